"""Time to render every view of a profile, by view, fold mode and node count.

    .venv/bin/python bench/bench_views.py [--quick] [--layers 10000]
                                          [--sizes 1000 10000 50000]

``--quick`` uses smaller sizes (1,000 layers; 500, 1,000 and 5,000 nodes) for a fast check.
Times are wall time (``time.perf_counter``), best of N; nothing is asserted, each time is
printed beside its target with ``ok`` or ``SLOW``. What it measures:

1. A real profile (``ls.profile(model, torch.randn(2, 4))``) of an ``nn.Sequential`` of
   ``--layers`` small modules (Linear(4, 4), ReLU alternating, so it has shapes and FLOPs):
   ``prof.render(view=V, fold=F, width=120)`` for every view V (table, tree, repr, top,
   ops) and F in (True, False), best of 3, against the 1 s target.
2. The BERT-base-shaped profile ``tests/data/bert_base.json`` (``ls.load``): every view
   unfolded (``fold=False``) at width 120, best of 5, against the 50 ms target.
3. Scaling with node count: hand-built profiles of the same Linear/ReLU layout (Nodes made
   directly with input and output shapes, then ``prof.rollup()``), one per ``--sizes``
   entry: ``fold(prof)`` alone, and the table view folded and unfolded, best of 3. The
   µs/node column (table unfolded / nodes) stays flat when the cost is linear. A last row
   gives the real profile of part 1 for comparison.
4. Printing through rich: ``Console(file=StringIO(), width=120, force_terminal=True,
   color_system="truecolor").print(prof)`` of the profile of part 1 (default options: the
   folded table), best of 3, beside the plain-text render of the same view, then every
   view unfolded printed the same way (colours and all), against the 1 s target of part 1.
"""

from __future__ import annotations

import argparse
import io
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from torch import nn

import layerscope as ls
from layerscope.analysis.fold import fold
from layerscope.profile import Node, Profile, Signature, TensorSpec
from layerscope.render.console import renderable
from layerscope.render.options import ViewOptions, view_options

VIEWS: tuple[str, ...] = ("table", "tree", "repr", "top", "ops")
WIDTH = 120
#: Target for any view of the large Sequential profile, and for printing it through rich.
LARGE_TARGET_MS = 1000.0
#: Target for any unfolded view of the BERT-base profile.
BERT_TARGET_MS = 50.0
BERT_PATH = Path(__file__).resolve().parent.parent / "tests" / "data" / "bert_base.json"

IN_SIG: Signature = (TensorSpec("0", (2, 4), "float32", "cpu"),)
OUT_SIG: Signature = (TensorSpec("", (2, 4), "float32", "cpu"),)


def best_ms(repeats: int, fn: Callable[[], object]) -> float:
    """Best wall time of ``fn()`` over ``repeats`` runs, in milliseconds."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def verdict(ms: float, target_ms: float) -> str:
    return f"{ms:9.1f} ms  (target < {target_ms:.0f} ms) {'ok' if ms < target_ms else 'SLOW'}"


def count_nodes(prof: Profile) -> int:
    return sum(1 for _ in prof.root.walk())


# ---- profiles ------------------------------------------------------------------------


def sequential(layers: int) -> nn.Sequential:
    """``layers`` small modules: Linear(4, 4) and ReLU alternating."""
    return nn.Sequential(*[nn.Linear(4, 4) if i % 2 == 0 else nn.ReLU() for i in range(layers)])


def real_profile(layers: int) -> tuple[Profile, float]:
    """The profile of ``sequential(layers)`` on a (2, 4) input, and the seconds it took."""
    model = sequential(layers)
    start = time.perf_counter()
    prof = ls.profile(model, torch.randn(2, 4))
    return prof, time.perf_counter() - start


def hand_leaf(i: int) -> Node:
    """The ``i``-th layer as the profiler records it: Linear(4, 4) or ReLU on (2, 4)."""
    linear = i % 2 == 0
    own: dict[str, int | float] = {
        "macs": 32 if linear else 0,
        "flops": 72 if linear else 8,
        "params": 20 if linear else 0,
        "trainable_params": 20 if linear else 0,
        "buffers": 0,
        "param_bytes": 80 if linear else 0,
        "buffer_bytes": 0,
    }
    return Node(
        path=str(i),
        name=str(i),
        type="Linear" if linear else "ReLU",
        node_id=str(i + 1),
        depth=1,
        calls=1,
        repr="Linear(in_features=4, out_features=4, bias=True)" if linear else "ReLU()",
        inputs=[IN_SIG],
        outputs=[OUT_SIG],
        self_metrics=own,
        self_by_dtype=(
            {"float32": {"params": 20, "param_bytes": 80, "buffers": 0, "buffer_bytes": 0}}
            if linear
            else {}
        ),
    )


def hand_profile(nodes: int) -> Profile:
    """A Sequential root with ``nodes - 1`` Linear/ReLU children, rolled up."""
    root = Node(
        path="",
        name="Sequential",
        type="Sequential",
        calls=1,
        repr="Sequential()",
        inputs=[IN_SIG],
        outputs=[OUT_SIG],
        self_metrics=dict.fromkeys(
            (
                "params",
                "trainable_params",
                "buffers",
                "param_bytes",
                "buffer_bytes",
                "macs",
                "flops",
            ),
            0,
        ),
        children=[hand_leaf(i) for i in range(nodes - 1)],
    )
    prof = Profile(root=root, model={"name": "Sequential", "ran": True, "device": "cpu"})
    prof.rollup()
    return prof


# ---- parts ---------------------------------------------------------------------------


def render_fn(prof: Profile, **options: Any) -> Callable[[], object]:
    return lambda: prof.render(width=WIDTH, **options)


def part_views(prof: Profile, label: str) -> dict[tuple[str, bool], float]:
    """Every view, folded and unfolded, best of 3; printed and returned by (view, fold)."""
    print(f"\n1. {label}: prof.render(view=V, fold=F, width={WIDTH}), best of 3")
    print(f"   {'view':<6} {'fold':<6} {'lines':>7} {'time':>12}")
    times: dict[tuple[str, bool], float] = {}
    for view in VIEWS:
        for folded in (True, False):
            lines = prof.render(view=view, fold=folded, width=WIDTH).count("\n") + 1
            ms = best_ms(3, render_fn(prof, view=view, fold=folded))
            times[view, folded] = ms
            print(f"   {view:<6} {folded!s:<6} {lines:>7} {verdict(ms, LARGE_TARGET_MS)}")
    slow = [f"{v} fold={f}" for (v, f), ms in times.items() if ms >= LARGE_TARGET_MS]
    worst_key = max(times, key=times.__getitem__)
    print(
        f"   slowest: {worst_key[0]} fold={worst_key[1]} {times[worst_key]:.1f} ms "
        f"({times[worst_key] / LARGE_TARGET_MS:.2f}× the target); "
        f"{'all under target' if not slow else 'over target: ' + ', '.join(slow)}"
    )
    return times


def part_bert() -> None:
    prof = ls.load(BERT_PATH)
    print(
        f"\n2. BERT-base profile ({BERT_PATH.name}, {count_nodes(prof)} nodes): "
        f"prof.render(view=V, fold=False, width={WIDTH}), best of 5"
    )
    print(f"   {'view':<6} {'lines':>7} {'time':>12}")
    worst = 0.0
    for view in VIEWS:
        lines = prof.render(view=view, fold=False, width=WIDTH).count("\n") + 1
        ms = best_ms(5, render_fn(prof, view=view, fold=False))
        worst = max(worst, ms)
        print(f"   {view:<6} {lines:>7} {verdict(ms, BERT_TARGET_MS)}")
    print(f"   slowest: {worst:.1f} ms ({worst / BERT_TARGET_MS:.2f}× the target)")


def scaling_row(label: str, prof: Profile, table: tuple[float, float] | None = None) -> None:
    """One row of part 3; ``table`` (folded, unfolded ms) when already measured."""
    nodes = count_nodes(prof)
    fold_ms = best_ms(3, lambda: fold(prof))
    if table is None:
        table = (
            best_ms(3, render_fn(prof, view="table", fold=True)),
            best_ms(3, render_fn(prof, view="table", fold=False)),
        )
    folded_ms, unfolded_ms = table
    per_node_us = unfolded_ms * 1e3 / nodes
    print(
        f"   {label:<11} {nodes:>7} {fold_ms:>9.1f} {folded_ms:>14.1f} {unfolded_ms:>16.1f} "
        f"{per_node_us:>9.1f}"
    )


def part_scaling(
    sizes: list[int], real: Profile, real_times: dict[tuple[str, bool], float]
) -> None:
    print(
        f"\n3. Against node count (Linear/ReLU under one Sequential), width {WIDTH}, "
        "best of 3, times in ms"
    )
    print(
        f"   {'profile':<11} {'nodes':>7} {'fold':>9} {'table folded':>14} "
        f"{'table unfolded':>16} {'µs/node':>9}"
    )
    for size in sizes:
        scaling_row("hand-built", hand_profile(size))
    scaling_row("real", real, (real_times["table", True], real_times["table", False]))


def part_rich(prof: Profile) -> None:
    nodes = count_nodes(prof)
    print(
        f"\n4. rich: Console(file=StringIO(), width={WIDTH}, force_terminal=True, "
        f'color_system="truecolor").print(prof), {nodes} nodes, best of 3'
    )

    def through_rich() -> None:
        console = Console(
            file=io.StringIO(), width=WIDTH, force_terminal=True, color_system="truecolor"
        )
        console.print(prof)

    rich_ms = best_ms(3, through_rich)
    plain_ms = best_ms(3, render_fn(prof))
    print(f"   console.print(prof)          {verdict(rich_ms, LARGE_TARGET_MS)}")
    print(f"   prof.render() (plain text)   {plain_ms:9.1f} ms")
    print(f"   rich / plain: {rich_ms / plain_ms:.2f}×")
    for view in VIEWS:
        options = view_options(view=view, fold=False)

        def unfolded(options: ViewOptions = options) -> None:
            console = Console(
                file=io.StringIO(), width=WIDTH, force_terminal=True, color_system="truecolor"
            )
            console.print(renderable(prof, options))

        print(f"   {view:<5} unfolded, coloured   {verdict(best_ms(3, unfolded), LARGE_TARGET_MS)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a fast check")
    parser.add_argument("--layers", type=int, help="layers of the Sequential (default 10000)")
    parser.add_argument(
        "--sizes", type=int, nargs="+", help="node counts for part 3 (default 1000 10000 50000)"
    )
    args = parser.parse_args()
    layers: int = args.layers or (1000 if args.quick else 10_000)
    sizes: list[int] = args.sizes or ([500, 1000, 5000] if args.quick else [1000, 10_000, 50_000])

    prof, seconds = real_profile(layers)
    print(
        f"Sequential of {layers} layers (Linear(4, 4), ReLU): {count_nodes(prof)} nodes, "
        f"ls.profile took {seconds:.2f} s"
    )
    times = part_views(prof, f"Sequential of {layers} layers")
    part_bert()
    part_scaling(sizes, prof, times)
    part_rich(prof)


if __name__ == "__main__":
    main()
