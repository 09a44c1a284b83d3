"""Real decode steps and a real KV cache on this GPU against ``ls.plan_serving``.

    python bench/serving_vs_decode.py [--out DIR] [--steps 20]
    python bench/serving_vs_decode.py --smoke     # the same code on CPU at a tiny width

A ~1.1B Llama (TinyLlama's shape: 22 layers, hidden 2,048, MLP 5,632, 32 heads, 4 KV
heads, vocab 32,000), bfloat16, random weights, transformers' ``StaticCache`` of
``prompt + new`` tokens (512 + 64):

- **Time per output token**, batch 1 and 16: the median of ``--steps`` decode steps
  after the prefill, each a model call of one token per sequence with ``cuda.synchronize``
  around it; eager, then the same step under ``torch.compile(mode="reduce-overhead")``
  (CUDA graphs), against ``plan_serving``'s ``tpot`` for ``mode="eager"`` and
  ``"graphs"``, and its bound. Target: within 15 %.
- **Capacity**: the KV budget as a server computes it here (``mem_get_info``'s total x
  0.9, less the weights as allocated, the peak of a 2,048-token prefill above them and
  the memory the CUDA context holds outside torch), over the bytes a real ``StaticCache``
  of one sequence of ``--context`` tokens allocates, against ``max_concurrency``.
  Target: within 5 %.

Prints a table and writes ``serving_vs_decode.json`` (torch version, device) under
``--out``. Refuses to run without a GPU unless ``--smoke``.
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

SHAPE: dict[str, Any] = {
    "num_hidden_layers": 22, "hidden_size": 2048, "intermediate_size": 5632,
    "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000,
    "max_position_embeddings": 4096,
}  # fmt: skip
SMOKE: dict[str, Any] = {
    **SHAPE, "num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128,
}  # fmt: skip
PROMPT, NEW = 512, 64


def build(shape: dict[str, Any], device: str) -> Any:
    import transformers

    config = transformers.LlamaConfig(**shape)
    torch.manual_seed(0)
    with torch.device(device):
        model: Any = transformers.LlamaForCausalLM(config)
    model = model.to(torch.bfloat16)
    model.eval()
    return model


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def decode_times(model: Any, batch: int, steps: int, device: str, compiled: bool) -> float:
    """The median seconds of one decode step of ``batch`` sequences (module doc)."""
    import transformers

    cache = transformers.StaticCache(config=model.config, max_cache_len=PROMPT + NEW)
    ids = torch.zeros(batch, PROMPT, dtype=torch.long, device=device)
    with torch.no_grad():
        model(ids, cache=cache, use_cache=True, logits_to_keep=1)
        token = torch.zeros(batch, 1, dtype=torch.long, device=device)

        def step(position: torch.Tensor) -> Any:
            return model(token, cache=cache, use_cache=True, logits_to_keep=1,
                         cache_position=position)  # fmt: skip

        run = torch.compile(step, mode="reduce-overhead", fullgraph=True) if compiled else step
        times = []
        for i in range(min(steps + 3, NEW - 1)):
            position = torch.tensor([PROMPT + i], device=device)
            sync(device)
            start = time.perf_counter()
            run(position)
            sync(device)
            if i >= 3:  # warm-up (and, compiled, the graph's capture) first
                times.append(time.perf_counter() - start)
    return statistics.median(times)


def measured_capacity(model: Any, context: int, device: str) -> dict[str, int]:
    """The KV budget and one sequence's cache here, as a server would size them."""
    import transformers

    if device != "cuda":
        return {}
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    allocated = torch.cuda.memory_allocated()
    outside = total - free - torch.cuda.memory_reserved()  # the context, outside torch
    torch.cuda.reset_peak_memory_stats()
    with torch.no_grad():
        model(torch.zeros(1, 2048, dtype=torch.long, device=device), use_cache=False,
              logits_to_keep=1)  # fmt: skip
    workspace = torch.cuda.max_memory_allocated() - allocated
    before = torch.cuda.memory_allocated()
    cache = transformers.StaticCache(config=model.config, max_cache_len=context)
    with torch.no_grad():  # a static cache allocates its layers on the first call
        model(torch.zeros(1, 1, dtype=torch.long, device=device), cache=cache, use_cache=True)
    per_seq = torch.cuda.memory_allocated() - before
    del cache
    budget = int(total * 0.9) - allocated - workspace - outside
    return {
        "total": total, "weights": allocated, "workspace": workspace, "outside": outside,
        "kv_per_seq_allocated": per_seq, "max_concurrency": max(budget // per_seq, 0),
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".", help="folder for serving_vs_decode.json")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--context", type=int, default=4096)
    parser.add_argument("--smoke", action="store_true", help="on CPU at a tiny width")
    args = parser.parse_args()
    if not args.smoke and not torch.cuda.is_available():
        print("serving_vs_decode: needs a GPU (or --smoke)", file=sys.stderr)
        return 2
    device = "cpu" if args.smoke else "cuda"
    shape = SMOKE if args.smoke else SHAPE
    target = "h100" if args.smoke else spec_of_gpu(torch.cuda.get_device_name())
    if target is None:
        print(f"no built-in spec for {torch.cuda.get_device_name()}", file=sys.stderr)
        return 2
    model = build(shape, device)
    meta = build(shape, "meta")
    rows: list[dict[str, Any]] = []
    for mode, compiled in (("eager", False), ("graphs", True)):
        if compiled and args.smoke:
            continue  # CUDA graphs need a GPU
        plan = ls.plan_serving(
            meta, target=target, max_context=args.context, prompt=PROMPT, new_tokens=NEW,
            batch=[1, 16], mode=mode,
        )  # fmt: skip
        for r in plan.rows:
            measured = decode_times(model, r.batch, args.steps, device, compiled)
            rows.append({"mode": mode, "batch": r.batch, "measured": measured,
                         "predicted": r.tpot, "bound": r.tpot_bound, "kernels": r.kernels,
                         "ratio": measured / r.tpot})  # fmt: skip
    capacity = measured_capacity(model, args.context, device)
    print(f"{'mode':7s} {'batch':>5s} {'measured':>10s} {'predicted':>10s} {'bound':>10s} ratio")
    for row in rows:
        ms = [f"{row[k] * 1e3:9.3f}ms" for k in ("measured", "predicted", "bound")]
        print(f"{row['mode']:7s} {row['batch']:5d} {' '.join(ms)} {row['ratio']:.2f}")
    planned = plan.max_concurrency
    if capacity:
        print(f"capacity at {args.context} tokens: measured {capacity['max_concurrency']}, "
              f"planned {planned} (weights {capacity['weights']:,} vs {plan.weight_bytes:,} B; "
              f"workspace {capacity['workspace']:,} vs {plan.workspace_bytes:,} B; KV per "
              f"sequence {capacity['kv_per_seq_allocated']:,} vs "
              f"{plan.kv_bytes(args.context):,} B)")  # fmt: skip
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"torch": torch.__version__, "device": device if args.smoke else
           torch.cuda.get_device_name(), "target": target, "rows": rows,
           "capacity": capacity, "planned_max_concurrency": planned}  # fmt: skip
    (out / "serving_vs_decode.json").write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
