"""Cost of an analysis pass: ``ls.profile`` wall time / bare forward time, per example model.

Prints, for each built-in example and a ResNet-50-shaped model, the best-of-N wall time of a
bare forward (``torch.no_grad`` off, as ``ls.profile`` runs it) and of ``ls.profile`` (hooks,
shape recording, parameter counting, state capture and restore, tree building), and their
ratio; also the ratio of ``ls.profile(count_bytes=False)``, so the cost of counting bytes
moved is the difference of the two ratios. All measured in this one run, interleaved.

    python bench/bench_overhead.py [--repeats 7] [--system-heap]
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
from torch import nn

import layerscope as ls
from layerscope.examples import EXAMPLES

sys.path.insert(0, os.path.dirname(__file__))
from models import resnet50
from timing import add_heap_option, best_of_interleaved, steady_heap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    add_heap_option(parser)
    args = parser.parse_args()
    heap = steady_heap(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    cases: list[tuple[str, nn.Module, torch.Tensor]] = [
        (name, ex.build().eval(), ex.example_input()) for name, ex in EXAMPLES.items()
    ]
    cases.append(("resnet50 (1x3x224x224)", resnet50().eval(), torch.randn(1, 3, 224, 224)))
    threads = torch.get_num_threads()
    print(f"torch {torch.__version__}, {threads} threads, best of {args.repeats}; {heap}")
    print(
        f"{'model':<28}{'bare fwd':>12}{'ls.profile':>12}{'ratio':>8}"
        f"{'no bytes':>10}{'bytes cost':>12}"
    )
    for name, model, x in cases:
        bare, prof, no_bytes = best_of_interleaved(
            [
                lambda m=model, x=x: m(x),  # type: ignore[misc]
                lambda m=model, x=x: ls.profile(m, x),  # type: ignore[misc]
                lambda m=model, x=x: ls.profile(m, x, count_bytes=False),  # type: ignore[misc]
            ],
            args.repeats,
        )
        print(
            f"{name:<28}{bare * 1e3:>10.2f}ms{prof * 1e3:>10.2f}ms{prof / bare:>8.2f}"
            f"{no_bytes / bare:>10.2f}{(prof - no_bytes) / bare:>12.3f}"
        )


if __name__ == "__main__":
    main()
