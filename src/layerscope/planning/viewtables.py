"""The text views' tables in the configured style, and fitted to a width with a line
naming the columns that went (``planning.view``, ``planning.pipelineview``)."""

from __future__ import annotations

from layerscope.render import config as display_config
from layerscope.render.layout import Line, Table, TableColumn, TableRow, fit_table, wrap_text

#: How a line that names the hidden columns ends.
WIDEN = "(widen with --width / width=)."


def table(columns: list[TableColumn], rows: list[TableRow], total: TableRow | None) -> Table:
    """A table in the configured style (box, header style), as the other views draw."""
    t = display_config.current().table
    return Table(
        columns=columns, rows=rows, total=total, box=t.box, show_edge=t.show_edge,
        show_header=t.show_header, header_style=t.header_style, border_style=t.border_style,
        row_styles=t.row_styles,
    )  # fmt: skip


def row(*cells: str, style: str = "") -> TableRow:
    """A row of plain cells (``style``: the whole row's)."""
    return TableRow([[(c, "")] for c in cells], style)


def fitted(table: Table, width: int) -> tuple[list[Line], list[str]]:
    """The table at ``width`` and, when columns had to go, the line that says which; and
    the headers of the columns that went."""
    fitted = fit_table(table, width)
    lines = list(fitted.lines)
    if fitted.dropped:
        text = f"Hidden to fit {width} columns: {', '.join(fitted.dropped)} {WIDEN}"
        lines += wrap_text(text, "layerscope.hidden", width)
    return lines, fitted.dropped


__all__ = ["WIDEN", "fitted", "row", "table"]
