"""The diff view: two profiles side by side, module by module (``ls.diff(a, b).show()``).

Columns: Module, then per metric A, B, Δ (B - A) and × (B / A), under a line naming the
metric, in the units of the other views. Rows are the tree (indented) or, with
``sort_by``, a flat list by the largest absolute change. Added modules are marked ``+``,
removed ``-``, type changes ``~``. The table engine (``render.layout``) lays it out, so
numbers are never cut: a narrow width drops the least important metric's columns first
(A, then B, ×, Δ) and says so below.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import IO, Any

from rich.console import Console
from rich.theme import Theme

import layerscope.metricspec as ms
from layerscope.analysis.catalog import column, has_column
from layerscope.analysis.diff import Change, DiffRow, ProfileDiff
from layerscope.gcpause import gc_paused
from layerscope.render import config as display_config
from layerscope.render import units
from layerscope.render.layout import (
    Line,
    LinesRenderable,
    Table,
    TableColumn,
    TableRow,
    cut_end,
    fit_table,
    plain_text,
    terminal_width,
    text_of,
    too_narrow,
    width_of,
    wrap_text,
)
from layerscope.render.treeviews import shorten_label
from layerscope.validate import (
    check_int,
    check_keys,
    check_names,
    check_number,
    close_matches,
    refuse,
)

__all__ = [
    "DIFF_THEME",
    "OPTION_NAMES",
    "DiffOptions",
    "check_diff",
    "diff_options",
    "render",
    "show",
]

#: Styles of the row markers; a display config's theme may override them.
DIFF_THEME: dict[str, str] = {
    "layerscope.diff.added": "green",
    "layerscope.diff.removed": "red",
    "layerscope.diff.changed": "yellow",
}

_MARKS = {
    "same": (" ", ""),
    "added": ("+", "layerscope.diff.added"),
    "removed": ("-", "layerscope.diff.removed"),
    "type_changed": ("~", "layerscope.diff.changed"),
}

#: The four columns of a metric, and the order a narrow table drops them in.
_ROLES = ("A", "B", "Δ", "×")
_DROP_ROLES = ("A", "B", "×", "Δ")


@dataclass(frozen=True)
class DiffOptions:
    """One view of a ProfileDiff. Build it with ``diff_options(d, **kwargs)``."""

    #: Metric keys (``flops``, ``self_flops``, ``calls``, ...); None: those either has.
    metrics: tuple[str, ...] | None = None
    #: Flat list, largest absolute change of this metric first (None: the tree).
    sort_by: str | None = None
    #: Keep the k rows with the largest absolute change of the sort metric.
    top: int | None = None
    #: Hide rows whose change of the sort metric is below this % of A.
    min_change_pct: float | None = None
    width: int | None = None


OPTION_NAMES: tuple[str, ...] = tuple(f.name for f in fields(DiffOptions))


def available(d: ProfileDiff) -> list[str]:
    """Metric keys the diff can show: either profile's metrics, then their self forms."""
    return [*d.metric_keys, *(f"self_{k}" for k in d.self_keys)]


def diff_options(d: ProfileDiff, **kwargs: Any) -> DiffOptions:
    """Validate keyword options for ``d``; every error names the allowed values."""
    return check_diff(d, kwargs)


def check_diff(
    d: ProfileDiff, options: Mapping[str, Any], labels: Mapping[str, str] | None = None
) -> DiffOptions:
    """``options`` validated for ``d``; a refusal names an option by ``labels[name]`` when
    given (the CLI's flags), else by its name."""
    check_keys("the diff options", options, OPTION_NAMES, noun="option")
    names = {name: name for name in OPTION_NAMES} | dict(labels or {})
    out: dict[str, Any] = {}
    allowed = available(d)
    if options.get("metrics") is not None:
        label = names["metrics"]
        keys = check_names(label, options["metrics"])
        if not keys:
            refuse(label, options["metrics"], f"one or more of {', '.join(allowed)}")
        out["metrics"] = tuple(dict.fromkeys(_metric(label, k, allowed) for k in keys))
    if options.get("sort_by") is not None:
        out["sort_by"] = _metric(names["sort_by"], options["sort_by"], allowed)
    for name in ("top", "width"):
        if options.get(name) is not None:
            out[name] = check_int(names[name], options[name], 1)
    if options.get("min_change_pct") is not None:
        label = names["min_change_pct"]
        out["min_change_pct"] = check_number(label, options["min_change_pct"], 0.0)
    return DiffOptions(**out)


def _metric(name: str, key: Any, allowed: list[str]) -> str:
    if isinstance(key, str) and key in allowed:
        return key
    try:
        known = isinstance(key, str) and bool(column(key))
    except KeyError:
        known = False
    refuse(
        name,
        key,
        f"one of {', '.join(allowed)}",
        why="neither profile has it" if known else "",
        close=close_matches(key, allowed),
    )


# ---- entry points --------------------------------------------------------------------


def _theme_styles() -> dict[str, str]:
    return {**DIFF_THEME, **display_config.current().theme}


def renderable(d: ProfileDiff, options: DiffOptions | None = None) -> LinesRenderable:
    """A rich renderable of the diff view; it lays itself out for the console's width."""
    options = options or DiffOptions()
    return LinesRenderable(build(d, options), _theme_styles, options.width)


def render(d: ProfileDiff, **options: Any) -> str:
    """The diff view as plain text; ``width`` defaults to the terminal's (80 without one)."""
    opts = diff_options(d, **options)
    with gc_paused():
        return plain_text(build(d, opts)(opts.width or terminal_width()))


def show(d: ProfileDiff, file: IO[str] | None = None, **options: Any) -> None:
    """Print the diff view to the terminal (colours when it is one) or to ``file``."""
    opts = diff_options(d, **options)
    console = Console(
        file=file or sys.stdout,
        theme=Theme(_theme_styles()),
        width=opts.width,
        highlight=False,
        soft_wrap=False,
    )
    console.print(renderable(d, opts))


# ---- the view ------------------------------------------------------------------------


#: Metrics a diff shows only when asked for: bytes moved follow FLOPs and shapes.
_ON_REQUEST = frozenset({ms.BYTES_ACCESSED, ms.BACKWARD_BYTES_ACCESSED})


def default_metrics(d: ProfileDiff) -> list[str]:
    """What the view shows unless told: each metric either profile has, where it is not
    0 everywhere (params and times always; bytes moved only on request), and calls where
    a module's count changed."""
    out = []
    for key in d.metric_keys:
        if not has_column(key) or key in _ON_REQUEST:  # e.g. spread statistics: by name
            continue
        changes = [r.metrics[key] for r in d.rows]
        if key == "calls":
            if any(c.delta for r, c in zip(d.rows, changes, strict=True) if r.status != "added"):
                out.append(key)
        elif key == ms.PARAMS or key in ms.TIMES or any(c.a or c.b for c in changes):
            out.append(key)
    return out


def _header(key: str) -> str:
    try:
        return column(key).header
    except KeyError:
        return key


def _kind(key: str) -> str:
    try:
        return column(key).kind
    except KeyError:
        return "number"


def _importance(key: str) -> int:
    try:
        return column(key).priority
    except KeyError:
        return 0


def value_text(key: str, value: float | None) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value != value:
        return "nan"
    return units.BY_KIND[_kind(key)](value)


def delta_text(key: str, delta: float | None) -> str:
    """``+544``, ``-272 B``, ``0``: the change in the metric's units, signed."""
    if delta is None:
        return ""
    if delta == 0:
        return "0"
    if delta != delta:
        return "nan"
    return ("+" if delta > 0 else "-") + units.BY_KIND[_kind(key)](abs(delta))


def ratio_text(ratio: float | None) -> str:
    """``2.00``, ``0.50``; 3 significant digits outside 0.01 to 1000."""
    if ratio is None:
        return ""
    if ratio == 0:
        return "0"
    if 0.01 <= abs(ratio) < 1000:
        return f"{ratio:.2f}"
    return f"{ratio:.3g}"


def _first_changed(d: ProfileDiff, keys: list[str]) -> str | None:
    """The sort metric when none is given: the first shown metric whose whole-model
    value changes (else the first shown)."""
    root = d.rows[0]
    for key in keys:
        c = root.value(key)
        if c is not None and c.delta:
            return key
    return keys[0] if keys else None


def _magnitude(change: Change | None) -> float:
    """The absolute change, for sorting (-1 when unknown: last)."""
    if change is None or change.delta is None:
        return -1.0
    return abs(float(change.delta))


class _View:
    """The width-independent part: rows chosen, cells made, column drop order."""

    def __init__(self, d: ProfileDiff, options: DiffOptions) -> None:
        self.d = d
        self.o = options
        keys = list(options.metrics) if options.metrics is not None else default_metrics(d)
        if not keys:
            keys = [d.metric_keys[0]] if d.metric_keys else []
        if options.sort_by is not None and options.sort_by not in keys:
            keys.insert(0, options.sort_by)
        self.keys = keys
        self.rank_key: str | None = options.sort_by or _first_changed(d, keys)
        if options.metrics is not None:
            important = keys  # the user's order
        else:
            important = sorted(keys, key=lambda k: -_importance(k))
        if options.sort_by is not None:
            important = [options.sort_by, *(k for k in important if k != options.sort_by)]
        self.flat = options.sort_by is not None
        self.rows, self.total_rows = self._select()
        self.partial = set(d.a.partial_metrics) | set(d.b.partial_metrics)
        self.table, self.groups, self.drop_order = self._table(important)

    # ---- rows ------------------------------------------------------------------------
    def _passes(self, row: DiffRow) -> bool:
        limit = self.o.min_change_pct
        if limit is None or row.status != "same" or self.rank_key is None:
            return True
        change = row.value(self.rank_key)
        pct = change.pct if change is not None else None
        return pct is None or abs(pct) >= limit

    def _top(self, rows: list[DiffRow]) -> list[DiffRow]:
        if self.o.top is None or self.rank_key is None:
            return rows
        key = self.rank_key
        ranked = sorted(rows, key=lambda r: -_magnitude(r.value(key)))  # stable
        return ranked[: self.o.top]

    def _select(self) -> tuple[list[DiffRow], int]:
        rows = self.d.rows
        modules = [r for r in rows if r.parent is not None]
        if self.flat:
            key = self.rank_key
            assert key is not None
            kept = [r for r in modules if self._passes(r)]
            kept = sorted(kept, key=lambda r: -_magnitude(r.value(key)))
            return self._top(kept), len(modules)
        if self.o.min_change_pct is None and self.o.top is None:
            return list(rows), len(rows)
        chosen = set(map(id, self._top([r for r in modules if self._passes(r)])))
        keep: set[int] = set()
        for r in rows:
            if r.parent is None:
                keep.add(id(r))
            elif id(r) in chosen:
                up: DiffRow | None = r
                while up is not None and id(up) not in keep:
                    keep.add(id(up))
                    up = up.parent
        return [r for r in rows if id(r) in keep], len(rows)

    # ---- cells -----------------------------------------------------------------------
    def label(self, row: DiffRow) -> tuple[Line, int]:
        mark, style = _MARKS[row.status]
        kind = row.type
        if row.status == "type_changed":
            kind = f"{row.type_a} → {row.type_b}"
        if self.flat:
            head = f"{mark} "
            body: Line = [(row.path, "layerscope.name"), (" ", ""), (kind, "layerscope.type")]
        else:
            head = f"{mark} " + "  " * row.depth
            body = [(kind, "layerscope.type")]
            if row.parent is not None:
                body = [(row.name, "layerscope.name"), (" ", ""), *body]
        return [(head, style), *body], 1

    def cells(self, row: DiffRow, total: bool = False) -> list[Line]:
        """A, B, Δ and × of each metric; on the Total row a self metric is the whole
        model's (the sum of every module's own), where it adds up."""
        out: list[Line] = []
        for key in self.keys:
            c = row.value(key)
            if total and key.startswith("self_"):
                base = key.removeprefix("self_")
                c = row.metrics.get(base) if base in ms.ADDITIVE else None
            if c is None:
                out += [[("", "")]] * 4
                continue
            out += [
                [(value_text(key, c.a), "")],
                [(value_text(key, c.b), "")],
                [(delta_text(key, c.delta), "")],
                [(ratio_text(c.ratio), "")],
            ]
        return out

    def _table(self, important: list[str]) -> tuple[Table, list[tuple[str, list[int]]], list[int]]:
        config = display_config.current().table
        columns = [
            TableColumn(
                "module",
                "Module",
                justify="left",
                priority=None,
                label=True,
                shorten=shorten_label,
                text=True,
            )
        ]
        groups: list[tuple[str, list[int]]] = []
        index: dict[tuple[str, str], int] = {}
        for key in self.keys:
            base = key.removeprefix("self_")
            name = _header(key) + ("*" if base in self.partial else "")
            members = []
            for role in _ROLES:
                index[key, role] = len(columns)
                members.append(len(columns))
                columns.append(TableColumn(f"{key}:{role}", role))
            groups.append((name, members))
        rows = []
        for r in self.rows:
            label, prefix = self.label(r)
            rows.append(TableRow([label, *self.cells(r)], prefix=prefix))
        # columns with no value first (Δ of a metric only one side has), then the least
        # important metric, column by column; distinct priorities, so the columns dropped
        # are the first ones of this list
        order = [index[k, role] for k in reversed(important) for role in _DROP_ROLES]
        empty = [i for i in order if not any(text_of(r.cells[i]) for r in rows)]
        drop_order = empty + [i for i in order if i not in empty]
        for priority, i in enumerate(drop_order, start=1):
            columns[i].priority = priority
        for name, members in groups:  # a metric's last column is as wide as its name
            last = max(members, key=drop_order.index)
            columns[last].header = columns[last].header.rjust(len(name))
        table = Table(
            columns=columns,
            rows=rows,
            box="SIMPLE_HEAD",
            header_style=config.header_style,
            border_style=config.border_style,
        )
        if self.flat:
            root = self.d.rows[0]
            table.total = TableRow(
                [[("Total", "layerscope.total")], *self.cells(root, total=True)],
                "layerscope.total",
            )
        return table, groups, drop_order

    # ---- lines around the table --------------------------------------------------------
    def title(self, width: int) -> list[Line]:
        a, b = self.d.a, self.d.b
        name_a = a.model.get("name") or a.root.type
        name_b = b.model.get("name") or b.root.type
        text = f"A: {name_a}, B: {name_b}"
        shown = [(k, v) for k, v in self.d.facts.items() if k not in ("model.name",)]
        if shown:
            text += "; they differ in " + ", ".join(
                f"{_fact_label(k)} {_fact_value(k, va)} → {_fact_value(k, vb)}"
                for k, (va, vb) in shown
            )
        else:
            text += "; same run and environment"
        return wrap_text(text + ".", "layerscope.header", width)

    def group_line(self, header: Line, widths: dict[int, int]) -> Line:
        """The metric names above their columns (``──── FLOPs ────``)."""
        border = self.table.header_style
        line: Line = []
        pos = 0
        starts: dict[int, int] = {}
        x = 0
        for i in sorted(widths):
            starts[i] = x
            x += widths[i] + 3
        for name, members in self.groups:
            shown = [i for i in members if i in widths]
            if not shown:
                continue
            start = starts[shown[0]]
            span = starts[shown[-1]] + widths[shown[-1]] - start
            line.append((" " * (start - pos), ""))
            if span >= len(name) + 4:
                left = (span - len(name) - 2) // 2
                right = span - len(name) - 2 - left
                line += [
                    ("─" * left + " ", self.table.border_style),
                    (name, border),
                    (" " + "─" * right, self.table.border_style),
                ]
            else:
                text = text_of(cut_end([(name, "")], span))
                gap = span - len(text)
                line.append((" " * (gap // 2) + text + " " * (gap - gap // 2), border))
            pos = start + span
        return line

    def footer(self, dropped: list[int], width: int) -> list[Line]:
        d = self.d
        lines: list[Line] = []
        structure = [
            f"{len(d.added)} added (+)" if d.added else "",
            f"{len(d.removed)} removed (-)" if d.removed else "",
            f"{len(d.changed_types)} type changed (~)" if d.changed_types else "",
        ]
        count_a = sum(1 for r in d.rows if r.node_a is not None)
        count_b = sum(1 for r in d.rows if r.node_b is not None)
        parts = [p for p in structure if p]
        text = (
            f"Modules: {count_a} in A, {count_b} in B; " + ", ".join(parts)
            if parts
            else f"Modules: the same {count_a} paths in A and B"
        )
        lines += wrap_text(text + ".", "", width)
        shown = len(self.rows)
        if shown < self.total_rows:
            why = []
            rank = _header(self.rank_key) if self.rank_key else ""
            if self.o.min_change_pct is not None:
                why.append(f"min_change_pct {self.o.min_change_pct:g}% of {rank}")
            if self.o.top is not None:
                why.append(f"top {self.o.top} by |Δ {rank}|")
            text = f"Showing {shown} of {self.total_rows} rows ({'; '.join(why)})"
            if self.flat:
                text += "; the Total row is the whole model"
            lines += wrap_text(text + ".", "layerscope.hidden", width)
        if dropped:
            names: dict[str, list[str]] = {}
            cols = self.table.columns
            for name, members in self.groups:
                gone = [cols[i].header.strip() for i in members if i in dropped]
                if gone:
                    names[name] = gone
            listed = "; ".join(f"{name} {', '.join(roles)}" for name, roles in names.items())
            lines += wrap_text(
                f"Hidden to fit {width} columns: {listed} (widen with --width / width=, or "
                "choose with --columns / metrics=).",
                "layerscope.hidden",
                width,
            )
        key = self.o.sort_by
        if key is not None and all(_magnitude(r.value(key)) < 0 for r in d.rows):
            lines += wrap_text(
                f"No module has a change of {_header(key)} (one profile lacks it): rows are "
                "in tree order.",
                "layerscope.notice",
                width,
            )
        for side, only in (("A", d.only_in_a), ("B", d.only_in_b)):
            keys = [k for k in only if has_column(k)]
            if keys:
                lines += wrap_text(
                    f"Only {side} has {', '.join(_header(k) for k in keys)}.",
                    "layerscope.notice",
                    width,
                )
        for side, p in (("A", d.a), ("B", d.b)):
            if p.partial_metrics:
                ops = ", ".join(sorted(p.unsupported_ops))
                lines += wrap_text(
                    f"Partial in {side} (marked *): {', '.join(p.partial_metrics)} miss ops "
                    f"without a FLOP formula ({ops}).",
                    "layerscope.notice",
                    width,
                )
        return lines


def build(d: ProfileDiff, options: DiffOptions) -> Callable[[int], list[Line]]:
    """The diff view as a function of the width."""
    view = _View(d, options)
    table = view.table
    natural: dict[int, int] = {}
    body = [*table.rows, *([table.total] if table.total is not None else [])]
    for i, col in enumerate(table.columns):
        natural[i] = max([len(col.header), *(width_of(r.cells[i]) for r in body)])

    def lay_out(width: int) -> list[Line]:
        narrow = too_narrow(width)
        if narrow is not None:
            return narrow
        fitted = fit_table(table, width)
        dropped = view.drop_order[: len(fitted.dropped)]
        lines = fitted.lines
        if lines and text_of(lines[0]).startswith(table.columns[0].header):
            widths = {i: natural[i] for i in range(len(table.columns)) if i not in dropped}
            others = sum(w for i, w in widths.items() if i)
            widths[0] = width_of(lines[0]) - others - 3 * (len(widths) - 1)
            lines = [view.group_line(lines[0], widths), *lines]
        return view.title(width) + lines + view.footer(dropped, width)

    return lay_out


# ---- facts ---------------------------------------------------------------------------

_FACT_LABELS = {
    "model.name": "model",
    "model.class": "class",
    "model.ran": "run",
    "model.training": "mode",
    "model.grad_mode": "grad mode",
    "env.cuda": "CUDA",
    "inputs": "inputs",
}


def _fact_label(key: str) -> str:
    return _FACT_LABELS.get(key, key.partition(".")[2] or key)


def _fact_value(key: str, value: Any) -> str:
    if value is None:
        return "none"
    if key == "model.training" and isinstance(value, bool):
        return "train" if value else "eval"
    if key == "model.ran" and isinstance(value, bool):
        return "yes" if value else "no (structure only)"
    return str(value)
