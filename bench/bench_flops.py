"""Cost of the analysis pass (params + FLOPs + shapes) against a bare forward and
torch's FlopCounterMode, all measured in this one run (interleaved best of N rounds,
median of 3 trials).

    python bench/bench_flops.py [--repeats 10] [--skip-llama] [--system-heap]

Columns: the bare forward's time, then layerscope's analysis (``ls.profile``), torch's
FlopCounterMode, and a TorchDispatchMode that does nothing but run each op (the floor of
any tool that sees aten ops from Python), each as time / bare forward time.

Targets: ResNet-50 shape, CPU, batch 1: layerscope / bare <= 1.25 and below
FlopCounterMode / bare. GPT-2 small shape, 128 tokens: <= 1.15. Llama 80 layers x 8192 on
meta, 2048 tokens: layerscope time <= 1.5 x FlopCounterMode time, peak RSS < 1 GB (measured
in a fresh subprocess).

The run re-executes itself with glibc's heap thresholds pinned (see ``timing.steady_heap``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

import layerscope as ls

sys.path.insert(0, os.path.dirname(__file__))
from models import gpt2_small, llama_on_meta, resnet50
from timing import add_heap_option, best_of_interleaved, steady_heap


def flop_counter_forward(model: torch.nn.Module, x: torch.Tensor) -> int:
    with FlopCounterMode(display=False) as counter:
        model(x)
    return int(counter.get_total_flops())


class NoOpMode(TorchDispatchMode):  # type: ignore[no-untyped-call]
    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        return func(*args, **(kwargs or {}))


def noop_mode_forward(model: torch.nn.Module, x: torch.Tensor) -> None:
    with NoOpMode():  # type: ignore[no-untyped-call]
        model(x)


def compare(name: str, model: torch.nn.Module, x: torch.Tensor, repeats: int) -> None:
    """Three interleaved trials of ``repeats`` rounds; the median trial's ratios."""
    trials = []
    for _ in range(3):
        bare, ours, theirs, floor = best_of_interleaved(
            [
                lambda: model(x),
                lambda: ls.profile(model, x),
                lambda: flop_counter_forward(model, x),
                lambda: noop_mode_forward(model, x),
            ],
            repeats,
        )
        trials.append((ours / bare, theirs / bare, floor / bare, bare))
    ours_ratio, theirs_ratio, floor_ratio, bare = sorted(trials)[1]
    prof = ls.profile(model, x)
    print(
        f"{name:<26}{bare * 1e3:>10.1f}ms{ours_ratio:>12.3f}{theirs_ratio:>14.3f}"
        f"{floor_ratio:>14.3f}   macs={prof.root.metrics['macs']:.4g} (FlopCounterMode "
        f"flops/2={flop_counter_forward(model, x) / 2:.4g})"
    )


LLAMA_CHILD = """
import os, sys, time
sys.path.insert(0, {bench!r})
import torch
import layerscope as ls
from models import llama_on_meta
model = llama_on_meta()
ids = torch.zeros(1, 2048, dtype=torch.long, device="meta")
t0 = time.perf_counter()
prof = ls.profile(model, ids)
dt = time.perf_counter() - t0
# VmHWM, not ru_maxrss: the latter can carry over the parent's peak across fork/exec
rss = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM"))
print(dt, rss, prof.root.metrics["flops"], prof.root.metrics["params"])
"""


def llama(repeats: int) -> None:
    model = llama_on_meta()
    ids = torch.zeros(1, 2048, dtype=torch.long, device="meta")
    theirs, ours = best_of_interleaved(
        [lambda: flop_counter_forward(model, ids), lambda: ls.profile(model, ids)],
        max(1, repeats // 2),
    )
    child = subprocess.run(
        [sys.executable, "-c", LLAMA_CHILD.format(bench=os.path.dirname(__file__))],
        capture_output=True,
        text=True,
        check=True,
    )
    dt, rss, flops, params = child.stdout.split()
    print(
        f"llama 80x8192 on meta, 2048 tokens: layerscope {ours:.2f}s, FlopCounterMode "
        f"{theirs:.2f}s, ratio {ours / theirs:.3f}; fresh process: {float(dt):.2f}s, "
        f"peak RSS {int(rss) / 2**30:.3f} GiB; flops {float(flops):.4g}, params {int(params):,}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--skip-llama", action="store_true")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    add_heap_option(parser)
    args = parser.parse_args()
    heap = steady_heap(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    print(f"torch {torch.__version__}, {threads} threads, best of {args.repeats}; {heap}")
    print(f"{'model':<26}{'bare fwd':>12}{'ls/bare':>12}{'FCM/bare':>14}{'no-op mode':>14}")
    compare("resnet50 1x3x224x224", resnet50().eval(), torch.randn(1, 3, 224, 224), args.repeats)
    compare(
        "gpt2-small 1x128 tokens",
        gpt2_small(),
        torch.randint(0, 50257, (1, 128)),
        args.repeats,
    )
    if not args.skip_llama:
        llama(args.repeats)


if __name__ == "__main__":
    main()
