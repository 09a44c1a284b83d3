"""Show a saved profile (JSON from `layerscope profile --json` or Profile.save).

Nothing is re-run: the view is built from the file alone.

Examples:
  layerscope show p.json --depth 2
  layerscope show p.json --format ops --top 10
  layerscope show p.json --format top --by-type --sort forward_time
  layerscope show p.json --sort flops --min-pct 1 --include '*attn*' --width 120
"""

from __future__ import annotations

import argparse

from layerscope.cli.common import add_view_arguments, check_view_arguments, print_profile
from layerscope.profile import load

NAME = "show"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="a profile saved as JSON")
    add_view_arguments(p)


def run(args: argparse.Namespace) -> int:
    check_view_arguments(args)
    print_profile(load(args.file), args)
    return 0
