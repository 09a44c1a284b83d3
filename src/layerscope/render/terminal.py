"""Printing a laid-out view: one place for the console every ``show`` uses (the
display configuration's theme, the terminal's width unless given, a note instead of a
view too narrow to lay out)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import IO

from rich.console import Console
from rich.theme import Theme

from layerscope.render import config as display_config
from layerscope.render.layout import Line, LinesRenderable, text_of, too_narrow
from layerscope.validate import refuse

__all__ = ["check_file", "print_lines"]


def check_file(file: IO[str] | None) -> None:
    """``file=`` of a ``show``: None (standard output) or a text stream."""
    if file is not None and not callable(getattr(file, "write", None)):
        refuse("file", file, "a text stream, such as sys.stdout or open(path, 'w')")


def _theme() -> dict[str, str]:
    return dict(display_config.current().theme)


def print_lines(
    build: Callable[[int], list[Line]], width: int | None, file: IO[str] | None
) -> None:
    """Print ``build(width)`` to the terminal (colours when it is one, at its width) or
    to ``file``; a too-narrow width prints its note, whole, instead."""
    check_file(file)
    console = Console(
        file=file or sys.stdout, theme=Theme(_theme()), width=width, highlight=False,
        soft_wrap=False,
    )  # fmt: skip
    note = too_narrow(width or console.width)
    if note is not None:  # the whole line, not cut to the width it complains about
        console.print(text_of(note[0]), style="layerscope.notice", soft_wrap=True)
        return
    console.print(LinesRenderable(build, _theme, width))
