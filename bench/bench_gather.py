"""Time to gather two large profiles over gloo, against the 2 s target.

    .venv/bin/python bench/bench_gather.py [--layers 10000] [--repeats 3]

Spawns 2 processes (gloo on CPU, a file store: no ports). Each profiles
``nn.Sequential(*[nn.Linear(4, 4) for _ in range(LAYERS)])`` on ``torch.randn(rank + 1,
4)`` (LAYERS + 1 nodes, with shapes and FLOPs), then, after a barrier, times
``prof.gather(dst=0)`` (best of ``--repeats``, wall time on rank 0, which waits for the
last byte and checks every received profile): serialising on rank 1, the transfer, the
reader's checks and the node building on rank 0. Nothing is asserted: the time is
printed beside its target with ``ok`` or ``SLOW``.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import tempfile
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

import layerscope as ls

TARGET_S = 2.0
WORLD = 2


def _rank(rank: int, store: str, layers: int, repeats: int, queue: Any) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    try:
        model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(layers)])
        prof = ls.profile(model, torch.randn(rank + 1, 4))
        best = math.inf
        nodes = 0
        for _ in range(repeats):
            dist.barrier()
            start = time.perf_counter()
            got = prof.gather(dst=0)
            best = min(best, time.perf_counter() - start)
            if got is not None:
                nodes = sum(len(p.nodes()) for p in got.ranks)
        if rank == 0:
            queue.put((best, nodes))
    finally:
        dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    ctx = multiprocessing.get_context("spawn")
    queue: Any = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        procs = [
            ctx.Process(target=_rank, args=(r, store, args.layers, args.repeats, queue))
            for r in range(WORLD)
        ]
        for p in procs:
            p.start()
        best, nodes = queue.get(timeout=600)
        for p in procs:
            p.join(60)
    verdict = "ok" if best < TARGET_S else "SLOW"
    print(f"gather of {WORLD} profiles ({args.layers + 1} nodes each, {nodes} in all) over gloo")
    print(f"  prof.gather(dst=0)  {best:8.3f} s  (target {TARGET_S:.1f} s)  {verdict}")


if __name__ == "__main__":
    main()
