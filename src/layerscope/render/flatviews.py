"""The flat views: ``top`` (the largest modules at each depth, or by type) and ``ops``
(every module by its own cost, so the % column adds up to 100 %).

Both take their rows from sources, (stage, context) pairs: one profile's view has one
source and no stage; a generation's stages (``render.stageviews``) give one source each,
and the table gains a Stage column, each stage's rows those of its own view."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import layerscope.metricspec as ms
from layerscope.analysis.catalog import column, has_column, pct_base
from layerscope.analysis.transforms import by_type, filter_tree, matches, top_k
from layerscope.profile import Node
from layerscope.render.context import Builder, ViewContext
from layerscope.render.layout import Line, TableColumn, TableRow, fit_table, wrap_text

__all__ = ["Footer", "Sources", "ops_builder", "ops_view", "top_builder", "top_view"]

#: Where a flat view's rows come from: (stage, context) pairs, in order. A stage of None
#: (one profile's view) adds no Stage column.
Sources = Sequence[tuple[str | None, ViewContext]]
#: The lines below a flat table: (hidden rows, total rows, dropped columns' headers,
#: width, the header of what ranks the rows) -> lines.
Footer = Callable[[int, int, list[str], int, str], list[Line]]

# ---- top and ops: flat lists -------------------------------------------------------------


def _flat_nodes(ctx: ViewContext) -> list[Node]:
    """Every module of the unfolded profile a flat view may list (root included),
    after max_depth, exclude and, when asked, hiding modules that did not run."""
    o = ctx.options
    shown = filter_tree(
        ctx.profile,
        max_depth=o.max_depth,
        exclude=o.exclude,
        hide_not_called=not o.show_not_called and ctx.ran,
    )
    return list(shown.root.walk())


_SHAPES = ("input_shape", "output_shape", "grad_input_shape", "grad_output_shape")


def _flat_columns(ctx: ViewContext, keys: Sequence[str], own: bool) -> list[str]:
    """The columns of a flat view: shapes only where the user named them (a by-type row
    leaves them blank: its modules have no one shape); with ``own``, self values (a key
    and its self form become one column)."""
    out = []
    for key in keys:
        if key in _SHAPES:
            if ctx.user_named(key) and key not in out:
                out.append(key)
            continue
        key = _own(key) if own else key
        if key not in out:
            out.append(key)
    return out


def _own_footer(ctx: ViewContext) -> Footer:
    """One profile's footer: its hidden rows and columns, then its facts."""

    def footer(
        hidden: int, total: int, dropped: list[str], width: int, ranked_by: str
    ) -> list[Line]:
        return ctx.footer(hidden, total, dropped, width, ranked_by=ranked_by)

    return footer


def _union(lists: Iterable[list[str]]) -> list[str]:
    """Column keys of every source, each once, in the order first met."""
    return list(dict.fromkeys(k for keys in lists for k in keys))


def _stage_cells(stage: str | None) -> list[Line]:
    return [] if stage is None else [[(stage, "")]]


def _label_cells(ctx: ViewContext, node: Node, root_name: str = "") -> list[Line]:
    """The module (or type) cells of a flat row."""
    if ctx.options.by_type:
        return [[(node.type, "layerscope.type")], [(str(node.repeat), "")]]
    return [[(node.path or root_name, "layerscope.name")], [(node.type, "layerscope.type")]]


def _label_columns(ctx: ViewContext, staged: bool) -> list[TableColumn]:
    """The Stage column (with stages), then the module (or type) columns."""
    columns = [ctx.text_column("stage", "Stage")] if staged else []
    if ctx.options.by_type:
        columns.append(ctx.text_column("type", "Type", label=True))
        columns.append(TableColumn("modules", "Modules", priority=85))
    else:
        columns.append(ctx.text_column("module", "Module", label=True))
        columns.append(ctx.text_column("type", "Type", priority=50))
    return columns


#: The drop priority, with stages, of the column that orders the rows and of its share.
_RANKING_PRIORITY = 95


def _metric_columns(ctx: ViewContext, keys: list[str], ranks: str | None) -> list[TableColumn]:
    """The metric columns. ``ranks``: with stages, the key that orders the rows; it and
    its % column are the last to go when the Stage column takes room."""
    columns = [ctx.table_column(c) for c in keys]
    base = None if ranks is None else pct_base(ranks)
    for col in columns:
        share = base is not None and col.key.endswith("_pct") and pct_base(col.key) == base
        if col.priority is not None and (col.key == ranks or share):
            col.core, col.priority = True, max(col.priority, _RANKING_PRIORITY)
    return columns


@dataclass
class _TopPicks:
    """One source's part of the top view: its columns, its sort key, its rows by depth."""

    keys: list[str]
    sort_key: str
    by_depth: dict[int, list[Node]]


def _top_picks(ctx: ViewContext, k: int) -> _TopPicks:
    o = ctx.options
    sort_key = ctx.sort_key
    nodes = [n for n in _flat_nodes(ctx) if n.depth > 0]
    if o.include:
        nodes = [n for n in nodes if matches(n, o.include)]
    keys = _flat_columns(ctx, ctx.columns, own=False)
    if o.by_type:  # summed rows: times as totals
        keys = list(dict.fromkeys(_total_time(c) for c in keys))
        sort_key = _total_time(sort_key)
    pct_key = f"{ctx.pct_base}_pct"
    by_depth: dict[int, list[Node]] = {}
    for depth in sorted({n.depth for n in nodes}):
        at_depth = [n for n in nodes if n.depth == depth]
        if o.by_type:
            at_depth = by_type(at_depth)
        if o.min_pct is not None:
            at_depth = [n for n in at_depth if (ctx.value(n, pct_key) or 0) >= o.min_pct]
        by_depth[depth] = top_k(at_depth, lambda n: ctx.value(n, sort_key), k)
    return _TopPicks(keys, sort_key, by_depth)


def top_view(ctx: ViewContext) -> Builder:
    return top_builder([(None, ctx)], _own_footer(ctx))


def top_builder(sources: Sources, footer: Footer) -> Builder:
    """The top view over ``sources``: at each depth, each source's top k in turn (the
    first source's options, columns and config lay the table out)."""
    ctx = sources[0][1]
    o = ctx.options
    k = o.top or 5
    staged = any(stage is not None for stage, _ in sources)
    picks = [_top_picks(c, k) for _, c in sources]
    keys = _union(p.keys for p in picks)
    rows: list[TableRow] = []
    sections: set[int] = set()
    for depth in sorted({d for p in picks for d in p.by_depth}):
        first = True
        for (stage, c), pick in zip(sources, picks, strict=True):
            for node in pick.by_depth.get(depth, []):
                cells: list[Line] = [[(str(depth) if first else "", "")]]
                first = False
                cells += _stage_cells(stage) + _label_cells(c, node)
                cells += [[(c.cell(node, key), "")] for key in keys]
                rows.append(TableRow(cells, c.row_style(node) if not o.by_type else ""))
        if rows:
            sections.add(len(rows) - 1)
    columns = [ctx.text_column("depth", "Depth", justify="right")]
    columns += _label_columns(ctx, staged)
    columns += _metric_columns(ctx, keys, picks[0].sort_key if staged else None)
    columns[0].justify = "right"
    table = ctx.table_style(columns, rows)
    table.sections = sections
    what = "module types" if o.by_type else "modules"
    ranked_by = ctx.header(picks[0].sort_key)
    title = f"Top {k} {what} by {ranked_by} at each depth"
    if staged:
        title += " of each stage"
    shares = {c.header for c in columns if c.key.endswith("_pct")} if staged else set()

    def lay_out(width: int) -> list[Line]:
        fitted = fit_table(table, width)
        shown = shares - set(fitted.dropped)
        heading = title + (" (% of the stage's total)" if shown else "")
        return (
            wrap_text(heading, "layerscope.header", width)
            + ctx.framed(fitted.lines, width)
            + footer(0, 0, fitted.dropped, width, ranked_by)
        )

    return lay_out


@dataclass
class _OpsPicks:
    """One source's part of the ops view: its columns, its sort key, its rows, and how
    many rows it had before include, min_pct and top."""

    keys: list[str]
    sort_key: str
    nodes: list[Node]
    total_rows: int


def _ops_picks(ctx: ViewContext) -> _OpsPicks:
    o = ctx.options
    nodes = _flat_nodes(ctx)
    total_rows = len(nodes)
    keys = _flat_columns(ctx, ctx.columns, own=True)
    sort_key = _own(ctx.sort_key)
    if o.by_type:
        nodes = by_type(nodes)
        total_rows = len(nodes)
    if o.include:
        nodes = [n for n in nodes if matches(n, o.include)]
    if o.min_pct is not None:
        pct_key = f"self_{ctx.pct_base}_pct"
        nodes = [n for n in nodes if (ctx.value(n, pct_key) or 0) >= o.min_pct]
    nodes = top_k(nodes, lambda n: ctx.value(n, sort_key), o.top)
    return _OpsPicks(keys, sort_key, nodes, total_rows)


def ops_view(ctx: ViewContext) -> Builder:
    return ops_builder([(None, ctx)], _own_footer(ctx))


def ops_builder(sources: Sources, footer: Footer) -> Builder:
    """The ops view over ``sources``: each source's rows in turn, a section each when
    they are stages (the first source's options, columns and config lay it out)."""
    ctx = sources[0][1]
    o = ctx.options
    staged = any(stage is not None for stage, _ in sources)
    picks = [_ops_picks(c) for _, c in sources]
    keys = _union(p.keys for p in picks)
    rows: list[TableRow] = []
    sections: set[int] = set()
    for (stage, c), pick in zip(sources, picks, strict=True):
        for node in pick.nodes:
            cells = _stage_cells(stage) + _label_cells(c, node, "<root>")
            cells += [[(c.cell(node, key), "")] for key in keys]
            rows.append(TableRow(cells, "" if o.by_type else c.row_style(node)))
        if staged and rows:
            sections.add(len(rows) - 1)
    columns = _label_columns(ctx, staged)
    columns += _metric_columns(ctx, keys, picks[0].sort_key if staged else None)
    table = ctx.table_style(columns, rows)
    table.sections = sections
    what = "Module types" if o.by_type else "Modules"
    ranked_by = ctx.header(picks[0].sort_key)
    where = " in each stage" if staged else ""
    title = f"{what} by {ranked_by}{where}: the work done directly in each module"
    # self shares add up to 100% over every module (by type too): said when one is shown
    shares = {c.header for c in columns if c.key.startswith("self_") and c.key.endswith("_pct")}
    total_rows = sum(p.total_rows for p in picks)

    def lay_out(width: int) -> list[Line]:
        fitted = fit_table(table, width)
        hidden = total_rows - len(rows)
        shown = shares - set(fitted.dropped)
        heading = title + (f", so the % column adds up to 100%{where}" if shown else "")
        return (
            wrap_text(heading, "layerscope.header", width)
            + ctx.framed(fitted.lines, width)
            + footer(fitted.rows_hidden(hidden), total_rows, fitted.dropped, width, ranked_by)
        )

    return lay_out


def _own(key: str) -> str:
    """The self form of a column key, for flat views (times as per-call × calls)."""
    if key.startswith("self_") or key == "calls":
        return _total_time(key)
    base = key.removesuffix("_pct")
    if key.endswith("_pct"):
        return f"self_{base}_pct" if has_column(f"self_{base}_pct") else key
    if base in ms.TIMES:
        return f"self_{base}_total"
    return f"self_{key}" if column(key).additive else key


def _total_time(key: str) -> str:
    """Per-call time keys as totals (aggregated rows have no per-call time)."""
    base = key.removeprefix("self_")
    if base in ms.TIMES:
        return f"{key}_total"
    return key
