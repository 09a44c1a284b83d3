"""Progress over the model runs of a timing pass: a user callback or a rich bar that
only redraws between runs, so it never competes with the timed work.
"""

from __future__ import annotations

import sys
import time
from typing import Any


class Progress:
    """Progress over the model runs of a pass: a callback, or a rich bar on stderr.

    The bar appears only once the pass is projected to take over ``threshold`` seconds,
    in automatic mode only on a terminal; it never refreshes by itself (no thread
    competing with the timed runs): it is redrawn between runs.
    """

    def __init__(self, setting: Any, total: int, label: str, threshold: float = 1.0) -> None:
        self.total = max(total, 1)
        self.done = 0
        self.label = label
        self.threshold = threshold
        self._callback = setting if callable(setting) and not isinstance(setting, bool) else None
        self._enabled = (
            setting is True or (setting is None and sys.stderr.isatty())
        ) and self._callback is None
        self._start = time.perf_counter()
        self._bar: Any = None
        self._task: Any = None

    def advance(self, n: int = 1) -> None:
        self.done = min(self.done + n, self.total)
        if self._callback is not None:
            self._callback(self.done, self.total)
            return
        if not self._enabled:
            return
        if self._bar is None:
            elapsed = time.perf_counter() - self._start
            if self.done < self.total and elapsed / self.done * self.total > self.threshold:
                self._open()
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done)
            self._bar.refresh()

    def _open(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
        from rich.progress import Progress as RichProgress

        self._bar = RichProgress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=True,
            auto_refresh=False,
        )
        self._bar.start()
        self._task = self._bar.add_task(self.label, total=self.total, completed=self.done)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
