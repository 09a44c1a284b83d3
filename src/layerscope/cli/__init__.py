"""The ``layerscope`` command: one module per subcommand, errors mapped to exit codes here."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rich.console import Console

from layerscope import __version__
from layerscope.cli import profile_cmd, show_cmd
from layerscope.errors import InvalidInputError, LayerscopeError, ModelError, SchemaError
from layerscope.metrics.numerics import NonFiniteError

#: Subcommand modules; each has NAME, a docstring (its help) and add_arguments/run.
COMMANDS = (profile_cmd, show_cmd)

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_MODEL = 3


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="layerscope",
        description="See what happens inside every layer of a PyTorch model.",
        epilog="Exit codes: 0 ok, 1 internal error, 2 bad arguments or file, 3 the model raised.",
    )
    parser.add_argument("--version", action="version", version=f"layerscope {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for cmd in COMMANDS:
        doc = (cmd.__doc__ or "").strip()
        p = sub.add_parser(
            cmd.NAME,
            help=doc.splitlines()[0] if doc else None,
            description=doc,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        cmd.add_arguments(p)
        p.set_defaults(run=cmd.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    err = Console(stderr=True, highlight=False)
    try:
        code: int = args.run(args)
        return code
    except (ModelError, NonFiniteError) as e:
        err.print(f"[bold red]error:[/] {e}", markup=True)
        return EXIT_MODEL
    except (InvalidInputError, SchemaError, FileNotFoundError, IsADirectoryError) as e:
        err.print(f"[bold red]error:[/] {e}", markup=True)
        return EXIT_USAGE
    except LayerscopeError as e:
        err.print(f"[bold red]error:[/] {e}", markup=True)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
