"""The cross-rank view of a gathered profile: per module and metric, how the ranks differ.

``rank_summary(prof)`` reads ``prof.ranks`` (filled by ``Profile.gather``) and gives, for
every module path and each chosen metric, the min, median and max over the ranks, the
rank with the max (for a time: the slowest) and the imbalance, max / median (1.0 when
every rank has 0; infinite when the median is 0 but the max is not). A module or metric
that some ranks lack is summarised over the ranks that have it. ``RankSummary.render``
draws one table per metric with the table engine of the other views, fitted to the
width (the per-rank columns, shown for up to 4 ranks, go first when it is narrow, then
the min).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from layerscope.analysis.catalog import TIMES, column, has_column
from layerscope.errors import InvalidInputError
from layerscope.profile import Node, Number, Profile
from layerscope.render import config as display_config
from layerscope.render import units
from layerscope.render.layout import (
    Line,
    LinesRenderable,
    Table,
    TableColumn,
    TableRow,
    fit_table,
    plain_text,
    too_narrow,
    wrap_text,
)

__all__ = ["RankRow", "RankStats", "RankSummary", "rank_summary", "rank_table"]

#: Per-rank value columns are shown up to this many ranks.
MAX_RANK_COLUMNS = 4
#: Imbalance from which a row is highlighted.
IMBALANCED = 1.1


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

    def lines(self, width: int, max_depth: int | None = None) -> list[Line]:
        """The view's styled lines at ``width`` (``max_depth``: deepest row shown)."""
        note = too_narrow(width)
        if note is not None:
            return note
        rows = [r for r in self.rows if max_depth is None or r.depth <= max_depth]
        out: list[Line] = []
        for n, key in enumerate(self.metrics):
            if n:
                out.append([])
            title = f"{_header(key)} over {len(self.ranks)} ranks"
            out.append([(title, "layerscope.header")])
            fitted = fit_table(self._table(key, rows, len(self.ranks) <= MAX_RANK_COLUMNS), width)
            if any(h.startswith("Rank ") for h in fitted.dropped):  # all of them or none
                fitted = fit_table(self._table(key, rows, False), width)
            out.extend(fitted.lines)
        out.append([])
        footer = "imbalance = max / median over the ranks"
        if any(k in TIMES for k in self.metrics):
            footer += "; times are per call"
        out.extend(wrap_text(footer, "layerscope.notice", width))
        return out

    def render(self, width: int = 80, max_depth: int | None = None) -> str:
        """The view as plain text, ``width`` characters wide."""
        return plain_text(self.lines(width, max_depth))

    def __str__(self) -> str:
        from layerscope.render.console import terminal_width

        return self.render(terminal_width())

    def __rich__(self) -> Any:
        return LinesRenderable(self.lines, lambda: dict(display_config.current().theme))

    def _table(self, key: str, rows: Sequence[RankRow], per_rank: bool) -> Table:
        fmt = _formatter(key)
        cols = [TableColumn("module", "Module", "left", None, label=True, text=True)]
        if per_rank:
            cols += [TableColumn(f"r{r}", f"Rank {r}", priority=10) for r in self.ranks]
        cols += [
            TableColumn("min", "Min", priority=30),
            TableColumn("median", "Median", priority=None),
            TableColumn("max", "Max", priority=None),
            TableColumn("argmax", "Max on", priority=None),
            TableColumn("imbalance", "Max/med", priority=None),
        ]
        table_rows = []
        for row in rows:
            name = row.path or f"{row.type} (root)"
            s = row.stats.get(key)
            if s is None:
                cells: list[Line] = [[(name, "layerscope.name")]]
                cells += [[("-", "")] for _ in cols[1:]]
                table_rows.append(TableRow(cells))
                continue
            cells = [[(name, "layerscope.name")]]
            if per_rank:
                cells += [[(fmt(v) if v is not None else "-", "")] for v in s.values]
            cells += [
                [(fmt(s.min), "")],
                [(fmt(s.median), "")],
                [(fmt(s.max), "")],
                [(f"rank {s.argmax}", "")],
                [(_ratio(s.imbalance), "")],
            ]
            style = "layerscope.notice" if s.imbalance >= IMBALANCED else ""
            table_rows.append(TableRow(cells, style))
        return Table(cols, table_rows)


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


def rank_table(
    profile: Profile,
    metrics: str | Sequence[str] | None = None,
    *,
    width: int | None = None,
    max_depth: int | None = None,
) -> str:
    """``rank_summary(profile, metrics)`` as plain text (``width``: the terminal's)."""
    from layerscope.render.console import terminal_width

    return rank_summary(profile, metrics).render(width or terminal_width(), max_depth)


def _metrics(metrics: str | Sequence[str] | None, have: set[str]) -> tuple[str, ...]:
    if metrics is None:
        first = "forward_time" if "forward_time" in have else "flops"
        keys = tuple(k for k in (first, "params") if k in have)
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


def _header(key: str) -> str:
    return column(key).header if has_column(key) else key


def _formatter(key: str) -> Any:
    kind = column(key).kind if has_column(key) else "number"
    fmt = units.BY_KIND.get(kind, units.magnitude)
    return fmt


def _ratio(x: float) -> str:
    return "inf" if x == float("inf") else f"{x:.2f}"
