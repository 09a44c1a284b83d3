"""Time of repeat folding (``layerscope.analysis.fold.fold``) on hand-built profiles.

    python bench/bench_fold.py [--repeats 3] [--sizes 1000 10000 50000]

No model runs: the Nodes are built directly, with one input and one output tensor spec
each, and rolled up. For every size (nodes in the tree, root included, about) it times,
best of ``--repeats``:

- ``identical``: a ModuleList of N identical Linear layers (folds to one entry ×N);
- ``distinct``: N Linear layers no two alike (nothing folds);
- ``transformer``: N / 12 blocks of 12 modules each (block, ln1, attn with q/k/v/o,
  ln2, mlp with fc1/act/fc2), every block alike (folds to one block entry);
- ``transformer-flags``: the same with an fp16 overflow flag on every 7th block's fc2, so
  the run of blocks splits into many;
- ``alternating``: layers A, x1, A, x2, ... with the x distinct: half the positions share
  one signature, so its positions alone would leave about N / 4 window lengths to try at
  each A; the positions of the x after it leave none;
- ``periodic-gaps``: A, B, A, B, x1, A, B, A, B, x2, ...: every A and B frequent, the
  window (A, B) ×2 found at each A, and the x that ends its run rules out the longer ones.

Then the case the old window search was slowest on, N distinct siblings under one parent,
for N = 1,000 and 4,000, beside the times the old algorithm took (measured before the
rewrite, on the machine of that change): it tried every window length at every position.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from layerscope.analysis.fold import fold
from layerscope.profile import Node, Profile, TensorSpec

#: Seconds the previous algorithm took to fold N distinct siblings (best of 3).
OLD_DISTINCT_SECONDS: dict[int, float] = {1000: 0.3, 4000: 11.9}


def leaf(path: str, type: str, width: int, params: int, **numerics: object) -> Node:
    """A called module with one (8, width) input and output and ``params`` of its own."""
    spec = (TensorSpec("0", (8, width), "float32", "cpu"),)
    return Node(
        path=path,
        name=path.rpartition(".")[2],
        type=type,
        calls=1,
        repr=f"{type}({width})",
        inputs=[spec],
        outputs=[spec],
        self_metrics={"params": params, "flops": 2 * 8 * params},
        numerics=dict(numerics),
    )


def parent(path: str, type: str, children: list[Node]) -> Node:
    node = leaf(path, type, 64, 0)
    node.children = children
    return node


def profile_of(children: list[Node]) -> Profile:
    prof = Profile(root=parent("", "Model", children))
    prof.rollup()
    return prof


def identical(n: int) -> Profile:
    return profile_of(
        [
            parent(
                "layers",
                "ModuleList",
                [leaf(f"layers.{i}", "Linear", 64, 4160) for i in range(n - 2)],
            )
        ]
    )


def distinct(n: int) -> Profile:
    return profile_of(
        [
            parent(
                "layers",
                "ModuleList",
                [leaf(f"layers.{i}", "Linear", i + 1, i) for i in range(n - 2)],
            )
        ]
    )


def alternating(n: int) -> Profile:
    layers = [
        leaf(f"layers.{i}", "Linear", 64 if i % 2 == 0 else 1000 + i, 4160) for i in range(n - 2)
    ]
    return profile_of([parent("layers", "ModuleList", layers)])


def periodic_gaps(n: int) -> Profile:
    widths = [64, 32, 64, 32, 0]
    layers = [leaf(f"layers.{i}", "Linear", widths[i % 5] or 1000 + i, 4160) for i in range(n - 2)]
    return profile_of([parent("layers", "ModuleList", layers)])


def block(i: int, overflow: bool) -> Node:
    p = f"layers.{i}"
    attn = [leaf(f"{p}.attn.{c}", "Linear", 64, 4160) for c in ("q", "k", "v", "o")]
    mlp = [
        leaf(f"{p}.mlp.fc1", "Linear", 64, 16640),
        leaf(f"{p}.mlp.act", "GELU", 256, 0),
        leaf(f"{p}.mlp.fc2", "Linear", 256, 16448, fp16_overflow=overflow),
    ]
    return parent(
        p,
        "Block",
        [
            leaf(f"{p}.ln1", "LayerNorm", 64, 128),
            parent(f"{p}.attn", "Attention", attn),
            leaf(f"{p}.ln2", "LayerNorm", 64, 128),
            parent(f"{p}.mlp", "MLP", mlp),
        ],
    )


def transformer(n: int, flags: bool = False) -> Profile:
    blocks = [block(i, flags and i % 7 == 3) for i in range(max(1, (n - 2) // 12))]
    return profile_of([parent("layers", "ModuleList", blocks)])


CASES: dict[str, Callable[[int], Profile]] = {
    "identical": identical,
    "distinct": distinct,
    "transformer": transformer,
    "transformer-flags": lambda n: transformer(n, flags=True),
    "alternating": alternating,
    "periodic-gaps": periodic_gaps,
}


def best_of(repeats: int, prof: Profile) -> tuple[float, int]:
    """Best wall time of ``fold(prof)`` over ``repeats`` runs, and the folded node count."""
    best = float("inf")
    shown = 0
    for _ in range(repeats):
        start = time.perf_counter()
        folded = fold(prof)
        best = min(best, time.perf_counter() - start)
        shown = sum(1 for _ in folded.root.walk())
    return best, shown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 50_000])
    args = parser.parse_args()

    print(f"{'case':<18} {'nodes':>7} {'folded':>7} {'fold time':>11}")
    for name, build in CASES.items():
        for size in args.sizes:
            prof = build(size)
            nodes = sum(1 for _ in prof.root.walk())
            seconds, shown = best_of(args.repeats, prof)
            print(f"{name:<18} {nodes:>7} {shown:>7} {seconds * 1e3:>9.1f}ms")

    print("\nN distinct siblings under one parent (old: every window length at every position)")
    print(f"{'siblings':>8} {'new':>10} {'old':>10}")
    for count, old in OLD_DISTINCT_SECONDS.items():
        seconds, _ = best_of(
            args.repeats, profile_of([leaf(str(i), "Linear", i + 1, i) for i in range(count)])
        )
        print(f"{count:>8} {seconds * 1e3:>8.1f}ms {old * 1e3:>8.0f}ms")


if __name__ == "__main__":
    main()
