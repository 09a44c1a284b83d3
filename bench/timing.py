"""Interleaved best-of-N timing: every candidate runs once per round, so drift in machine
load hits all of them alike, and the minimum over rounds is reported.

``steady_heap`` pins glibc's heap thresholds for the whole run. By default glibc returns
freed memory to the system or keeps it depending on the heap's layout at that moment, so
which candidate has to fault its activations back in (about 13,000 page faults, 10-17 ms
per ResNet-50 forward on a 2-vCPU VM) depends on the order of the candidates and on what
ran before, not on the candidate. With the thresholds pinned no candidate pays them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence

#: glibc's tunables: never trim the heap top, never mmap a block of its own.
PINNED_HEAP = {"MALLOC_TRIM_THRESHOLD_": str(2**34), "MALLOC_MMAP_THRESHOLD_": str(2**32)}


def add_heap_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--system-heap",
        action="store_true",
        help="keep glibc's default heap thresholds (page faults then vary with run order)",
    )


def steady_heap(args: argparse.Namespace) -> str:
    """Re-run this script with the heap thresholds pinned (unless ``--system-heap``, or
    they already are); returns a line saying which heap the run has."""
    if args.system_heap:
        return "heap: glibc defaults"
    if any(os.environ.get(k) != v for k, v in PINNED_HEAP.items()):
        os.environ.update(PINNED_HEAP)
        os.execv(sys.executable, [sys.executable, *sys.argv])
    return "heap: glibc trim and mmap thresholds pinned (--system-heap to keep defaults)"


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
