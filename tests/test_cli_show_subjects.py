"""``layerscope show`` recognises a generation's and a sweep's documents and shows each
as itself, as it does a plan's; view flags show a generation's profile."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
import torch

import layerscope as ls
from helpers.models import tiny_llama
from layerscope.cli import main


def show(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["show", *argv]) == 0
    return out.getvalue()


def test_a_generation_shows_as_itself(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    gen = ls.profile_generate(tiny_llama(), torch.tensor([[1, 2, 3, 4]]), 2)
    gen.save(tmp_path / "gen.json")
    assert show(str(tmp_path / "gen.json"), "--width", "90") == gen.render(width=90) + "\n"
    # a view flag: the document's own profile, the prefill
    table = show(str(tmp_path / "gen.json"), "--width", "90", "--depth", "1")
    assert table == gen.stages["prefill"].render(width=90, max_depth=1)


def test_a_sweep_shows_as_itself(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
    sweep = ls.plan_sweep(model, torch.randn(2, 8), world_size=[8, 16])
    sweep.save(tmp_path / "sweep.json")
    assert show(str(tmp_path / "sweep.json"), "--width", "90") == sweep.render(width=90)
    show(str(tmp_path / "sweep.json"), "--width", "90", "-o", str(tmp_path / "s.txt"))
    assert (tmp_path / "s.txt").read_text() == sweep.render(width=90)
