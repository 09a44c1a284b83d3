"""Show a saved profile (from `layerscope profile -o p.json` or Profile.save) as
any view, or convert it to another format. Nothing is re-run: everything comes
from the file. A saved plan (`layerscope plan --json`, Plan.save), generation
(Generation.save), sweep (`layerscope plan --sweep --json`), estimate
(`layerscope generate --json`) or serving plan (`layerscope serve --json`) shows
as itself, and -o writes it as its own object's export does (.txt, .json; a
plan's or a generation's report .html; a timed generation's .trace.json). With
view flags, a plan's analysis or a generation's first stage shows as a profile
does (stderr says which); the others take no view flags.

Examples:
  layerscope show p.json --depth 2
  layerscope show p.json --format ops --top 10
  layerscope show p.json --format top --by-type --sort forward_time
  layerscope show p.json --sort flops --min-pct 1 --include '*attn*'
  layerscope show p.json -o p.html
  layerscope show plan.json
  layerscope show plan.json -o plan.html
  layerscope show gen.json
  layerscope show serve.json
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from layerscope.cli.common import (
    add_view_arguments,
    check_view_arguments,
    output_format,
    view_flags_given,
    write_profile,
)
from layerscope.errors import ExportError, InvalidInputError, SchemaError
from layerscope.export.files import write_text
from layerscope.export.formats import DOCUMENT_FORMATS, FORMATS, document_formats_error
from layerscope.export.json import profile_from_dict
from layerscope.export.jsonread import read_document
from layerscope.profile import Profile
from layerscope.render import options as view_table
from layerscope.render.layout import terminal_width

NAME = "show"
HELP = "show a saved profile as any view, or convert it (html, csv, md, trace), or a plan"


@dataclass(frozen=True)
class _Kind:
    """A document besides a profile: what it is called, the formats its object writes
    from a file (its ``export``; text is ``show``'s own), and, where it has one, what its
    profile is (a plan's analysis) or where its HTML report comes from instead."""

    what: str
    writes: tuple[str, ...]
    part: str = ""
    report: str = ""


_KINDS: dict[str, _Kind] = {
    "plan": _Kind("a plan", ("html", "json"), "its analysis (the profile the plan was "
                  "computed from)"),
    "generation": _Kind("a generation", ("html", "trace", "json"), "its {stage} stage's profile"),
    "sweep": _Kind("a sweep", ("json",), report="layerscope plan MODEL --sweep ... --html "
                   "PATH draws it in its best plan's report"),
    "estimate": _Kind("an estimate", ("json",), report="layerscope generate MODEL ... --html "
                      "PATH writes it (its JSON does not keep the analysis the report draws)"),
    "serving": _Kind("a serving plan", ("json",), report="layerscope serve MODEL ... --html "
                     "PATH writes it (its JSON does not keep the analysis the report draws)"),
}  # fmt: skip


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "file",
        help="a profile, plan, generation, sweep, estimate or serving plan saved as JSON",
    )
    add_view_arguments(p)


def _kind(data: object) -> str | None:
    """Which of ``_KINDS`` a document is, or None for a profile (or no document)."""
    if not isinstance(data, dict):
        return None
    if "plan" in data:
        return "plan"
    if "generation" in data:
        return "generation"
    from layerscope.generation.estimate_result import is_estimate
    from layerscope.generation.serving_result import is_serving
    from layerscope.planning.schema import is_sweep

    if is_estimate(data):
        return "estimate"
    if is_serving(data):
        return "serving"
    if is_sweep(data):
        return "sweep"
    return None


def _load(kind: str, data: Any, source: str) -> Any:
    """The object of a document of ``kind``, checked as its loader checks it (``data``
    consumed); ``SchemaError`` after the file's name."""
    try:
        if kind == "plan":
            from layerscope.planning import Plan

            return Plan.from_dict(data, consume=True, source=source)
        if kind == "generation":
            from layerscope.generation.result import Generation

            return Generation.from_dict(data, consume=True, source=source)
        if kind == "estimate":
            from layerscope.generation.estimate_result import GenerateEstimate

            return GenerateEstimate.from_dict(data, source)
        if kind == "serving":
            from layerscope.generation.serving_result import ServingPlan

            return ServingPlan.from_dict(data, source)
        from layerscope.planning.sweep import Sweep

        return Sweep.from_dict(data, source)
    except (TypeError, KeyError) as e:
        raise SchemaError(f"{source}: {e}") from e


def _view_flags(args: argparse.Namespace) -> list[str]:
    """The flags that ask for a view of a profile: every view flag but ``--width`` and
    ``--config`` (a document's own view takes them), and ``--format`` naming a view."""
    flags = [f for f in view_flags_given(args) if f not in ("--width", "--config")]
    if args.format in view_table.VIEWS:
        flags.insert(0, f"--format {args.format}")
    return flags


def _check_input_kept(args: argparse.Namespace, source: str) -> None:
    """``-o`` naming the file shown, in another format than JSON, would replace the
    document with what it shows: refused before anything is written."""
    if args.output is None:
        return
    try:
        same = os.path.samefile(args.output, source)
    except OSError:  # no such file yet, or the input is no file (a pipe)
        return
    fmt = output_format(args)
    if same and fmt != "json":
        written = f"the {fmt} view as text" if fmt in view_table.VIEWS else fmt
        raise InvalidInputError(
            f"-o {os.fspath(args.output)} is the file being shown: writing {written} there "
            "would replace its JSON; give another file name"
        )


def _part(kind: str, subject: Any, source: str) -> tuple[Profile, str]:
    """The profile of a plan (its analysis) or a generation (its first stage), and what
    it is; ``InvalidInputError`` when the document keeps none."""
    if kind == "plan":
        profile, part = subject.analysis, _KINDS[kind].part
    else:
        stage = next(iter(subject.stages), "")
        profile, part = subject.stages.get(stage), _KINDS[kind].part.format(stage=stage)
    if profile is None:
        raise InvalidInputError(
            f"{source} holds {_KINDS[kind].what} without a profile: there is nothing to show "
            "as a view or a profile's file; without view flags it shows as itself"
        )
    return profile, part


def _text(subject: Any, args: argparse.Namespace) -> None:
    """The document's own view: printed, or written as text at ``--width`` (default
    ``COLUMNS`` or the terminal's, as every view)."""
    if args.output is None:
        subject.show(width=args.width)
    else:
        width = args.width if args.width is not None else terminal_width()
        write_text(args.output, subject.render(width=width))


def _write(write: Callable[[str], None], args: argparse.Namespace, fmt: str) -> None:
    """``write(path)`` to ``-o``, or, without ``-o``, to a file in a temporary folder
    printed to standard output."""
    if args.output is not None:
        write(os.fspath(args.output))
        return
    with tempfile.TemporaryDirectory(prefix="layerscope-") as folder:
        path = os.path.join(folder, "show" + DOCUMENT_FORMATS[fmt][0])
        try:
            write(path)
        except ExportError as e:
            raise ExportError(str(e).replace(path, "standard output")) from None
        with open(path, encoding="utf-8") as f:
            sys.stdout.write(f.read())


def _say(text: str) -> None:
    sys.stderr.write(f"layerscope: {text}\n")


def _show_document(kind: str, subject: Any, args: argparse.Namespace, source: str) -> None:
    """A document besides a profile, as the flags ask: its profile with view flags (a
    plan's, a generation's), else its own view, or its object's export to ``-o``."""
    spec = _KINDS[kind]
    fmt = output_format(args)
    flags = _view_flags(args)
    if flags and not spec.part:
        raise InvalidInputError(
            f"{', '.join(flags)} {'does' if len(flags) == 1 else 'do'} not apply to "
            f"{spec.what} ({source}), which has no module tree: it shows as itself "
            "(--width, --config), and -o writes it as text (.txt) or json (.json)"
        )
    if flags:
        profile, part = _part(kind, subject, source)
        noun = spec.what.split(" ", 1)[1]
        _say(f"{source} is {spec.what}: showing {part}, as view flags ask (without them, "
             f"the {noun} itself)")  # fmt: skip
        write_profile(profile, args)
    elif fmt == "table":  # no -o, or -o FILE.txt
        _text(subject, args)
    elif fmt in spec.writes:
        _write(lambda path: subject.export(path, fmt), args, fmt)
    elif spec.part and fmt in FORMATS:
        profile, part = _part(kind, subject, source)
        write_profile(profile, args)  # said once done: a failed write is the one line
        done = f"written to {os.fspath(args.output)}" if args.output is not None else "printed"
        _say(f"{source} is {spec.what}, which has no {fmt} form: {part} {done} instead")
    else:
        target = os.fspath(args.output) if args.output is not None else "standard output"
        message = document_formats_error(target, fmt, (*spec.writes, "txt"), spec.what)
        also = f"; its HTML report: {spec.report}" if fmt == "html" and spec.report else ""
        raise ExportError(message + also)


def run(args: argparse.Namespace) -> int:
    check_view_arguments(args)
    source = os.fspath(args.file)
    _check_input_kept(args, source)
    data = read_document(args.file)
    kind = _kind(data)
    if kind is None:
        write_profile(profile_from_dict(data, source, consume=True), args)
        return 0
    subject = _load(kind, data, source)
    del data
    _show_document(kind, subject, args, source)
    return 0
