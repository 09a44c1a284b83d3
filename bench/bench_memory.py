"""Cost of memory tracking and of numerics checks against a bare forward, all measured in
this one run (interleaved best of N rounds, median of 3 trials).

    python bench/bench_memory.py [--repeats 7] [--threads N] [--batch 1] [--system-heap]

Rows, each as wall time / bare forward time on a ResNet-50-shaped model, CPU:

- ``session only``: ``ls.profile(count_flops=False)`` with no observer (hooks, state capture
  and restore, tree building), the floor every analysis pays;
- ``dispatch floor``: the same plus an observer whose ``on_op`` does nothing: the cost of
  the session's dispatch mode alone, which the FLOP counter and memory share;
- ``memory``: ``ls.profile(count_flops=False, memory=True)``;
- ``numerics``: ``ls.profile(count_flops=False, numerics="record")`` (NaN/Inf checks and
  activation statistics on every module output);
- ``+ underflow``: the same with ``underflow=True`` (the smallest nonzero magnitude too);
- ``flops``: ``ls.profile()`` (the FLOP counter alone);
- ``memory + flops``: both observers in one session.


Targets: memory / bare <= 1.15, numerics / bare <= 1.3 at batch 1.
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

sys.path.insert(0, os.path.dirname(__file__))
from models import resnet50
from timing import add_heap_option, best_of_interleaved, steady_heap


class NoOp(Observer):
    """Turns the session's dispatch mode on and does nothing with the ops."""

    def on_op(self, *args: object) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--batch", type=int, default=1)
    add_heap_option(parser)
    args = parser.parse_args()
    heap = steady_heap(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    model = resnet50().eval()
    x = torch.randn(args.batch, 3, 224, 224)
    cases: list[tuple[str, Callable[[], object]]] = [
        ("bare forward", lambda: model(x)),
        ("session only", lambda: ls.profile(model, x, count_flops=False)),
        ("dispatch floor", lambda: ls.profile(model, x, count_flops=False, observers=[NoOp()])),
        ("memory", lambda: ls.profile(model, x, count_flops=False, memory=True)),
        ("numerics", lambda: ls.profile(model, x, count_flops=False, numerics="record")),
        (
            "+ underflow",
            lambda: ls.profile(
                model, x, count_flops=False, numerics={"nonfinite": "record", "underflow": True}
            ),
        ),
        ("flops", lambda: ls.profile(model, x)),
        ("memory + flops", lambda: ls.profile(model, x, memory=True)),
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
        f"median of 3 trials; resnet50 {args.batch}x3x224x224 on CPU, eval mode; {heap}"
    )
    print(f"{'case':<18}{'time':>12}{'/ bare':>10}")
    for (name, _), ratio in zip(cases, ratios, strict=True):
        print(f"{name:<18}{bare * ratio * 1e3:>10.1f}ms{ratio:>10.3f}")
    prof = ls.profile(model, x, count_flops=False, memory=True)
    mem = prof.memory
    print(
        f"forward peak {mem['forward_peak_bytes'] / 2**20:.2f} MiB, saved activations "
        f"{mem['activation_bytes'] / 2**20:.2f} MiB, live at forward end "
        f"{mem['forward_end_bytes'] / 2**20:.2f} MiB"
    )
    by_name = {name: ratio for (name, _), ratio in zip(cases, ratios, strict=True)}
    memory, numerics = by_name["memory"], by_name["numerics"]
    session, floor = by_name["session only"], by_name["dispatch floor"]
    print(
        f"memory / bare = {memory:.3f} ({'meets' if memory <= 1.15 else 'misses'} the 1.15 "
        f"target); memory tracking on top of the dispatch floor: +{memory - floor:.3f}"
    )
    print(
        f"numerics / bare = {numerics:.3f} "
        f"({'meets' if numerics <= 1.3 else 'misses'} the 1.3 target); statistics on top "
        f"of the session: +{numerics - session:.3f}"
    )


if __name__ == "__main__":
    main()
