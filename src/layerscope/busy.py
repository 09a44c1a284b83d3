"""A status line on stderr for work that may run long (planning, sweeps): shown only once
the work has lasted ``THRESHOLD_S``, on a terminal unless asked for, and gone when it
ends; or a callback given each status text instead.

``progress`` settings, as ``ls.plan``, ``ls.plan_sweep`` and ``Plan.max_micro_batch``
take them: ``None`` (a spinner on stderr when it is a terminal), ``True`` (also when it is
not: there a line per status text), ``False`` (nothing), or a callable, called with each
status text.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeAlias

from layerscope.validate import is_bool, refuse

#: ``progress=``: None (auto), a bool, or a callable given each status text
ProgressSetting: TypeAlias = "bool | Callable[[str], None] | None"
#: Seconds of work before a spinner appears.
THRESHOLD_S = 2.0


def check_progress(value: Any) -> ProgressSetting:
    """``progress=`` as given, or the one-line refusal."""
    if value is None or is_bool(value) or callable(value):
        return value  # type: ignore[no-any-return]
    refuse("progress", value, "None, True, False or a callable taking a status text")


class Busy:
    """The status of one long piece of work; ``update`` changes its text."""

    def __init__(self, text: str, setting: ProgressSetting) -> None:
        self.text = text
        self._callback = setting if callable(setting) and not is_bool(setting) else None
        show = setting is True or (setting is None and sys.stderr.isatty())
        self._lock = threading.Lock()
        self._status: Any = None
        self._closed = False
        self._timer = threading.Timer(THRESHOLD_S, self._open) if show else None
        if self._timer is not None:
            self._timer.daemon = True
            self._timer.start()
        if self._callback is not None:
            self._callback(text)

    def update(self, text: str) -> None:
        self.text = text
        if self._callback is not None:
            self._callback(text)
        with self._lock:
            if self._status is True:
                print(text, file=sys.stderr, flush=True)
            elif self._status is not None:
                self._status.update(text)

    def _open(self) -> None:
        with self._lock:
            if self._closed:
                return
            if not sys.stderr.isatty():  # asked for where no spinner draws: a line each
                self._status = True
                print(self.text, file=sys.stderr, flush=True)
                return
            from rich.console import Console
            from rich.status import Status

            self._status = Status(self.text, console=Console(stderr=True))
            self._status.start()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:
            self._closed = True
            if self._status is not None and self._status is not True:
                self._status.stop()
            self._status = None


@contextmanager
def busy(text: str, setting: ProgressSetting) -> Iterator[Busy]:
    """A ``Busy`` status for the block: a spinner after ``THRESHOLD_S`` (see module doc)."""
    status = Busy(text, setting)
    try:
        yield status
    finally:
        status.close()


__all__ = ["THRESHOLD_S", "Busy", "ProgressSetting", "busy", "check_progress"]
