"""The cross-rank view: one table per metric of a ``RankSummary`` (``analysis.ranks``).

The tables use the table engine of the other views, fitted to the width (the per-rank
columns, shown for up to 4 ranks, go first when it is narrow, then the min).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import layerscope.metricspec as ms
from layerscope.analysis.catalog import column, has_column
from layerscope.analysis.ranks import RankRow, RankSummary, rank_summary
from layerscope.profile import Profile
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
    terminal_width,
    too_narrow,
    wrap_text,
)

__all__ = ["rank_summary", "rank_table", "render_summary", "renderable", "summary_lines"]

#: Per-rank value columns are shown up to this many ranks.
MAX_RANK_COLUMNS = 4
#: Imbalance from which a row is highlighted.
IMBALANCED = 1.1


def summary_lines(summary: RankSummary, width: int, max_depth: int | None = None) -> list[Line]:
    """The styled lines of ``summary`` at ``width`` (``max_depth``: deepest row shown)."""
    note = too_narrow(width)
    if note is not None:
        return note
    rows = [r for r in summary.rows if max_depth is None or r.depth <= max_depth]
    out: list[Line] = []
    for n, key in enumerate(summary.metrics):
        if n:
            out.append([])
        title = f"{_header(key)} over {len(summary.ranks)} ranks"
        out.append([(title, "layerscope.header")])
        fitted = fit_table(
            _table(summary, key, rows, len(summary.ranks) <= MAX_RANK_COLUMNS), width
        )
        if any(h.startswith("Rank ") for h in fitted.dropped):  # all of them or none
            fitted = fit_table(_table(summary, key, rows, False), width)
        out.extend(fitted.lines)
    out.append([])
    footer = "imbalance = max / median over the ranks"
    if any(k in ms.TIMES for k in summary.metrics):
        footer += "; times are per call"
    out.extend(wrap_text(footer, "layerscope.notice", width))
    return out


def render_summary(
    summary: RankSummary, width: int | None = None, max_depth: int | None = None
) -> str:
    """``summary`` as plain text, ``width`` characters wide (default: the terminal's)."""
    return plain_text(summary_lines(summary, width or terminal_width(), max_depth))


def renderable(summary: RankSummary) -> LinesRenderable:
    """``summary`` for ``rich``: its lines at the console's width, in the current theme."""
    return LinesRenderable(
        lambda width: summary_lines(summary, width), lambda: dict(display_config.current().theme)
    )


def _table(summary: RankSummary, key: str, rows: Sequence[RankRow], per_rank: bool) -> Table:
    fmt = _formatter(key)
    cols = [TableColumn("module", "Module", "left", None, label=True, text=True)]
    if per_rank:
        cols += [TableColumn(f"r{r}", f"Rank {r}", priority=10) for r in summary.ranks]
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


def rank_table(
    profile: Profile,
    metrics: str | Sequence[str] | None = None,
    *,
    width: int | None = None,
    max_depth: int | None = None,
) -> str:
    """``rank_summary(profile, metrics)`` as plain text (``width``: the terminal's)."""
    return render_summary(rank_summary(profile, metrics), width, max_depth)


def _header(key: str) -> str:
    return column(key).header if has_column(key) else key


def _formatter(key: str) -> Any:
    kind = column(key).kind if has_column(key) else "number"
    fmt = units.BY_KIND.get(kind, units.magnitude)
    return fmt


def _ratio(x: float) -> str:
    return "inf" if x == float("inf") else f"{x:.2f}"
