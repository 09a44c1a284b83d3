"""Numerics through the public options: ls.profile(numerics=...), the console and the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import layerscope as ls
from helpers.snapshots import ModelSnapshot
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


def test_numerics_options_as_a_mapping() -> None:
    class Tiny(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2.0

    x = torch.tensor([2.0**-25, 0.5], requires_grad=True)
    # underflow: 2 * 2**-25 = 2**-24 is fp16's smallest subnormal (not below it), and
    # 2 * 0.5 = 1: smallest nonzero magnitude 2**-24, no underflow.
    prof = ls.profile(nn.Sequential(Tiny()), x, numerics={"nonfinite": "warn", "underflow": True})
    s = prof.node("0").numerics
    assert (s["min_abs_nonzero"], s["fp16_underflow"]) == (2.0**-24, False)
    # No backward: no gradients to check, so none are hooked. With a backward they are:
    # one gradient, w.r.t. the output that "0" and the root share (x is a leaf, so its
    # gradient is autograd's to accumulate, not a module's to produce).
    assert (prof.numerics["mode"], prof.numerics["grads"], prof.numerics["underflow"]) == (
        "warn",
        False,
        True,
    )
    prof = ls.profile(nn.Sequential(Tiny()), x, numerics="record", backward=True)
    assert prof.numerics["grads"] is True and prof.numerics["checked_grads"] == 1
    assert x.grad is None


@pytest.mark.parametrize("bad", [{"mode": "raise"}, 3, {"nonfinite": "loud"}])
def test_bad_numerics_options_are_rejected(bad: object) -> None:
    with pytest.raises(ls.InvalidInputError):
        ls.profile(nn.Linear(2, 2), torch.ones(1, 2), numerics=bad)  # type: ignore[arg-type]


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


def scale_model_file(tmp_path: Path, factor: str, layers: str) -> str:
    """A model file for the CLI, as its target: ``Scale`` multiplies by ``factor`` and
    ``build()`` returns ``nn.Sequential(<layers>)``."""
    script = tmp_path / "m.py"
    script.write_text(
        "import torch\nfrom torch import nn\n"
        "class Scale(nn.Module):\n"
        f"    def forward(self, x):\n        return x * {factor}\n"
        f"def build():\n    return nn.Sequential({layers})\n"
    )
    return f"{script}:build"


def test_cli_numerics_raise_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = scale_model_file(tmp_path, "1e39", "nn.Linear(4, 4), Scale(), nn.Linear(4, 2)")
    code = main(["profile", target, "--input-shape", "2,4", "--numerics", "raise"])
    assert code == 3
    assert "1" in capsys.readouterr().err


def test_cli_underflow_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = scale_model_file(tmp_path, "2.0**-30", "Scale()")
    out = tmp_path / "p.json"
    assert main(["profile", target, "--input-shape", "2,4", "--underflow"]) == 2
    assert "--underflow needs --numerics" in capsys.readouterr().err
    args = ["profile", target, "--input-shape", "2,4", "--numerics", "record", "--underflow"]
    assert main([*args, "--json", str(out)]) == 0
    prof = ls.load(out)
    assert prof.numerics["underflow"] is True and prof.numerics["grads"] is False
    # randn values times 2**-30: the smallest nonzero magnitude is below float16's
    # smallest subnormal 2**-24 unless all 8 values had |x| >= 2**6.
    assert prof.node("0").numerics["fp16_underflow"] is True
