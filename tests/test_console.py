"""Every view against golden files at 80 and 120 columns.

The examples are profiled fresh (their numbers are exact and machine-independent); the
BERT-base-shaped transformers model is read from a saved profile (tests/data), so a
transformers release cannot change the files. Regenerate after an intended change with
``LAYERSCOPE_UPDATE_GOLDEN=1 pytest tests/test_console.py`` and review the diff.
"""

from __future__ import annotations

import json
import os
import re
from functools import cache
from pathlib import Path

import pytest
import torch
from torch import nn

import layerscope as ls
from helpers import SimpleModel
from layerscope.examples import EXAMPLES

GOLDEN = Path(__file__).parent / "golden"
DATA = Path(__file__).parent / "data"
VIEWS = ("table", "tree", "repr", "top", "ops")
WIDTHS = (80, 120)
MODELS = ("tiny_resnet", "tiny_gpt", "lstm_tagger", "shared_mlp", "simple_model", "bert_base")


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("LAYERSCOPE_UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"missing golden file {path}; set LAYERSCOPE_UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8")


@cache
def profile_of(name: str) -> ls.Profile:
    if name == "bert_base":
        return ls.load(DATA / "bert_base.json")
    if name == "simple_model":
        return ls.profile(SimpleModel(), torch.zeros(4, 1))
    if name == "mlp":  # a small model for the export docs
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        return ls.profile(model, torch.zeros(2, 8), backward=True)
    if name == "quickstart":  # the README's first example
        model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10))
        return ls.profile(model, torch.randn(32, 128), backward=True)
    ex = EXAMPLES[name]
    return ls.profile(ex.build(), ex.example_input())


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize("name", MODELS)
def test_view_golden(name: str, view: str, width: int) -> None:
    text = profile_of(name).render(view=view, width=width)
    check_golden(f"{name}.{view}.{width}", text)
    # numbers are never cut, and no line is wider than asked
    assert "…" not in "".join(line[-12:] for line in text.splitlines() if "│" in line[:3])
    assert max(len(line) for line in text.splitlines()) <= width


def test_loaded_profile_renders_the_same(tmp_path: Path) -> None:
    prof = profile_of("tiny_gpt")
    prof.save(tmp_path / "p.json")
    loaded = ls.load(tmp_path / "p.json")
    for view in VIEWS:
        assert loaded.render(view=view, width=100) == prof.render(view=view, width=100)


def test_named_siblings_no_longer_fold_but_fold_all_does() -> None:
    prof = profile_of("simple_model")
    text = prof.render(width=120)
    assert "(2.1) A Linear" in text and "(2.2) B Linear" in text  # named: not folded
    everything = prof.render(width=120, fold="all")
    assert "(2.1) A–B Linear ×2" in everything
    assert "(4.1) C–K Repeat ×3" in everything
    unfolded = prof.render(width=120, fold=False, max_depth=1)
    assert "(4.1)" not in unfolded  # depth 1 hides the children of repeat_2x3
    structure = ls.profile(SimpleModel()).render(width=120)
    assert "Not run" in structure and "Calls" not in structure


def test_str_print_and_width_default(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    prof = profile_of("shared_mlp")
    monkeypatch.setenv("COLUMNS", "80")
    assert str(prof) == prof.render(width=80) == prof.render()
    print(prof)
    assert capsys.readouterr().out == prof.render(width=80) + "\n"


RENDER_MARK = re.compile(r"<!-- render: (\w+) (\{.*?\}) -->\n```text\n(.*?)```", re.DOTALL)


@pytest.mark.parametrize("doc", ["docs/views.md", "docs/exports.md", "README.md"])
def test_documented_output_is_real(doc: str) -> None:
    """Every ``<!-- render: NAME {options} -->`` block in the docs is what it claims
    (``"format": "csv"`` or ``"markdown"`` in the options: that export instead)."""
    path = Path(__file__).parent.parent / doc
    text = path.read_text(encoding="utf-8")

    def real(match: re.Match[str]) -> str:
        name, options = match.group(1), json.loads(match.group(2))
        fmt = options.pop("format", None)
        prof = profile_of(name)
        if fmt == "csv":
            out = prof.to_csv() or ""
        elif fmt == "markdown":
            out = prof.to_markdown(**options)
        else:
            out = prof.render(**options)
        return f"<!-- render: {name} {match.group(2)} -->\n```text\n{out}```"

    expected = RENDER_MARK.sub(real, text)
    if os.environ.get("LAYERSCOPE_UPDATE_GOLDEN"):
        path.write_text(expected, encoding="utf-8")
    assert RENDER_MARK.search(text), f"{doc} shows no rendered example"
    assert text == expected
