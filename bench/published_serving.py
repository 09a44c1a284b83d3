"""Published, measured serving runs against ``ls.plan_serving``: predicted and bound
tokens/s per sequence beside the measured, and whether the bound holds.

    python bench/published_serving.py [--json OUT.json]

Source: gpt-fast's README, "Benchmarks" (https://github.com/pytorch-labs/gpt-fast,
README.md at commit 0f925b5): batch 1, a 5-token prompt, ``torch.compile`` (CUDA graphs
through ``mode="reduce-overhead"``), one A100-80GB power-limited to 330 W; tokens/s per
user. Llama-2-7B base 104.9, 8-bit 155.58, 4-bit (G=32) 196.80; Llama-2-70B 8-bit 19.13,
4-bit (G=32) 25.25. The tensor-parallel rows need the mesh layerscope does not plan yet.

Approximations, stated: the A100 SXM4 80GB spec (the runs were power-limited, and the
README says the bandwidth it reached was about 1,700 GB/s of the datasheet's 2,039);
``mode="graphs"``; 200 new tokens (gpt-fast's default ``max_new_tokens``); gpt-fast's
int8 has a bfloat16 scale per output channel (our ``int8``'s float16 one has the same
width); its int4 stores a bfloat16 scale and zero per group of 32 (4 bytes a group) where
our ``int4`` charges a float16 scale and a 4-bit zero (2.5 bytes); gpt-fast also
quantizes the output projection, which ours keeps at bfloat16 (about 2 % of Llama-2-7B's
bytes). Shapes: Meta's published Llama 2 configs as transformers' ``LlamaForCausalLM`` on
meta, bfloat16.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch
import transformers

import layerscope as ls

SOURCE = "https://github.com/pytorch-labs/gpt-fast/blob/0f925b5/README.md"
SHAPES: dict[str, dict[str, Any]] = {
    "llama2-7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=32, vocab_size=32000),
    "llama2-70b": dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                       num_attention_heads=64, num_key_value_heads=8, vocab_size=32000),
}  # fmt: skip


@dataclass(frozen=True)
class Run:
    """One row of the table, as printed there."""

    model: str
    weights: str | None
    group_size: int
    tokens_per_s: float


RUNS = (
    Run("llama2-7b", None, 128, 104.9),
    Run("llama2-7b", "int8", 128, 155.58),
    Run("llama2-7b", "int4", 32, 196.80),
    Run("llama2-70b", "int8", 128, 19.13),
    Run("llama2-70b", "int4", 32, 25.25),
)


def plan_run(run: Run) -> dict[str, Any]:
    config = transformers.LlamaConfig(max_position_embeddings=4096, **SHAPES[run.model])
    with torch.device("meta"):
        model: Any = transformers.LlamaForCausalLM(config)
    model = model.to(torch.bfloat16)
    start = time.perf_counter()
    plan = ls.plan_serving(
        model, target="a100", max_context=4096, prompt=5, new_tokens=200, batch=1,
        weights=run.weights, group_size=run.group_size, mode="graphs",
    )  # fmt: skip
    row = plan.rows[0]
    return {
        **asdict(run),
        "predicted": row.tokens_per_s_per_seq,
        "bound": 1 / row.tpot_bound,
        "ratio": run.tokens_per_s / row.tokens_per_s_per_seq,
        "bound_holds": run.tokens_per_s <= 1 / row.tpot_bound,
        "weight_bytes": plan.weight_bytes,
        "seconds": time.perf_counter() - start,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the rows as JSON")
    args = parser.parse_args()
    rows = []
    print(f"{'model':11s} {'weights':8s} {'measured':>9s} {'predicted':>9s} {'bound':>8s} "
          f"{'meas/pred':>9s}  bound holds")  # fmt: skip
    for run in RUNS:
        r = plan_run(run)
        rows.append(r)
        print(f"{r['model']:11s} {r['weights'] or 'bf16':8s} {r['tokens_per_s']:9.1f} "
              f"{r['predicted']:9.1f} {r['bound']:8.1f} {r['ratio']:9.2f}  "
              f"{'yes' if r['bound_holds'] else 'NO'}")  # fmt: skip
    ratios = [r["ratio"] for r in rows]
    print(f"median measured/predicted {statistics.median(ratios):.2f} "
          f"(min {min(ratios):.2f}, max {max(ratios):.2f}); bound held on "
          f"{sum(r['bound_holds'] for r in rows)} of {len(rows)}; source {SOURCE}")  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
