"""Repeat folding: exact folded trees, summed metrics, no mutation, invariants."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import layerscope as ls
from helpers import SimpleModel
from layerscope.analysis.fold import REPEAT_TYPE, fold
from layerscope.profile import ADDITIVE_METRICS, Node, Profile

Row = tuple[str, str, str, int, list[str]]


def rows(prof: Profile) -> list[Row]:
    """(node_id, path, type, repeat, members) of every node, pre-order."""
    return [(n.node_id, n.path, n.type, n.repeat, n.members) for n in prof.nodes()]


def expand(entries: list[Node]) -> list[str]:
    """The original paths a list of (possibly folded) sibling entries stands for."""
    return [p for e in entries for p in (e.members or [e.path])]


class Block(nn.Module):
    """Residual MLP block: x + fc2(gelu(fc1(x)))."""

    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d, h)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(h, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(self.act(self.fc1(x)))  # type: ignore[no-any-return]


class Stack(nn.Module):
    """Blocks of width 8 held in a ModuleList and run in a loop."""

    def __init__(self, hidden: list[int]) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(8, h) for h in hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


class Parallel(nn.Module):
    """Applies every head to the same input, so heads of different widths can be siblings."""

    def __init__(self, heads: list[nn.Module]) -> None:
        super().__init__()
        self.heads = nn.ModuleList(heads)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([h(x) for h in self.heads], dim=-1)


def test_torchmeter_simple_model() -> None:
    prof = ls.profile(SimpleModel(), torch.randn(4, 1))
    folded = fold(prof)
    cdefghijk = [f"repeat_2x3.{c}" for c in "CDEFGHIJK"]
    assert rows(folded) == [
        ("0", "", "SimpleModel", 1, []),
        ("1", "single_1", "Linear", 1, []),
        ("2", "repeat_1x2", "Sequential", 1, []),
        ("2.1", "repeat_1x2.A–B", "Linear", 2, ["repeat_1x2.A", "repeat_1x2.B"]),
        ("3", "single_2", "ReLU", 1, []),
        ("4", "repeat_2x3", "Sequential", 1, []),
        ("4.1", "repeat_2x3.C–K", REPEAT_TYPE, 3, cdefghijk),
        ("4.1.1", "repeat_2x3.C", "Linear", 1, cdefghijk[0::3]),
        ("4.1.2", "repeat_2x3.D", "ReLU", 1, cdefghijk[1::3]),
        ("4.1.3", "repeat_2x3.E", "Linear", 1, cdefghijk[2::3]),
        ("5", "single_3", "Linear", 1, []),
    ]
    ab = folded.node("repeat_1x2.A–B")
    assert ab.name == "A–B"
    assert ab.metrics["params"] == 2 * (10 * 10 + 10)  # 220
    assert ab.calls == 2
    ck = folded.by_id("4.1")
    assert (ck.name, ck.repr, ck.calls, ck.inputs, ck.outputs) == ("C–K", "", 0, [], [])
    assert ck.shared == []
    assert [c.name for c in ck.children] == ["C", "D", "E"]
    assert [c.metrics["params"] for c in ck.children] == [
        3 * (10 * 5 + 5),  # 165
        0,
        3 * (5 * 10 + 10),  # 180
    ]
    assert [c.calls for c in ck.children] == [3, 3, 3]
    assert ck.metrics["params"] == 165 + 180  # 345
    assert ck.self_metrics["params"] == 0
    assert ck.by_dtype["float32"]["param_bytes"] == 345 * 4
    # 1*10+10 + 2*(10*10+10) + 0 + 3*(55+60) + 10*1+1 = 20 + 220 + 345 + 11
    assert folded.root.metrics["params"] == 596
    assert folded.root.metrics == prof.root.metrics
    assert folded.root.by_dtype == prof.root.by_dtype
    folded.self_check()


def test_unequal_widths_fold_only_the_equal_run() -> None:
    # Linear(10,5), Linear(10,5), Linear(10,6): the first two fold, the third stays alone.
    model = Parallel([nn.Linear(10, 5), nn.Linear(10, 5), nn.Linear(10, 6)])
    folded = fold(ls.profile(model, torch.randn(2, 10)))
    heads = folded.node("heads").children
    assert [(h.path, h.repeat, h.members) for h in heads] == [
        ("heads.0–1", 2, ["heads.0", "heads.1"]),
        ("heads.2", 1, []),
    ]
    assert heads[0].metrics["params"] == 2 * (10 * 5 + 5)  # 110
    assert heads[1].metrics["params"] == 10 * 6 + 6  # 66


def test_twelve_identical_blocks() -> None:
    prof = ls.profile(Stack([16] * 12), torch.randn(2, 8))
    folded = fold(prof)
    (entry,) = folded.node("blocks").children
    assert (entry.name, entry.path, entry.node_id) == ("0–11", "blocks.0–11", "1.1")
    assert (entry.type, entry.repeat, entry.calls) == ("Block", 12, 12)
    assert entry.members == [f"blocks.{i}" for i in range(12)]
    # fc1 = 8*16+16 = 144, fc2 = 16*8+8 = 136, block = 280
    assert entry.metrics["params"] == 12 * 280  # 3360
    fc1, act, fc2 = entry.children
    assert (fc1.path, fc1.node_id, fc1.repeat) == ("blocks.0.fc1", "1.1.1", 1)
    assert fc1.members == [f"blocks.{i}.fc1" for i in range(12)]
    assert [fc1.metrics["params"], act.metrics["params"], fc2.metrics["params"]] == [
        12 * 144,  # 1728
        0,
        12 * 136,  # 1632
    ]
    assert folded.root.metrics == prof.root.metrics
    folded.self_check()


def test_one_different_block_splits_the_run() -> None:
    hidden = [16] * 12
    hidden[5] = 32
    prof = ls.profile(Stack(hidden), torch.randn(2, 8))
    folded = fold(prof)
    entries = folded.node("blocks").children
    assert [(e.name, e.repeat, len(e.members)) for e in entries] == [
        ("0–4", 5, 5),
        ("5", 1, 0),
        ("6–11", 6, 6),
    ]
    assert [e.node_id for e in entries] == ["1.1", "1.2", "1.3"]
    assert [e.metrics["params"] for e in entries] == [
        5 * 280,  # 1400
        8 * 32 + 32 + 32 * 8 + 8,  # 552
        6 * 280,  # 1680
    ]
    assert folded.root.metrics["params"] == 11 * 280 + 552 == 3632
    folded.self_check()


class TwoShapes(nn.Module):
    """Two same-hyperparameter siblings fed different shapes."""

    def __init__(self, module: type[nn.Module], *args: int) -> None:
        super().__init__()
        self.a = module(*args)
        self.b = module(*args)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.a(x), self.b(x[..., ::2, ::2])


@pytest.mark.parametrize(("module", "args"), [(nn.Identity, ()), (nn.AdaptiveAvgPool2d, (1,))])
def test_different_input_shapes_do_not_fold(module: type[nn.Module], args: tuple[int]) -> None:
    # a sees (1, 3, 8, 8), b sees (1, 3, 4, 4): same type and repr, different signature.
    folded = fold(ls.profile(TwoShapes(module, *args), torch.randn(1, 3, 8, 8)))
    assert [(c.path, c.repeat) for c in folded.root.children] == [("a", 1), ("b", 1)]


def test_without_input_folds_on_structure_alone() -> None:
    model = nn.Sequential(*(nn.Linear(4, 4) for _ in range(4)), nn.ReLU())
    prof = ls.profile(model)
    folded = fold(prof)
    assert [(c.path, c.repeat, c.calls) for c in folded.root.children] == [
        ("0–3", 4, 0),
        ("4", 1, 0),
    ]
    assert folded.root.children[0].metrics["params"] == 4 * (4 * 4 + 4)  # 80
    folded.self_check()


class Sub(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.relu(self.lin(x))


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(Sub(), Sub())
        self.norm = nn.LayerNorm(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.layers(x))  # type: ignore[no-any-return]


def test_nested_folding() -> None:
    prof = ls.profile(nn.Sequential(*(Outer() for _ in range(4))), torch.randn(2, 8))
    folded = fold(prof)
    inner = [f"{i}.layers.{j}" for i in range(4) for j in range(2)]  # tree order
    assert rows(folded) == [
        ("0", "", "Sequential", 1, []),
        ("1", "0–3", "Outer", 4, ["0", "1", "2", "3"]),
        ("1.1", "0.layers", "Sequential", 1, [f"{i}.layers" for i in range(4)]),
        ("1.1.1", "0.layers.0–1", "Sub", 2, inner),
        ("1.1.1.1", "0.layers.0.lin", "Linear", 1, [f"{p}.lin" for p in inner]),
        ("1.2", "0.norm", "LayerNorm", 1, [f"{i}.norm" for i in range(4)]),
    ]
    assert [n.depth for n in folded.nodes()] == [0, 1, 2, 3, 4, 2]
    # Linear(8,8) = 8*8+8 = 72, LayerNorm(8) = 8+8 = 16; Outer = 2*72 + 16 = 160
    assert folded.node("0.layers.0–1").metrics["params"] == 8 * 72  # 576
    assert folded.node("0.layers.0–1").calls == 8
    assert folded.node("0.norm").metrics["params"] == 4 * 16  # 64
    assert folded.root.metrics["params"] == 4 * 160 == 640
    assert folded.root.metrics == prof.root.metrics
    folded.self_check()


def test_window_positions_fold_inside_repeat() -> None:
    # A A B A A B: window (A, A, B) ×2 covers 6 > (A ×2) covering 2; inside it A, A fold.
    def aab() -> list[nn.Module]:
        return [nn.Linear(4, 4), nn.Linear(4, 4), nn.Tanh()]

    folded = fold(ls.profile(nn.Sequential(*aab(), *aab()), torch.randn(2, 4)))
    assert rows(folded) == [
        ("0", "", "Sequential", 1, []),
        ("1", "0–5", REPEAT_TYPE, 2, ["0", "1", "2", "3", "4", "5"]),
        ("1.1", "0–1", "Linear", 2, ["0", "1", "3", "4"]),
        ("1.2", "2", "Tanh", 1, ["2", "5"]),
    ]
    assert folded.by_id("1.1").metrics["params"] == 4 * (4 * 4 + 4)  # 80
    folded.self_check()


def test_non_additive_metrics_take_the_max() -> None:
    prof = ls.profile(nn.Sequential(*(nn.Linear(4, 4) for _ in range(3))), torch.randn(2, 4))
    for node, peak in zip(prof.root.children, [10, 30, 20], strict=True):
        node.metrics["peak_bytes"] = node.self_metrics["peak_bytes"] = peak
    (entry,) = fold(prof).root.children
    assert entry.metrics["peak_bytes"] == entry.self_metrics["peak_bytes"] == 30  # max(10, 30, 20)
    assert entry.metrics["params"] == 3 * (4 * 4 + 4)  # 60: additive keys still sum


def test_fold_does_not_mutate_and_passes_self_check() -> None:
    prof = ls.profile(SimpleModel(), torch.randn(4, 1))
    before = prof.to_dict()
    folded = fold(prof)
    assert prof.to_dict() == before
    assert folded.model == prof.model and folded.env == prof.env
    assert folded.notices == prof.notices and folded.unsupported_ops == prof.unsupported_ops
    folded.self_check()
    # editing the folded view leaves the original alone
    folded.by_id("1").metrics["params"] = -1
    folded.model["name"] = "changed"
    assert prof.to_dict() == before
    # and a folded profile round-trips through JSON
    assert Profile.from_dict(folded.to_dict()) == folded


ALPHABET: dict[str, Callable[[], nn.Module]] = {
    "L": lambda: nn.Linear(8, 8),
    "R": nn.ReLU,
    "T": nn.Tanh,
    "N": lambda: nn.Linear(8, 8, bias=False),
}


@settings(max_examples=30, deadline=None)
@given(st.text(alphabet="LRTN", min_size=1, max_size=12))
def test_fold_property(layers: str) -> None:
    prof = ls.profile(nn.Sequential(*(ALPHABET[c]() for c in layers)), torch.randn(2, 8))
    folded = fold(prof)
    folded.self_check()
    assert folded.root.metrics == prof.root.metrics
    for key in ADDITIVE_METRICS:
        if key in prof.root.metrics:
            assert sum(c.metrics[key] for c in folded.root.children) == prof.root.metrics[key]
    # every original child is covered exactly once, in order
    entries = folded.root.children
    assert expand(entries) == [c.path for c in prof.root.children]
    assert [n.node_id for n in entries] == [str(i) for i in range(1, len(entries) + 1)]
    for e in entries:
        kinds = [layers[int(p)] for p in (e.members or [e.path])]
        period = len(kinds) // e.repeat
        assert len(kinds) == period * e.repeat
        # the members are ``repeat`` copies of one window of layers
        assert kinds == kinds[:period] * e.repeat
        if e.type == REPEAT_TYPE:
            assert period >= 2
            assert sum(len(c.members) for c in e.children) == len(e.members)
    # the greedy fold leaves no two equal unfolded layers next to each other
    for a, b in itertools.pairwise(entries):
        assert not (a.repr == b.repr and a.repeat == b.repeat == 1 and a.type != REPEAT_TYPE)
