"""Options and output shared by subcommands: the view flags and printing a view."""

from __future__ import annotations

import argparse
from typing import Any

from layerscope.profile import Profile
from layerscope.render import config as display_config
from layerscope.render.console import show
from layerscope.render.options import VIEWS, view_options

_FOLD = {"on": True, "off": False, "all": "all"}


def add_view_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "view", "what to show and how (the same options as prof.show(); docs/views.md)"
    )
    g.add_argument(
        "--format",
        choices=VIEWS,
        default="table",
        help="table: tree and metric columns (default); tree: the module tree with metrics "
        "on each label; repr: the model's repr annotated; top: the largest modules at "
        "each depth; ops: every module by its own (self) cost",
    )
    g.add_argument(
        "--columns",
        metavar="KEY,...",
        help="metric columns to show, in order (e.g. params,flops,flops_pct,forward_time); "
        "an unknown one lists them all",
    )
    g.add_argument("--sort", metavar="KEY", help="sort by this metric, largest first")
    g.add_argument("--top", type=int, metavar="K", help="keep the K largest rows")
    g.add_argument("--by-type", action="store_true", help="top/ops: aggregate modules by type")
    g.add_argument("--depth", type=int, default=None, help="show modules down to this depth")
    g.add_argument(
        "--min-pct",
        type=float,
        metavar="P",
        help="hide rows below P %% of the whole model (of --pct-of, else the sort metric, "
        "else FLOPs, else params)",
    )
    g.add_argument("--pct-of", metavar="KEY", help="the metric that %% and --min-pct refer to")
    g.add_argument(
        "--include",
        action="append",
        metavar="GLOB",
        help="keep modules whose path or type matches (case-sensitive; repeatable)",
    )
    g.add_argument(
        "--exclude",
        action="append",
        metavar="GLOB",
        help="hide modules (and what they contain) whose path or type matches (repeatable)",
    )
    g.add_argument(
        "--fold",
        choices=tuple(_FOLD),
        default="on",
        help="on: fold runs of identical numbered siblings (layers.0–11 ×12, default); "
        "off: every module; all: named siblings too",
    )
    g.add_argument("--no-fold", action="store_true", help="same as --fold off")
    g.add_argument("--hide-not-called", action="store_true", help="hide modules that did not run")
    g.add_argument("--no-pct", action="store_true", help="no %% of total column")
    g.add_argument("--raw", action="store_true", help="numbers in base units, unformatted")
    g.add_argument("--no-shapes", action="store_true", help="hide input/output shape columns")
    g.add_argument("--width", type=int, default=None, help="console width in characters")
    g.add_argument(
        "--config",
        metavar="YAML",
        help="display configuration (styles, labels, boxes); see `ls.config.dump`",
    )


def view_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The view flags as ``prof.show`` keyword options (validated there)."""
    kwargs: dict[str, Any] = {
        "view": args.format,
        "fold": False if args.no_fold else _FOLD[args.fold],
        "show_not_called": not args.hide_not_called,
        "pct": not args.no_pct,
        "raw": args.raw,
        "shapes": not args.no_shapes,
        "by_type": args.by_type,
    }
    for flag, name in (
        ("columns", "columns"),
        ("sort", "sort_by"),
        ("top", "top"),
        ("depth", "max_depth"),
        ("min_pct", "min_pct"),
        ("pct_of", "pct_of"),
        ("include", "include"),
        ("exclude", "exclude"),
        ("width", "width"),
    ):
        value = getattr(args, flag)
        if value is not None:
            kwargs[name] = value
    return kwargs


def check_view_arguments(args: argparse.Namespace) -> None:
    """Validate the view flags and load ``--config`` before any work is done."""
    view_options(**view_kwargs(args))
    if args.config:
        display_config.load(args.config)


def print_profile(prof: Profile, args: argparse.Namespace) -> None:
    show(prof, **view_kwargs(args))
