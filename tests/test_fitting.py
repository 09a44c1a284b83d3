"""Fitting views to a width: which columns give way and in what order, node ids hidden
before names are cut, named columns kept in every view, and word wrapping that never
parts a number from its unit and cuts long words in linear time."""

from __future__ import annotations

import itertools
import re
import textwrap
from functools import cache

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import layerscope as ls
from layerscope.render.layout import wrap_text
from layerscope.render.units import UNITS
from layerscope.render.wrap import wrap_words
from test_console import profile_of
from viewmodels import build, node


def chain() -> ls.Profile:
    """Net > a > b > c > d, one module each, d with 3 params and 5 FLOPs."""
    d = node("d", "D", flops=5, params=3)
    return build(node("Net", "Net", node("a", "A", node("b", "B", node("c", "C", d)))))


def test_node_ids_go_before_the_core_columns_and_dropped_columns_come_back() -> None:
    prof = chain()
    # the widest label, "         └─ (1.1.1.1) d D", is 9 + 3 + 10 + 3 = 25 wide; with
    # Params (6), FLOPs (5), % FLOPs (7), each after a gap of 3: 25 + 9 + 8 + 10 = 52
    text = prof.render(width=52)
    assert text.splitlines()[:7] == [
        "Module                      Params   FLOPs   % FLOPs",
        "─" * 52,
        "Net                              3       5      100%",
        "└─ (1) a A                       3       5      100%",
        "   └─ (1.1) b B                  3       5      100%",
        "      └─ (1.1.1) c C             3       5      100%",
        "         └─ (1.1.1.1) d D        3       5      100%",
    ]
    assert "Hidden to fit 52 columns: Calls (widen" in text
    # at 51 the ids go, from every row: the label is 15 wide, 15 + 27 = 42, and Calls
    # (5 + 3) comes back: 50
    text = prof.render(width=51)
    assert text.splitlines()[:7] == [
        "Module            Params   FLOPs   % FLOPs   Calls",
        "─" * 50,
        "Net                    3       5      100%       1",
        "└─ a A                 3       5      100%       1",
        "   └─ b B              3       5      100%       1",
        "      └─ c C           3       5      100%       1",
        "         └─ d D        3       5      100%       1",
    ]
    assert "Hidden to fit 51 columns: Node ids (widen" in text
    # at 41 the core columns go too, the % column first (15 + 9 + 8 = 32 <= 41)
    text = prof.render(width=41)
    assert text.splitlines()[0] == "Module            Params   FLOPs"
    assert "Hidden to fit 41 columns: Node ids, Calls, % FLOPs (widen" in text.replace("\n  ", " ")


def test_a_name_too_long_to_be_whole_keeps_the_columns_that_fit_beside_it() -> None:
    long = node("a_really_long_module_name", "SomeVeryLongModuleType", flops=1, params=2)
    prof = build(node("Net", "Net", long))
    text = prof.render(width=40)
    # "└─ a_really_long_module_name SomeVeryLongModuleType" is 51 > 40 even alone: the
    # ids go, and while columns are dropped the label counts as max(16, 40 × 0.45) = 18:
    # 18 + 9 (Params) + 8 (FLOPs) + 10 (% FLOPs) + 8 (Calls) = 53 > 40 drops Calls,
    # 45 > 40 the % column; the label gets 40 - 9 - 8 = 23
    assert text.splitlines()[:4] == [
        "Module                    Params   FLOPs",
        "─" * 40,
        "Net                            2       1",
        "└─ a_real…e_name So…ype        2       1",
    ]
    assert "Hidden to fit 40 columns: Node ids, Calls, % FLOPs (widen" in " ".join(text.split())


def test_the_tree_view_hides_node_ids_on_every_label_before_cutting_one() -> None:
    prof = chain()
    assert prof.render(view="tree", width=80).splitlines()[4] == (
        "         └─ (1.1.1.1) d D  Params 3  FLOPs 5 (100%)"
    )
    # at 24 "(1.1.1.1) d D" (13) has 24 - 12 = 12: every label loses its id
    text = prof.render(view="tree", width=24)
    assert text.splitlines()[:5] == [
        "Net  Params 3",
        "│   FLOPs 5 (100%)",
        "└─ a A  Params 3",
        "   │   FLOPs 5 (100%)",
        "   └─ b B  Params 3",
    ]
    assert "         └─ d D" in text.splitlines()
    assert "Hidden to fit 24 columns: Node ids (widen" in " ".join(text.split())
    assert "(1." not in text and "(1) " not in text and "…" not in text


@cache
def mlp() -> ls.Profile:
    """Linear(4, 8), ReLU, Linear(8, 2) on a (3, 4) input: FLOPs 2·3·4·8 + 3·8 = 216,
    3·8 = 24 and 2·3·8·2 + 3·2 = 102."""
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    return ls.profile(model, torch.zeros(3, 4))


def test_flat_views_keep_the_shapes_the_user_names() -> None:
    text = mlp().render(view="ops", columns=["input_shape", "output_shape"], width=120)
    assert text.splitlines()[1:7] == [
        "Module   Type         Input shape   Output shape",
        "─" * 48,
        "0        Linear       [3, 4]        [3, 8]",
        "2        Linear       [3, 8]        [3, 2]",
        "1        ReLU         [3, 8]        [3, 8]",
        "<root>   Sequential   [3, 4]        [3, 2]",
    ]
    text = mlp().render(view="ops", columns=["flops", "input_shape"], width=200)
    assert text.splitlines()[1:4] == [
        "Module   Type         Self FLOPs   Self % FLOPs   Input shape",
        "─" * 61,
        "0        Linear              216          63.2%   [3, 4]",  # 216 / 342
    ]
    assert "Hidden" not in text
    # a by-type row stands for several modules: its shape cell is blank
    text = mlp().render(view="top", columns=["output_shape"], width=80, by_type=True)
    assert text.splitlines()[1:5] == [
        "Depth   Type     Modules   Output shape",
        "─" * 39,
        "    1   Linear         2",
        "        ReLU           1",
    ]


def test_named_columns_stay_and_the_label_gives_way() -> None:
    cols = ["flops", "input_shape", "output_shape", "macs", "params"]
    text = profile_of("gpt2_small").render(view="ops", columns=cols, width=80, top=1)
    header = next(line for line in text.splitlines() if line.startswith("Module "))
    assert " ".join(header.split()) == (
        "Module Self FLOPs Input shape Output shape Self MACs Self params"
    )
    assert "Hidden to fit 80 columns: Type, Self % FLOPs (widen" in " ".join(text.split())


# ---- wrapping ---------------------------------------------------------------------------


def test_a_number_and_its_unit_stay_on_one_line() -> None:
    cases = [  # textwrap gave "... 0 (0" / "  B)", "... 32" / "  K", "(109.50" / "  KiB)"
        (
            "Params: 53,561,088 (trainable 53,561,088, frozen 0), 204.32 MiB; buffers: 0 (0 B)",
            80,
            [
                "Params: 53,561,088 (trainable 53,561,088, frozen 0), 204.32 MiB; buffers: 0",
                "  (0 B)",
            ],
        ),
        ("Outside the model: FLOPs 32 K", 27, ["Outside the model: FLOPs", "  32 K"]),
        (
            "By dtype: float32 28,032 params (109.50 KiB)",
            39,
            ["By dtype: float32 28,032 params", "  (109.50 KiB)"],
        ),
        (
            "throughput 14.5 K inputs/s (batch 1)",
            17,
            ["throughput", "  14.5 K inputs/s", "  (batch 1)"],
        ),
        ("median 69 ms, p90 76.4 ms", 22, ["median 69 ms, p90", "  76.4 ms"]),
        # a word that only starts like a unit stays free of its number
        ("wait 5 minutes", 11, ["wait 5", "  minutes"]),
        # a rate, and an affine formula, are one word too
        ("bandwidth 2.04 TB/s here", 18, ["bandwidth", "  2.04 TB/s here"]),
        ("the steps of a + b·R fitted", 17, ["the steps of", "  a + b·R fitted"]),
    ]
    for text, width, lines in cases:
        assert wrap_words(text, width, "  ") == lines, text


_WORDS = st.sampled_from(["a", "bb", "word", "x-y", "(z)", "longer_word_here", "q" * 60])


@settings(max_examples=300, deadline=None)
@given(
    words=st.lists(st.tuples(_WORDS, st.sampled_from([" ", "  ", "\n", "\t"])), max_size=30),
    width=st.integers(1, 70),
    indent=st.sampled_from(["", "  ", "    "]),
)
def test_wrapping_is_textwraps_rule(words: list[tuple[str, str]], width: int, indent: str) -> None:
    """Without numbers and units, the lines are textwrap's (trailing blanks aside)."""
    text = "".join(w + s for w, s in words)
    width = max(width, len(indent) + 1)
    expected = textwrap.wrap(text, width, subsequent_indent=indent, break_on_hyphens=False)
    assert [line.rstrip() for line in wrap_words(text, width, indent)] == [
        line.rstrip() for line in expected
    ]


_UNIT_START = re.compile(
    "^(?:" + "|".join(re.escape(u) for u in sorted(UNITS, key=len, reverse=True)) + r")(?![\w/])"
)


def parted(text: str) -> list[tuple[str, str]]:
    """Neighbouring lines where the first ends in a number and the next starts with a
    unit (after the indent and any tree guides or box edges)."""
    lines = text.splitlines()
    out = []
    for a, b in itertools.pairwise(lines):
        head = a.rstrip(" │")
        tail = b.lstrip(" │├└─╭╰")
        if head[-1:].isdigit() and _UNIT_START.match(tail):
            out.append((a, b))
    return out


@settings(max_examples=60, deadline=None)
@given(
    width=st.integers(40, 200),
    name=st.sampled_from(["gpt2_small", "bert_base", "tiny_gpt"]),
    view=st.sampled_from(["table", "tree", "repr", "top", "ops"]),
)
def test_views_never_part_a_number_from_its_unit(width: int, name: str, view: str) -> None:
    text = profile_of(name).render(view=view, width=width)
    assert parted(text) == []
    assert max(len(line) for line in text.splitlines()) <= width


def test_the_check_sees_a_parted_unit() -> None:
    assert parted("buffers: 0 (0\n  B)\n") == [("buffers: 0 (0", "  B)")]
    assert parted("│  FLOPs 32\n│    K\n") == [("│  FLOPs 32", "│    K")]
    assert parted("FLOPs 32\n  Kernels\n") == []


def test_a_long_word_is_cut_in_pieces() -> None:
    word = "x" * 2_000_000
    lines = wrap_text(word, "s", 80)
    # the first line holds 80 characters, each next one 78 after its indent of 2:
    # 2,000,000 - 80 = 1,999,920 = 78 × 25,640
    assert len(lines) == 1 + 25_640
    assert lines[0] == [("x" * 80, "s")]
    assert all(line == [("  " + "x" * 78, "s")] for line in lines[1:])


def test_a_profile_with_a_long_notice_prints_it_whole() -> None:
    prof = chain()
    notice = "y" * 1_000_000
    prof.notices.append(notice)
    text = prof.render(width=100)
    # "Note: " and the first 94 characters, then 98 on each line after its indent
    lines = [line for line in text.splitlines() if "yyyy" in line]
    assert lines[0] == "Note: " + "y" * 94
    assert all(line == "  " + "y" * 98 for line in lines[1:-1])
    assert len(lines) == 1 + -(-(1_000_000 - 94) // 98)
    assert "".join(line.strip() for line in lines) == "Note: " + notice
