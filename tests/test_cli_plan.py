"""``layerscope plan`` and ``layerscope show`` of a plan: the output is the library's
(``ls.plan(...).render()``), ``--json`` round-trips through ``ls.load_plan``, every bad
option is one line and exit code 2."""

from __future__ import annotations

import contextlib
import io
import json
from functools import cache
from pathlib import Path

import pytest
import torch

import layerscope as ls
from layerscope.cli import main
from layerscope.cli.plan_cmd import parse_checkpoint, parse_size, parse_sweep
from layerscope.errors import InvalidInputError
from layerscope.examples.gpt import tiny_gpt

#: tiny_gpt on 8 H100s, FSDP2, its two blocks checkpointed: the CLI's and the library's.
ARGS = ["examples:tiny_gpt", "--input-shape", "2,16", "--checkpoint", "blocks"]


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(autouse=True)
def _eighty(monkeypatch: pytest.MonkeyPatch, default_display_config: None) -> None:
    monkeypatch.setenv("COLUMNS", "80")


@cache
def library_plan() -> ls.Plan:
    return ls.plan(
        tiny_gpt(), input_shape=(2, 16), input_dtype=torch.long, target="h100", world_size=8,
        sharding="fsdp", checkpoint="blocks", precision="bf16-mixed", optimizer="adamw",
    )  # fmt: skip


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """One CLI run with --json: what it printed and the file."""
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COLUMNS", "80")
        code, out, err = run("plan", *ARGS, "--json", str(path))
    assert code == 0, err
    return out, path


def test_plan_prints_the_librarys_plan_at_80_columns(saved: tuple[str, Path]) -> None:
    out, _ = saved
    assert out == library_plan().render(width=80)
    assert max(len(line) for line in out.splitlines()) <= 80
    assert out.startswith("Plan for one GPU of 8: NVIDIA H100 SXM5 80GB (h100)\n")


def test_json_round_trips_through_load_plan(saved: tuple[str, Path]) -> None:
    _, path = saved
    loaded = ls.load_plan(path)
    assert loaded.section() == json.loads(json.dumps(library_plan().section()))
    assert loaded.render(width=80) == library_plan().render(width=80)
    assert ls.load(path).root.type == "TinyGPT"  # the analysis is the rest of the file


def test_show_of_a_plan_file(saved: tuple[str, Path], tmp_path: Path) -> None:
    out, path = saved
    code, shown, _ = run("show", str(path))
    assert code == 0 and shown == out
    code, wide, _ = run("show", str(path), "--width", "120")
    assert code == 0 and wide == library_plan().render(width=120)
    code, _, _ = run("show", str(path), "-o", str(tmp_path / "plan.txt"))
    assert code == 0 and (tmp_path / "plan.txt").read_text() == out
    # view flags: its analysis, as a profile
    code, table, _ = run("show", str(path), "--depth", "1")
    assert code == 0 and table.startswith("Module") and "TinyGPT" in table


def test_show_of_a_plain_profile_is_unchanged(tmp_path: Path) -> None:
    prof = ls.profile(tiny_gpt(), torch.zeros(2, 16, dtype=torch.long))
    prof.save(tmp_path / "p.json")
    code, out, _ = run("show", str(tmp_path / "p.json"))
    assert code == 0 and out == prof.render(width=80)


def test_sweep_prints_one_row_per_combination(tmp_path: Path) -> None:
    path = tmp_path / "sweep.json"
    code, out, err = run(
        "plan", "examples:tiny_gpt", "--sweep", "world_size=8,16", "checkpoint=none,blocks",
        "--json", str(path),
    )  # fmt: skip
    assert code == 0, err
    assert out.startswith("Plan sweep: 4 plans over world_size × checkpoint\n")
    assert max(len(line) for line in out.splitlines()) <= 80
    data = json.loads(path.read_text())
    assert data["axes"] == ["world_size", "checkpoint"]
    # what every plan shares: the h100's usable 85,029,158,912 B (85,029,158,912 / 2**30 =
    # 79.19 GiB, what torch.cuda.mem_get_info() reports), the example's (2, 16) token ids
    assert data["setting"] == {
        "target": "h100", "device": "NVIDIA H100 SXM5 80GB", "budget": 85_029_158_912,
        "input": "(2, 16) int64",
    }  # fmt: skip
    assert "On NVIDIA H100 SXM5 80GB (h100), budget 79.19 GiB; input (2, 16) int64" in out
    assert [(r["world_size"], r["checkpoint"]) for r in data["rows"]] == [
        (8, None), (8, "blocks"), (16, None), (16, "blocks"),
    ]  # fmt: skip
    sweep = ls.plan_sweep(
        tiny_gpt(), input_shape=(2, 16), input_dtype=torch.long, world_size=[8, 16],
        checkpoint=[None, "blocks"],
    )  # fmt: skip
    assert out == sweep.render(width=80)


BAD = [
    (["--sharding", "fdsp"], "--sharding must be one of 'none', 'ddp', 'fsdp', 'zero1', "
     "'zero2', got 'fdsp' (did you mean 'fsdp'?)"),
    (["--sweep", "world_size"], "--sweep must be AXIS=V1,V2,... with AXIS one of micro_batch, "
     "world_size, sharding, checkpoint, precision, optimizer, grad_accum, tp, pp, got "
     "'world_size'"),
    (["--sweep", "gpus=8,16"], "--sweep must be AXIS=V1,V2,..."),
    (["--sweep", "world_size=8,x"], "--sweep world_size must be a whole number >= 1, got 'x'"),
    (["--sweep", "world_size=8", "world_size=16"], "--sweep lists world_size twice"),
    (["--world-size", "16", "--sweep", "world_size=8,16"],
     "--world-size and --sweep world_size=... both give world_size; give one"),
    (["--sweep", "precision=fp8"], "--sweep precision must be one of"),
    (["--budget", "80XB"], "--budget must be a size such as 80GB, 79.6GiB, 512MiB or a number "
     "of bytes, got '80XB'"),
    (["--target", "cpu"], "--target must be a GPU (h100, "),
    (["--device", "cpu"], "--device must be meta, got 'cpu'"),
    (["--rank", "8"], "--rank must be an int from 0 to 7, got 8"),
    (["--world-size", "0"], "--world-size must be an int >= 1, got 0"),
    (["--sharding", "none"], "--sharding none is one GPU: give --world-size 1"),
    (["--checkpoint", "blocks.9"], "--checkpoint must be none, blocks, op, auto or a module "
     "path of the model, got 'blocks.9' (did you mean"),
    (["--units", "blokcs.0"], "--units must be a module path of the model, got 'blokcs.0'"),
    (["--input-dtype", "long"], "--input-dtype needs --input-shape"),
    (["--max-rows", "0"], "--max-rows must be an int >= 1, got 0"),
    (["--grad-accum", "x"], "argument --grad-accum: invalid int value: 'x'"),
    (["--budget", "1" + "0" * 400], "budget must be an int from 0 to 9223372036854775807"),
    (["--sweep", "micro_batch=1," + "1" * 31], "micro_batch must be an int from 1 to "
     "1000000000, got " + "1" * 31),
    (["--nics-per-node", "0"], "--nics-per-node must be an int >= 1, got 0"),
    (["--nic-gbps", "-1"], "--nic-gbps must be"),
    (["--loss", "chunked"], "--loss must be one of 'plain', 'fused', got 'chunked'"),
]  # fmt: skip


@pytest.mark.parametrize(("flags", "words"), BAD, ids=[" ".join(f) for f, _ in BAD])
def test_bad_options_are_one_line_and_exit_code_2(flags: list[str], words: str) -> None:
    code, out, err = run("plan", "examples:tiny_gpt", *flags)
    assert code == 2, err
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert words in err


def test_parsers() -> None:
    assert parse_size("80GB", "--budget") == 80 * 10**9
    assert parse_size("2GiB", "--reserve") == 2 * 2**30
    assert parse_size("1.5 MiB", "--budget") == 3 * 2**19
    assert parse_size("85029158912", "--budget") == 85_029_158_912  # bytes
    assert parse_size("0", "--reserve") == 0
    with pytest.raises(InvalidInputError, match=r"with its unit .*e.g. 80GB, got '80'"):
        parse_size("80", "--budget")  # 80 B: a GPU's memory without its unit
    with pytest.raises(InvalidInputError):
        parse_size("-1GB", "--budget")
    assert parse_checkpoint("none") is None
    assert parse_checkpoint("auto") == "auto"
    assert parse_checkpoint("a.b, c") == ["a.b", "c"]
    assert parse_sweep(["checkpoint=none,blocks,a+b", "micro_batch=1,2"]) == {
        "checkpoint": [None, "blocks", ["a", "b"]],
        "micro_batch": [1, 2],
    }


def test_the_subcommand_is_listed() -> None:
    with pytest.raises(SystemExit):
        run("--help")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        main(["plan", "--help"])
    assert "--sweep AXIS=V,V" in out.getvalue()


def test_a_sweeps_report_leads_with_its_best_row(tmp_path: Path) -> None:
    """The HTML report of a sweep is the plan of one of its rows: the one with the most
    tokens/s that fits (the fewest GPUs, here: each GPU's step is the same compute with
    more collectives at 16), named on the terminal."""
    page = tmp_path / "sweep.html"
    code, out, err = run(
        "plan", "examples:tiny_gpt", "--sweep", "world_size=8,16", "--html", str(page)
    )
    assert code == 0, err
    assert out.splitlines()[-1] == (
        "HTML report: the plan of the row world_size 8 (the most tokens/s that fits)."
    )
    assert '"world_size":8,' in page.read_text(encoding="utf-8")


def test_the_sweeps_footer_explains_only_the_columns_shown() -> None:
    code, out, err = run(
        "plan", "examples:tiny_gpt", "--sweep", "world_size=8,16", "micro_batch=1,2",
        "checkpoint=none,blocks", "sharding=fsdp,ddp",
    )  # fmt: skip
    assert code == 0, err
    # four axes leave no room at 80 columns for the bound, Headroom, MFU and Tokens/s
    assert "Hidden to fit 80 columns: Step bound, Headroom, MFU, Tokens/s" in out
    assert out.rstrip().endswith("Step is predicted (each kernel at its achievable rate).")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--html", "report.txt"], "--html must be a path ending in .html"),
        (["--json", "/nonexistent-folder/p.json"], "the folder /nonexistent-folder does not exist"),
        (["--budget", "1GB", "--reserve", "2GB"], "reserve_bytes (2,000,000,000) is not below"),
    ],
)
def test_outputs_and_the_reserve_are_checked_before_the_analysis(
    flags: list[str], message: str
) -> None:
    code, out, err = run("plan", "examples:tiny_gpt", *flags)
    assert code != 0 and out == ""  # refused before anything was planned or printed
    assert message in err


def test_the_cluster_flags_are_the_cluster_option(tmp_path: Path) -> None:
    """--gpus-per-node, --nics-per-node and --nic-gbps plan as ``cluster=`` does."""
    path = tmp_path / "plan.json"
    flags = ["--world-size", "16", "--gpus-per-node", "4", "--nics-per-node", "2",
             "--nic-gbps", "100"]  # fmt: skip
    code, _out, err = run("plan", *ARGS, *flags, "--json", str(path))
    assert code == 0, err
    cluster = {"gpus_per_node": 4, "nics_per_node": 2, "nic_bandwidth": 100e9 / 8}
    alone = ls.plan(
        tiny_gpt(), input_shape=(2, 16), input_dtype=torch.long, target="h100", world_size=16,
        sharding="fsdp", checkpoint="blocks", cluster=cluster,
    )  # fmt: skip
    loaded = ls.load_plan(path)
    assert loaded.options["cluster"] == json.loads(json.dumps(alone.options["cluster"]))
    assert loaded.options["cluster"]["nic_bandwidth"] == 100e9 / 8
    assert loaded.step_time == alone.step_time


def test_the_loss_flag_is_the_loss_option(tmp_path: Path) -> None:
    """--loss fused plans as ``loss="fused"`` does (``planning.loss``)."""
    path = tmp_path / "plan.json"
    code, _out, err = run("plan", *ARGS, "--loss", "fused", "--json", str(path))
    assert code == 0, err
    alone = ls.plan(
        tiny_gpt(), input_shape=(2, 16), input_dtype=torch.long, target="h100", world_size=8,
        sharding="fsdp", checkpoint="blocks", loss="fused",
    )  # fmt: skip
    loaded = ls.load_plan(path)
    assert loaded.options["loss"] == "fused"
    assert loaded.peak_bytes == alone.peak_bytes
    assert "loss" in loaded.timeline["event"] and "loss" not in library_plan().timeline["event"]
