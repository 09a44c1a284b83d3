"""The command line: profile, show, exit codes, help."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import layerscope as ls
from layerscope.cli import main

BROKEN = """
import torch
from torch import nn

class Broken(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 4), nn.Linear(5, 5))

    def forward(self, x):
        return self.body(x)

def build():
    return Broken()
"""


def test_profile_example_and_show_saved(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    code = main(
        [
            "profile",
            "examples:tiny_resnet",
            "--input-shape",
            "2,3,32,32",
            "--json",
            str(out),
            "--width",
            "200",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "TinyResNet" in printed and "Total" in printed
    assert "[2, 3, 32, 32]" in printed
    prof = ls.load(out)
    assert prof.root.inputs[0][0] == ls.TensorSpec("0", (2, 3, 32, 32), "float32", "cpu")
    assert main(["show", str(out), "--width", "200"]) == 0
    assert capsys.readouterr().out == printed  # the saved profile shows the same view


def test_profile_file_target_model_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "broken.py"
    script.write_text(BROKEN)
    code = main(["profile", f"{script}:build", "--input-shape", "2,4"])
    assert code == 3
    assert "body.1" in capsys.readouterr().err


def test_profile_without_input_shows_structure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "broken.py"
    script.write_text(BROKEN)
    assert main(["profile", f"{script}:Broken", "--width", "160"]) == 0
    out = capsys.readouterr().out
    assert "Not run" in out
    assert "Params: 50 " in out  # (4*4+4) + (5*5+5) = 20 + 30


@pytest.mark.parametrize(
    "argv",
    [
        ["profile", "examples:nope"],
        ["profile", "no_such_module_xyz:model"],
        ["profile", "examples:tiny_resnet", "--input-shape", "2,a"],
        ["profile", "examples:tiny_resnet", "--input-shape", "1,3,8,8", "--input-dtype", "nope"],
        ["profile", "nocolon"],
        ["show", "does-not-exist.json"],
    ],
)
def test_bad_arguments_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert "error:" in capsys.readouterr().err


def test_list_examples(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["profile", "--list-examples"]) == 0
    out = capsys.readouterr().out
    for name in ("tiny_resnet", "tiny_gpt", "lstm_tagger"):
        assert f"examples:{name}  --input-shape" in out
    assert max(len(line) for line in out.splitlines()) <= 80  # descriptions wrapped


@pytest.mark.slow
def test_python_dash_m_and_help() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "layerscope", "profile", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "examples:NAME" in run.stdout and "--input-shape" in run.stdout


def test_profile_backward_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "examples:shared_mlp", "--backward", "--width", "200"]) == 0
    out = capsys.readouterr().out
    assert "Bwd FLOPs" in out and "MACs" in out


DATA = Path(__file__).resolve().parent / "data" / "cli"


def test_output_formats_by_extension_and_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["profile", "examples:tiny_gpt"]
    for name in ("p.json", "p.csv", "p.md", "p.html", "p.txt"):
        assert main([*base, "-o", str(tmp_path / name)]) == 0
        assert capsys.readouterr().out == ""  # written, not printed
    prof = ls.load(tmp_path / "p.json")
    assert prof.model["training"] is False  # the CLI runs in eval mode by default
    assert (tmp_path / "p.csv").read_text() == prof.to_csv()
    assert (tmp_path / "p.md").read_text() == prof.to_markdown()
    assert (tmp_path / "p.html").read_text().startswith("<!DOCTYPE html>")
    assert (tmp_path / "p.txt").read_text() == prof.render()
    # --format overrides the extension; a file format without -o prints
    assert main([*base, "--format", "csv", "-o", str(tmp_path / "q.txt")]) == 0
    assert (tmp_path / "q.txt").read_text() == prof.to_csv()
    assert main([*base, "--format", "json"]) == 0
    assert ls.Profile.from_dict(json.loads(capsys.readouterr().out)) == prof
    assert main([*base, "--format", "md", "--columns", "params"]) == 0
    assert capsys.readouterr().out == prof.to_markdown(columns=["params"])


def test_view_flags_with_a_file_format_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "examples:tiny_gpt", "--format", "csv", "--depth", "1"]) == 2
    err = capsys.readouterr().err
    assert (
        err == "layerscope: error: --depth applies only to views and to --format md, not to csv\n"
    )
    assert main(["profile", "examples:tiny_gpt", "--format", "csv", "--top", "2", "--raw"]) == 2
    assert capsys.readouterr().err == (
        "layerscope: error: --top --raw apply only to views and to --format md, not to csv\n"
    )
    assert main(["profile", "examples:tiny_gpt", "--format", "html", "--depth", "1"]) == 2
    assert capsys.readouterr().err == (
        "layerscope: error: --depth applies only to views and to --format md (and --spec to "
        "html), not to html\n"
    )


def test_spec_draws_the_html_roofline(tmp_path: Path) -> None:
    out = tmp_path / "p.html"
    assert main(["profile", "examples:tiny_gpt", "--spec", "a100", "-o", str(out)]) == 0
    text = out.read_text()
    data = json.loads(text[text.index('id="ls-data">') + 13 : text.index("</script>")])
    # a100 (the 80 GB part, the alias): TF32 tensor cores 156 TFLOP/s, 2,039 GB/s; the
    # profile has no timing pass, so the points sit on that roof
    assert data["roofline"]["roof"] == {
        "name": "a100-80gb",
        "dtype": "float32",
        "peak": 156000000000000,
        "bandwidth": 2039000000000,
        "note": "The profile was analysed on cpu; the roofline is a100-80gb's, so the bytes "
        "moved are those of cpu's kernels.",
    }
    assert data["roofline"]["phases"]["forward"]["timed"] is False


def test_eval_and_train_and_the_run_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flops = {}
    for flag in ("--eval", "--train"):
        out = tmp_path / f"{flag[2:]}.json"
        assert (
            main(["profile", "examples:tiny_gpt", flag, "--json", str(out), "--width", "120"]) == 0
        )
        printed = capsys.readouterr().out
        assert f"Run: {flag[2:]} mode, grad enabled, device cpu, float32." in printed
        prof = ls.load(out)
        assert prof.model["training"] is (flag == "--train")
        flops[flag] = prof.root.metrics["flops"]
    # train-mode dropout (p=0.1 in tiny_gpt) adds its own ops: more FLOPs than eval
    assert flops["--train"] > flops["--eval"]
    assert main(["profile", "examples:tiny_gpt", "--eval", "--train"]) == 2


def test_keyword_inputs_saved_inputs_and_seed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(DATA)
    out = tmp_path / "k.json"
    kwargs = '{"x": {"shape": [3, 4]}, "scale": 2.0}'
    assert main(["profile", "models.py:build", "--kwargs", kwargs, "--json", str(out)]) == 0
    prof = ls.load(out)
    assert prof.root.inputs == [] or prof.root.metrics["flops"] > 0
    # Linear(4, 8) + ReLU + Linear(8, 8) + ReLU + Linear(8, 2) on 3 rows, times scale:
    # MACs 3 * (4*8 + 8*8 + 8*2) = 3 * 112 = 336
    assert prof.root.metrics["macs"] == 336
    saved = tmp_path / "in.pt"
    torch.save({"x": torch.ones(5, 4)}, saved)
    assert main(["profile", "models.py:build", "--input", str(saved), "--json", str(out)]) == 0
    assert ls.load(out).root.metrics["macs"] == 5 * 112
    torch.save((torch.ones(6, 4),), saved)
    assert main(["profile", "models.py:build", "--input", str(saved), "--json", str(out)]) == 0
    assert ls.load(out).root.metrics["macs"] == 6 * 112
    capsys.readouterr()
    # the same seed draws the same inputs: the same activation statistics
    stats = []
    for seed in ("1", "1", "2"):
        argv = ["profile", "models.py:build", "--input-shape", "2,4", "--numerics", "record"]
        assert main([*argv, "--seed", seed, "--json", str(out)]) == 0
        stats.append(ls.load(out).node("head").numerics)
    assert stats[0] == stats[1] and stats[0] != stats[2]


def test_integer_inputs_stay_below_the_first_embedding() -> None:
    from layerscope.cli.inputs import InputMaker
    from layerscope.examples import tiny_gpt

    maker = InputMaker(tiny_gpt(), seed=0)
    ids = maker.tensor((4000,), None)
    assert ids.dtype == torch.long and int(ids.min()) == 0 and int(ids.max()) == 63  # vocab 64
    ids = maker.tensor((4000,), torch.int32, low=10, high=13)
    assert ids.dtype == torch.int32 and sorted(set(ids.tolist())) == [10, 11, 12]
    with pytest.raises(ls.InvalidInputError, match=r"\[low, high\)"):
        maker.tensor((2,), torch.long, low=5, high=5)


def test_device_meta_keeps_tied_weights(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.json"
    assert main(["profile", "examples:tiny_gpt", "--device", "meta", "--json", str(out)]) == 0
    meta = ls.load(out)
    assert main(["profile", "examples:tiny_gpt", "--json", str(out)]) == 0
    cpu = ls.load(out)
    assert meta.model["device"] == "meta"
    # the LM head's weight is the token embedding's: counted once on meta too
    assert meta.root.metrics["params"] == cpu.root.metrics["params"] == 28_032
    assert meta.node("blocks.0.mlp").metrics["flops"] == cpu.node("blocks.0.mlp").metrics["flops"]


def test_dtype_casts_the_model(tmp_path: Path) -> None:
    out = tmp_path / "d.json"
    assert (
        main(
            [
                "profile",
                "examples:tiny_resnet",
                "--dtype",
                "bfloat16",
                "--json",
                str(out),
                "-o",
                str(tmp_path / "x.txt"),
            ]
        )
        == 0
    )
    prof = ls.load(out)
    assert prof.model["dtype"] == "bfloat16"
    spec = prof.root.inputs[0][0]
    assert isinstance(spec, ls.TensorSpec) and spec.dtype == "bfloat16"  # the input is cast too


def test_diff_and_config_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert (
        main(["profile", "examples:tiny_gpt", "--json", str(a), "-o", str(tmp_path / "a.txt")]) == 0
    )
    assert (
        main(
            [
                "profile",
                "examples:tiny_gpt",
                "--input-shape",
                "4,16",
                "--json",
                str(b),
                "-o",
                str(tmp_path / "b.txt"),
            ]
        )
        == 0
    )
    assert main(["diff", str(a), str(b), "--columns", "flops", "--width", "100"]) == 0
    out = capsys.readouterr().out
    assert out == ls.diff(ls.load(a), ls.load(b)).render(metrics=["flops"], width=100)
    assert "2.00" in out  # twice the batch: twice the FLOPs
    assert main(["diff", str(a), str(b), "--columns", "nope"]) == 2
    capsys.readouterr()
    assert main(["config", "--dump"]) == 0
    dumped = capsys.readouterr().out
    assert dumped == ls.config.dumps(ls.config.defaults())
    path = tmp_path / "display.yaml"
    path.write_text(dumped)
    assert main(["config", "--check", str(path)]) == 0
    assert capsys.readouterr().out == f"{path}: a valid display configuration\n"
    path.write_text("table:\n  box: nope\n")
    assert main(["config", "--check", str(path)]) == 2


def test_transformers_spec_prints_only_the_profile(capsys: pytest.CaptureFixture[str]) -> None:
    """transformers' warnings about a small config's token ids stay out of stderr."""
    args = '{"n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 100, "n_positions": 16}'
    argv = ["profile", "transformers:gpt2", "--model-args", args, "--input-shape", "1,8"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    # wte 100*32 + wpe 16*32 + one block (2 LayerNorms 2*64, attn 32*96+96 + 32*32+32,
    # mlp 32*128+128 + 128*32+32) + ln_f 64 = 3,200 + 512 + 12,704 + 64 = 16,480
    assert "Params: 16,480 " in captured.out


def test_numpy_is_a_dependency() -> None:
    """Without numpy, importing torch warns "Failed to initialize NumPy" (make demo)."""
    from importlib.metadata import requires

    assert any(r.split(">")[0].strip() == "numpy" for r in requires("layerscope") or [])


def test_estimate_and_roofline_view(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["profile", "examples:shared_mlp", "--device", "meta", "--estimate", "h100"]
    assert main([*argv, "--width", "100"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Roofline on h100 (float32: peak 495 TFLOP/s, 3.35 TB/s")
    assert "a lower bound" in out and "Fwd min" in out
    saved = tmp_path / "p.json"
    assert main(["profile", "examples:shared_mlp", "--time", "-o", str(saved)]) == 0
    capsys.readouterr()
    assert main(["show", str(saved), "--format", "roofline", "--spec", "l4"]) == 0
    assert capsys.readouterr().out.startswith("Roofline on l4 ")
    assert main(["show", str(saved), "--estimate", "h1000"]) == 2
    assert capsys.readouterr().err.endswith(
        "'cpu', got 'h1000' (did you mean 'h100', 'h200' or 'a100'?)\n"
    )
    assert main(["show", str(saved), "--format", "roofline"]) == 2
    assert capsys.readouterr().err == (
        "layerscope: error: --format roofline needs a device for its roof: --spec h100 (or "
        "cpu, a100, l4, ...), a profile analysed with --device meta --target h100, or a run "
        "on a GPU with a built-in spec\n"
    )


NANER = """
import torch
from torch import nn

class NaNer(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Identity(), nn.ReLU()

    def forward(self, x):
        return self.b(torch.log(self.a(x) - 100))

def build():
    return NaNer()
"""


def test_a_nonfinite_error_is_printed_with_one_prefix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "models.py").write_text(NANER)
    monkeypatch.chdir(tmp_path)
    argv = ["profile", "models.py:build", "--input-shape", "2,3", "--numerics", "raise"]
    assert main(argv) == 3
    # random inputs lie far inside (-100, 100): log(x - 100) is NaN, 2 * 3 = 6 of them
    assert capsys.readouterr().err == (
        "layerscope: error: module <root> (NaNer) call 0: its own code made non-finite "
        "values from finite inputs (origin); they reached module 'b' (ReLU) call 0, whose "
        "output has 6 NaN, 0 Inf, shapes [[2, 3]]\n"
    )


def test_the_metric_rows_are_sorted_by_is_kept_as_long_as_its_share() -> None:
    """Sorted by saved activations at 80 columns, the Saved column stays beside % Saved
    (before, % Saved stayed and Saved was among the first hidden)."""
    from layerscope import examples

    ex = examples.get("tiny_gpt")
    prof = ls.profile(ex.build(), ex.example_input(), backward=True, memory=True)
    header = prof.render(width=80, sort_by="activation_bytes", top=4).splitlines()[0]
    assert header.split()[-3:] == ["Saved", "%", "Saved"]
