"""How planning time grows with depth: FSDP2 over blocks of two Linears, every block a
unit and checkpointed (also ``"auto"``, and ``"auto"`` under a budget nothing fits, so
that its greedy search checkpoints every module it can), planned from one profile at 100
to 1,600 blocks.

    python bench/bench_plan_depth.py [--blocks 100 200 400 800 1600] [--repeats 3]

Prints, per depth, the profile's seconds, the plan's (best of ``--repeats``) and the
plan's growth against the previous depth: about 2x per doubling is linear, 4x quadratic.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

import layerscope as ls


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(64, 64), nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.b(torch.relu(self.a(x)))
        return out


class Stack(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Block() for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.layers:
            x = block(x)
        return x


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, nargs="+", default=[100, 200, 400, 800, 1600])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"{'blocks':>6} {'profile s':>9} {'blocks s':>9} {'growth':>6} {'auto s':>8} "
          f"{'tight s':>8} {'growth':>6}")  # fmt: skip
    tight_last = None
    last = None
    for n in args.blocks:
        model, x = Stack(n), torch.randn(4, 64)
        start = time.perf_counter()
        prof = ls.profile(model, x, memory=True, backward=True)
        profiled = time.perf_counter() - start
        best = {}
        for name, checkpoint, budget in (("blocks", "blocks", None), ("auto", "auto", None),
                                         ("tight", "auto", 2**31)):  # fmt: skip
            times = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                ls.plan(prof, sharding="fsdp", world_size=8, checkpoint=checkpoint,
                        precision="fp32", budget=budget)  # fmt: skip
                times.append(time.perf_counter() - start)
            best[name] = min(times)
        growth = f"{best['blocks'] / last:.2f}x" if last else ""
        tight = f"{best['tight'] / tight_last:.2f}x" if tight_last else ""
        print(f"{n:>6} {profiled:>9.2f} {best['blocks']:>9.2f} {growth:>6} {best['auto']:>8.2f} "
              f"{best['tight']:>8.2f} {tight:>6}")  # fmt: skip
        last, tight_last = best["blocks"], best["tight"]


if __name__ == "__main__":
    main()
