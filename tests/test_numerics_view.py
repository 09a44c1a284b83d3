"""Numerics through the public options: ls.profile(numerics=...), the console and the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import layerscope as ls
from helpers import ModelSnapshot
from layerscope.cli import main
from layerscope.render.console import render_text


class Blowup(nn.Module):
    """x * 1e39 overflows float32 to inf for any nonzero x."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 1e39


def model() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 4), Blowup(), nn.ReLU(), nn.Linear(4, 2))


def test_profile_records_origin_and_console_names_it() -> None:
    m, x = model(), torch.ones(3, 4)
    snap = ModelSnapshot.take(m)
    prof = ls.profile(m, x, numerics="record")
    snap.assert_unchanged(m)
    assert prof.numerics["origin"]["path"] == "1"
    assert prof.numerics["first_nonfinite"]["path"] == "1"
    text = render_text(prof, width=140)
    assert "NaN" in text or "Inf" in text
    assert "'1'" in text or " 1 " in text
    again = ls.Profile.from_dict(prof.to_dict())
    assert again.numerics == prof.numerics and again == prof


def test_profile_raise_stops_at_origin() -> None:
    m, x = model(), torch.ones(3, 4)
    snap = ModelSnapshot.take(m)
    with pytest.raises(ls.NonFiniteError) as info:
        ls.profile(m, x, numerics="raise")
    assert info.value.path == "1"
    snap.assert_unchanged(m)


def test_activation_stats_column_and_fp16_flag() -> None:
    class Fixed(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.tensor([0.0, 1.0, -70000.0, 3.0])

    prof = ls.profile(nn.Sequential(Fixed()), torch.zeros(1), numerics="record")
    assert prof.node("0").numerics["absmax"] == 70000.0
    assert prof.node("0").numerics["fp16_overflow"] is True
    text = render_text(prof, width=140)
    assert "Abs max" in text and "7e+04" in text
    assert "overflows float16) in: <root>, 0" in text


def test_cli_numerics_raise_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "m.py"
    script.write_text(
        "import torch\nfrom torch import nn\n"
        "class Blowup(nn.Module):\n"
        "    def forward(self, x):\n        return x * 1e39\n"
        "def build():\n    return nn.Sequential(nn.Linear(4, 4), Blowup(), nn.Linear(4, 2))\n"
    )
    code = main(["profile", f"{script}:build", "--input-shape", "2,4", "--numerics", "raise"])
    assert code == 3
    assert "1" in capsys.readouterr().err
