"""Leftovers of a user audit of ``layerscope plan``, each asserted word for word: what
the module table's Gather and Reduce columns hold, ``-o`` by its extension, close
suggestions of a transformers name (or how to list them), and --hsdp's own form."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from layerscope.cli import main
from layerscope.cli.common import close_names
from layerscope.cli.specs import LIST_HINT

GATHER = (
    "Gather: this GPU's shard, in the dtype gathered, as the micro-batch's all-gathers "
    "send it (their payload): once for the forward, again for the backward when resharded"
)
REDUCE = (
    "Reduce: the whole unsharded gradient, in the reduce dtype (fp32 under mixed "
    "precision), as the micro-batch's reduce-scatter or DDP's all-reduce takes it in "
    "(their payload), plus under HSDP the shard all-reduced."
)
O_EXTENSIONS = (
    "-o must be a file name ending in .html (as --html), .json (as --json) or .txt (what "
    "is printed), got '{}' (its extension names no file this command writes)"
)


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["plan", *argv])
    return code, out.getvalue(), err.getvalue()


def error(*argv: str) -> str:
    code, out, err = cli(*argv)
    assert code == 2 and out == ""
    assert err.startswith("layerscope: error: ") and err.count("\n") == 1
    return err.removeprefix("layerscope: error: ").removesuffix("\n")


def joined(text: str) -> str:
    """The text's wrapped lines as one line each paragraph (the legend is wrapped)."""
    return " ".join(line.strip() for line in text.splitlines())


# ---------------------------------------------------------------- 1. the legend
def test_the_legend_says_what_gather_and_reduce_hold() -> None:
    code, out, _ = cli("examples:tiny_gpt", "--world-size", "8", "--sharding", "fsdp", "-q",
                       "--width", "120")  # fmt: skip
    assert code == 0
    header = next(line for line in out.splitlines() if line.startswith("Module"))
    assert header.split()[-2:] == ["Gather", "Reduce"]  # the headers as before
    assert f"{GATHER}; {REDUCE}" in joined(out)


def test_gather_is_the_shard_twice_and_reduce_the_whole_fp32_gradient() -> None:
    """The numbers the legend describes: over 8 GPUs in bf16-mixed a resharded block
    gathers its bf16 shard twice (1/8 of the unsharded bf16 bytes, x2) and reduces its
    whole fp32 gradient (x2 the unsharded bf16 bytes): Reduce is 8 x Gather."""
    import layerscope as ls
    from layerscope import examples

    ex = examples.get("tiny_gpt")
    result = ls.plan(ex.build(), ex.example_input(), world_size=8, sharding="fsdp")
    block = next(m for m in result.modules if m["path"] == "blocks.0")
    assert block["gather_bytes"] * 8 == block["reduce_bytes"] == 2 * block["unsharded_bytes"]


# ---------------------------------------------------------------- 2. -o by extension
@pytest.mark.parametrize("name", ["plan.html", "plan.json", "plan.txt"])
def test_o_writes_the_file_its_extension_names(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    code, out, err = cli("examples:tiny_gpt", "-q", "--width", "90", "-o", str(path))
    assert (code, err) == (0, "")
    text = path.read_text(encoding="utf-8")
    if name.endswith(".txt"):
        assert text == out
    elif name.endswith(".json"):
        assert "plan" in json.loads(text)
    else:
        assert text.lstrip().lower().startswith("<!doctype html>")


def test_o_txt_of_a_sweep_is_its_table(tmp_path: Path) -> None:
    path = tmp_path / "sweep.txt"
    code, out, _ = cli("examples:tiny_gpt", "--sweep", "world_size=8,16", "-q", "--width",
                       "90", "-o", str(path))  # fmt: skip
    assert code == 0 and path.read_text(encoding="utf-8") == out


def test_o_refuses_an_extension_plan_does_not_write(tmp_path: Path) -> None:
    for name in ("plan.csv", "plan.trace.json"):
        path = str(tmp_path / name)
        assert error("examples:tiny_gpt", "-o", path) == O_EXTENSIONS.format(path)
    assert not list(tmp_path.iterdir())


def test_o_and_its_flag_both_naming_one_file_are_refused(tmp_path: Path) -> None:
    a, b = str(tmp_path / "a.html"), str(tmp_path / "b.html")
    assert error("examples:tiny_gpt", "-o", a, "--html", b) == (
        f"-o {a} and --html both name the HTML report: give one"
    )
    a, b = str(tmp_path / "a.json"), str(tmp_path / "b.json")
    assert error("examples:tiny_gpt", "-o", a, "--json", b) == (
        f"-o {a} and --json both name the JSON file: give one"
    )


# ---------------------------------------------------------------- 3. transformers names
KNOWN = ["gpt2", "gptj", "gpt-sw3", "seggpt", "llama", "YoutuModel", "UVDocModel",
         "SpeechT5Model", "GPT2Model", "GPT2LMHeadModel", "BartForCausalLM",
         "LlamaForCausalLM"]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "close"),
    [
        ("NoSuchModel", []),  # shares only the suffix "Model"
        ("FooBarForCausalLM", []),  # only "ForCausalLM"
        ("gpt3", ["gptj", "gpt2"]),  # not gpt-sw3, seggpt
        ("LlamaForCausalLm", ["LlamaForCausalLM"]),
        ("gpt2model", ["GPT2Model"]),
        ("GPT2LMHeadModle", ["GPT2LMHeadModel"]),
    ],
)
def test_only_close_names_are_suggested(name: str, close: list[str]) -> None:
    assert close_names(name, KNOWN) == close


def test_an_unknown_transformers_model_with_none_close_says_how_to_list_them() -> None:
    pytest.importorskip("transformers")
    assert LIST_HINT == (
        'list the model types with python -c "import transformers; '
        'print(*transformers.CONFIG_MAPPING)"'
    )
    assert error("transformers:NoSuchModel") == (
        "unknown transformers model 'NoSuchModel': neither a model type (gpt2, bert, t5, "
        "llama, whisper, ...) nor a model class (GPT2LMHeadModel, ...); none is close: "
        f"{LIST_HINT}"
    )


def test_an_unknown_model_type_in_a_config_file_says_how_to_list_them(
    tmp_path: Path, monkeypatch: Any
) -> None:
    pytest.importorskip("transformers")
    monkeypatch.chdir(tmp_path)
    Path("c.json").write_text(json.dumps({"model_type": "nosuchthing"}), encoding="utf-8")
    assert error("transformers:c.json") == (
        f"c.json: transformers knows no \"model_type\" 'nosuchthing'; none is close: {LIST_HINT}"
    )


# ---------------------------------------------------------------- 4. --hsdp's form
@pytest.mark.parametrize("value", ["x", "2,0", "2", "2,3,4"])
def test_hsdp_refusals_show_its_own_form(value: str) -> None:
    assert error("examples:tiny_gpt", "--hsdp", value) == (
        f"--hsdp must be R,S: R replicas of S-way shards (positive integers, e.g. 2,4), "
        f"got '{value}'"
    )
