"""Print the display configuration (styles, labels, boxes, columns) as YAML:
the shipped defaults, or those with a file's changes (--config, or
$LAYERSCOPE_CONFIG). Edit a copy and pass it to `profile` or `show` with
--config, or to ls.config.load (docs/views.md).

Examples:
  layerscope config --dump > display.yaml
  layerscope config --check display.yaml
"""

from __future__ import annotations

import argparse
import sys

from layerscope.errors import InvalidInputError
from layerscope.render import config as display_config

NAME = "config"
HELP = "print the display configuration as YAML, or check a file"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dump", action="store_true", help="print the configuration in force")
    p.add_argument(
        "--config", metavar="YAML", help="with --dump: the configuration with this file's changes"
    )
    p.add_argument("--check", metavar="YAML", help="check a configuration file and say so")


def run(args: argparse.Namespace) -> int:
    if not (args.dump or args.check):
        raise InvalidInputError("give --dump or --check FILE")
    if args.check:
        display_config.load(args.check)
        sys.stdout.write(f"{args.check}: a valid display configuration\n")
    if args.dump:
        cfg = display_config.load(args.config) if args.config else display_config.current()
        sys.stdout.write(display_config.dumps(cfg))
    return 0
