"""Cost of memory tracking (``MemoryObserver``) against a bare forward, all measured in this
one run (interleaved best of N rounds, median of 3 trials).

    python bench/bench_memory.py [--repeats 7] [--threads N] [--batch 1]

Rows, each as wall time / bare forward time on a ResNet-50-shaped model, CPU:

- ``session only``: ``ls.profile(count_flops=False)`` with no observer (hooks, state capture
  and restore, tree building), the floor every analysis pays;
- ``dispatch floor``: the same plus an observer whose ``on_op`` does nothing: the cost of
  the session's dispatch mode alone, which the FLOP counter and memory share;
- ``memory``: ``ls.profile(count_flops=False, observers=[MemoryObserver()])``;
- ``flops``: ``ls.profile()`` (the FLOP counter alone);
- ``memory + flops``: both observers in one session.

Target: memory / bare <= 1.15 at batch 1.

Measured when written (torch 2.13 CPU, a shared 2-vCPU VM, so +-5% run to run; the
median of 3 trials):

    threads  bare     session only  dispatch floor  memory  flops  memory + flops
    1        127 ms   1.19          1.37            1.47    1.30   1.49
    2        104 ms   1.17          1.31            1.47    1.32   1.55

The target is missed, and not by memory tracking's own work: the session floor (module
hooks, state capture and restore) is ~1.17-1.19 and the dispatch mode every per-op
observer needs adds ~0.13-0.19; memory tracking adds ~0.10-0.16 on top (saved-tensor hooks
and bookkeeping, a few microseconds per op, module call and saved tensor).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Callable

import torch

import layerscope as ls
from layerscope.collect.observer import Observer
from layerscope.metrics.memory import MemoryObserver

sys.path.insert(0, os.path.dirname(__file__))
from models import resnet50
from timing import best_of_interleaved


class NoOp(Observer):
    """Turns the session's dispatch mode on and does nothing with the ops."""

    def on_op(self, *args: object) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--batch", type=int, default=1)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model = resnet50().eval()
    x = torch.randn(args.batch, 3, 224, 224)
    cases: list[tuple[str, Callable[[], object]]] = [
        ("bare forward", lambda: model(x)),
        ("session only", lambda: ls.profile(model, x, count_flops=False)),
        ("dispatch floor", lambda: ls.profile(model, x, count_flops=False, observers=[NoOp()])),
        (
            "memory",
            lambda: ls.profile(model, x, count_flops=False, observers=[MemoryObserver()]),
        ),
        ("flops", lambda: ls.profile(model, x)),
        ("memory + flops", lambda: ls.profile(model, x, observers=[MemoryObserver()])),
    ]
    trials: list[list[float]] = []
    for _ in range(3):
        times = best_of_interleaved([fn for _, fn in cases], args.repeats)
        trials.append(times)
    # per case, the median over trials of (time / bare time of the same trial)
    ratios = [statistics.median(t[i] / t[0] for t in trials) for i in range(len(cases))]
    bare = statistics.median(t[0] for t in trials)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, best of {args.repeats}, "
        f"median of 3 trials; resnet50 {args.batch}x3x224x224 on CPU, eval mode"
    )
    print(f"{'case':<18}{'time':>12}{'/ bare':>10}")
    for (name, _), ratio in zip(cases, ratios, strict=True):
        print(f"{name:<18}{bare * ratio * 1e3:>10.1f}ms{ratio:>10.3f}")
    prof = ls.profile(model, x, count_flops=False, observers=[MemoryObserver()])
    mem = prof.memory
    print(
        f"forward peak {mem['forward_peak_bytes'] / 2**20:.2f} MiB, saved activations "
        f"{mem['activation_bytes'] / 2**20:.2f} MiB, live at forward end "
        f"{mem['forward_end_bytes'] / 2**20:.2f} MiB"
    )
    memory, floor = ratios[3], ratios[2]
    verdict = "meets" if memory <= 1.15 else "misses"
    print(
        f"memory / bare = {memory:.3f} ({verdict} the 1.15 target); memory tracking on top "
        f"of the dispatch floor: +{memory - floor:.3f} of a bare forward"
    )


if __name__ == "__main__":
    main()
