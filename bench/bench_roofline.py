"""How close does this CPU get to its own roofline? Measured time / roofline time, per
module type and for the whole model, at several batch sizes.

The CPU's roof comes from ``layerscope.hardware.calibrate_cpu`` (a large matmul for peak
FLOP/s, a large copy for bytes/s), measured in this run. Each model is profiled with a
timing pass (forward, eval, ``torch.no_grad`` off as ``ls.profile`` runs it); ``ls.estimate``
gives every module's roofline time; the ratio measured / roofline (>= 1: the roofline is a
lower bound) is printed for the whole model and summed per module type over the leaf
modules (Conv2d, Linear, ...), with the analysis pass's cost of counting bytes too.

    python bench/bench_roofline.py [--repeats 5] [--batches 1,8,32] [--gpt-batches 1,4]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict

import torch
from torch import nn

import layerscope as ls
from layerscope.analysis.roofline import Estimate, estimate
from layerscope.hardware import calibrate_cpu

sys.path.insert(0, os.path.dirname(__file__))
from models import gpt2_small, resnet50


def by_type(est: Estimate, prof: ls.Profile) -> dict[str, tuple[float, float]]:
    """Leaf modules' (measured, roofline) seconds summed per module type."""
    leaves = {n.path for n in prof.root.walk() if not n.children}
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for m in est:
        if m.path in leaves and m.measured is not None:
            out[m.type][0] += m.measured
            out[m.type][1] += m.time
    return {k: (v[0], v[1]) for k, v in out.items()}


def report(name: str, model: nn.Module, args: tuple[object, ...], repeats: int) -> None:
    prof = ls.profile(model, args=args, timing={"repeats": repeats, "warmup": 2})
    est = estimate(prof, "cpu")
    whole = est.model
    assert whole.measured is not None
    print(
        f"{name:<26} measured {whole.measured * 1e3:9.2f} ms  roofline "
        f"{whole.time * 1e3:8.2f} ms  ratio {whole.measured / whole.time:6.2f}  "
        f"intensity {whole.intensity or 0:7.1f} FLOP/B"
    )
    for kind, (measured, roof) in sorted(by_type(est, prof).items(), key=lambda kv: -kv[1][0]):
        if measured > 0.02 * whole.measured and roof > 0:
            print(f"    {kind:<22} measured {measured * 1e3:9.2f} ms  ratio {measured / roof:6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--gpt-batches", default="1,4")
    parser.add_argument("--seq", type=int, default=128)
    args = parser.parse_args()
    t0 = time.perf_counter()
    spec = calibrate_cpu()
    took = time.perf_counter() - t0
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; {spec.label}: "
        f"float32 peak {spec.peak('float32') / 1e9:.1f} GFLOP/s, bandwidth "
        f"{spec.bandwidth / 1e9:.1f} GB/s (calibrated in {took:.2f} s)"
    )
    torch.manual_seed(0)
    net = resnet50().eval()
    for b in (int(v) for v in args.batches.split(",")):
        report(f"resnet50 batch {b}", net, (torch.randn(b, 3, 224, 224),), args.repeats)
    gpt = gpt2_small().eval()
    for b in (int(v) for v in args.gpt_batches.split(",")):
        ids = torch.randint(0, 50257, (b, args.seq))
        report(f"gpt2-small batch {b}x{args.seq}", gpt, (ids,), args.repeats)


if __name__ == "__main__":
    main()
