"""Room on the stack for a session's frames: Python's recursion limit, raised while an
instrumented (or timed) run adds frames per level of module nesting, so that a deep
model which runs bare also runs under layerscope."""

from __future__ import annotations

import operator
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from layerscope.collect.tree import ModelTree

#: Frames a session adds per level of module nesting: the forward wrapper, or the frame
#: in which nn.Module runs the hooks of a module that had none of its own.
_FRAMES_PER_LEVEL = 1
#: Frames a session adds once, whatever the depth: its own calls around the model's, the
#: dispatch mode, observers and formulas under the innermost op.
_FRAMES_MARGIN = 64
_limit_guard = threading.Lock()
_limit_set: int | None = None  # the recursion limit as layerscope last set it
_get_depth = operator.attrgetter("depth")


def frames_for_depth(depth: int) -> int:
    """How many more frames than a bare run a run instrumented on every module of a
    model nested ``depth`` levels deep (the root is 0) may need."""
    return _FRAMES_PER_LEVEL * (depth + 1) + _FRAMES_MARGIN


def stack_room(tree: ModelTree) -> int:
    """How many more frames than a bare run a run under instrumentation may need."""
    return frames_for_depth(max(map(_get_depth, tree.by_path.values()), default=0))


def raise_recursion_limit(extra: int) -> None:
    """Raise Python's recursion limit by ``extra`` frames (see ``lower_recursion_limit``)."""
    global _limit_set
    with _limit_guard:
        limit = sys.getrecursionlimit() + extra
        sys.setrecursionlimit(limit)
        _limit_set = limit


def lower_recursion_limit(extra: int) -> None:
    """Take back the ``extra`` frames ``raise_recursion_limit`` gave, unless someone set the
    limit since: what the user sets stays, never lowered."""
    global _limit_set
    with _limit_guard:
        limit = sys.getrecursionlimit()
        if limit != _limit_set:
            return
        try:
            sys.setrecursionlimit(limit - extra)
        except RecursionError:  # deeper than that right now: leave it raised
            return
        _limit_set = limit - extra


@contextmanager
def recursion_room(extra: int) -> Iterator[None]:
    """The block runs with ``extra`` more frames of recursion limit."""
    raise_recursion_limit(extra)
    try:
        yield
    finally:
        lower_recursion_limit(extra)


__all__ = [
    "frames_for_depth",
    "lower_recursion_limit",
    "raise_recursion_limit",
    "recursion_room",
    "stack_room",
]
