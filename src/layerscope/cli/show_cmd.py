"""Show a saved profile (from `layerscope profile -o p.json` or Profile.save) as
any view, or convert it to another format. Nothing is re-run: everything comes
from the file. A saved plan (`layerscope plan --json`, Plan.save), generation
(Generation.save) or sweep (`layerscope plan --sweep --json`) shows as itself;
with view flags, a plan's or a generation's profile shows as a profile does.

Examples:
  layerscope show p.json --depth 2
  layerscope show p.json --format ops --top 10
  layerscope show p.json --format top --by-type --sort forward_time
  layerscope show p.json --sort flops --min-pct 1 --include '*attn*'
  layerscope show p.json -o p.html
  layerscope show plan.json
  layerscope show gen.json
  layerscope show serve.json
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from layerscope.cli.common import add_view_arguments, check_view_arguments, write_profile
from layerscope.errors import SchemaError
from layerscope.export.files import write_text
from layerscope.export.json import profile_from_dict
from layerscope.export.jsonread import read_document
from layerscope.planning import Plan
from layerscope.planning.sweep import Sweep

NAME = "show"
HELP = "show a saved profile as any view, or convert it (html, csv, md, trace), or a plan"

#: What is not a view flag, and the flags that leave a plan file shown as the plan (the
#: others show its analysis); -o only to a text file.
_PLAN_FLAGS = frozenset({"file", "run", "debug", "command", "width", "config", "output"})


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="a profile or a plan saved as JSON")
    add_view_arguments(p)


def _as_plan(args: argparse.Namespace) -> bool:
    """Whether the flags ask for nothing but the plan's text (at a width, to a .txt)."""
    for name, value in vars(args).items():
        if name not in _PLAN_FLAGS and value not in (None, False, "on" if name == "fold" else None):
            return False
    return args.output is None or args.output.lower().endswith((".txt", ".text"))


def _subject(data: object) -> Any:
    """The plan, generation, sweep, estimate or serving plan a document holds, or None
    for a plain profile (left whole: only a subject found consumes ``data``)."""
    if not isinstance(data, dict):
        return None
    if "plan" in data:
        return Plan.from_dict(data, consume=True)
    if "generation" in data:
        from layerscope.generation.result import Generation

        return Generation.from_dict(data, consume=True)
    from layerscope.generation.estimate_result import GenerateEstimate, is_estimate

    if is_estimate(data):
        return GenerateEstimate.from_dict(data)
    from layerscope.generation.serving_result import ServingPlan, is_serving

    if is_serving(data):
        return ServingPlan.from_dict(data)
    if "schema" not in data and isinstance(data.get("rows"), list) and "axes" in data:
        return Sweep.from_dict(data)
    return None


def run(args: argparse.Namespace) -> int:
    check_view_arguments(args)
    data = read_document(args.file)
    if _as_plan(args) or (isinstance(data, dict) and "schema" not in data):
        try:
            subject = _subject(data)
        except (SchemaError, TypeError, KeyError) as e:
            raise SchemaError(f"{os.fspath(args.file)}: {e}") from e
        if subject is not None:
            if args.output is None:
                subject.show(width=args.width)
            else:
                write_text(args.output, subject.render(width=args.width))
            return 0
    write_profile(profile_from_dict(data, os.fspath(args.file), consume=True), args)
    return 0
