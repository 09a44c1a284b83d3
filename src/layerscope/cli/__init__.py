"""The ``layerscope`` command: one module per subcommand, errors mapped to exit codes here.

Every mistake a user can make prints one line on stderr (``layerscope: error: ...``) and
exits with a documented code; ``--debug``, before or after the subcommand, adds the
traceback. ``docs/cli.md`` lists each case.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
import traceback
from collections.abc import Sequence
from typing import NoReturn

from layerscope.cli import (
    calibrate_cmd,
    config_cmd,
    diff_cmd,
    generate_cmd,
    plan_cmd,
    profile_cmd,
    serve_cmd,
    show_cmd,
)
from layerscope.errors import (
    ExportError,
    InvalidInputError,
    MissingDependencyError,
    ModelError,
    SchemaError,
)
from layerscope.metrics.numerics import NonFiniteError
from layerscope.version import __version__

#: Subcommand modules; each has NAME, HELP (one line), a docstring (its description) and
#: add_arguments/run.
COMMANDS = (
    profile_cmd,
    show_cmd,
    plan_cmd,
    generate_cmd,
    serve_cmd,
    diff_cmd,
    config_cmd,
    calibrate_cmd,
)

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_MODEL = 3
EXIT_INTERRUPTED = 130

#: Pre-wrapped: the subcommands print their epilog as it is.
EPILOG = textwrap.fill(
    "Exit codes: 0 ok, 1 internal error, 2 bad arguments or file, 3 the model raised. "
    "--debug (anywhere on the line) prints the traceback of an error.",
    width=78,
)


class UsageError(Exception):
    """A command line argparse refused; ``prog`` is the (sub)command it belongs to."""

    def __init__(self, prog: str, message: str):
        super().__init__(message)
        self.prog = prog


class Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises instead of printing its usage and exiting, so that
    every error goes through ``main``'s one-line report."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(self.prog, message)


def build_parser() -> tuple[Parser, dict[str, Parser]]:
    """The top-level parser and each subcommand's, by name."""
    parser = Parser(
        prog="layerscope",
        description="See what happens inside every layer of a PyTorch model.",
        epilog=EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"layerscope {__version__}")
    parser.add_argument("--debug", action="store_true", help="print tracebacks of errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    subparsers: dict[str, Parser] = {}
    for cmd in COMMANDS:
        p = sub.add_parser(
            cmd.NAME,
            help=cmd.HELP,
            description=(cmd.__doc__ or "").strip(),
            epilog=EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
        cmd.add_arguments(p)
        p.set_defaults(run=cmd.run)
        subparsers[cmd.NAME] = p
    return parser, subparsers


def exit_code(error: BaseException) -> int:
    """The documented exit code of an error that ends a command."""
    if isinstance(error, ModelError | NonFiniteError):
        return EXIT_MODEL
    if isinstance(
        error,
        UsageError
        | InvalidInputError
        | SchemaError
        | ExportError
        | MissingDependencyError
        | FileNotFoundError
        | IsADirectoryError
        | NotADirectoryError
        | PermissionError,
    ):
        return EXIT_USAGE
    return EXIT_INTERNAL


def one_line(text: str) -> str:
    """``text`` with every run of whitespace that holds a line break made one space."""
    return re.sub(r"\s*\n\s*", " ", text.strip())


def message(error: BaseException) -> str:
    """What ``main`` prints for ``error``, on one line."""
    if isinstance(error, UsageError):
        return f"{error.prog}: error: {one_line(str(error))} (see '{error.prog} --help')"
    if isinstance(error, FileNotFoundError | IsADirectoryError | PermissionError) and (
        error.filename is not None
    ):
        return f"layerscope: error: {error.strerror or error}: {error.filename}"
    text = one_line(str(error)) or type(error).__name__
    if isinstance(error, NonFiniteError):
        text = text.removeprefix("layerscope: ")  # its message carries the library's prefix
    if exit_code(error) == EXIT_INTERNAL:
        return (
            f"layerscope: internal error: {type(error).__name__}: {text} "
            "(rerun with --debug for the traceback)"
        )
    return f"layerscope: error: {text}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv[: argv.index("--")] if "--" in argv else "--debug" in argv
    try:
        parser, subparsers = build_parser()
        args, extra = parser.parse_known_args(argv)
        if extra:
            subparsers[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
        code: int = args.run(args)
        return code
    except KeyboardInterrupt:
        sys.stderr.write("layerscope: interrupted\n")
        return EXIT_INTERRUPTED
    except Exception as e:
        if debug:
            traceback.print_exception(e)
        sys.stderr.write(message(e) + "\n")
        return exit_code(e)


if __name__ == "__main__":
    sys.exit(main())
