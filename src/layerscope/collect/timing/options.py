"""Options of the timing pass: the timer and grad-mode enums and ``TimingOptions``.

Validated once at the boundary, so every backend can trust its options.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeAlias

import torch
from torch import Tensor

from layerscope.errors import InvalidInputError

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
        for name in ("warmup", "repeats"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise InvalidInputError(f"{name} must be an int, got {v!r}")
        if self.warmup < 0:
            raise InvalidInputError(f"warmup must be >= 0, got {self.warmup}")
        if self.repeats < 1:
            raise InvalidInputError(f"repeats must be >= 1, got {self.repeats}")
        try:
            object.__setattr__(self, "timer", Timer(self.timer))
        except ValueError:
            known = ", ".join(repr(t.value) for t in Timer)
            raise InvalidInputError(f"unknown timer {self.timer!r}; use one of {known}") from None
        try:
            object.__setattr__(self, "grad_mode", GradMode(self.grad_mode))
        except ValueError:
            known = ", ".join(repr(g.value) for g in GradMode)
            raise InvalidInputError(
                f"unknown grad_mode {self.grad_mode!r}; use one of {known}"
            ) from None
        if self.loss_fn is not None and not self.backward:
            raise InvalidInputError("loss_fn only applies with backward=True")
        if self.backward and self.grad_mode is not GradMode.ENABLED:
            raise InvalidInputError(
                "backward=True needs gradients; it cannot run with "
                f"grad_mode={self.grad_mode.value!r}"
            )
        if self.batch_size is not None and (
            isinstance(self.batch_size, bool)
            or not isinstance(self.batch_size, int)
            or self.batch_size < 1
        ):
            raise InvalidInputError(f"batch_size must be a positive int, got {self.batch_size!r}")
        if self.ops and self.timer is Timer.HOOKS:
            raise InvalidInputError("ops=True needs timer='kineto' or timer='fx'")
        if self.clock is not None and not callable(self.clock):
            raise InvalidInputError("clock must be a callable returning nanoseconds")
        p = self.progress
        if p is not None and not isinstance(p, bool) and not callable(p):
            raise InvalidInputError("progress must be None, a bool or a callable(done, total)")

    def grad_context(self) -> AbstractContextManager[Any]:
        if self.grad_mode is GradMode.NO_GRAD:
            return torch.no_grad()
        if self.grad_mode is GradMode.INFERENCE:
            return torch.inference_mode()
        return nullcontext()
