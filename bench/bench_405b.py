"""The memory and backward analysis of a Llama-3.1-405B-shaped model on ``meta`` against
torch's ``FlopCounterMode`` and the bare passes, at two depths (same run, best of 2).

    python bench/bench_405b.py [--layers 32 126] [--tokens 2048]

Prints, per depth, the analysis's time over: a forward under ``FlopCounterMode``; a
forward and backward under it (the same work the analysis observes); and a bare forward
and backward on meta with no mode at all, the floor of anything that runs the backward.
A ratio that grows with the depth means work that is super-linear in the model's size;
an equal ratio, a constant factor.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from contextlib import nullcontext

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
        times = measure(llama_405b(layers), args.tokens)
        analysis = times.pop("analysis")
        print(f"{layers:>4} layers: memory + backward analysis {analysis:.2f} s", flush=True)
        for name, t in times.items():
            print(f"      {name:<34} {t:.2f} s, analysis / it {analysis / t:.2f}", flush=True)


def measure(model: torch.nn.Module, tokens: int) -> dict[str, float]:
    """Seconds of layerscope's memory + backward analysis ("analysis") and of the passes
    it is compared with."""
    ids = torch.zeros(1, tokens, dtype=torch.long, device="meta")

    def forward(counted: bool, backward: bool) -> Callable[[], None]:
        def run() -> None:
            with meta_values(), FlopCounterMode(display=False) if counted else nullcontext():
                out = model(ids).logits
                if backward:
                    out.sum().backward()
            model.zero_grad(set_to_none=True)

        return run

    return {
        "analysis": best(lambda: ls.profile(model, ids, memory=True, backward=True)),
        "FlopCounterMode forward": best(forward(True, False)),
        "FlopCounterMode forward + backward": best(forward(True, True)),
        "bare forward + backward": best(forward(False, True)),
    }


if __name__ == "__main__":
    main()
