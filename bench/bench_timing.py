"""Cost and faithfulness of the timing pass, per timer, on a ResNet-50-shaped model.

    python bench/bench_timing.py [--repeats 20] [--rounds 10] [--threads N] [--cuda]
                                 [--clock wall|thread] [--timers hooks,kineto,fx]

For each timer (hooks, kineto, fx), CPU, batch 1 (``--cuda``: a GPU, batch 32):

- ``instr/bare``: one forward with the timer's instrumentation in place (hooks installed;
  ``record_function`` ranges under a running torch.profiler; the fx timing interpreter)
  over a bare forward: median of 3 trials, each the ratio of best-of-``rounds``
  interleaved runs (``best_of_interleaved``). Target for the default timer: <= 1.05.
- ``root/bare``: the root's reported inclusive ``forward_time`` (median per call, overhead
  corrected) over the median of the uninstrumented forwards of the same pass
  (``Profile.timing["forward_latency"]``). ``paired``: the median over repeats of
  root / bare of the *same* repeat (the pass interleaves them; kineto cannot, its bare
  runs all come first). Target: between 0.95 and 1.05.

``--clock thread`` measures CPU time of the calling thread (``time.thread_time_ns``) instead
of wall time, for the pass and for the ratios: immune to other processes on a loaded
machine, but only meaningful with ``--threads 1`` (all work on the calling thread).
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from collections.abc import Callable

import torch
from torch import nn
from torch.autograd.profiler import record_function

import layerscope as ls
from layerscope.collect.timing import FORWARD_TIME, ForwardHooks, ModuleIndex, Stamper
from layerscope.collect.timing import time_profile as run_timing
from layerscope.collect.timing.fx import TimingInterpreter, trace
from layerscope.collect.timing.kineto import RangeHooks

sys.path.insert(0, os.path.dirname(__file__))
from models import resnet50
from timing import best_of_interleaved


def synced(fn: Callable[[], object], cuda: bool) -> Callable[[], object]:
    if not cuda:
        return fn

    def call() -> object:
        out = fn()
        torch.cuda.synchronize()
        return out

    return call


#: The clock of the ratios; ``--clock thread`` switches it to the thread's CPU time.
CLOCK: list[Callable[[], float]] = [time.perf_counter]


def best_of(fns: list[Callable[[], object]], rounds: int) -> list[float]:
    """``best_of_interleaved`` on the wall clock; the same loop on the thread clock."""
    if CLOCK[0] is time.perf_counter:
        return best_of_interleaved(fns, rounds)
    for fn in fns:
        fn()
    best = [float("inf")] * len(fns)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            t0 = CLOCK[0]()
            fn()
            best[i] = min(best[i], CLOCK[0]() - t0)
    return best


def median_ratio(bare: Callable[[], object], instr: Callable[[], object], rounds: int) -> float:
    """Median over 3 trials of (best-of-rounds instrumented / best-of-rounds bare)."""
    ratios = []
    for _ in range(3):
        b, i = best_of([bare, instr], rounds)
        ratios.append(i / b)
    return statistics.median(ratios)


def instrumented_forward(
    timer: str, model: nn.Module, x: torch.Tensor, rounds: int, cuda: bool
) -> float:
    """instr/bare for one timer, instrumenting a deep copy so the bare model stays bare."""
    twin = copy.deepcopy(model)
    bare = synced(lambda: model(x), cuda)
    device = x.device
    if timer == "hooks":
        # one stamper, so that the events a run records go back to the pool it takes from
        stamper = Stamper(None, device, False)
        hooks = ForwardHooks(ModuleIndex.build(twin), stamper, False)

        def hooked() -> object:
            out = twin(x)
            stamper.recycle([e[1] for e in hooks.take()])
            return out

        hooks.install()
        try:
            return median_ratio(bare, synced(hooked, cuda), rounds)
        finally:
            hooks.uninstall()
    if timer == "kineto":
        ranges = RangeHooks(ModuleIndex.build(twin), record_seq=False)
        activities = [torch.profiler.ProfilerActivity.CPU]
        if cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        ranges.install()
        try:
            # The profiler records every op while it runs, so bare runs happen outside it:
            # each trial is a profiler session of `rounds` runs against `rounds` bare ones.
            ratios = []
            for _ in range(3):
                (b,) = best_of([bare], rounds)
                with torch.profiler.profile(activities=activities):
                    with record_function("warm"):
                        twin(x)
                    best = float("inf")
                    for _ in range(rounds):
                        t0 = CLOCK[0]()
                        synced(lambda: twin(x), cuda)()
                        best = min(best, CLOCK[0]() - t0)
                ratios.append(best / b)
            return statistics.median(ratios)
        finally:
            ranges.uninstall()
    gm = trace(twin)
    nodes = [n for n in gm.graph.nodes if n.op in ("call_module", "call_function", "call_method")]
    stamper = Stamper(None, device, False)
    interp = TimingInterpreter(gm, {n: i for i, n in enumerate(nodes)}, stamper.record, False)

    def interpreted() -> object:
        interp.log.clear()
        out = interp.run(x)
        interp.env.clear()  # else the graph stays alive into the next (bare) run
        return out

    return median_ratio(bare, synced(interpreted, cuda), rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=20, help="timing-pass repeats")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds per trial")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--cuda", action="store_true", help="on a GPU, batch 32")
    parser.add_argument("--clock", choices=("wall", "thread"), default="wall")
    parser.add_argument("--timers", default="hooks,kineto,fx")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    clock_ns = None
    if args.clock == "thread":
        if args.cuda:
            parser.error("--clock thread measures CPU time; use the wall clock with --cuda")
        CLOCK[0] = time.thread_time
        clock_ns = time.thread_time_ns
    device = torch.device("cuda" if args.cuda else "cpu")
    batch = 32 if args.cuda else 1
    model = resnet50().eval().to(device)
    x = torch.randn(batch, 3, 224, 224, device=device)
    for _ in range(3):
        synced(lambda: model(x), args.cuda)()
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {device}, batch {batch}, "
        f"{args.clock} clock, repeats {args.repeats}, rounds {args.rounds}"
    )
    prof = ls.profile(model, x)
    print(
        f"{'timer':<8}{'bare fwd':>12}{'instr/bare':>12}{'root/bare':>11}{'paired':>9}{'pass s':>9}"
    )
    for timer in args.timers.split(","):
        ratio = instrumented_forward(timer, model, x, args.rounds, args.cuda)
        t0 = time.perf_counter()
        result = run_timing(
            prof,
            model,
            (x,),
            timer=timer,
            warmup=3,
            repeats=args.repeats,
            clock=clock_ns,
            progress=False,
        )
        took = time.perf_counter() - t0
        root = float(prof.root.metrics[FORWARD_TIME])
        bare = float(prof.timing["forward_latency"]["median"])
        per_repeat = result.modules[""].series[FORWARD_TIME].inclusive
        paired = statistics.median(
            r / b for r, b in zip(per_repeat, result.whole["forward_latency"], strict=True)
        )
        print(
            f"{timer:<8}{bare * 1e3:>10.2f}ms{ratio:>12.3f}{root / bare:>11.3f}{paired:>9.3f}"
            f"{took:>9.1f}"
        )


if __name__ == "__main__":
    main()
