"""Cross-rank statistics of a gathered profile: per module and metric, how the ranks differ.

``rank_summary(prof)`` reads ``prof.ranks`` (filled by ``Profile.gather``) and gives, for
every module path and each chosen metric, the min, median and max over the ranks, the
rank with the max (for a time: the slowest) and the imbalance, max / median (1.0 when
every rank has 0; infinite when the median is 0 but the max is not). A module or metric
that some ranks lack is summarised over the ranks that have it. The summary draws itself
with ``render.ranks`` (its display methods import it lazily).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import layerscope.metricspec as ms
from layerscope.errors import InvalidInputError
from layerscope.profile import Node, Number, Profile

if TYPE_CHECKING:
    from layerscope.render.layout import Line

__all__ = ["RankRow", "RankStats", "RankSummary", "rank_summary"]


@dataclass(frozen=True)
class RankStats:
    """One metric of one module over the ranks."""

    #: Per rank, in the order of ``RankSummary.ranks``; None where the rank lacks it.
    values: tuple[Number | None, ...]
    min: Number
    median: float
    max: Number
    #: The rank (its number, ``Profile.dist["rank"]``) with the max; the lowest on ties.
    argmax: int
    #: max / median: 1.0 when all are 0, ``inf`` when the median is 0 and the max not.
    imbalance: float


@dataclass(frozen=True)
class RankRow:
    """A module path and its statistics per metric (a metric no rank has is absent)."""

    path: str
    type: str
    depth: int
    stats: dict[str, RankStats]


@dataclass
class RankSummary:
    """The cross-rank comparison of a gathered profile (see the module docstring)."""

    #: Rank numbers, in the order of ``Profile.ranks``.
    ranks: tuple[int, ...]
    metrics: tuple[str, ...]
    #: One per module path, in the pre-order of the first rank that has it.
    rows: list[RankRow]

    def row(self, path: str) -> RankRow:
        """The row of a module path ("" is the root); ``KeyError`` if no rank has it."""
        for r in self.rows:
            if r.path == path:
                return r
        raise KeyError(f"no module with path {path!r} on any rank")

    # ---- display (render.ranks, imported when used) --------------------------------
    def lines(self, width: int, max_depth: int | None = None) -> list[Line]:
        """The view's styled lines at ``width`` (``max_depth``: deepest row shown)."""
        from layerscope.render.ranks import summary_lines

        return summary_lines(self, width, max_depth)

    def render(self, width: int = 80, max_depth: int | None = None) -> str:
        """The view as plain text, ``width`` characters wide."""
        from layerscope.render.ranks import render_summary

        return render_summary(self, width, max_depth)

    def __str__(self) -> str:
        from layerscope.render.ranks import render_summary

        return render_summary(self)

    def __rich__(self) -> Any:
        from layerscope.render.ranks import renderable

        return renderable(self)


def rank_summary(profile: Profile, metrics: str | Sequence[str] | None = None) -> RankSummary:
    """The cross-rank comparison of ``profile.ranks`` for ``metrics`` (default: forward
    time if the ranks were timed, else FLOPs, then parameters)."""
    ranks = profile.ranks
    if not ranks:
        raise InvalidInputError(
            "this profile holds no per-rank profiles: call prof.gather() on every rank "
            "and use the profile it returns on the destination rank"
        )
    have: set[str] = set()
    for p in ranks:
        have.update(p.root.metrics)
    keys = _metrics(metrics, have)
    numbers = tuple(int(p.dist.get("rank", i)) for i, p in enumerate(ranks))
    order: dict[str, tuple[str, int]] = {}
    by_path: list[dict[str, Node]] = []
    for p in ranks:
        nodes: dict[str, Node] = {}
        for node in p.root.walk():
            nodes[node.path] = node
            if node.path not in order:
                order[node.path] = (node.type, node.depth)
        by_path.append(nodes)
    rows = []
    for path, (type_, depth) in order.items():
        stats: dict[str, RankStats] = {}
        for key in keys:
            values: list[Number | None] = []
            for nodes in by_path:
                found = nodes.get(path)
                values.append(None if found is None else found.metrics.get(key))
            got = _stats(values, numbers)
            if got is not None:
                stats[key] = got
        rows.append(RankRow(path, type_, depth, stats))
    return RankSummary(numbers, keys, rows)


def _metrics(metrics: str | Sequence[str] | None, have: set[str]) -> tuple[str, ...]:
    if metrics is None:
        first = ms.FORWARD_TIME if ms.FORWARD_TIME in have else ms.FLOPS
        keys = tuple(k for k in (first, ms.PARAMS) if k in have)
        if not keys:
            raise InvalidInputError(
                "the ranks' profiles have neither times, FLOPs nor parameters to compare; "
                f"name metrics=... among {sorted(have)}"
            )
        return keys
    if isinstance(metrics, str):
        metrics = [metrics]
    keys = tuple(metrics)
    if not keys or not all(isinstance(k, str) for k in keys):
        raise InvalidInputError(f"metrics must be metric keys (strings), got {metrics!r}")
    missing = [k for k in keys if k not in have]
    if missing:
        raise InvalidInputError(
            f"no rank has the metric {missing[0]!r}; the ranks have: {', '.join(sorted(have))}"
        )
    return keys


def _stats(values: list[Number | None], ranks: tuple[int, ...]) -> RankStats | None:
    present = [(v, r) for v, r in zip(values, ranks, strict=True) if v is not None]
    if not present:
        return None
    nums = [v for v, _ in present]
    top = max(nums)
    median = float(statistics.median(nums))
    # all 0 is balanced; a max over a median of 0 is not, however small
    imbalance = top / median if median else (1.0 if top == 0 else float("inf"))
    argmax = next(r for v, r in present if v == top)
    return RankStats(tuple(values), min(nums), median, top, argmax, imbalance)
