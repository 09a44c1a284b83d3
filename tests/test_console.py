"""The console view against golden files at a pinned width.

Regenerate after an intended change with ``LAYERSCOPE_UPDATE_GOLDEN=1 pytest tests/test_console.py``
and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from torch import nn

import layerscope as ls
from helpers import SimpleModel
from layerscope.examples import EXAMPLES
from layerscope.render.console import ViewOptions, render_text

GOLDEN = Path(__file__).parent / "golden"
WIDTH = 120


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("LAYERSCOPE_UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"missing golden file {path}; set LAYERSCOPE_UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8")


@pytest.mark.parametrize("name", ["tiny_resnet", "tiny_gpt", "lstm_tagger", "shared_mlp"])
def test_examples_golden(name: str) -> None:
    ex = EXAMPLES[name]
    check_golden(name, render_text(ls.profile(ex.build(), ex.example_input()), width=WIDTH))


def test_torchmeter_simple_model_golden() -> None:
    prof = ls.profile(SimpleModel(), torch.zeros(4, 1))
    text = render_text(prof, width=WIDTH)
    check_golden("simple_model", text)
    assert "(2.1) A–B Linear ×2" in text
    assert "(4.1) C–K Repeat ×3" in text


def test_unfolded_and_depth_and_structure_only() -> None:
    prof = ls.profile(SimpleModel())
    text = render_text(prof, width=WIDTH, options=ViewOptions(fold=False, max_depth=1))
    check_golden("simple_model_unfolded_depth1", text)
    assert "(4.1)" not in text  # depth 1 hides the children of repeat_2x3
    assert "Not run" in text


def test_print_uses_render_text(capsys: pytest.CaptureFixture[str]) -> None:
    prof = ls.profile(nn.Linear(3, 2), torch.zeros(1, 3))
    assert str(prof) == render_text(prof)
    print(prof)
    assert "Linear" in capsys.readouterr().out
