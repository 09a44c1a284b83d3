"""Every view against golden files at 80 and 120 columns.

The examples are profiled fresh (their numbers are exact and machine-independent); the
BERT-base-shaped transformers model is read from a saved profile (tests/data), so a
transformers release cannot change the files. Regenerate after an intended change with
``LAYERSCOPE_UPDATE_GOLDEN=1 pytest tests/test_console.py`` and review the diff.
"""

from __future__ import annotations

import io
import json
import os
import re
from functools import cache
from pathlib import Path

import pytest
import torch
from torch import nn

import layerscope as ls
from helpers.models import SimpleModel
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
    if name in ("bert_base", "gpt2_small"):
        return ls.load(DATA / f"{name}.json")
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


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("view", ["table", "tree"])
def test_gpt2_names_stay_whole(view: str, width: int) -> None:
    """GPT-2 (2 blocks, backward and memory) at 80 and 120 columns: every module name and
    type whole, beside params, FLOPs and the % column."""
    prof = profile_of("gpt2_small")
    text = prof.render(view=view, width=width)
    check_golden(f"gpt2_small.{view}.{width}", text)
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= width
    for node in prof.nodes()[1:]:
        name = "0–1" if node.name in ("0", "1") else node.name  # h.0 and h.1 fold into one
        assert f"{name} {node.type}" in text, node.path
    if view == "table":
        # at 80: the widest label (act NewGELUActivation, 48) + Params 10 + FLOPs 6
        # + % FLOPs 7 + 3 gaps of 3 = 80
        header = {
            80: "Module Params FLOPs % FLOPs",
            120: "Module Params MACs FLOPs % FLOPs Bwd FLOPs Saved",
        }[width]
        assert " ".join(text.split("\n", 1)[0].split()) == header


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


# ---- hostile text: control characters never reach the terminal ------------------------
HOSTILE = "\x1b]0;PWNED\x07\x1b[2Jx"  # sets the terminal's title, then clears the screen
SHOWN = "␛]0;PWNED␇␛[2Jx"  # one visible character for each control: columns stay aligned


@cache
def hostile_profile() -> ls.Profile:
    model = nn.Sequential()
    model.add_module(HOSTILE, nn.Linear(2, 2))
    prof = ls.profile(model, torch.randn(1, 2))
    prof.notices.append("a notice \x9b31m from a file\x7f")  # C1 CSI and DEL
    return prof


HOSTILE_TABLE = (
    "Module                          Params   MACs   FLOPs   % FLOPs   Calls\n"
    "───────────────────────────────────────────────────────────────────────\n"
    "Sequential                           6      4      10      100%       1\n"
    f"└─ (1) {SHOWN} Linear        6      4      10      100%       1\n"
    "\n"
    "Total                                6      4      10      100%\n"
    "Hidden to fit 80 columns: Input shape, Output shape, Param size (widen with\n"
    "  --width / width=, or choose with --columns / columns=).\n"
    "Params: 6 (trainable 6, frozen 0), 24 B; buffers: 0 (0 B)\n"
    "By dtype: float32 6 params (24 B)\n"
    "Note: a notice �31m from a file␡\n"
    "Run: train mode, grad enabled, device cpu, float32.\n"
)


def test_control_characters_are_shown_not_sent_in_every_view() -> None:
    prof = hostile_profile()
    assert prof.render(width=80) == HOSTILE_TABLE
    assert prof.render(view="tree", width=80).splitlines()[1] == (
        f"└─ (1) {SHOWN} Linear  [1, 2] → [1, 2]  Params 6  FLOPs 10 (100%)"
    )
    assert prof.render(view="repr", width=80).splitlines()[2] == f"  ({SHOWN}): Linear("
    for view in VIEWS:
        text = prof.render(view=view, width=80)
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", text), view


@pytest.mark.parametrize("terminal", [True, False])
def test_show_on_a_terminal_or_a_pipe_sends_no_control_characters(terminal: bool) -> None:
    from rich.console import Console

    from layerscope.render.console import renderable
    from layerscope.render.options import view_options

    buf = io.StringIO()
    console = Console(file=buf, width=80, force_terminal=terminal, color_system="standard")
    console.print(renderable(hostile_profile(), view_options(width=80)))
    out = buf.getvalue()
    assert SHOWN in out and "PWNED\x07" not in out and "\x9b" not in out
    plain = re.sub("\x1b\\[[0-9;]*m", "", out)  # rich's own colour codes (a terminal)
    assert plain == HOSTILE_TABLE
    buf = io.StringIO()
    hostile_profile().show(file=buf, width=80)
    assert buf.getvalue() == HOSTILE_TABLE


def test_layerscope_show_of_a_hostile_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from layerscope.cli import main

    hostile_profile().save(tmp_path / "p.json")
    assert main(["show", str(tmp_path / "p.json"), "--width", "80"]) == 0
    assert capsys.readouterr().out == HOSTILE_TABLE
