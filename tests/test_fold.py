"""Repeat folding: exact folded trees, summed metrics, no mutation, invariants."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import layerscope as ls
import layerscope.metricspec as ms
from helpers.models import SimpleModel
from layerscope.analysis.fold import REPEAT_TYPE, _best_window, fold
from layerscope.errors import InvalidInputError
from layerscope.profile import Node, Profile

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


def test_torchmeter_simple_model_named_items_stay_unfolded() -> None:
    # A, B and C..K are named items of Sequential(OrderedDict(...)): the default mode
    # folds integer-named siblings only, so the tree is the unfolded one, renumbered.
    prof = ls.profile(SimpleModel(), torch.randn(4, 1))
    folded = fold(prof)
    kinds = ["Linear", "ReLU", "Linear"] * 3
    assert rows(folded) == [
        ("0", "", "SimpleModel", 1, []),
        ("1", "single_1", "Linear", 1, []),
        ("2", "repeat_1x2", "Sequential", 1, []),
        ("2.1", "repeat_1x2.A", "Linear", 1, []),
        ("2.2", "repeat_1x2.B", "Linear", 1, []),
        ("3", "single_2", "ReLU", 1, []),
        ("4", "repeat_2x3", "Sequential", 1, []),
        *[
            (f"4.{k}", f"repeat_2x3.{c}", kind, 1, [])
            for k, (c, kind) in enumerate(zip("CDEFGHIJK", kinds, strict=True), start=1)
        ],
        ("5", "single_3", "Linear", 1, []),
    ]
    assert [n.path for n in folded.nodes()] == [n.path for n in prof.nodes()]  # 16 nodes
    # 1*10+10 + 2*(10*10+10) + 0 + 3*(55+60) + 10*1+1 = 20 + 220 + 345 + 11
    assert folded.root.metrics["params"] == 596
    folded.self_check()


def test_torchmeter_simple_model_all_names() -> None:
    prof = ls.profile(SimpleModel(), torch.randn(4, 1))
    folded = fold(prof, "all")
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
    for key in ms.ADDITIVE_METRICS:
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


# ---- hand-built profiles: the folding rule, numerics, scale ----------------------------


def mod(
    path: str,
    type: str = "Linear",
    params: int = 0,
    children: list[Node] | None = None,
    numerics: dict[str, Any] | None = None,
    repr: str | None = None,
) -> Node:
    """A called module with ``params`` of its own; its name is the last part of its path."""
    return Node(
        path=path,
        name=path.rpartition(".")[2],
        type=type,
        calls=1,
        repr=f"{type}()" if repr is None else repr,
        self_metrics={"params": params},
        numerics=dict(numerics or {}),
        children=children or [],
    )


def built(*children: Node, numerics: dict[str, Any] | None = None) -> Profile:
    """A profile whose root holds ``children``, with inclusive metrics rolled up."""
    prof = Profile(root=mod("", "Model", children=list(children)), numerics=numerics or {})
    prof.rollup()
    prof.self_check()
    return prof


def layers(n: int, **kw: Any) -> Node:
    """A ModuleList ``layers`` of n identical Linear layers with 10 params each."""
    return mod(
        "layers", "ModuleList", children=[mod(f"layers.{i}", params=10, **kw) for i in range(n)]
    )


def test_named_siblings_do_not_fold_by_default() -> None:
    prof = built(*(mod(p, params=20) for p in ("q_proj", "k_proj", "v_proj")))
    assert rows(fold(prof)) == [
        ("0", "", "Model", 1, []),
        ("1", "q_proj", "Linear", 1, []),
        ("2", "k_proj", "Linear", 1, []),
        ("3", "v_proj", "Linear", 1, []),
    ]
    assert rows(fold(prof, True)) == rows(fold(prof))
    # "all" folds them whatever their names
    folded = fold(prof, "all")
    assert rows(folded) == [
        ("0", "", "Model", 1, []),
        ("1", "q_proj–v_proj", "Linear", 3, ["q_proj", "k_proj", "v_proj"]),
    ]
    assert folded.by_id("1").name == "q_proj–v_proj"
    assert folded.by_id("1").metrics["params"] == 3 * 20  # 60
    assert folded.by_id("1").calls == 3  # 1 call each


def test_integer_named_siblings_fold() -> None:
    prof = built(layers(6))
    folded = fold(prof)
    assert rows(folded) == [
        ("0", "", "Model", 1, []),
        ("1", "layers", "ModuleList", 1, []),
        ("1.1", "layers.0–5", "Linear", 6, [f"layers.{i}" for i in range(6)]),
    ]
    entry = folded.by_id("1.1")
    assert (entry.name, entry.calls, entry.depth) == ("0–5", 6, 2)
    assert entry.metrics["params"] == entry.self_metrics["params"] == 6 * 10  # 60
    assert folded.root.metrics == prof.root.metrics == {"params": 60}
    assert fold(prof, "all").to_dict() == folded.to_dict()  # integer names: same either way
    folded.self_check()


def test_named_position_splits_an_integer_run() -> None:
    # 0 1 2 norm 3 4, all alike: the named one stops the runs on either side by default.
    names = ["0", "1", "2", "norm", "3", "4"]
    prof = built(*(mod(p, params=5) for p in names))
    assert rows(fold(prof)) == [
        ("0", "", "Model", 1, []),
        ("1", "0–2", "Linear", 3, ["0", "1", "2"]),
        ("2", "norm", "Linear", 1, []),
        ("3", "3–4", "Linear", 2, ["3", "4"]),
    ]
    assert rows(fold(prof, "all")) == [
        ("0", "", "Model", 1, []),
        ("1", "0–4", "Linear", 6, names),
    ]


def test_window_folds_only_with_integer_names() -> None:
    def window(names: str) -> Profile:
        # Linear, ReLU, Linear, ReLU under the given four names
        return built(*(mod(p, t) for p, t in zip(names, "LRLR", strict=True)))

    assert rows(fold(window("0123"))) == [
        ("0", "", "Model", 1, []),
        ("1", "0–3", REPEAT_TYPE, 2, ["0", "1", "2", "3"]),
        ("1.1", "0", "L", 1, ["0", "2"]),
        ("1.2", "1", "R", 1, ["1", "3"]),
    ]
    assert rows(fold(window("abcd"))) == [
        ("0", "", "Model", 1, []),
        ("1", "a", "L", 1, []),
        ("2", "b", "R", 1, []),
        ("3", "c", "L", 1, []),
        ("4", "d", "R", 1, []),
    ]
    # one named member is enough to stop the window: 0 1 2 alone cover no repeat
    assert [r[1] for r in rows(fold(window("012d")))] == ["", "0", "1", "2", "d"]
    assert rows(fold(window("abcd"), "all")) == [
        ("0", "", "Model", 1, []),
        ("1", "a–d", REPEAT_TYPE, 2, ["a", "b", "c", "d"]),
        ("1.1", "a", "L", 1, ["a", "c"]),
        ("1.2", "b", "R", 1, ["b", "d"]),
    ]


def test_rule_applies_inside_folded_entries() -> None:
    # 3 blocks of (q, k, 0, 1), all four alike Linear with 4 params
    def block(i: int) -> Node:
        parts = [mod(f"blocks.{i}.{c}", params=4) for c in ("q", "k", "0", "1")]
        return mod(f"blocks.{i}", "Block", children=parts)

    prof = built(mod("blocks", "ModuleList", children=[block(i) for i in range(3)]))
    of = [f"blocks.{i}" for i in range(3)]
    assert rows(fold(prof)) == [
        ("0", "", "Model", 1, []),
        ("1", "blocks", "ModuleList", 1, []),
        ("1.1", "blocks.0–2", "Block", 3, of),
        ("1.1.1", "blocks.0.q", "Linear", 1, [f"{b}.q" for b in of]),
        ("1.1.2", "blocks.0.k", "Linear", 1, [f"{b}.k" for b in of]),
        # 0 and 1 fold inside: 2 per block × 3 blocks = 6 members, in tree order
        ("1.1.3", "blocks.0.0–1", "Linear", 2, [f"{b}.{j}" for b in of for j in "01"]),
    ]
    assert fold(prof).by_id("1.1.3").metrics["params"] == 6 * 4  # 24
    assert rows(fold(prof, "all"))[3:] == [
        ("1.1.1", "blocks.0.q–1", "Linear", 4, [f"{b}.{j}" for b in of for j in "qk01"]),
    ]


def test_nan_in_one_layer_keeps_it_apart() -> None:
    # layers.3 of 6 identical layers saw 2 NaNs: 0–2 and 4–5 still fold, 3 stands alone
    clean = {"checked_calls": 1, "nan": 0, "inf": 0, "min": -1.0, "max": 1.0, "absmax": 1.0}
    prof = built(layers(6, numerics=clean))
    prof.node("layers.3").numerics.update(nan=2, nonfinite_calls=[0])
    folded = fold(prof)
    assert rows(folded) == [
        ("0", "", "Model", 1, []),
        ("1", "layers", "ModuleList", 1, []),
        ("1.1", "layers.0–2", "Linear", 3, ["layers.0", "layers.1", "layers.2"]),
        ("1.2", "layers.3", "Linear", 1, []),
        ("1.3", "layers.4–5", "Linear", 2, ["layers.4", "layers.5"]),
    ]
    assert [n.name for n in folded.node("layers").children] == ["0–2", "3", "4–5"]
    assert folded.node("layers.3").numerics["nan"] == 2
    # merged numerics: calls and counts summed, extremes combined
    assert folded.node("layers.0–2").numerics == {
        "checked_calls": 3,  # 1 + 1 + 1
        "nan": 0,
        "inf": 0,
        "min": -1.0,
        "max": 1.0,
        "absmax": 1.0,
    }
    assert [e.metrics["params"] for e in folded.node("layers").children] == [30, 10, 20]
    # the same holds when folding any names
    assert rows(fold(prof, "all")) == rows(folded)


@pytest.mark.parametrize("key", ["first_nonfinite", "origin"])
def test_event_path_keeps_its_ancestors_apart(key: str) -> None:
    # The event names layers.2.fc (no counts on the node itself): layers.2 stays unfolded,
    # 0–1 and 3–4 fold around it, and fc keeps its own path.
    def layer(i: int) -> Node:
        return mod(f"layers.{i}", "Block", children=[mod(f"layers.{i}.fc", params=3)])

    event = {"path": "layers.2.fc", "node_id": "1.3.1", "nan": 1, "inf": 0}
    prof = built(
        mod("layers", "ModuleList", children=[layer(i) for i in range(5)]),
        numerics={key: event, "checked_calls": 10},
    )
    assert rows(fold(prof)) == [
        ("0", "", "Model", 1, []),
        ("1", "layers", "ModuleList", 1, []),
        ("1.1", "layers.0–1", "Block", 2, ["layers.0", "layers.1"]),
        ("1.1.1", "layers.0.fc", "Linear", 1, ["layers.0.fc", "layers.1.fc"]),
        ("1.2", "layers.2", "Block", 1, []),
        ("1.2.1", "layers.2.fc", "Linear", 1, []),
        ("1.3", "layers.3–4", "Block", 2, ["layers.3", "layers.4"]),
        ("1.3.1", "layers.3.fc", "Linear", 1, ["layers.3.fc", "layers.4.fc"]),
    ]


def test_nonfinite_gradient_keeps_a_layer_apart() -> None:
    prof = built(layers(3))
    prof.node("layers.0").numerics = {"nan": 0, "inf": 0, "nonfinite_grad_calls": [0]}
    assert [r[1:4] for r in rows(fold(prof))[2:]] == [
        ("layers.0", "Linear", 1),
        ("layers.1–2", "Linear", 2),
    ]


def test_range_flag_splits_the_run_and_alike_flags_fold() -> None:
    # fp16_overflow on layers.2 and layers.3 only: 0–1, 2–3, 4–5
    def stats(overflow: bool) -> dict[str, Any]:
        return {
            "checked_calls": 1,
            "nan": 0,
            "inf": 0,
            "min": -1e5 if overflow else -1.0,
            "max": 2.0,
            "absmax": 1e5 if overflow else 2.0,
            "fp16_overflow": overflow,
            "bf16_overflow": False,
            "fp16_underflow": None,  # underflow not measured
            "bf16_underflow": None,
        }

    prof = built(
        mod(
            "layers",
            "ModuleList",
            children=[mod(f"layers.{i}", numerics=stats(i in (2, 3))) for i in range(6)],
        )
    )
    folded = fold(prof)
    assert [r[1:] for r in rows(folded)[2:]] == [
        ("layers.0–1", "Linear", 2, ["layers.0", "layers.1"]),
        ("layers.2–3", "Linear", 2, ["layers.2", "layers.3"]),
        ("layers.4–5", "Linear", 2, ["layers.4", "layers.5"]),
    ]
    # flags combine with any(); the unmeasured (None) ones are left out
    assert folded.node("layers.2–3").numerics == {
        "checked_calls": 2,  # 1 + 1
        "nan": 0,
        "inf": 0,
        "min": -1e5,
        "max": 2.0,
        "absmax": 1e5,
        "fp16_overflow": True,
        "bf16_overflow": False,
    }
    assert folded.node("layers.0–1").numerics["fp16_overflow"] is False


def test_thousand_distinct_siblings_stay_unfolded() -> None:
    # 1,000 Linear layers with distinct reprs: no two alike, the tree comes back renumbered
    distinct = [mod(str(i), params=i, repr=f"Linear({i})") for i in range(1000)]
    folded = fold(built(*distinct))
    assert rows(folded) == [("0", "", "Model", 1, [])] + [
        (str(i + 1), str(i), "Linear", 1, []) for i in range(1000)
    ]
    assert folded.root.metrics["params"] == 999 * 1000 // 2  # 0 + 1 + ... + 999 = 499500


def test_thousand_distinct_siblings_twice_fold_as_one_window() -> None:
    # the same 1,000 distinct layers twice (paths 0..1999): one window of 1000 ×2
    kinds = [mod(str(i), params=i % 1000, repr=f"Linear({i % 1000})") for i in range(2000)]
    folded = fold(built(*kinds))
    (window,) = folded.root.children
    assert (window.path, window.type, window.repeat) == ("0–1999", REPEAT_TYPE, 2)
    assert window.members == [str(i) for i in range(2000)]
    assert [(c.path, c.members) for c in window.children[:2]] == [
        ("0", ["0", "1000"]),
        ("1", ["1", "1001"]),
    ]
    assert len(window.children) == 1000
    assert window.metrics["params"] == 2 * 499500  # 999000
    folded.self_check()


def test_ten_thousand_identical_layers_fold_to_one_entry() -> None:
    prof = built(layers(10_000))
    folded = fold(prof)
    assert [r[:4] for r in rows(folded)] == [
        ("0", "", "Model", 1),
        ("1", "layers", "ModuleList", 1),
        ("1.1", "layers.0–9999", "Linear", 10_000),
    ]
    entry = folded.by_id("1.1")
    assert entry.members == [f"layers.{i}" for i in range(10_000)]
    assert entry.metrics["params"] == 10_000 * 10  # 100000
    assert entry.calls == 10_000


def test_modes() -> None:
    prof = built(layers(2))
    assert fold(prof, False) is prof  # no folding: the profile itself, not a copy
    for bad in ("none", 1, None):
        with pytest.raises(InvalidInputError, match="fold mode"):
            fold(prof, bad)  # type: ignore[arg-type]
    before = prof.to_dict()
    fold(prof, "all")
    assert prof.to_dict() == before  # "all" leaves the input untouched too


def best_window_by_definition(sigs: list[int], i: int, end: int) -> tuple[int, int]:
    """Every w from 1 to half of what is left: N whole copies of sigs[i:i+w] in a row."""
    best_w, best_n = 1, 1
    for w in range(1, (end - i) // 2 + 1):
        n = 1
        while i + (n + 1) * w <= end and sigs[i + n * w : i + (n + 1) * w] == sigs[i : i + w]:
            n += 1
        if n >= 2 and w * n > best_w * best_n:
            best_w, best_n = w, n
    return best_w, best_n


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=40), st.data())
def test_best_window_matches_the_definition(sigs: list[int], data: st.DataObject) -> None:
    i = data.draw(st.integers(0, len(sigs) - 1))
    end = data.draw(st.integers(i + 1, len(sigs)))
    where = {s: [k for k, x in enumerate(sigs) if x == s] for s in sigs}
    assert _best_window(sigs, i, end, where) == best_window_by_definition(sigs, i, end)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 2), min_size=1, max_size=4),
    st.lists(st.tuples(st.integers(1, 4), st.integers(0, 5)), min_size=1, max_size=8),
    st.data(),
)
def test_best_window_matches_the_definition_on_periodic_runs(
    unit: list[int], parts: list[tuple[int, int]], data: st.DataObject
) -> None:
    # runs of one unit, each followed by a gap signature (3 to 5: maybe seen before)
    sigs = [s for times, gap in parts for s in unit * times + ([gap] if gap >= 3 else [])]
    i = data.draw(st.integers(0, len(sigs) - 1))
    where = {s: [k for k, x in enumerate(sigs) if x == s] for s in sigs}
    for end in (len(sigs), data.draw(st.integers(i + 1, len(sigs)))):
        assert _best_window(sigs, i, end, where) == best_window_by_definition(sigs, i, end)


def test_best_window_examples() -> None:
    def best(sigs: list[int], end: int) -> tuple[int, int]:
        where = {s: [k for k, x in enumerate(sigs) if x == s] for s in sigs}
        return _best_window(sigs, 0, end, where)

    # A A B A A B: (A A B) ×2 covers 6 > A ×2 covering 2
    assert best([0, 0, 1, 0, 0, 1], 6) == (3, 2)
    # A ×4 and (A A) ×2 both cover 4: the smaller window wins
    assert best([0, 0, 0, 0], 4) == (1, 4)
    # the same list cut at 3: A ×3
    assert best([0, 0, 0, 0], 3) == (1, 3)
    # nothing repeats at 0
    assert best([0, 1, 0, 2], 4) == (1, 1)
    # A B A C A B A C: (A B A C) ×2 covers 8, found through the positions of B
    assert best([0, 1, 0, 2, 0, 1, 0, 2], 8) == (4, 2)


def test_fold_keeps_the_whole_profile_sections() -> None:
    """Folding changes the tree only: outside work, the distributed facts, the ranks and
    the extra sections are the profile's as they were."""
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(3)])
    prof = ls.profile(model, torch.randn(2, 4), backward=True)
    prof.dist = {"rank": 0, "world_size": 2}
    prof.ranks = [prof]
    prof.extra["regions"] = [{"path": "<outside>.[data]"}]
    folded = fold(prof)
    assert folded.root.children[0].repeat == 3  # the three Linears are one row
    # the default loss sums the (2, 4) output: one FLOP per input element, 2*4 = 8
    assert folded.outside == prof.outside and prof.outside["flops"] == 8
    assert folded.dist == {"rank": 0, "world_size": 2}
    assert folded.ranks == [prof]
    assert folded.extra == {"regions": [{"path": "<outside>.[data]"}]}
