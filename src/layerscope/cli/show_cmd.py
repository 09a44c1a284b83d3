"""Show a saved profile (from `layerscope profile -o p.json` or Profile.save) as
any view, or convert it to another format. Nothing is re-run: everything comes
from the file.

Examples:
  layerscope show p.json --depth 2
  layerscope show p.json --format ops --top 10
  layerscope show p.json --format top --by-type --sort forward_time
  layerscope show p.json --sort flops --min-pct 1 --include '*attn*'
  layerscope show p.json -o p.html
"""

from __future__ import annotations

import argparse

from layerscope.cli.common import add_view_arguments, check_view_arguments, write_profile
from layerscope.export.json import load

NAME = "show"
HELP = "show a saved profile as any view, or convert it (html, csv, md, trace)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="a profile saved as JSON")
    add_view_arguments(p)


def run(args: argparse.Namespace) -> int:
    check_view_arguments(args)
    write_profile(load(args.file), args)
    return 0
