"""Options of the timing pass: the timer and grad-mode enums and ``TimingOptions``.

Validated once at the boundary, so every backend can trust its options.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeAlias, TypeVar

import torch
from torch import Tensor

from layerscope.errors import InvalidInputError
from layerscope.validate import check_bool, check_callable, check_enum, check_int, is_bool, refuse

#: The most timed repeats and warmup runs a timing pass takes.
MAX_REPEATS = 10_000
MAX_WARMUP = 10_000
#: The bounds of the integer options (``None``: no upper bound), for every entry point.
INT_BOUNDS: dict[str, tuple[int, int | None]] = {
    "warmup": (0, MAX_WARMUP),
    "repeats": (1, MAX_REPEATS),
    "batch_size": (1, None),
}
#: A clock: integer nanoseconds from an arbitrary origin, like ``time.perf_counter_ns``.
Clock: TypeAlias = Callable[[], int]
#: ``progress``: None (auto: a bar on a terminal when the pass takes over ~1 s), a bool,
#: or a callback ``(done, total)`` called after each run of the model.
ProgressArg: TypeAlias = "bool | Callable[[int, int], None] | None"


class Timer(str, Enum):
    """Which timer the pass uses (see the ``layerscope.collect.timing`` docstring)."""

    HOOKS = "hooks"
    KINETO = "kineto"
    FX = "fx"


class GradMode(str, Enum):
    """Autograd mode of every timed forward: as given, ``no_grad`` or ``inference_mode``."""

    ENABLED = "enabled"
    NO_GRAD = "no_grad"
    INFERENCE = "inference_mode"


@dataclass(frozen=True)
class TimingOptions:
    """Validated options of one timing pass (strings turned into enums at the boundary)."""

    warmup: int = 3
    repeats: int = 10
    backward: bool = False
    loss_fn: Callable[[Any], Tensor] | None = None
    timer: Timer = Timer.HOOKS
    sync: bool = False
    grad_mode: GradMode = GradMode.ENABLED
    ops: bool = False
    batch_size: int | None = None
    clock: Clock | None = None
    progress: ProgressArg = None
    correct_overhead: bool = True

    def __post_init__(self) -> None:
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        put("warmup", check_int("warmup", self.warmup, *INT_BOUNDS["warmup"]))
        put("repeats", check_int("repeats", self.repeats, *INT_BOUNDS["repeats"]))
        for name in ("backward", "sync", "ops", "correct_overhead"):
            put(name, check_bool(name, getattr(self, name)))
        put("timer", _choice("timer", self.timer, Timer))
        put("grad_mode", _choice("grad_mode", self.grad_mode, GradMode))
        check_callable("loss_fn", self.loss_fn, "a callable(output) -> loss tensor")
        if self.loss_fn is not None and not self.backward:
            raise InvalidInputError("loss_fn only applies with backward=True")
        if self.backward and self.grad_mode is not GradMode.ENABLED:
            raise InvalidInputError(
                "backward=True needs gradients; it cannot run with "
                f"grad_mode={self.grad_mode.value!r}"
            )
        if self.batch_size is not None:
            put("batch_size", check_int("batch_size", self.batch_size, *INT_BOUNDS["batch_size"]))
        if self.ops and self.timer is Timer.HOOKS:
            raise InvalidInputError("ops=True needs timer='kineto' or timer='fx'")
        check_callable("clock", self.clock, "a callable returning nanoseconds")
        p = self.progress
        if is_bool(p):
            put("progress", bool(p))
        elif p is not None and not callable(p):
            refuse("progress", p, "None, True, False or a callable(done, total)")

    def grad_context(self) -> AbstractContextManager[Any]:
        if self.grad_mode is GradMode.NO_GRAD:
            return torch.no_grad()
        if self.grad_mode is GradMode.INFERENCE:
            return torch.inference_mode()
        return nullcontext()


_E = TypeVar("_E", Timer, GradMode)


def _choice(name: str, value: object, kind: type[_E]) -> _E:
    """``value`` (an enum member or its string) as a member of ``kind``."""
    return check_enum(name, value, kind)
