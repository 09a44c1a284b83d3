"""Interleaved best-of-N timing: every candidate runs once per round, so drift in machine
load hits all of them alike, and the minimum over rounds is reported."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence


def best_of_interleaved(fns: Sequence[Callable[[], object]], rounds: int) -> list[float]:
    for fn in fns:  # warm up
        fn()
    best = [float("inf")] * len(fns)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - t0)
    return best
