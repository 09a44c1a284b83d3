"""The sweep row a report leads with (``Sweep.best``), read from rows in their document
form (``SweepRow.to_dict``), so that a sweep's HTML section, which has only the document,
picks the row the terminal names."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def best_row(rows: Sequence[Mapping[str, Any]]) -> int:
    """The index of the row a report leads with: of the rows that fit (or whose fit is
    not known), the most tokens per second (the shortest step where tokens are not
    known); when none fits, the smallest peak. The first of equals."""
    fitting = [k for k, r in enumerate(rows) if r.get("fits") is not False]
    if not fitting:
        return min(range(len(rows)), key=lambda k: rows[k]["peak_bytes"])
    return max(fitting, key=lambda k: (rows[k].get("tokens_per_s") or 0.0, -rows[k]["step_time"]))


__all__ = ["best_row"]
