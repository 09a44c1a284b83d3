"""Real single-GPU training steps against their plans (one command for a GPU).

    python bench/plan_vs_step.py [--out DIR] [--steps 8] [--only NAME]

Three models, each a real step (AdamW, bf16 autocast, the loss of a causal LM, random
weights built from a transformers config) on this GPU and ``ls.plan`` of the same step
for this GPU (``target`` from the device's name, ``sharding="none"``, ``world_size=1``,
``precision="bf16-mixed"``, the micro-batch the step ran):

- ``gpt2-small``: GPT-2 small's shape (12 layers, hidden 768), 4 x 1,024 tokens;
- ``llama-1b-2k``: a ~1.2B Llama-3-shaped model (16 layers, hidden 2,048, 32 heads, 8 KV
  heads, MLP 8,192, vocab 128,256), 1 x 2,048 tokens;
- ``llama-1b-8k``: the same at 1 x 8,192 tokens, every block checkpointed.

Measured: the median step time over ``--steps`` steps after two warm-up steps
(``torch.cuda.synchronize`` around each), and ``torch.cuda.max_memory_allocated`` over
the measured steps (the optimizer's states exist from the first step on). Planned: the
step time (the prediction where the plan has one, and its bound), the peak and the
reserve. Prints a table and writes ``plan_vs_step.json`` (with the torch version and
the device) under ``--out``. Targets: step time within 10 %, peak
within 3 % plus the stated reserve. Refuses to run without a GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

import layerscope as ls
from layerscope.hardware import spec_of_gpu

MODELS: dict[str, dict[str, Any]] = {
    "gpt2-small": {"kind": "gpt2", "config": {"n_layer": 12, "n_embd": 768, "n_head": 12},
                   "batch": 4, "tokens": 1024, "checkpoint": None},
    "llama-1b-2k": {"kind": "llama", "config": {
        "num_hidden_layers": 16, "hidden_size": 2048, "num_attention_heads": 32,
        "num_key_value_heads": 8, "intermediate_size": 8192, "vocab_size": 128256},
        "batch": 1, "tokens": 2048, "checkpoint": None},
    "llama-1b-8k": {"kind": "llama", "config": {
        "num_hidden_layers": 16, "hidden_size": 2048, "num_attention_heads": 32,
        "num_key_value_heads": 8, "intermediate_size": 8192, "vocab_size": 128256},
        "batch": 1, "tokens": 8192, "checkpoint": "blocks"},
}  # fmt: skip


def build(spec: dict[str, Any], device: str) -> torch.nn.Module:
    import transformers

    torch.manual_seed(0)
    if spec["kind"] == "gpt2":
        config: Any = transformers.GPT2Config(n_positions=spec["tokens"], **spec["config"])
        cls: Any = transformers.GPT2LMHeadModel
    else:
        config = transformers.LlamaConfig(max_position_embeddings=spec["tokens"],
                                          **spec["config"])  # fmt: skip
        cls = transformers.LlamaForCausalLM
    config.use_cache = False
    with torch.device(device):
        model: torch.nn.Module = cls(config)
    return model.train()


def real_step(name: str, spec: dict[str, Any], steps: int) -> dict[str, Any]:
    model: Any = build(spec, "cuda")
    if spec["checkpoint"] == "blocks":
        model.gradient_checkpointing_enable({"use_reentrant": False})
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (spec["batch"], spec["tokens"]), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    times: list[float] = []
    for k in range(steps + 2):
        if k == 2:
            torch.cuda.reset_peak_memory_stats()
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if k >= 2:
            times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated()
    del model, opt, loss
    torch.cuda.empty_cache()
    return {"step_time": statistics.median(times), "step_times": times, "peak_bytes": peak}


def planned(spec: dict[str, Any], target: str) -> dict[str, Any]:
    model = build(spec, "meta")
    ids = torch.zeros(spec["batch"], spec["tokens"], dtype=torch.long, device="meta")
    plan = ls.plan(model, kwargs={"input_ids": ids, "labels": ids}, target=target,
                   world_size=1, sharding="none", precision="bf16-mixed", optimizer="adamw",
                   checkpoint=spec["checkpoint"])  # fmt: skip
    return {
        "step_time": plan.step_time,
        "step_time_bound": getattr(plan, "step_time_bound", plan.step_time),
        "peak_bytes": plan.peak_bytes,
        "reserve_bytes": plan.reserve_bytes,
        "notes": list(plan.notes),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--only", choices=list(MODELS))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("plan_vs_step: needs a CUDA GPU (none is visible here)", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name()
    target = spec_of_gpu(name)
    if target is None:
        print(f"plan_vs_step: {name} has no built-in spec to plan for", file=sys.stderr)
        return 2
    rows = []
    for key, spec in MODELS.items():
        if args.only and key != args.only:
            continue
        real, plan = real_step(key, spec, args.steps), planned(spec, target)
        rows.append({"model": key, "real": real, "plan": plan})
        slack = abs(plan["peak_bytes"] - real["peak_bytes"]) / real["peak_bytes"]
        print(f"{key:<12} step {real['step_time'] * 1e3:8.1f} ms real, "
              f"{plan['step_time'] * 1e3:8.1f} ms planned "
              f"({plan['step_time'] / real['step_time']:.2f}x; bound "
              f"{plan['step_time_bound'] * 1e3:.1f} ms); peak {real['peak_bytes'] / 2**30:.2f} "
              f"GiB real, {plan['peak_bytes'] / 2**30:.2f} GiB planned ({100 * slack:.1f} % "
              f"apart; reserve {plan['reserve_bytes'] / 2**30:.1f} GiB)", flush=True)  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {"torch": torch.__version__, "device": name, "target": target, "rows": rows}
    (args.out / "plan_vs_step.json").write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
