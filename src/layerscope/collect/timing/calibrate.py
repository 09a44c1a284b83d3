"""Calibration of the instrumentation's own cost (clock read, forward hook pair, autograd
pre-hook) on empty modules, so it can be subtracted from the measured times.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from layerscope.collect.timing.clock import Stamper
from layerscope.collect.timing.forward import ForwardHooks
from layerscope.collect.timing.index import ModuleIndex
from layerscope.collect.timing.options import Clock


class _Empty(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x


def calibrate_clock(clock: Clock, trials: int = 64) -> float:
    """Cost of one clock read: the smallest gap between two back-to-back reads."""
    best = float("inf")
    for _ in range(trials):
        a = clock()
        b = clock()
        best = min(best, b - a)
    return max(float(best), 0.0)


def calibrate_forward(
    stamper: Stamper, record_seq: bool, k: int = 32, trials: int = 15
) -> tuple[float, float]:
    """(inner, outer) cost in ns of one instrumented module call, measured on empty modules.

    ``inner``: the smallest median window of an empty leaf (what a hook pair puts inside
    its own window). ``outer``: (instrumented chain - bare chain) / (k + 1), the extra
    wall time each instrumented call adds to whatever encloses it.
    """
    clock = stamper.clock
    bare = nn.Sequential(*[_Empty() for _ in range(k)])
    hooked = nn.Sequential(*[_Empty() for _ in range(k)])
    index = ModuleIndex.build(hooked)
    hooks = ForwardHooks(index, stamper, record_seq)
    x = torch.zeros(1)
    best_bare = best_hooked = best_inner = float("inf")
    hooks.install()
    try:
        for _ in range(trials):
            t0 = clock()
            bare(x)
            t1 = clock()
            best_bare = min(best_bare, t1 - t0)
            t0 = clock()
            hooked(x)
            t1 = clock()
            best_hooked = min(best_hooked, t1 - t0)
            entries = hooks.take()
            windows: list[float] = []
            open_at: dict[int, float] = {}
            for code, t, _ in entries:
                if code > 0:  # leaves only (the container is module 0)
                    open_at[code] = float(t)
                elif code < -1:
                    windows.append(float(t) - open_at[~code])
            if windows:
                windows.sort()
                best_inner = min(best_inner, windows[len(windows) // 2])
    finally:
        hooks.uninstall()
    outer = max((best_hooked - best_bare) / (k + 1), 0.0)
    inner = max(best_inner, 0.0) if best_inner != float("inf") else 0.0
    return inner, outer


def calibrate_backward(stamper: Stamper, k: int = 32, trials: int = 15) -> float:
    """Cost in ns of one autograd-node pre-hook: (hooked - bare) backward / hooked nodes."""
    clock = stamper.clock
    x = torch.zeros((), requires_grad=True)

    def chain() -> Tensor:
        y = x
        for _ in range(k):
            y = y * 1.0
        return y

    sink: list[tuple[int, int]] = []
    best_bare = best_hooked = float("inf")
    hooked_nodes = 1
    for _ in range(trials):
        y = chain()
        t0 = clock()
        y.backward()  # type: ignore[no-untyped-call]
        t1 = clock()
        best_bare = min(best_bare, t1 - t0)
        y = chain()
        handles = []
        fn: Any = y.grad_fn
        seen: set[Any] = set()
        while fn is not None and fn not in seen:
            seen.add(fn)
            handles.append(fn.register_prehook(lambda g: sink.append((0, clock()))))
            nxt = fn.next_functions
            fn = nxt[0][0] if nxt else None
        hooked_nodes = len(handles)
        t0 = clock()
        y.backward()  # type: ignore[no-untyped-call]
        t1 = clock()
        for h in handles:
            h.remove()
        best_hooked = min(best_hooked, t1 - t0)
    return max((best_hooked - best_bare) / hooked_nodes, 0.0)
