"""Whole-model latency of a ``torch.compile``'d model, beside the eager analysis.

A compiled graph may fuse or reorder the ops of many modules, so per-module numbers come
from the eager original (``ls.profile`` analyses and times ``model._orig_mod``); what the
compiled model adds is its own forward latency, measured here with nothing installed:
warmup runs first (the first call compiles, and is never timed), then timed repeats.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import torch
from torch import nn

from layerscope.collect.state import ModelState
from layerscope.collect.timing.options import TimingOptions
from layerscope.collect.timing.stats import summarize
from layerscope.errors import LayerscopeError, ModelError
from layerscope.gcpause import gc_paused


def time_compiled(
    compiled: nn.Module,
    eager: nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    options: TimingOptions,
    template: tuple[tuple[Any, ...], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """``profile.timing["compiled"]``: the compiled model's forward latency (seconds) over
    ``options.repeats`` runs after ``max(options.warmup, 1)`` untimed ones (each on a
    fresh copy of ``template``, the inputs as given, when there is one)."""

    def inputs() -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (args, kwargs) if template is None else copy.deepcopy(template)

    cuda = any(t.is_cuda for t in eager.parameters())

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    state = ModelState.capture(eager)
    runs: list[float] = []
    try:
        with gc_paused(), options.grad_context():
            for _ in range(max(options.warmup, 1)):
                a, k = inputs()
                compiled(*a, **k)
            for _ in range(options.repeats):
                a, k = inputs()
                sync()
                t0 = time.perf_counter_ns()
                out = compiled(*a, **k)
                sync()
                runs.append(float(time.perf_counter_ns() - t0))
                del out
    except LayerscopeError:
        raise
    except Exception as e:
        raise ModelError(f"the compiled model raised {type(e).__name__}: {e}") from e
    finally:
        state.restore()
    return {
        "latency": summarize(runs, 1e-9),
        "warmup": max(options.warmup, 1),
        "repeats": options.repeats,
        "grad_mode": options.grad_mode.value,
        "what": "forward latency of the torch.compile'd model; per-module numbers are the "
        "eager original's",
    }
