"""Forgetting the exceptions that can no longer end a session.

The scope tracker marks, for an exception on its way out of a module, the module it was
raised in (``ScopeTracker.error_site``; ``backward_error_site`` for a tensor hook's), so
that the error leaving the session can name it. Exceptions cannot be weakly referenced:
a mark holds the exception, its traceback, the frames there and their tensors. So a mark
lasts only while its exception may still be on its way: once a module returns normally,
the exceptions its thread marked and is not handling now were caught and dropped on the
way (an exception caught, kept, and raised again later loses its mark); when the session
ends, only the mark of the exception that ended it is kept.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

#: id(exception) -> (exception, node, id of the thread that marked it)
Sites = dict[int, tuple[BaseException, Any, int]]


def handled_now() -> set[int]:
    """Ids of the exception this thread is handling now and of those it was raised from
    or while handling (``__cause__``, ``__context__``), transitively."""
    handling: set[int] = set()
    pending = [sys.exc_info()[1]]
    while pending:
        e = pending.pop()
        if e is not None and id(e) not in handling:
            handling.add(id(e))
            pending += (e.__context__, e.__cause__)
    return handling


def forget_swallowed(tables: Iterable[Sites], thread: int) -> None:
    """Drop the marks ``thread`` made whose exception it is not handling now."""
    handling = handled_now()
    for sites in tables:
        for key in [k for k, v in sites.items() if v[2] == thread and k not in handling]:
            del sites[key]


def keep_only(tables: Iterable[Sites], exc: BaseException | None) -> None:
    """Drop every mark but ``exc``'s (all of them for None)."""
    for sites in tables:
        kept = sites.get(id(exc)) if exc is not None else None
        sites.clear()
        if kept is not None and kept[0] is exc:
            sites[id(exc)] = kept
