"""The memory and backward analysis of a Llama-3.1-405B-shaped model on ``meta`` against
a forward pass under torch's ``FlopCounterMode``, at two depths (same run, best of 2).

    python bench/bench_405b.py [--layers 32 126] [--tokens 2048]

Prints, per depth, both times and their ratio: a ratio that grows with the depth means
work that is super-linear in the model's size; an equal ratio, a constant factor.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode

import layerscope as ls
from layerscope.collect.hfmeta import meta_values


def llama_405b(layers: int) -> torch.nn.Module:
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=128256, hidden_size=16384, intermediate_size=53248,
        num_hidden_layers=layers, num_attention_heads=128, num_key_value_heads=8,
        max_position_embeddings=8192, use_cache=False,
    )  # fmt: skip
    with torch.device("meta"):
        model: torch.nn.Module = transformers.LlamaForCausalLM(config)
    return model.train(False)


def best(fn: Callable[[], object], repeats: int = 2) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[32, 126])
    parser.add_argument("--tokens", type=int, default=2048)
    args = parser.parse_args()
    for layers in args.layers:
        fcm, analysis = measure(llama_405b(layers), args.tokens)
        print(f"{layers:>4} layers: FlopCounterMode forward {fcm:.2f} s, memory + backward "
              f"analysis {analysis:.2f} s, ratio {analysis / fcm:.2f}", flush=True)  # fmt: skip


def measure(model: torch.nn.Module, tokens: int) -> tuple[float, float]:
    """(FlopCounterMode's forward, layerscope's memory + backward analysis), seconds."""
    ids = torch.zeros(1, tokens, dtype=torch.long, device="meta")

    def theirs() -> None:
        with meta_values(), FlopCounterMode(display=False):
            model(ids)

    return best(theirs), best(lambda: ls.profile(model, ids, memory=True, backward=True))


if __name__ == "__main__":
    main()
