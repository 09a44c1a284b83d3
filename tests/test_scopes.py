"""The scope stack: current module, balance under exceptions, error sites, call order."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

import layerscope as ls
from helpers import ModelSnapshot


class Probe(nn.Module):
    """Records which node the tracker reports as running during its own forward."""

    def __init__(self, seen: list[str], tracker: Callable[[], ls.Profiler | None]) -> None:
        super().__init__()
        self.seen = seen
        self.tracker = tracker

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.tracker()
        if p is not None:
            self.seen.append(p.tracker.current.path)
        return x


def test_current_is_innermost_running_module() -> None:
    seen: list[str] = []
    holder: list[ls.Profiler] = []
    probe = Probe(seen, lambda: holder[0])
    model = nn.Sequential(nn.Sequential(probe), Probe(seen, lambda: holder[0]))
    with ls.Profiler(model) as p:
        holder.append(p)
        model(torch.ones(1))
        assert p.tracker.current is p.tracker.tree.root  # outside any module: the root
    assert seen == ["0.0", "1"]
    assert p.tracker.stack == []


class Fallback(nn.Module):
    """Catches an error of one submodule and falls back to another."""

    def __init__(self) -> None:
        super().__init__()
        self.bad = nn.Linear(3, 3)
        self.good = nn.Linear(2, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        try:
            out: torch.Tensor = self.bad(x)
        except RuntimeError:
            out = self.good(x)
        return out


def test_error_caught_inside_model_is_not_an_error() -> None:
    prof = ls.profile(Fallback(), torch.ones(1, 2))
    assert prof.node("bad").calls == 1
    assert prof.node("good").calls == 1
    assert prof.node("bad").outputs == []  # it never returned
    assert prof.root.outputs[0][0].shape == (1, 3)  # type: ignore[union-attr]


class RootRaises(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.fc(x)
        raise KeyError("missing")


def test_error_in_root_forward_names_the_root() -> None:
    model = RootRaises()
    x = torch.ones(1, 2)
    snap = ModelSnapshot.take(model)
    with pytest.raises(ls.ModelError, match=r"<root> \(RootRaises\)") as info:
        ls.profile(model, x)
    assert info.value.path == ""
    assert isinstance(info.value.__cause__, KeyError)
    snap.assert_unchanged(model)


def test_user_pre_hook_that_raises_keeps_stack_balanced() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())

    def bad_hook(module: nn.Module, args: tuple[object, ...]) -> None:
        raise ValueError("hook failed")

    handle = model[1].register_forward_pre_hook(bad_hook)
    x = torch.ones(1, 2)
    snap = ModelSnapshot.take(model)
    p = ls.Profiler(model)
    with pytest.raises(ValueError, match="hook failed") as info, p:
        model(x)
    assert p.tracker.stack == []
    assert any("'1' (ReLU)" in note for note in info.value.__notes__)
    snap.assert_unchanged(model)
    handle.remove()


def test_children_in_execution_order_uncalled_last() -> None:
    class Reordered(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(2, 2)
            self.unused = nn.Linear(2, 2)
            self.b = nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.a(self.b(x))
            return out

    prof = ls.profile(Reordered(), torch.ones(1, 2))
    assert [(n.node_id, n.path, n.calls) for n in prof.nodes()] == [
        ("0", "", 1),
        ("1", "b", 1),
        ("2", "a", 1),
        ("3", "unused", 0),
    ]


def test_profiler_block_is_reusable_only_once() -> None:
    model = nn.Linear(2, 2)
    p = ls.Profiler(model)
    with pytest.raises(ls.LayerscopeError, match="after the `with` block"):
        _ = p.profile
    with p:
        model(torch.ones(1, 2))
        model(torch.ones(1, 2))
    assert p.profile.root.calls == 2
    with pytest.raises(ls.LayerscopeError, match="entered twice"), p:
        pass


def test_gc_state_is_restored() -> None:
    import gc

    model, x = nn.Linear(2, 2), torch.ones(1, 2)
    assert gc.isenabled()
    ls.profile(model, x)
    assert gc.isenabled()
    gc.disable()
    try:
        ls.profile(model, x)
        assert not gc.isenabled()
    finally:
        gc.enable()
