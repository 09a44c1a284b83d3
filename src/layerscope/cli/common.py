"""Options and output shared by subcommands: the view flags, ``--format``/``-o`` and
writing a profile out as a view or a file; a result command's ``-o``/``--html``/``--json``;
the close names a refusal suggests."""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
from typing import Any

from layerscope import hardware
from layerscope.analysis.roofline import target_spec
from layerscope.errors import InvalidInputError
from layerscope.export.files import check_writable, write_text
from layerscope.export.formats import FORMATS, export, export_text, matching
from layerscope.hardware import BY_NAME, known_devices
from layerscope.profile import Profile
from layerscope.render import config as display_config
from layerscope.render import options as view_table
from layerscope.render.console import render, show
from layerscope.render.options import check_view
from layerscope.validate import check_choice, refuse

_FOLD = {"on": True, "off": False, "all": "all"}


def gpu_names() -> str:
    """The built-in GPU specs' names, for help texts: read from the device table
    (``hardware.GPU_SPECS``) when the parser is built."""
    return ", ".join(hardware.GPU_SPECS)


#: The flag that gives each view option, for refusals that name it.
VIEW_FLAGS = {
    "view": "--format",
    "columns": "--columns",
    "sort_by": "--sort",
    "top": "--top",
    "by_type": "--by-type",
    "max_depth": "--depth",
    "min_pct": "--min-pct",
    "pct_of": "--pct-of",
    "include": "--include",
    "exclude": "--exclude",
    "ignore": "--ignore",
    "fold": "--fold",
    "show_not_called": "--hide-not-called",
    "pct": "--no-pct",
    "raw": "--raw",
    "shapes": "--no-shapes",
    "width": "--width",
    "device": "--spec",
}
#: The view flags that give their value as it is (the others are switches), by argparse
#: dest -> the ``prof.show`` option each sets.
_OPTION_FLAGS = {
    VIEW_FLAGS[option].removeprefix("--").replace("-", "_"): option
    for option in (
        *("columns", "sort_by", "top", "max_depth", "min_pct", "pct_of"),
        *("include", "exclude", "ignore", "width", "device"),
    )
}
#: Extensions that write a view as plain text with ``-o``.
_TEXT_EXTENSIONS = (".txt", ".text")


def add_view_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "view", "what to show and how (the same options as prof.show(); docs/views.md)"
    )
    g.add_argument(
        "--format",
        choices=(*view_table.VIEWS, *FORMATS),
        default=None,
        metavar="FORMAT",
        help="a view: table (tree and metric columns; the default), tree (the module tree "
        "with metrics on each label), repr (the model's repr annotated), top (the largest "
        "modules at each depth), ops (every module by its own, self, cost), roofline "
        "(each module's own work against a device's roofline; needs --spec); or a file "
        "format: json, csv, md (a GitHub table of the table view), html (a self-contained "
        "report), trace (Chrome/Perfetto, needs --time). Default: table, or with -o the "
        "format of the file's extension",
    )
    g.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write to FILE instead of printing: .json, .csv, .md, .html, .trace.json, or "
        ".txt for a view as plain text (--format overrides the extension)",
    )
    g.add_argument(
        "--columns",
        metavar="KEY,...",
        help="metric columns to show, in order (e.g. params,flops,flops_pct,forward_time); "
        "an unknown one lists them all",
    )
    g.add_argument(
        "--sort",
        metavar="KEY",
        help="sort by this metric, largest first (one the profile lacks: by the %% metric)",
    )
    g.add_argument("--top", type=int, metavar="K", help="keep the K largest rows")
    g.add_argument("--by-type", action="store_true", help="top/ops: aggregate modules by type")
    g.add_argument("--depth", type=int, default=None, help="show modules down to this depth")
    g.add_argument(
        "--min-pct",
        type=float,
        metavar="P",
        help="hide rows below P %% of the whole model (of --pct-of, else the sort metric, "
        "else the one metric of --columns, else FLOPs, else params)",
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
        "--ignore",
        action="append",
        metavar="GLOB",
        help="take the work of modules whose path or type matches out of their ancestors "
        "and the Total, and leave out their rows (repeatable, or comma-separated)",
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
        "--spec",
        metavar="DEVICE",
        help=f"a device spec (cpu, {gpu_names()} or an alias) for the roofline view and "
        "columns (intensity, bound, roofline_time, efficiency, "
        "lost_time) and the HTML report's roofline chart; docs/roofline.md",
    )
    g.add_argument(
        "--estimate",
        metavar="DEVICE",
        help="print the roofline estimate on DEVICE instead of a view: per-module lower-"
        "bound times, forward and backward (works on a profile analysed on meta); a table "
        "that takes the view flags (--depth, --fold, --columns, --sort, --top, ...)",
    )
    g.add_argument(
        "--config",
        metavar="YAML",
        help="display configuration (styles, labels, boxes); see `ls.config.dump`",
    )


def view_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The view flags as ``prof.show`` keyword options (validated there)."""
    kwargs: dict[str, Any] = {
        "view": args.format if args.format in view_table.VIEWS else "table",
        "fold": False if args.no_fold else _FOLD[args.fold],
        "show_not_called": not args.hide_not_called,
        "pct": not args.no_pct,
        "raw": args.raw,
        "shapes": not args.no_shapes,
        "by_type": args.by_type,
    }
    return kwargs | flags_given(args, **_OPTION_FLAGS)


def flags_given(args: argparse.Namespace, **names: str) -> dict[str, Any]:
    """The flags (by their dest) that were given, under the option names they map to."""
    return {
        option: getattr(args, flag)
        for flag, option in names.items()
        if getattr(args, flag) is not None
    }


def output_format(args: argparse.Namespace) -> str:
    """The view or file format to write: ``--format``, else ``-o``'s extension, else
    the table view."""
    if args.format is not None:
        return str(args.format)
    if args.output is None:
        return "table"
    found = extension_format(args.output)
    if found is not None:
        return found
    known = ", ".join(ext for f in FORMATS.values() for ext in f.extensions)
    refuse(
        "-o",
        args.output,
        f"a file name ending in one of {known}, .txt (or give --format)",
        why="its extension names no format",
    )


def extension_format(path: str | os.PathLike[str]) -> str | None:
    """The format ``-o FILE``'s extension names: ``table`` for .txt (a view as plain
    text), else an export format's name (``export.formats.matching``), or None."""
    if os.fspath(path).lower().endswith(_TEXT_EXTENSIONS):
        return "table"
    found = matching(path)
    return found.name if found is not None else None


def check_view_arguments(args: argparse.Namespace) -> None:
    """Validate the view and output flags and load ``--config`` before any work is done."""
    for flag, name in (("--spec", args.spec), ("--estimate", args.estimate)):
        if name is not None and name.strip().lower() not in known_devices():
            check_choice(flag, name, known_devices())  # before the model runs
    check_view(view_kwargs(args), VIEW_FLAGS)
    fmt = output_format(args)
    export_format = FORMATS.get(fmt)
    if export_format is not None and not export_format.view_options:
        takes = [f"--{dest}" for dest, opt in _OPTION_FLAGS.items() if opt in export_format.options]
        given = [flag for flag in view_flags_given(args) if flag not in takes]
        if given:
            drawn = " ".join(f"--format {f.name}" for f in FORMATS.values() if f.view_options)
            also = f" (and {', '.join(takes)} to {fmt})" if takes else ""
            raise InvalidInputError(
                f"{' '.join(given)} {'applies' if len(given) == 1 else 'apply'} only to views "
                f"and to {drawn}{also}, not to {fmt}"
            )
    if args.config:
        display_config.load(args.config)


def check_roof(args: argparse.Namespace, target: str | None) -> None:
    """``--format roofline`` needs a device for its roof: ``--spec``, or the device spec
    of the profile's device (``target``: ``--target``, the GPU it runs on, or what a
    saved profile names)."""
    if output_format(args) != "roofline" or args.spec is not None:
        return
    if target is None or target.strip().lower() not in BY_NAME:
        raise InvalidInputError(
            "--format roofline needs a device for its roof: --spec h100 (or cpu, a100, "
            "l4, ...), a profile analysed with --device meta --target h100, or a run on a "
            "GPU with a built-in spec"
        )


def view_flags_given(args: argparse.Namespace) -> list[str]:
    """The view flags given, as they are typed (``--depth``), ``--format`` not counted.
    A value of 0 is given (``--depth 0``, ``--min-pct 0``): only an absent flag (None, a
    switch left off, ``--fold on``) is not."""
    defaults = {"fold": "on"}
    flags = []
    for name in (
        "columns", "sort", "top", "by_type", "depth", "min_pct", "pct_of", "include",
        "exclude", "ignore", "fold", "no_fold", "hide_not_called", "no_pct", "raw", "no_shapes",
        "width", "config", "spec", "estimate",
    ):  # fmt: skip
        value = getattr(args, name)
        if value is not None and value is not False and value != defaults.get(name):
            flags.append("--" + name.replace("_", "-"))
    return flags


def write_profile(prof: Profile, args: argparse.Namespace) -> None:
    """Print the chosen view, or write the chosen format to ``-o`` (or to stdout)."""
    fmt = output_format(args)
    options = view_kwargs(args)
    check_roof(args, target_spec(prof))
    if args.estimate is not None:
        from layerscope.analysis.roofline import estimate

        # the view flags but --format, --spec and --by-type (the estimate is a table on
        # its own device), without a % column by default
        dropped = ("view", "device", "by_type", "pct")
        shown = {k: v for k, v in options.items() if k not in dropped}
        text = estimate(prof, args.estimate).render(**shown)
        if args.output is None:
            sys.stdout.write(text)
        else:
            write_text(args.output, text)
        return
    if fmt in view_table.VIEWS:
        if args.output is None:
            show(prof, **options)
        else:
            write_text(args.output, render(prof, **options))
        return
    if FORMATS[fmt].view_options:
        extra = {k: v for k, v in options.items() if k not in ("view", "width")}
    else:  # the options it takes, such as html's device (--spec: the roofline chart's roof)
        extra = {k: v for k, v in options.items() if k in FORMATS[fmt].options}
    if args.output is None:
        sys.stdout.write(export_text(prof, fmt, **extra))
    else:
        export(prof, args.output, fmt, **extra)


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """The model spec and ``--model-args``, as the commands that build a model take them."""
    p.add_argument(
        "model",
        help="the model: examples:NAME, package.module:attr, file.py:attr, transformers:NAME "
        "or transformers:config.json (as for `layerscope profile`)",
    )
    p.add_argument(
        "--model-args", metavar="JSON",
        help="keyword arguments for the factory, or config fields for transformers: specs",
    )  # fmt: skip


def check_outputs(html: str | None, *paths: str | None, text: str | None = None) -> None:
    """The files a command will write, checked before its work, whose result would
    otherwise be lost: ``--html`` ends in .html, ``text`` (``-o``, what is printed) in
    .txt, and every path given can be written."""
    if text is not None and not text.lower().endswith(_TEXT_EXTENSIONS):
        refuse("-o", text, "a path ending in .txt (the text that is printed)")
    if html is not None and not html.lower().endswith((".html", ".htm")):
        refuse("--html", html, "a path ending in .html (the report is an HTML page)")
    for path in (*paths, text, html):
        if path:
            check_writable(path)


#: The flag that writes what ``-o`` writes for a result command, by the format its
#: extension names (``extension_format``); a .txt (``table``) is what is printed.
_RESULT_FLAGS = {"html": ("--html", "the HTML report"), "json": ("--json", "the JSON file")}


def route_output(args: argparse.Namespace) -> None:
    """``-o FILE`` of a command whose files are ``--html``, ``--json`` and the printed
    text: by its extension, as ``profile -o`` reads it, a .html or .json becomes that
    flag's path; a .txt stays ``-o`` (``write_outputs``). An extension that names none
    of them, or a file that ``-o`` and its flag both give, is refused."""
    path = args.output
    kind = extension_format(path) if path is not None else "table"
    if kind == "table":
        return
    flag, what = _RESULT_FLAGS.get(kind or "", ("", ""))
    if not flag:
        allowed = (
            "a file name ending in .html (as --html), .json (as --json) or .txt (what is printed)"
        )
        refuse("-o", path, allowed, why="its extension names no file this command writes")
    dest = flag.removeprefix("--")
    if getattr(args, dest) is not None:
        raise InvalidInputError(f"-o {path} and {flag} both name {what}: give one")
    setattr(args, dest, path)
    args.output = None


def write_outputs(args: argparse.Namespace, result: Any, text: str) -> None:
    """The files a result command was asked for: ``--json`` (``result.save``), ``-o``
    (``text``, what was printed) and ``--html`` (``result.to_html``)."""
    if args.json:
        result.save(args.json)
    if args.output:
        write_printed(args.output, text)
    if args.html:
        result.to_html(args.html)


def write_printed(path: str, text: str) -> None:
    """What was printed (``text``) to ``-o``'s .txt, ending in a newline."""
    write_text(path, text if text.endswith("\n") else text + "\n")


#: How alike a suggestion and the name given must be (``difflib``'s ratio, 0 to 1).
CLOSE_CUTOFF = 0.75
#: A model class's suffix (``Model``, ``ForCausalLM``): many names share it, so a class
#: is suggested only when the part before it is close too.
_CLASS_SUFFIX = re.compile(r"(?:For[A-Z]\w*|[Mm]odel\w*)$")


def close_names(name: str, known: list[str], n: int = 4) -> list[str]:
    """The names of ``known`` close to ``name`` (case aside, the closest first): none
    that shares only a class suffix with it (``NoSuchModel`` is not ``YoutuModel``)."""
    by_lower: dict[str, str] = {}
    for k in known:
        by_lower.setdefault(k.lower(), k)
    close = difflib.get_close_matches(
        name.lower(), list(by_lower), n=len(by_lower), cutoff=CLOSE_CUTOFF
    )
    stem = _CLASS_SUFFIX.sub("", name).lower()
    if stem != name.lower():  # a class name: the part before its suffix must be close too
        close = [c for c in close if _alike(stem, _CLASS_SUFFIX.sub("", by_lower[c]).lower())]
    return [by_lower[c] for c in close[:n]]


def _alike(a: str, b: str) -> bool:
    return difflib.SequenceMatcher(None, a, b).ratio() >= CLOSE_CUTOFF
