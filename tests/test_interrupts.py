"""A ``KeyboardInterrupt`` or ``SystemExit`` anywhere in a run leaves nothing behind.

torch runs ``always_call`` forward hooks for ``Exception`` only, so a mode that a hook
enters and another leaves would stay on the stack when the forward is interrupted (the
autocast emulation of mixed-precision plans did, and every later analysis in the process
then counted under it). Each case here interrupts the run at one module, in the forward
or the backward, then checks that the thread's mode stacks and the process's hook tables
are empty and that a reference analysis gives exactly the numbers it gave before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
import torch.nn.modules.module as torch_module
from torch import nn
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

import layerscope as ls
from helpers.models import tiny_llama
from helpers.snapshots import GLOBAL_HOOK_DICTS, ModelSnapshot
from layerscope.collect.target import steering_active
from layerscope.planning.states import PRECISIONS
from layerscope.planning.strategies import SHARDINGS
from layerscope.torchapi import len_torch_function_stack, top_saved_tensors_hooks

#: where the next interruption goes: the phase, the tick it fires at, the ticks so far
TRAP: dict[str, Any] = {"phase": None, "at": -1, "count": 0, "exc": KeyboardInterrupt}


def tick(phase: str) -> None:
    if TRAP["phase"] != phase:
        return
    if TRAP["count"] == TRAP["at"]:
        TRAP["phase"] = None  # fires once
        raise TRAP["exc"]
    TRAP["count"] += 1


class _Tick(torch.autograd.Function):
    """Identity whose backward ticks: an interruption inside the backward pass."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        tick("backward")
        return grad


def tick_back(x: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = _Tick.apply(x)  # type: ignore[no-untyped-call]
    return out


def _ticking(cls: type[nn.Module]) -> type[nn.Module]:
    """``cls`` whose forward ticks on entry and whose output ticks in the backward."""

    def forward(self: nn.Module, *args: Any) -> Any:
        tick("forward")
        return tick_back(cls.forward(self, *args))

    return type(f"Ticking{cls.__name__}", (cls,), {"forward": forward})


TLinear, TLayerNorm, TGELU = _ticking(nn.Linear), _ticking(nn.LayerNorm), _ticking(nn.GELU)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm, self.up, self.act, self.down = (
            TLayerNorm(16),
            TLinear(16, 32),
            TGELU(),
            (TLinear(32, 16)),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tick("forward")
        return tick_back(x + self.down(self.act(self.up(self.norm(x)))))


class Net(nn.Module):
    """11 ticking modules: the root, 2 blocks and their 4 layers each."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tick("forward")
        for block in self.blocks:
            x = block(x)
        return tick_back(x)


TICKS = 11  # modules whose forward ticks once, and whose output ticks once backward


def _clean() -> None:
    """Nothing of a session is left on this thread or in the process."""
    assert len_torch_function_stack() == 0
    assert _get_current_dispatch_mode_stack() == []
    assert not steering_active()
    assert torch.is_grad_enabled()
    assert top_saved_tensors_hooks(False) is None
    for name in GLOBAL_HOOK_DICTS:
        assert not getattr(torch_module, name), name


def _reference() -> dict[str, Any]:
    """A TransformerEncoderLayer's numbers, which a mode left behind would change."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    prof = ls.profile(layer, input_shape=(2, 8, 32), memory=True, backward=True)
    return {n.path: dict(n.metrics) for n in prof.nodes()}


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    _clean()
    return _reference()


@contextmanager
def trap(phase: str, at: int, exc: type[BaseException]) -> Iterator[None]:
    TRAP.update(phase=phase, at=at, count=0, exc=exc)
    try:
        yield
    finally:
        TRAP["phase"] = None


def _interrupt_everywhere(run: Callable[[], Any], phases: tuple[str, ...]) -> int:
    """Run ``run`` once with an interruption at every tick of every phase (alternately
    ``KeyboardInterrupt`` and ``SystemExit``); each must come out as itself and leave
    nothing behind. The number of interruptions."""
    fired = 0
    for phase in phases:
        for at in range(TICKS):
            exc = (KeyboardInterrupt, SystemExit)[at % 2]
            with trap(phase, at, exc), pytest.raises(exc):
                run()
            _clean()
            fired += 1
    return fired


PLANS = [(sharding, precision) for sharding in SHARDINGS for precision in PRECISIONS]


@pytest.mark.parametrize(("sharding", "precision"), PLANS)
def test_an_interrupted_plan_leaves_nothing(
    sharding: str, precision: str, reference: dict[str, Any]
) -> None:
    model = Net()
    snap = ModelSnapshot.take(model)
    world = 1 if sharding == "none" else 2

    def run() -> Any:
        return ls.plan(
            model, input_shape=(2, 16), target="h100", world_size=world, sharding=sharding,
            precision=precision,
        )  # fmt: skip

    # 11 forward and 11 backward ticks: the trap fires at each
    assert _interrupt_everywhere(run, ("forward", "backward")) == 2 * TICKS
    snap.assert_unchanged(model)
    assert _reference() == reference


def test_an_interrupted_sweep_and_max_micro_batch_leave_nothing(
    reference: dict[str, Any],
) -> None:
    model = Net()
    plan = ls.plan(
        model, input_shape=(2, 16), target="h100", world_size=2, sharding="ddp",
        precision="bf16-mixed",
    )  # fmt: skip

    def sweep() -> Any:
        return ls.plan_sweep(
            model, input_shape=(2, 16), target="h100", world_size=[2, 4], sharding="ddp",
            precision="bf16-mixed",
        )  # fmt: skip

    assert _interrupt_everywhere(sweep, ("forward", "backward")) == 2 * TICKS
    # max_micro_batch plans again from the model: its first analysis is interrupted
    assert _interrupt_everywhere(plan.max_micro_batch, ("forward",)) == TICKS
    assert _reference() == reference


@pytest.fixture(scope="module")
def llama() -> Any:
    pytest.importorskip("transformers")
    return tiny_llama()


def _trap_modules(model: nn.Module, at: int, exc: type[BaseException]) -> Callable[[], None]:
    """Forward pre-hooks that raise ``exc`` at the first call of the ``at``-th module;
    the remover of the hooks."""
    target = _called(model)[at]

    def hook(module: nn.Module, _args: Any) -> None:
        raise exc

    handle = target.register_forward_pre_hook(hook)
    return handle.remove


def _called(model: nn.Module) -> list[nn.Module]:
    """The modules whose forward runs (a ``ModuleList`` holds, it is not called)."""
    return [m for m in model.modules() if not isinstance(m, nn.ModuleList | nn.ModuleDict)]


def _each_module(model: nn.Module, run: Callable[[], Any], reference: dict[str, Any]) -> int:
    snap = ModelSnapshot.take(model)
    count = len(_called(model))
    for at in range(count):
        exc = (KeyboardInterrupt, SystemExit)[at % 2]
        remove = _trap_modules(model, at, exc)
        try:
            with pytest.raises(exc):
                run()
        finally:
            remove()
        _clean()
    snap.assert_unchanged(model)
    assert _reference() == reference
    return count


@pytest.mark.slow
def test_an_interrupted_profile_generate_leaves_nothing(
    llama: Any, reference: dict[str, Any]
) -> None:
    ids = torch.tensor([[1, 2, 3, 4]])
    # 32 modules called: the root, model, embed_tokens, 2 layers of 13 (the layer,
    # self_attn and its 4 projections, mlp and its 3 projections and act_fn, 2 norms),
    # norm, rotary_emb, lm_head: 3 + 26 + 3
    assert _each_module(llama, lambda: ls.profile_generate(llama, ids, 2), reference) == 32


@pytest.mark.slow
def test_an_interrupted_staged_profiler_leaves_nothing(
    llama: Any, reference: dict[str, Any]
) -> None:
    ids = torch.tensor([[1, 2, 3, 4]])

    def run() -> None:
        with ls.Profiler(llama, stages=True):
            llama.generate(ids, max_new_tokens=2, min_new_tokens=2, do_sample=False)

    assert _each_module(llama, run, reference) == 32
