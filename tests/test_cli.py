"""The command line: profile, show, exit codes, help."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

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


def test_list_examples(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "--list-examples"]) == 0
    out = capsys.readouterr().out
    for name in ("tiny_resnet", "tiny_gpt", "lstm_tagger"):
        assert f"examples:{name}" in out


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
