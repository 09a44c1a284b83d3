"""Summary statistics of timing samples (median, min, iqr, ...), without numpy.

Kept apart so the numbers every report shows come from one small, testable function.
"""

from __future__ import annotations

from collections.abc import Sequence


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, ``method='linear'``)."""
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(values: Sequence[float], scale: float = 1.0) -> dict[str, float]:
    """median, mean, min, max, p90 and iqr (p75 - p25) of ``values``, times ``scale``."""
    if not values:
        raise ValueError("no values to summarize")
    ordered = sorted(values)
    out = {
        "median": _quantile(ordered, 0.5),
        "mean": sum(ordered) / len(ordered),
        "min": ordered[0],
        "max": ordered[-1],
        "p90": _quantile(ordered, 0.9),
        "iqr": _quantile(ordered, 0.75) - _quantile(ordered, 0.25),
    }
    return {k: v * scale for k, v in out.items()} | {"n": len(ordered)}
