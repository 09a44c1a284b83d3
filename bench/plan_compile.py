"""The step time ``compile=True`` and ``float8=True`` predict, as docs/plan.md quotes it.

    python bench/plan_compile.py

Llama-3.1-8B (its transformers config, on ``meta``), 2 x 8,192 tokens a GPU on 8 H100s:
FSDP2, every block checkpointed, bf16-mixed, AdamW; eager, compiled, and compiled with
float8 linears. Prints each plan's tokens/s per GPU, its kernels a step and the change
from the one before (torchtitan measured +15.7 % for compile and +28.0 % for float8 on
8 H100s: its ``benchmarks/llama3_h100_202412_torchtitan.md``, Table 1).
"""

from __future__ import annotations

from typing import Any

import torch

import layerscope as ls
from bench_plan import build


def main() -> None:
    model = build("8b")
    ids = torch.zeros(2, 8192, dtype=torch.long, device="meta")
    options: dict[str, Any] = {
        "target": "h100", "world_size": 8, "sharding": "fsdp", "precision": "bf16-mixed",
        "optimizer": "adamw", "checkpoint": "blocks",
    }  # fmt: skip
    before = 0.0
    runs: tuple[tuple[str, dict[str, Any]], ...] = (
        ("eager", {}),
        ("compile", {"compile": True}),
        ("compile + float8", {"compile": True, "float8": True}),
    )
    for name, extra in runs:
        plan = ls.plan(model, ids, **options, **extra)
        rate = float(plan.tokens_per_s or 0.0)
        change = f"  {rate / before - 1:+.1%}" if before else ""
        print(f"{name:<17} {rate:>9,.0f} tokens/s a GPU  {plan.kernels:>6,} kernels{change}")
        before = rate


if __name__ == "__main__":
    main()
