"""Time and memory of planning Llama-3-8B (or 70B) training on H100s, on this machine.

    python bench/bench_plan.py [--model 8b|70b] [--world-size 8] [--seq 8192]

Builds the model from its transformers config on ``meta`` (random weights, nothing
allocated), plans FSDP2 with every block checkpointed, bf16-mixed and AdamW for one
sequence per GPU, then sweeps world sizes x {None, "blocks", "auto"} (one more
analysis). Prints the plan, the sweep, each step's seconds and the peak RSS.
"""

from __future__ import annotations

import argparse
import resource
import time
from typing import Any

import torch

import layerscope as ls

CONFIGS: dict[str, dict[str, Any]] = {
    "8b": {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
           "num_attention_heads": 32},
    "70b": {"hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80,
            "num_attention_heads": 64},
}  # fmt: skip


def build(name: str) -> torch.nn.Module:
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=128256, num_key_value_heads=8, max_position_embeddings=8192,
        use_cache=False, **CONFIGS[name],
    )  # fmt: skip
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    model.train()
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(CONFIGS), default="8b")
    parser.add_argument("--world-size", type=int, default=8)
    parser.add_argument("--seq", type=int, default=8192)
    args = parser.parse_args()
    model = build(args.model)
    ids = torch.zeros(1, args.seq, dtype=torch.long, device="meta")
    options: dict[str, Any] = {
        "target": "h100", "sharding": "fsdp", "precision": "bf16-mixed",
        "optimizer": "adamw", "loss_fn": lambda o: o.logits.float().sum(),
    }  # fmt: skip
    t0 = time.perf_counter()
    plan = ls.plan(model, ids, world_size=args.world_size, checkpoint="blocks", **options)
    t1 = time.perf_counter()
    print(plan.render(width=100))
    n = args.world_size
    sweep = ls.plan_sweep(
        model, ids, world_size=[n, 2 * n, 8 * n], checkpoint=[None, "blocks", "auto"], **options
    )
    t2 = time.perf_counter()
    print(sweep.render(width=100))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"plan (one analysis): {t1 - t0:.1f} s; sweep of 9 (one analysis): {t2 - t1:.1f} s; "
          f"peak RSS {rss:.0f} MiB")  # fmt: skip


if __name__ == "__main__":
    main()
