"""An eager decode step's host time, against what ``ls.plan_serving`` charges for it.

The architecture of the one eager decode measured on a GPU (``cuda_check.py``'s
``generate`` check: a 0.6B Llama, 8 layers, bfloat16, batch 8, 512-token prompts; 10.4 ms
per token on an H200, ``bench/results/h200-torch2.11.0/cuda_check.txt``) is planned on
meta (kernels per decode step, the eager and CUDA-graph predictions), then run on this
CPU at a tiny width, where the ops' own work is negligible: the time per decode step over
the kernels it runs is transformers' host time per kernel before any launch.

Run: ``PYTHONPATH=src python bench/bench_serving_eager.py``
"""

from __future__ import annotations

import time
from typing import Any

import torch
import transformers

from layerscope.generation.serving import plan_serving

SHAPE: dict[str, Any] = {"num_hidden_layers": 8, "max_position_embeddings": 4096}


def planned() -> int:
    config = transformers.LlamaConfig(
        hidden_size=2048, num_attention_heads=16, num_key_value_heads=4,
        intermediate_size=5632, vocab_size=32000, **SHAPE,
    )  # fmt: skip
    with torch.device("meta"):
        model: Any = transformers.LlamaForCausalLM(config)
    model = model.to(torch.bfloat16)
    kernels = 0
    for mode in ("eager", "graphs"):
        plan = plan_serving(
            model, target="h200", max_context=4096, prompt=512, new_tokens=16, batch=[8],
            mode=mode,
        )  # fmt: skip
        r = plan.rows[0]
        if mode == "eager":  # the kernels the host launches one by one
            kernels = r.kernels
        print(f"{mode:7s} {r.kernels} kernels, launches {r.launch_time * 1e3:.2f} ms, "
              f"tpot {r.tpot * 1e3:.2f} ms, bound {r.tpot_bound * 1e3:.3f} ms")  # fmt: skip
    return kernels


def host_time(kernels: int, repeats: int = 30) -> None:
    config = transformers.LlamaConfig(
        hidden_size=64, num_attention_heads=4, num_key_value_heads=1, intermediate_size=128,
        vocab_size=128, **SHAPE,
    )  # fmt: skip
    model: Any = transformers.LlamaForCausalLM(config)
    model.eval()
    with torch.no_grad():
        cache = model(torch.zeros(8, 512, dtype=torch.long), use_cache=True).past_key_values
        token = torch.zeros(8, 1, dtype=torch.long)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            model(token, cache=cache, use_cache=True, logits_to_keep=1)
            times.append(time.perf_counter() - start)
    best = min(times)
    print(f"host: a decode step at width 64 takes {best * 1e3:.2f} ms on this CPU (best of "
          f"{repeats}): {best / kernels * 1e6:.1f} us per kernel before any launch")  # fmt: skip


if __name__ == "__main__":
    torch.manual_seed(0)
    host_time(planned())
