"""Time of profiling and estimating generation on this machine, best of several repeats.

    python bench/bench_generate.py [--repeats 3] [--layers 4]

A Llama built from its transformers config (random weights, hidden 256, 4 heads of 64,
2 KV heads): ``ls.profile_generate`` of 4 prompts of 64 tokens and 16 new tokens on the
CPU, the same loop under ``ls.Profiler(stages=True)``, the views and documents of the
result, and ``ls.estimate_generate`` of a meta copy at batches 1, 8 and 32 for an H100.
Prints the best time of each, in seconds.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import layerscope as ls


def llama(layers: int) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
    )  # fmt: skip
    model: Any = LlamaForCausalLM(config)
    return model.eval()


def best(repeats: int, fn: Callable[[], Any]) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--layers", type=int, default=4)
    args = parser.parse_args()
    model = llama(args.layers)
    ids = torch.randint(0, 1000, (4, 64), generator=torch.Generator().manual_seed(0))
    gen = ls.profile_generate(model, ids, 16)

    def staged() -> None:
        with ls.Profiler(model, stages=True):
            model.generate(ids, max_new_tokens=16, min_new_tokens=16, do_sample=False)

    def documents() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            gen.render(width=100)
            gen.render(view="top", width=100)
            gen.save(Path(tmp) / "g.json")
            ls.load_generation(Path(tmp) / "g.json")
            gen.to_html(Path(tmp) / "g.html")

    meta = ls.to_meta(model)
    cases: dict[str, Callable[[], Any]] = {
        "profile_generate": lambda: ls.profile_generate(model, ids, 16),
        "Profiler(stages=True)": staged,
        "views and documents": documents,
        "estimate_generate": lambda: ls.estimate_generate(
            meta, target="h100", prompt=512, new_tokens=128, batch=[1, 8, 32]
        ),
    }
    print(f"Llama of {args.layers} layers, best of {args.repeats}:")
    for name, fn in cases.items():
        print(f"{name:24} {best(args.repeats, fn):8.3f} s")


if __name__ == "__main__":
    main()
