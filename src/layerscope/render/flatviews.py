"""The flat views: ``top`` (the largest modules at each depth, or by type) and ``ops``
(every module by its own cost, so the % column adds up to 100 %)."""

from __future__ import annotations

from collections.abc import Sequence

import layerscope.metricspec as ms
from layerscope.analysis.catalog import column, has_column
from layerscope.analysis.transforms import by_type, filter_tree, matches, top_k
from layerscope.profile import Node
from layerscope.render.context import Builder, ViewContext
from layerscope.render.layout import Line, TableColumn, TableRow, fit_table, wrap_text

__all__ = ["ops_view", "top_view"]

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


def top_view(ctx: ViewContext) -> Builder:
    o = ctx.options
    k = o.top or 5
    sort_key = ctx.sort_key
    nodes = [n for n in _flat_nodes(ctx) if n.depth > 0]
    if o.include:
        nodes = [n for n in nodes if matches(n, o.include)]
    keys = _flat_columns(ctx, ctx.columns, own=False)
    if o.by_type:  # summed rows: times as totals
        keys = list(dict.fromkeys(_total_time(c) for c in keys))
        sort_key = _total_time(sort_key)
    depths = sorted({n.depth for n in nodes})
    rows: list[TableRow] = []
    sections: set[int] = set()
    pct_key = f"{ctx.pct_base}_pct"
    for depth in depths:
        at_depth = [n for n in nodes if n.depth == depth]
        if o.by_type:
            at_depth = by_type(at_depth)
        if o.min_pct is not None:
            at_depth = [n for n in at_depth if (ctx.value(n, pct_key) or 0) >= o.min_pct]
        for rank, node in enumerate(top_k(at_depth, lambda n: ctx.value(n, sort_key), k)):
            cells: list[Line] = [[(str(depth) if rank == 0 else "", "")]]
            if o.by_type:
                cells += [[(node.type, "layerscope.type")], [(str(node.repeat), "")]]
            else:
                cells += [[(node.path, "layerscope.name")], [(node.type, "layerscope.type")]]
            cells += [[(ctx.cell(node, c), "")] for c in keys]
            rows.append(TableRow(cells, ctx.row_style(node) if not o.by_type else ""))
        if rows:
            sections.add(len(rows) - 1)
    columns = [ctx.text_column("depth", "Depth", justify="right")]
    if o.by_type:
        columns += [
            ctx.text_column("type", "Type", label=True),
            TableColumn("modules", "Modules", priority=85),
        ]
    else:
        columns += [
            ctx.text_column("module", "Module", label=True),
            ctx.text_column("type", "Type", priority=50),
        ]
    columns += [ctx.table_column(c) for c in keys]
    columns[0].justify = "right"
    table = ctx.table_style(columns, rows)
    table.sections = sections
    what = "module types" if o.by_type else "modules"
    ranked_by = ctx.header(sort_key)
    title = f"Top {k} {what} by {ranked_by} at each depth"

    def lay_out(width: int) -> list[Line]:
        fitted = fit_table(table, width)
        return (
            wrap_text(title, "layerscope.header", width)
            + ctx.framed(fitted.lines, width)
            + ctx.footer(0, 0, fitted.dropped, width, ranked_by=ranked_by)
        )

    return lay_out


def ops_view(ctx: ViewContext) -> Builder:
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
    rows: list[TableRow] = []
    for node in nodes:
        if o.by_type:
            cells: list[Line] = [[(node.type, "layerscope.type")], [(str(node.repeat), "")]]
        else:
            cells = [[(node.path or "<root>", "layerscope.name")], [(node.type, "layerscope.type")]]
        cells += [[(ctx.cell(node, c), "")] for c in keys]
        rows.append(TableRow(cells, "" if o.by_type else ctx.row_style(node)))
    if o.by_type:
        columns = [
            ctx.text_column("type", "Type", label=True),
            TableColumn("modules", "Modules", priority=85),
        ]
    else:
        columns = [
            ctx.text_column("module", "Module", label=True),
            ctx.text_column("type", "Type", priority=50),
        ]
    columns += [ctx.table_column(c) for c in keys]
    table = ctx.table_style(columns, rows)
    what = "Module types" if o.by_type else "Modules"
    ranked_by = ctx.header(sort_key)
    title = f"{what} by {ranked_by}: the work done directly in each module"
    # self shares add up to 100% over every module (by type too): said when one is shown
    shares = {c.header for c in columns if c.key.startswith("self_") and c.key.endswith("_pct")}

    def lay_out(width: int) -> list[Line]:
        fitted = fit_table(table, width)
        hidden = total_rows - len(rows)
        shown = shares - set(fitted.dropped)
        heading = title + (", so the % column adds up to 100%" if shown else "")
        return (
            wrap_text(heading, "layerscope.header", width)
            + ctx.framed(fitted.lines, width)
            + ctx.footer(hidden, total_rows, fitted.dropped, width, ranked_by=ranked_by)
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
