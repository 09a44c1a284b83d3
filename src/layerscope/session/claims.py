"""One thread at a time profiles a module: claims on every module of a session's model.

A session claims each module of the model it instruments (the model and all its
submodules), so two threads cannot profile overlapping models at once: ``ls.profile(a)``
in one thread and ``ls.Profiler(a.head)`` in another share ``a.head``. ``ls.profile``
waits until its modules are free; a ``Profiler`` refuses to start. Claims are
re-entrant: sessions nest in one thread.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from torch import nn


@dataclass(frozen=True)
class Claim:
    """What ``claim`` took: the modules' ids and the thread that holds them."""

    ids: tuple[int, ...]
    thread: int


_changed = threading.Condition()
_holders: dict[int, tuple[int, int]] = {}  # id(module) -> (thread, sessions of it there)


def _taken_elsewhere(ids: tuple[int, ...], me: int) -> bool:
    for i in ids:
        held = _holders.get(i)
        if held is not None and held[0] != me:
            return True
    return False


def claim(model: nn.Module, *, wait: bool) -> Claim | None:
    """Claim every module of ``model`` for this thread; ``None`` when another thread
    holds one of them and ``wait`` is false (else wait until they are free)."""
    ids = tuple(id(m) for m in model.modules())
    me = threading.get_ident()
    with _changed:
        while _taken_elsewhere(ids, me):
            if not wait:
                return None
            _changed.wait()
        for i in ids:
            _, n = _holders.get(i, (me, 0))
            _holders[i] = (me, n + 1)
    return Claim(ids, me)


def release(taken: Claim) -> None:
    """Give back what ``claim`` took (from any thread)."""
    with _changed:
        for i in taken.ids:
            held = _holders.get(i)
            if held is None or held[0] != taken.thread:
                continue
            if held[1] <= 1:
                del _holders[i]
            else:
                _holders[i] = (held[0], held[1] - 1)
        _changed.notify_all()


@contextmanager
def claimed(model: nn.Module) -> Iterator[None]:
    """``model``'s modules claimed for the block, waiting for another thread's turn."""
    taken = claim(model, wait=True)
    assert taken is not None
    try:
        yield
    finally:
        release(taken)
