"""The largest batch whose training (or inference) footprint fits a memory budget.

``max_batch_size(model, make_input, budget_bytes)`` profiles the model at a few batch
sizes, fits the activation peak as ``a + b * batch``, checks the fit on a third batch
size, and solves for the largest batch whose footprint fits the budget.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import torch
from torch import nn

import layerscope.metricspec as ms
from layerscope.metrics.memory.observer import MemoryObserver
from layerscope.planning.footprint import OptimizerName, training_footprint
from layerscope.planning.states import OPTIMIZER_STATES
from layerscope.profile import Profile
from layerscope.session.run import profile as run_profile
from layerscope.validate import (
    check_bool,
    check_callable,
    check_choice,
    check_instance,
    check_int,
    check_whole,
    each,
    refuse,
)


def _on_meta(model: nn.Module) -> bool:
    tensors = [*model.parameters(), *model.buffers()]
    return bool(tensors) and all(t.is_meta for t in tensors)


def call_inputs(inputs: Any) -> tuple[tuple[Any, ...], dict[str, Any] | None]:
    """What ``make_input`` returned as a call: a tuple or list is the positional
    arguments, a dict the keyword ones, anything else (a tensor) the one input, as
    ``ls.profile(model, x)`` takes it."""
    if isinstance(inputs, tuple | list):
        return tuple(inputs), None
    if isinstance(inputs, dict):
        return (), inputs
    return (inputs,), None


class _PeakMeter:
    """The forward peak at a batch size, profiled once per size (with ``MemoryObserver``);
    ``first`` is the first Profile, for the model's fixed footprint."""

    def __init__(
        self,
        model: nn.Module,
        make_input: Callable[[int], Any],
        training: bool,
        target: str | None,
    ) -> None:
        self.model = model
        self.make_input = make_input
        self.training = training
        self.target = target
        self.peaks: dict[int, int] = {}
        self.first: Profile | None = None

    def __call__(self, batch: int) -> int:
        peaks = self.peaks
        if batch not in peaks:
            grad_mode = contextlib.nullcontext() if self.training else torch.no_grad()
            args, kwargs = call_inputs(self.make_input(batch))
            with grad_mode:
                prof = run_profile(
                    self.model,
                    args=args,
                    kwargs=kwargs,
                    count_flops=False,
                    count_bytes=False,
                    record_shapes=False,
                    observers=[MemoryObserver()],
                    target=self.target,
                )
            if self.first is None:
                self.first = prof
            peaks[batch] = int(prof.memory["forward_peak_bytes"])
        return peaks[batch]


@dataclass(frozen=True)
class _Fit:
    """The forward peak fitted as ``intercept + slope * batch`` on two batch sizes and
    checked on a third; when the check fails, the steepest measured slope from the
    largest point (``base_*``, ``per_sample``) extrapolates conservatively."""

    slope: Fraction
    intercept: Fraction
    predicted3: Fraction
    affine: bool
    base_batch: int
    base_peak: Fraction
    per_sample: Fraction
    notes: tuple[str, ...]

    @classmethod
    def of(cls, p1: tuple[int, int], p2: tuple[int, int], p3: tuple[int, int]) -> _Fit:
        """The fit of three (batch, peak) points, batches increasing."""
        (b1, a1), (b2, a2), (b3, a3) = p1, p2, p3
        slope = Fraction(a2 - a1, b2 - b1)
        intercept = a1 - slope * b1
        predicted3 = intercept + slope * b3
        affine = predicted3 == a3
        if affine:
            return cls(slope, intercept, predicted3, affine, b1, Fraction(a1), slope, ())
        note = (
            f"the forward peak is not affine in the batch size: {a3} B measured at batch "
            f"{b3}, {float(predicted3):.0f} B predicted from batches {b1} and {b2}; "
            "extrapolated with the steepest measured slope from the largest point"
        )
        per_sample = max(slope, Fraction(a3 - a2, b3 - b2))
        return cls(slope, intercept, predicted3, affine, b3, Fraction(a3), per_sample, (note,))


def max_batch_size(
    model: nn.Module,
    make_input: Callable[[int], Any],
    budget_bytes: float,
    *,
    optimizer: OptimizerName | None = "adamw",
    master_weights: bool = False,
    batch_sizes: tuple[int, int, int] = (1, 2, 4),
    verify: bool | None = None,
    target: str | None = None,
) -> dict[str, Any]:
    """The largest batch whose training footprint fits ``budget_bytes``, with its breakdown.

    ``make_input(batch)`` returns the model's inputs for that batch size, on the model's
    device: a tensor (the one input), a tuple or list (positional arguments) or a dict
    (keyword arguments). The model is profiled (forward only, with ``MemoryObserver``)
    at the first two ``batch_sizes``; the forward peak is fitted as ``a + b * batch`` and
    checked on the third. The model runs as given, on its own device: on ``meta`` nothing
    is computed or allocated, so analyse big models there; on a real device this runs the
    model once per batch size (small ones by default). When the check fails the result
    says ``"affine": False`` and the solution uses the steepest measured slope from the
    largest measured point (a conservative extrapolation). ``verify`` (default: on meta)
    profiles the answer itself and steps down until it fits.

    ``optimizer=None`` sizes inference instead: forward under ``torch.no_grad``, no
    gradients or optimizer state. ``target`` (``"h100"``, ``"a100"``, ...; default
    ``"cpu"``) makes a model on meta follow that device's kernels (attention's saved
    tensors differ between them: ``docs/target.md``).

    One device and the forward's peak over a training footprint: for a step with
    sharding, checkpointing, mixed precision and the backward's own peak, plan it
    (``ls.plan(...).max_micro_batch()``, ``docs/plan.md``).
    """
    budget_bytes, (b1, b2, b3) = _check_options(
        model, make_input, budget_bytes, optimizer, master_weights, batch_sizes, verify
    )
    if verify is None:
        verify = _on_meta(model)
    training = optimizer is not None
    measure = _PeakMeter(model, make_input, training, target)
    peaks = measure.peaks
    a1, a2, a3 = measure(b1), measure(b2), measure(b3)
    first = measure.first
    assert first is not None
    fit = _Fit.of((b1, a1), (b2, a2), (b3, a3))
    notes = list(fit.notes)

    def footprint(activations: int) -> dict[str, Any]:
        assert first is not None
        if training:
            assert optimizer is not None
            return training_footprint(
                first, optimizer, master_weights=master_weights, activation_bytes=activations
            )
        root = first.root.metrics
        parts = {
            ms.PARAM_BYTES: int(root.get(ms.PARAM_BYTES, 0)),
            ms.BUFFER_BYTES: int(root.get(ms.BUFFER_BYTES, 0)),
            ms.ACTIVATION_BYTES: activations,
        }
        return {"optimizer": None, **parts, "total_bytes": sum(parts.values()), "notes": []}

    fixed = footprint(0)["total_bytes"]

    def predict(batch: int) -> int:
        return math.ceil(fit.base_peak + fit.per_sample * (batch - fit.base_batch))

    room = budget_bytes - fixed
    if fit.per_sample <= 0:
        best: int | None = None if room >= predict(b1) else 0
        if best is None:
            notes.append("the forward peak does not grow with the batch size: no upper bound")
    else:
        # largest batch with base_peak + per_sample * (batch - base_batch) <= room
        best = max(0, math.floor((room - fit.base_peak) / fit.per_sample + fit.base_batch))
    verified = False
    if verify and best is not None and best >= 1:
        best, verified = _verify_down(best, budget_bytes, fixed, measure, peaks)
    activations = peaks.get(best, predict(best)) if best else 0
    breakdown = footprint(activations) if best else None
    return {
        "budget_bytes": budget_bytes,
        "max_batch": best,
        "fits": best is None or best >= 1,
        "fixed_bytes": fixed,
        "activation_fit": {
            "intercept_bytes": float(fit.intercept),
            "per_sample_bytes": float(fit.slope),
            "points": {str(b): peaks[b] for b in (b1, b2, b3)},
            "affine": fit.affine,
            "third_point_error_bytes": float(a3 - fit.predicted3),
        },
        "breakdown": breakdown,
        "verified": verified,
        "notes": notes,
    }


def _check_options(
    model: object,
    make_input: object,
    budget_bytes: object,
    optimizer: object,
    master_weights: object,
    batch_sizes: object,
    verify: object,
) -> tuple[int, tuple[int, int, int]]:
    """``max_batch_size``'s options, refused before the model runs; the budget and the
    three batch sizes as ints."""
    check_instance("model", model, nn.Module, "an nn.Module")
    check_callable("make_input", make_input, "a callable(batch) -> the model's inputs", none=False)
    budget = check_whole("budget_bytes", budget_bytes, 1)
    check_choice("optimizer", optimizer, list(OPTIMIZER_STATES), none=True)
    check_bool("master_weights", master_weights)
    if verify is not None:
        check_bool("verify", verify)
    allowed = "three increasing positive ints, such as (1, 2, 4)"
    if not isinstance(batch_sizes, tuple | list) or len(batch_sizes) != 3:
        refuse("batch_sizes", batch_sizes, allowed)
    b1, b2, b3 = each("batch_sizes", batch_sizes, lambda label, b: check_int(label, b, 1))
    if not b1 < b2 < b3:
        refuse("batch_sizes", batch_sizes, allowed)
    return budget, (b1, b2, b3)


def _verify_down(
    best: int,
    budget: int,
    fixed: int,
    measure: Callable[[int], int],
    peaks: dict[int, int],
) -> tuple[int, bool]:
    """Profile the predicted batch; if it does not fit, bisect down to the largest that does."""
    if fixed + measure(best) <= budget:
        return best, True
    fitting = [b for b, p in peaks.items() if b < best and fixed + p <= budget]
    lo = max(fitting, default=0)  # fits (0: nothing known to fit)
    hi = best  # does not fit
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fixed + measure(mid) <= budget:
            lo = mid
        else:
            hi = mid
    return lo, True
