"""The work every profile does outside the model's forward: capturing and restoring the
model's state, building the module tree, counting parameters and rolling metrics up."""

from __future__ import annotations

import dataclasses
import json
import math
import operator
import pickle
import random
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch._subclasses.fake_tensor import FakeTensorMode, is_fake

import layerscope as ls
import layerscope.metricspec as ms
from helpers.snapshots import ModelSnapshot
from layerscope.collect import state as state_module
from layerscope.collect.state import (
    _BATCH_NUMEL,
    _BATCH_TOTAL,
    ModelState,
    _has_values,
)
from layerscope.collect.tree import ModelTree, module_repr
from layerscope.errors import LayerscopeError
from layerscope.metrics.params import fill_parameters, owned_tensors
from layerscope.profile import DTYPE_KEYS, Node, Profile, new_node

# ---- ModelState ------------------------------------------------------------------------


class ManyBuffers(nn.Module):
    """Buffers of several dtypes that forward changes in place (one of them to NaN)."""

    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm1d(4)
        self.f16: Tensor
        self.f64: Tensor
        self.count: Tensor
        self.flags: Tensor
        self.nan: Tensor
        self.still: Tensor
        self.register_buffer("f16", torch.zeros(3, dtype=torch.float16))
        self.register_buffer("f64", torch.arange(5, dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.int64))
        self.register_buffer("flags", torch.zeros(2, dtype=torch.bool))
        self.register_buffer("nan", torch.tensor([1.0, math.nan]))
        self.register_buffer("still", torch.ones(2))

    def forward(self, x: Tensor) -> Tensor:
        self.f16.add_(1)
        self.f64.mul_(2)
        self.count += 1
        self.flags.fill_(True)
        self.nan[0] = math.nan
        out: Tensor = self.bn(x)
        return out


def test_buffers_of_every_dtype_changed_in_place_are_put_back() -> None:
    model = ManyBuffers().train()
    x = torch.randn(3, 4)
    snap = ModelSnapshot.take(model)
    version = model.still._version
    ls.profile(model, x)
    ls.profile(model, x)
    snap.assert_unchanged(model)
    assert model.f16.tolist() == [0.0, 0.0, 0.0]
    assert model.f64.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert int(model.count) == 0 and not model.flags.any()
    assert model.nan[0].item() == 1.0 and math.isnan(model.nan[1].item())
    assert int(model.bn.num_batches_tracked) == 0  # type: ignore[arg-type]
    assert torch.equal(model.bn.running_mean, torch.zeros(4))  # type: ignore[arg-type]
    assert model.still._version == version  # an unchanged buffer is not written


def test_a_buffer_that_stays_nan_is_written_back_unchanged() -> None:
    model = ManyBuffers()
    state = ModelState.capture(model)
    model.nan[0] = 7.0
    assert state.restore() == []
    assert model.nan[0].item() == 1.0 and math.isnan(model.nan[1].item())


def test_restore_runs_once_and_drops_the_copies() -> None:
    model = ManyBuffers()
    model.bn.weight.grad = torch.ones(4)
    state = ModelState.capture(model)
    assert state.modules and state.buffers and state.grads and state.empty and state.contents
    assert state.restore() == []
    assert not (state.modules or state.contents or state.empty or state.params)
    assert not (state.grads or state.buffers or state.batches or state.lazy)
    with pytest.raises(LayerscopeError, match="restored once"):
        state.restore()


def test_shared_tensors_captured_once_and_named_by_their_first_path() -> None:
    inner, last = nn.Linear(2, 2), nn.Linear(2, 2)
    model = nn.Sequential(inner, nn.Sequential(inner), last)
    last.weight = inner.weight
    state = ModelState.capture(model)
    assert [(prefix, key) for prefix, key, *_ in state.params] == [
        ("0", "weight"),
        ("0", "bias"),
        ("2", "bias"),
    ]
    with torch.no_grad():
        inner.weight.add_(1)
        last.bias.add_(1)
    assert state.restore() == [
        f"the model changed parameter {name} in place during forward; layerscope cannot undo that"
        for name in ("0.weight", "2.bias")
    ]


def test_module_tables_and_attributes_are_put_back() -> None:
    lin, act = nn.Linear(2, 2), nn.ReLU()
    model = nn.Sequential(lin, act)
    kept = lin.register_forward_hook(lambda m, a, o: None)
    state = ModelState.capture(model)
    hooks = lin._forward_hooks
    extra = act.register_forward_pre_hook(lambda m, a: None)  # was empty
    kept.remove()  # was not empty
    lin.cache = torch.ones(1)  # an attribute added
    act.inplace = True  # an attribute rebound
    model.train(False)
    del lin._buffers  # a table removed
    model._modules["2"] = nn.Tanh()  # a submodule added
    state.restore()
    assert lin._forward_hooks is hooks and list(hooks) == [kept.id]
    assert extra.id not in act._forward_pre_hooks and not act._forward_pre_hooks
    assert not hasattr(lin, "cache") and not act.inplace
    assert model.training and lin.training and lin._buffers == {}
    assert list(model._modules) == ["0", "1"]
    kept.remove()


def test_meta_model_state_round_trips() -> None:
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    snap = ModelSnapshot.take(model)
    state = ModelState.capture(model)
    assert state.restore() == []
    snap.assert_unchanged(model)


def _reference_has_values(t: Tensor) -> bool:
    return t.device.type != "meta" and not is_fake(t)


def test_has_values_agrees_with_is_fake() -> None:
    class Sub(Tensor):
        pass

    plain = torch.ones(3)
    tensors = [
        plain,
        nn.Parameter(torch.ones(2)),
        torch.ones(2, device="meta"),
        torch.ones(2, dtype=torch.int32),
        plain.as_subclass(Sub),
    ]
    with FakeTensorMode() as mode:
        tensors.append(torch.ones(2))
        tensors.append(mode.from_tensor(plain))
    for t in tensors:
        assert _has_values(t) is _reference_has_values(t), t

    seen: list[bool] = []

    def check(x: Tensor) -> Tensor:
        assert _has_values(x) is _reference_has_values(x)
        seen.append(_has_values(x))
        return x * 2

    torch.func.vmap(check)(torch.ones(2, 3))  # a functorch-wrapped tensor
    torch.func.functionalize(check)(torch.ones(2))  # a functional tensor
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(plain)
        torch.func.vmap(check)(fake.expand(2, 3))  # functorch wrapping a fake one
    assert seen == [True, True, False]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_grads_of_parameters_restored_by_value(dtype: torch.dtype) -> None:
    model = nn.Linear(2, 2).to(dtype)
    model.weight.grad = torch.ones(2, 2, dtype=dtype)
    state = ModelState.capture(model)
    grad = model.weight.grad
    grad.add_(1)
    model.bias.grad = torch.ones(2, dtype=dtype)
    state.restore()
    assert model.weight.grad is grad and torch.equal(grad, torch.ones(2, 2, dtype=dtype))
    assert model.bias.grad is None


class Batched(nn.Module):
    """Small buffers of rank 0 and 1, several per dtype, beside ones copied alone."""

    def __init__(self) -> None:
        super().__init__()
        for name, value in {
            "a": torch.arange(3.0),
            "b": torch.ones(4),
            "empty": torch.zeros(0),
            "strided": torch.arange(8.0)[::2],  # not contiguous
            "nan": torch.tensor([math.nan, 2.0]),
            "n1": torch.tensor(1),
            "n2": torch.tensor(2),
            "f0": torch.tensor(0.5),
            "g0": torch.tensor(-0.0),
            "mask": torch.tensor([True, False]),
            "mask2": torch.tensor([False]),
            "big": torch.zeros(_BATCH_NUMEL + 1),  # too big for a batch
            "grid": torch.ones(2, 2),  # of rank 2
            "lone": torch.ones(2, dtype=torch.float64),  # the only one of its dtype
        }.items():
            self.register_buffer(name, value)


def _values(model: nn.Module) -> dict[str, list[Any]]:
    return {name: b.tolist() for name, b in model.named_buffers()}


def _versions(model: nn.Module) -> dict[str, int]:
    return {name: b._version for name, b in model.named_buffers()}


def _restore_writes(state: ModelState, named: dict[str, Tensor]) -> set[str]:
    """Restore ``state``; return the names of the tensors it wrote. Restore gives every
    tensor its version counter at capture back (so a user's pending graph still runs), so
    the writes are read off the counters just before it does."""
    before = {name: t._version for name, t in named.items()}
    seen: dict[int, int] = {}
    reset = state_module._reset_versions

    def spy(versions: list[tuple[Tensor, int]]) -> None:
        seen.update((id(t), t._version) for t, _ in versions)
        reset(versions)

    state_module._reset_versions = spy
    try:
        assert state.restore() == []
    finally:
        state_module._reset_versions = reset
    return {name for name, t in named.items() if seen.get(id(t), before[name]) != before[name]}


def test_small_buffers_are_copied_in_batches() -> None:
    model = Batched()
    state = ModelState.capture(model)
    buffers = dict(model.named_buffers())
    batched = {
        (str(batch.saved.dtype), batch.stacked): [
            next(k for k, b in buffers.items() if b is t) for t in batch.tensors
        ]
        for batch in state.batches
    }
    assert batched == {
        ("torch.float32", False): ["a", "b", "empty", "strided", "nan"],
        ("torch.int64", True): ["n1", "n2"],
        ("torch.float32", True): ["f0", "g0"],
        ("torch.bool", False): ["mask", "mask2"],
    }
    assert {next(k for k, b in buffers.items() if b is t) for t, _ in state.buffers} == {
        "big",
        "grid",
        "lone",
    }
    assert state.restore() == []


def test_only_the_changed_buffers_of_a_batch_are_written_back() -> None:
    model = Batched()
    values, versions = _values(model), _versions(model)
    b = dict(model.named_buffers())
    state = ModelState.capture(model)
    b["b"][1] = 5.0
    b["strided"].mul_(3)
    b["n2"].add_(1)
    b["g0"].fill_(0.0)  # equal to -0.0: not a change
    b["mask2"].fill_(True)
    b["big"][-1] = 1.0
    written = _restore_writes(state, b)
    after = _values(model)
    assert after.pop("nan")[1] == 2.0 and math.isnan(b["nan"][0].item())
    assert after == {k: v for k, v in values.items() if k != "nan"}
    assert math.copysign(1.0, b["g0"].item()) == 1.0  # 0.0 == -0.0: left as it was
    assert b["strided"].stride() == (2,)
    # Written back where changed; "nan" differs from itself, so it is written back like
    # every buffer torch.equal finds changed. Every counter is as at capture.
    assert written == {"b", "strided", "n2", "mask2", "big", "nan"}
    assert _versions(model) == versions


def test_unchanged_batches_are_not_written() -> None:
    model = Batched()
    del model.nan
    versions = _versions(model)
    b = dict(model.named_buffers())
    state = ModelState.capture(model)
    b["a"].add_(0)  # written, values unchanged
    assert _restore_writes(state, b) == set()
    assert _versions(model) == versions  # "a"'s counter too, its values being the same


def test_a_batch_holds_fewer_elements_than_torch_splits_over_threads() -> None:
    model = nn.Module()
    for i in range(7):
        model.register_buffer(f"b{i}", torch.full((_BATCH_NUMEL // 2,), float(i)))
    buffers = list(model.buffers())
    state = ModelState.capture(model)
    assert _BATCH_TOTAL == 32767 and [len(batch.tensors) for batch in state.batches] == [3, 3]
    assert len(state.buffers) == 1 and state.buffers[0][0] is buffers[6]  # alone in its batch
    for i in (0, 5, 6):
        buffers[i].zero_()
    state.restore()
    assert [b.tolist() for b in buffers] == [[float(i)] * 8192 for i in range(7)]


def test_a_batch_whose_tensor_changed_rank_is_restored_one_by_one() -> None:
    model = Batched()
    b = dict(model.named_buffers())
    state = ModelState.capture(model)
    b["a"].unsqueeze_(0)  # the batch no longer concatenates
    b["a"].add_(1)
    b["b"].zero_()
    b["n1"].unsqueeze_(0)  # nor stacks
    b["n1"].add_(1)
    state.restore()
    assert b["a"].tolist() == [[0.0, 1.0, 2.0]] and b["b"].tolist() == [1.0] * 4
    assert b["n1"].tolist() == [1] and b["n2"].item() == 2


def test_small_grads_are_copied_in_batches() -> None:
    model = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 2), nn.Linear(2, 1))
    params = list(model.parameters())
    grads = [torch.full_like(p, 2.0) for p in params]
    for p, g in zip(params, grads, strict=True):
        p.grad = g
    state = ModelState.capture(model)
    assert len(state.batches) == 1
    assert all(map(operator.is_, state.batches[0].tensors, grads[1::2]))  # the biases'
    versions = [g._version for g in grads]
    grads[1].add_(1)  # in the batch
    grads[2].add_(1)  # alone
    params[5].grad = None
    written = _restore_writes(state, {str(i): g for i, g in enumerate(grads)})
    assert all(p.grad is g for p, g in zip(params, grads, strict=True))
    assert all(torch.equal(g, torch.full_like(g, 2.0)) for g in grads)
    assert written == {"1", "2"}
    assert [g._version for g in grads] == versions


# ---- parameter counting ------------------------------------------------------------------


class HeldTwice(nn.Module):
    """A parameter under two names in one module, a buffer shared by two children, a
    lazy parameter and an unset (None) parameter slot."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(2, 2)
        self.a.alias = self.a.weight
        self.b = nn.BatchNorm1d(2)
        self.c = nn.BatchNorm1d(2)
        self.c.running_mean = self.b.running_mean
        self.lazy = nn.LazyLinear(2)
        self.register_parameter("unset", None)


def test_owned_tensors_holders_and_owners() -> None:
    model = HeldTwice()
    tree = ModelTree.build(model)
    owned, notices = owned_tensors(tree)
    by_name = {o.names[0]: o for o in owned}
    assert list(by_name) == [
        "a.weight",
        "a.bias",
        "b.weight",
        "b.bias",
        "b.running_mean",
        "b.running_var",
        "b.num_batches_tracked",
        "c.weight",
        "c.bias",
        "c.running_var",
        "c.num_batches_tracked",
    ]
    alias = by_name["a.weight"]
    assert alias.names == ("a.weight", "a.alias") and alias.owner.path == "a"
    assert [(n.path, q) for n, q in alias.holders] == [("a", "a.weight"), ("a", "a.alias")]
    mean = by_name["b.running_mean"]
    assert mean.names == ("b.running_mean", "c.running_mean") and mean.owner is tree.root
    assert not mean.is_param and by_name["a.bias"].is_param
    assert notices == [
        f"lazy.{key} is an uninitialised lazy tensor; run the model on an input to count it"
        for key in ("weight", "bias")
    ]


def test_fill_parameters_resets_and_counts_once() -> None:
    model = HeldTwice()
    tree = ModelTree.build(model)
    root = tree.root
    root.self_metrics["params"] = 99
    root.self_metrics["macs"] = 5
    first = fill_parameters(tree)
    snapshot = [(n.self_metrics.copy(), n.self_by_dtype, n.shared) for n in root.walk()]
    assert fill_parameters(tree) == first and len(first) == 2
    assert [(n.self_metrics, n.self_by_dtype, n.shared) for n in root.walk()] == snapshot
    assert list(root.self_metrics) == [
        "params",
        "macs",
        "trainable_params",
        "buffers",
        "param_bytes",
        "buffer_bytes",
    ]
    assert root.self_metrics["macs"] == 5 and root.self_metrics["buffers"] == 2
    assert root.self_by_dtype == {
        "float32": {"params": 0, "param_bytes": 0, "buffers": 2, "buffer_bytes": 8}
    }
    a, b, c = (tree.by_path[p] for p in "abc")
    assert a.self_metrics["params"] == 6 and a.self_metrics["trainable_params"] == 6
    assert a.shared == ["a.weight (counted at a)", "a.alias (counted at a)"]
    assert b.shared == ["b.running_mean (counted at <root>)"]
    assert c.shared == ["c.running_mean (counted at <root>)"]
    assert b.self_by_dtype == {
        "float32": {"params": 4, "param_bytes": 16, "buffers": 2, "buffer_bytes": 8},
        "int64": {"params": 0, "param_bytes": 0, "buffers": 1, "buffer_bytes": 8},
    }


# ---- module tree ------------------------------------------------------------------------


def test_new_node_is_the_dataclass_constructor() -> None:
    fast = new_node("a.b", "b", "Linear", 2, "Linear(x)")
    slow = Node(path="a.b", name="b", type="Linear", node_id="0", depth=2, repr="Linear(x)")
    assert list(vars(fast).items()) == list(vars(slow).items())  # same values, same order
    assert [f.name for f in dataclasses.fields(fast)] == list(vars(fast))
    other = new_node("a.b", "b", "Linear", 2, "Linear(x)")
    for f in dataclasses.fields(Node):
        value = getattr(fast, f.name)
        if isinstance(value, list | dict):
            assert value is not getattr(other, f.name)  # a fresh container per node
    assert repr(fast) == repr(slow) and fast != slow and fast == fast  # identity equality
    copy = pickle.loads(pickle.dumps(fast))
    assert type(copy) is Node and list(vars(copy).items()) == list(vars(fast).items())
    assert (
        dataclasses.replace(fast, calls=3).to_dict() == dataclasses.replace(slow, calls=3).to_dict()
    )


class Odd(nn.Module):
    """A submodule under two paths, a None slot, a cycle, an extra_repr that fails."""

    def __init__(self) -> None:
        super().__init__()
        shared = nn.Linear(2, 2)
        self.a = nn.Sequential(shared, nn.ReLU())
        inner = nn.Sequential(nn.Tanh())
        self.b = nn.ModuleDict({"x": shared, "y": inner})
        self.register_module("none", None)
        inner.add_module("back", self.b)  # a cycle: b.y.back is b
        self.bad = Broken()


class Broken(nn.Module):
    def extra_repr(self) -> str:
        raise RuntimeError("no")


def _reference_tree(model: nn.Module) -> ModelTree:
    """ModelTree.build as first written."""

    def make(module: nn.Module, path: str, name: str, depth: int) -> Node:
        tname = type(module).__name__
        return Node(
            path=path, name=name or tname, type=tname, depth=depth, repr=module_repr(module)
        )

    root = make(model, "", "", 0)
    tree = ModelTree(model=model, root=root)

    def add(node: Node, module: nn.Module, parent: Node | None) -> None:
        tree.by_path[node.path] = node
        tree.parent[id(node)] = parent
        tree.module[id(node)] = module
        tree.nodes_of.setdefault(id(module), []).append(node)

    add(root, model, None)
    stack: list[tuple[Node, nn.Module, tuple[int, ...]]] = [(root, model, (id(model),))]
    while stack:
        node, module, ancestry = stack.pop()
        for name, child in module._modules.items():
            if child is None or id(child) in ancestry:
                continue
            path = f"{node.path}.{name}" if node.path else name
            child_node = make(child, path, name, node.depth + 1)
            node.children.append(child_node)
            add(child_node, child, node)
            stack.append((child_node, child, (*ancestry, id(child))))
    return tree


@pytest.mark.parametrize(
    "model",
    [
        Odd(),
        HeldTwice(),
        nn.Sequential(nn.Conv2d(3, 4, 3, padding="same", bias=False), nn.BatchNorm2d(4)),
        nn.Linear(2, 2),
    ],
)
def test_tree_matches_the_reference(model: nn.Module) -> None:
    ours, theirs = ModelTree.build(model), _reference_tree(model)
    assert ours.root.to_dict() == theirs.root.to_dict()
    for n, m in zip(ours.root.walk(), theirs.root.walk(), strict=True):
        assert list(vars(n)) == list(vars(m))
    index = {id(n): i for i, n in enumerate(ours.root.walk())}
    other = {id(n): i for i, n in enumerate(theirs.root.walk())}

    def ids(tree: ModelTree, at: dict[int, int]) -> list[object]:
        return [
            list(tree.by_path),
            [at[id(n)] for n in tree.by_path.values()],
            [(at[k], at[id(v)] if v is not None else None) for k, v in tree.parent.items()],
            [(at[k], id(v)) for k, v in tree.module.items()],
            [(k, [at[id(n)] for n in v]) for k, v in tree.nodes_of.items()],
        ]

    assert ids(ours, index) == ids(theirs, other)
    assert ours.model is model
    if isinstance(model, Odd):
        assert ours.by_path["bad"].repr == "Broken()"
        assert [n.path for n in ours.nodes_of[id(model.a[0])]] == ["b.x", "a.0"]


def _reference_fill(tree: ModelTree) -> tuple[list[tuple[str, bool, str, list[str]]], list[str]]:
    """fill_parameters as first written (each tensor's holders in one list, a lazy check
    per tensor); returns what owned_tensors did too: (first name, is_param, owner,
    names), and the notices."""
    found: dict[int, tuple[Tensor, bool, list[tuple[Node, str]]]] = {}
    notices: list[str] = []

    def qualified(node: Node, key: str) -> str:
        return f"{node.path}.{key}" if node.path else key

    for node in tree.root.walk():
        node.self_metrics.update(dict.fromkeys(ms.ADDITIVE_METRICS[:5], 0))
        node.self_by_dtype = {}
        node.shared = []
        module = tree.module[id(node)]
        for is_param, table in ((True, module._parameters), (False, module._buffers)):
            for key, t in table.items():
                if t is None:
                    continue
                if torch.nn.parameter.is_lazy(t):
                    notices.append(
                        f"{qualified(node, key)} is an uninitialised lazy tensor; run the "
                        "model on an input to count it"
                    )
                    continue
                found.setdefault(id(t), (t, is_param, []))[2].append((node, key))
    owned = []
    for t, is_param, holders in found.values():
        nodes = list({id(n): n for n, _ in holders}.values())
        owner = nodes[0] if len(nodes) == 1 else tree.lowest_common_ancestor(nodes)
        names = [qualified(n, k) for n, k in holders]
        owned.append((names[0], is_param, owner.path, names))
        if len(holders) > 1:
            for (node, _), name in zip(holders, names, strict=True):
                node.shared.append(f"{name} (counted at {owner.path or '<root>'})")
        numel, nbytes = t.numel(), t.numel() * t.element_size()
        row = owner.self_by_dtype.setdefault(
            str(t.dtype).removeprefix("torch."), dict.fromkeys(DTYPE_KEYS, 0)
        )
        m = owner.self_metrics
        kind = "params" if is_param else "buffers"
        m[kind] += numel
        m[kind[:-1] + "_bytes"] += nbytes
        if is_param and t.requires_grad:
            m["trainable_params"] += numel
        row[kind] += numel
        row[kind[:-1] + "_bytes"] += nbytes
    return owned, notices


class OddTensors(nn.Module):
    """A Parameter subclass, a buffer that is a Parameter, a tensor-subclass buffer, a
    frozen parameter, a buffer of another dtype and a parameter tied across subtrees."""

    class Sub(Tensor):
        pass

    class MyParam(nn.Parameter):
        pass

    def __init__(self) -> None:
        super().__init__()
        self.p = OddTensors.MyParam(torch.ones(3))
        self.register_buffer("pbuf", nn.Parameter(torch.ones(2)))
        self.register_buffer("sub", torch.ones(4).as_subclass(OddTensors.Sub))
        self.frozen = nn.Linear(2, 2).requires_grad_(False)
        self.f16 = nn.Linear(2, 3).half()
        tied = nn.Linear(3, 2)
        self.deep = nn.Sequential(nn.Sequential(tied), nn.LazyLinear(2))
        self.f16.weight = tied.weight


@pytest.mark.parametrize(
    "make", [HeldTwice, OddTensors, Odd, lambda: nn.Sequential(nn.BatchNorm2d(3), nn.ReLU())]
)
def test_parameters_match_the_reference(make: Callable[[], nn.Module]) -> None:
    model = make()
    ours, theirs = ModelTree.build(model), ModelTree.build(model)
    ours.root.self_metrics["macs"] = theirs.root.self_metrics["macs"] = 1
    expected_owned, expected_notices = _reference_fill(theirs)
    for _ in range(2):  # a second fill starts again from zero
        assert fill_parameters(ours) == expected_notices
        assert json.dumps(ours.root.to_dict()) == json.dumps(theirs.root.to_dict())
    owned, notices = owned_tensors(ours)
    assert notices == expected_notices
    got = [(o.names[0], o.is_param, o.owner.path, list(o.names)) for o in owned]
    assert got == expected_owned
    assert all([q for _, q in o.holders] == list(o.names) for o in owned)


# ---- ordering and notices in build_profile ---------------------------------------------


class Nested(nn.Module):
    """Blocks called out of definition order, a container never called itself, a lazy
    module the forward never reaches and a subtree that never runs."""

    def __init__(self) -> None:
        super().__init__()
        self.idle = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
        self.blocks = nn.ModuleList([nn.Linear(2, 2), nn.Tanh(), nn.ReLU()])
        self.head = nn.Linear(2, 2)
        self.lazy = nn.LazyLinear(2)

    def forward(self, x: Tensor) -> Tensor:
        x = self.head(x)
        for i in (2, 0, 1):
            x = self.blocks[i](x)
        return x


def test_nodes_numbered_in_call_order_uncalled_last() -> None:
    prof = ls.profile(Nested(), torch.ones(1, 2))
    assert [(n.node_id, n.depth, n.path, n.calls) for n in prof.nodes()] == [
        ("0", 0, "", 1),
        ("1", 1, "head", 1),
        ("2", 1, "blocks", 0),
        ("2.1", 2, "blocks.2", 1),
        ("2.2", 2, "blocks.0", 1),
        ("2.3", 2, "blocks.1", 1),
        ("3", 1, "idle", 0),
        ("3.1", 2, "idle.0", 0),
        ("3.2", 2, "idle.1", 0),
        ("4", 1, "lazy", 0),
    ]
    assert prof.notices == [
        "lazy.weight is an uninitialised lazy tensor; run the model on an input to count it",
        "lazy.bias is an uninitialised lazy tensor; run the model on an input to count it",
        "the model has lazy modules that were not initialised by this run",
    ]
    unrun = ls.profile(Nested())
    assert [n.path for n in unrun.nodes()][:4] == ["", "idle", "idle.0", "idle.1"]
    assert len(unrun.notices) == 2 and "initialised by this run" not in unrun.notices[-1]
    assert ls.profile(nn.Sequential(nn.Linear(2, 2)), torch.ones(1, 2)).notices == []


# ---- rollup ----------------------------------------------------------------------------


def _reference_rollup(root: Node) -> None:
    """Profile.rollup as first written: recursive, every row merged into a default row."""

    def visit(node: Node) -> None:
        for c in node.children:
            visit(c)
        totals = {k: v for k, v in node.self_metrics.items() if k in ms.ADDITIVE_METRICS}
        for c in node.children:
            for k, v in c.metrics.items():
                if k in ms.ADDITIVE_METRICS:
                    totals[k] = totals.get(k, 0) + v
        node.metrics.update(totals)
        merged: dict[str, dict[str, int]] = {}
        for part in [node.self_by_dtype, *(c.by_dtype for c in node.children)]:
            for dtype, row in part.items():
                acc = merged.setdefault(dtype, dict.fromkeys(DTYPE_KEYS, 0))
                for k in DTYPE_KEYS:
                    acc[k] += row.get(k, 0)
        node.by_dtype = dict(sorted(merged.items()))

    visit(root)


def _random_tree(rng: random.Random) -> Node:
    keys = [*ms.ADDITIVE_METRICS, "latency_ms", "peak_bytes"]
    nodes = [Node(path="", name="root", type="Root")]
    for i in range(1, 60):
        node = Node(path=f"n{i}", name=f"n{i}", type="T")
        rng.choice(nodes).children.append(node)
        nodes.append(node)
    for node in nodes:
        for k in rng.sample(keys, rng.randint(0, len(keys))):
            node.self_metrics[k] = rng.choice([rng.randint(0, 9), rng.random() * 1e6])
        for k in rng.sample(keys, rng.randint(0, 3)):  # stale or non-additive values
            node.metrics[k] = rng.randint(0, 9)
        for dtype in rng.sample(["float32", "bfloat16", "int64"], rng.randint(0, 3)):
            row_keys = rng.sample([*DTYPE_KEYS, "other"], rng.randint(0, 5))
            if rng.random() < 0.5:  # as fill_parameters writes them
                row_keys = list(DTYPE_KEYS)
            node.self_by_dtype[dtype] = {k: rng.randint(0, 99) for k in row_keys}
    return nodes[0]


@pytest.mark.parametrize("seed", range(20))
def test_rollup_matches_the_reference(seed: int) -> None:
    ours = _random_tree(random.Random(seed))
    theirs = _random_tree(random.Random(seed))
    kept = [n.metrics for n in ours.walk()]
    Profile(root=ours).rollup()
    assert all(n.metrics is m for n, m in zip(ours.walk(), kept, strict=True))  # in place
    _reference_rollup(theirs)
    assert ours.to_dict() == theirs.to_dict()
    assert json.dumps(ours.to_dict()) == json.dumps(theirs.to_dict())  # key order too
    rows = [
        id(row) for n in ours.walk() for row in (*n.by_dtype.values(), *n.self_by_dtype.values())
    ]
    assert len(rows) == len(set(rows))  # no row shared between nodes or with self rows
