"""Compare two saved profiles module by module: per metric A, B, the change
B - A and the ratio B / A. Added modules are marked +, removed -, type changes ~
(docs/diff.md).

Examples:
  layerscope diff before.json after.json
  layerscope diff fp32.json bf16.json --columns forward_time,peak_bytes
  layerscope diff a.json b.json --sort flops --top 10
"""

from __future__ import annotations

import argparse
from typing import Any

from layerscope.analysis.diff import diff
from layerscope.cli.common import flags_given
from layerscope.export.json import load
from layerscope.render import config as display_config
from layerscope.render.diff import check_diff

NAME = "diff"
HELP = "compare two saved profiles module by module"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", help="the first profile (JSON), the baseline")
    p.add_argument("b", help="the second profile (JSON)")
    g = p.add_argument_group("view")
    g.add_argument(
        "--columns",
        metavar="KEY,...",
        help="metrics to compare (e.g. flops,forward_time,self_flops); default: those "
        "either profile has",
    )
    g.add_argument(
        "--sort",
        metavar="KEY",
        help="a flat list, largest absolute change of this metric first (default: the tree)",
    )
    g.add_argument("--top", type=int, metavar="K", help="keep the K largest changes")
    g.add_argument(
        "--min-pct",
        type=float,
        metavar="P",
        help="hide rows whose change of the sort metric is below P %% of A",
    )
    g.add_argument("--width", type=int, default=None, help="console width in characters")
    g.add_argument("--config", metavar="YAML", help="display configuration (styles)")


#: The flag that gives each diff option, for refusals that name it.
DIFF_FLAGS = {
    "metrics": "--columns",
    "sort_by": "--sort",
    "top": "--top",
    "min_change_pct": "--min-pct",
    "width": "--width",
}


def options(args: argparse.Namespace) -> dict[str, Any]:
    return flags_given(
        args,
        columns="metrics",
        sort="sort_by",
        top="top",
        min_pct="min_change_pct",
        width="width",
    )


def run(args: argparse.Namespace) -> int:
    if args.config:
        display_config.load(args.config)
    d = diff(load(args.a), load(args.b))
    kwargs = options(args)
    check_diff(d, kwargs, DIFF_FLAGS)
    d.show(**kwargs)
    return 0
