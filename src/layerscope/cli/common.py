"""Options and output shared by subcommands."""

from __future__ import annotations

import argparse

from rich.console import Console

from layerscope.profile import Profile
from layerscope.render.console import THEME, ViewOptions, build_renderable


def add_view_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--depth", type=int, default=None, help="show modules down to this depth")
    p.add_argument("--no-fold", action="store_true", help="do not fold repeated siblings")
    p.add_argument("--no-shapes", action="store_true", help="hide input/output shape columns")
    p.add_argument("--width", type=int, default=None, help="console width in characters")


def print_profile(prof: Profile, args: argparse.Namespace) -> None:
    options = ViewOptions(fold=not args.no_fold, max_depth=args.depth, shapes=not args.no_shapes)
    Console(theme=THEME, width=args.width).print(build_renderable(prof, options))
