"""The CLI speaks in one line per message, in its own words: a negative dimension reaches
the shape check, an unknown name lists what the file defines, a failed transformers build
gives the right hint, and ``--numerics warn`` prints ``layerscope: warning: ...``."""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import pytest

from layerscope.cli import main

CLI_DIR = Path(__file__).resolve().parent / "data" / "cli"

NAN_MODEL = """
import torch
from torch import nn


class Log(nn.Module):
    def forward(self, x):
        return torch.log(x - 100)


def build():
    return nn.Sequential(nn.Linear(4, 4), Log())
"""


def run(argv: list[str], cwd: Path = CLI_DIR) -> tuple[int, str, str]:
    """``layerscope ARGV`` in ``cwd``: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    finally:
        os.chdir(here)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("shape", ["-2,4", "-2x4"])
def test_a_negative_dimension_reaches_the_shape_check(shape: str) -> None:
    # was argparse's "argument --input-shape: expected one argument"
    assert run(["profile", "models.py:build", "--input-shape", shape]) == (
        2,
        "",
        "layerscope: error: --input-shape must be a shape such as 2,3,32,32 (positive "
        f"integers), got '{shape}'\n",
    )


def test_an_unknown_name_lists_what_the_file_defines() -> None:
    # models.py's classes and functions; `block`, imported from helper.py, is not its own
    assert run(["profile", "models.py:nope"]) == (
        2,
        "",
        "layerscope: error: models.py has no attribute 'nope'; it defines Mismatch, Net, "
        "build, needs_args, not_a_module, raises, with_inputs\n",
    )


@pytest.mark.parametrize(
    ("error", "model_args", "hint"),
    [
        (ImportError("No module named 'einops'"), [], "install the package it needs"),
        (
            ValueError("head size 5 does not divide 768"),
            [],
            "its default config does not build; set its fields with --model-args",
        ),
        (
            ValueError("head size 5 does not divide 768"),
            ["--model-args", '{"n_head": 5}'],
            "check --model-args",
        ),
    ],
)
def test_a_failed_transformers_build_says_what_to_do(
    monkeypatch: pytest.MonkeyPatch, error: Exception, model_args: list[str], hint: str
) -> None:
    transformers = pytest.importorskip("transformers")

    def fails(*args: object, **kwargs: object) -> None:
        raise error

    monkeypatch.setattr(transformers.AutoModel, "from_config", fails)
    code, out, err = run(["profile", "transformers:gpt2", "--device", "meta", *model_args])
    # was: "building transformers the gpt2 config base model raised ...; check --model-args"
    assert (code, out) == (2, "")
    assert err == (
        "layerscope: error: building the transformers base model (gpt2 config) raised "
        f"{type(error).__name__}: {error}; {hint}\n"
    )


def test_numerics_warn_is_one_layerscope_line(tmp_path: Path) -> None:
    (tmp_path / "nanmodel.py").write_text(NAN_MODEL)
    argv = ["profile", "nanmodel.py:build", "--input-shape", "2,4", "--numerics", "warn"]
    code, out, err = run([*argv, "--depth", "0"], cwd=tmp_path)
    # log(x - 100) of Linear's small outputs: NaN in all 2 x 4 elements
    assert code == 0 and out.startswith("Module")
    assert err == (
        "layerscope: warning: module '1' (Log) call 0: non-finite values (8 NaN, 0 Inf) in "
        "its output, shapes [[2, 4]]; its inputs were finite, so this module produced them "
        "(origin)\n"
    )
