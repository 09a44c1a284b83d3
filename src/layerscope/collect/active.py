"""Per thread, the sessions and forward timers installed in it.

``active.trackers`` (``ScopeTracker``s, innermost last) and ``active.timers`` (the
forward timers of ``collect.timing.forward``) are what a user region
(``collect.regions``) reports to and what a tensor hook registered during a session
(``collect.tensorhooks``) names its module through. Both are empty outside any session,
so a region there costs two attribute lookups (made on first use in each thread).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from layerscope.collect.scopes import ScopeTracker


class _Active(threading.local):
    """This thread's installed trackers and forward timers, innermost last."""

    def __init__(self) -> None:
        self.trackers: list[ScopeTracker] = []
        self.timers: list[Any] = []


active = _Active()

__all__ = ["active"]
