"""``gc_paused``: pause Python's cyclic garbage collector around work that allocates many
small objects and makes no cycles (a measured run, a fold, a view of a large profile)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC, and restore it as it was: collections of a large heap would
    otherwise cost more than the work itself (or land in a measured run)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
