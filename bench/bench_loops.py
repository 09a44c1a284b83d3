"""Cost of a ``Profiler`` in a training loop: step time / bare step time for the steps a
schedule leaves idle (``wait``) and for the timed steps of ``timing=True``.

A GPT-2-small-shaped model (n_embd 768, 12 heads, vocab 50257; ``--layers`` blocks, 2 by
default) built from a transformers config, trained on CPU with AdamW on random tokens.
Each round runs ``--steps`` bare steps, then as many wait steps (a started Profiler with
``schedule(wait=...)``, ``p.step()`` after each optimizer step), then a Profiler with
``timing=True, schedule(active=steps + 1)``: its first active step is analysed (not
counted here), the others are timed. A step's time includes ``p.step()``. Best step of
all rounds per kind, and the ratios, all from this one run.

    python bench/bench_loops.py [--rounds 5] [--steps 4] [--batch 2] [--seq 128]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import torch
from torch import nn

import layerscope as ls
from layerscope.session.schedule import schedule

sys.path.insert(0, os.path.dirname(__file__))
from timing import add_heap_option, steady_heap


def gpt2(layers: int) -> nn.Module:
    import transformers

    config = transformers.GPT2Config(n_layer=layers, n_embd=768, n_head=12, vocab_size=50257)
    model: nn.Module = transformers.GPT2LMHeadModel(config)
    return model.train()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=128)
    add_heap_option(parser)
    args = parser.parse_args()
    heap = steady_heap(args)
    torch.manual_seed(0)
    model = gpt2(args.layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 50257, (args.batch, args.seq))

    def train_step() -> None:
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()

    def run(n: int, after: Callable[[], None] | None) -> list[float]:
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            train_step()
            if after is not None:
                after()
            times.append(time.perf_counter() - t0)
        return times

    for _ in range(2):  # warm up: AdamW state, allocator
        train_step()
    kinds: dict[str, list[float]] = {"bare": [], "wait": [], "timing": []}
    for _ in range(args.rounds):
        kinds["bare"] += run(args.steps, None)
        p = ls.Profiler(model, schedule=schedule(wait=10**6))
        p.start()
        kinds["wait"] += run(args.steps, p.step)
        p.stop()
        p = ls.Profiler(model, timing=True, schedule=schedule(active=args.steps + 1, repeat=1))
        p.start()
        run(1, p.step)  # the analysed step
        kinds["timing"] += run(args.steps, p.step)
        p.stop()
        assert p.profile.model["loop"]["timed_steps"] == args.steps
    prof = p.profile
    threads = torch.get_num_threads()
    print(
        f"torch {torch.__version__}, {threads} threads; GPT-2 shape, {args.layers} layers, "
        f"batch {args.batch}x{args.seq}, AdamW; {args.rounds} rounds x {args.steps} steps; {heap}"
    )
    bare_best = min(kinds["bare"])
    bare_median = statistics.median(kinds["bare"])
    print(f"{'steps':<10}{'best':>12}{'median':>12}{'best/bare':>12}{'median/bare':>13}")
    for name, times in kinds.items():
        best, median = min(times), statistics.median(times)
        print(
            f"{name:<10}{best * 1e3:>10.1f}ms{median * 1e3:>10.1f}ms"
            f"{best / bare_best:>12.3f}{median / bare_median:>13.3f}"
        )
    ms = {k: v["median"] * 1e3 for k, v in prof.timing.items() if k.startswith("step_")}
    print(
        "last timed cycle, medians: step {step_time:.1f} ms = forward {step_forward:.1f} ms"
        " + backward {step_backward:.1f} ms + optimizer {step_optimizer:.1f} ms"
        " + other {step_other:.1f} ms".format(**ms)
    )
    module_backward = prof.root.metrics.get("backward_time", 0.0) * 1e3
    print(f"root module backward time per call (median step): {module_backward:.1f} ms")


if __name__ == "__main__":
    main()
