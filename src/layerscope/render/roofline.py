"""The roofline view of a profile and the text of a roofline estimate.

``view="roofline"`` (with ``device=``) lists every module by its own work (self FLOPs
and bytes, so nothing is counted twice): intensity, bound, roofline time and, with a
timing pass, measured time, efficiency and the time lost to inefficiency, sorted by the
time lost (by roofline time without timing). ``render_estimate`` writes an
``ls.estimate`` result as a table of modules with their lower-bound times.
"""

from __future__ import annotations

from typing import Any

import layerscope.metricspec as ms
from layerscope.analysis.roofline import Estimate, Roof
from layerscope.analysis.transforms import filter_tree, matches, top_k
from layerscope.errors import InvalidInputError
from layerscope.profile import Node
from layerscope.render import units
from layerscope.render.context import Builder, ViewContext
from layerscope.render.layout import (
    Line,
    TableRow,
    fit_table,
    plain_text,
    terminal_width,
    wrap_text,
)
from layerscope.render.options import view_options
from layerscope.render.treeviews import tree_table

__all__ = ["flat_path", "render_estimate", "roof_title", "roofline_view"]


def roof_title(roof: Roof, label: str = "") -> str:
    return (
        f"Roofline on {label or roof.name} ({roof.dtype}: peak {units.si(roof.peak)}FLOP/s, "
        f"{units.si(roof.bandwidth)}B/s; ridge {roof.ridge:.3g} FLOP/B)"
    )


#: Short headers in this view (every value is the module's own work: the title says so).
_HEADERS = {
    "self_flops": "FLOPs",
    "self_bytes_accessed": "Bytes",
    "self_intensity": "FLOP/B",
    "self_bound": "Bound",
    "self_roofline_time": "Roofline",
    "self_forward_time_total": "Measured",
    "self_efficiency": "Eff",
    "self_lost_time": "Lost",
    "self_backward_intensity": "Bwd FLOP/B",
    "self_backward_roofline_time": "Bwd roofline",
    "self_backward_efficiency": "Bwd eff",
    "self_backward_lost_time": "Bwd lost",
}
_PRIORITY = {
    "self_lost_time": 95,
    "self_efficiency": 94,
    "self_roofline_time": 93,
    "self_forward_time_total": 92,
    "self_bound": 91,
    "self_intensity": 90,
    "self_flops": 40,
    "self_bytes_accessed": 39,
}


def roofline_view(ctx: ViewContext) -> Builder:
    o = ctx.options
    roof = ctx.values.roof
    assert roof is not None  # view_options refuses the view without a device
    profile = ctx.profile
    timed = ms.FORWARD_TIME in profile.root.metrics
    backward = ms.BACKWARD_BYTES_ACCESSED in profile.root.metrics
    keys = ["self_flops", "self_bytes_accessed", "self_intensity", "self_bound"]
    keys += ["self_roofline_time"]
    if timed:
        keys += ["self_forward_time_total", "self_efficiency", "self_lost_time"]
    if backward:
        keys += ["self_backward_intensity", "self_backward_roofline_time"]
        if ms.BACKWARD_TIME in profile.root.metrics:
            keys += ["self_backward_efficiency", "self_backward_lost_time"]
    if o.columns is not None:
        keys = list(o.columns)
    sort_key = o.sort_by or ("self_lost_time" if timed else "self_roofline_time")
    ctx.sort_key = sort_key  # what the footer names for top
    shown = filter_tree(
        ctx.folded(),
        max_depth=o.max_depth,
        exclude=o.exclude,
        hide_not_called=not o.show_not_called and ctx.ran,
    )
    nodes = [n for n in shown.root.walk() if n.self_metrics.get(ms.BYTES_ACCESSED)]
    listed = len(nodes)
    if o.include:
        nodes = [n for n in nodes if matches(n, o.include)]
    nodes = top_k(nodes, lambda n: ctx.value(n, sort_key), o.top or len(nodes) or 1)
    rows = [
        TableRow(
            [[(flat_path(n), "layerscope.name")], [(n.type, "layerscope.type")]]
            + [[(ctx.cell(n, k), "")] for k in keys],
            ctx.row_style(n),
        )
        for n in nodes
    ]
    columns = [
        ctx.text_column("module", "Module", label=True),
        ctx.text_column("type", "Type", priority=20),
    ]
    for k in keys:
        col = ctx.table_column(k, header=_HEADERS.get(k))
        if o.columns is None:  # the roofline's own columns stay longest
            col.priority = _PRIORITY.get(k, col.priority)
        columns.append(col)
    table = ctx.table_style(columns, rows)
    by = _HEADERS.get(sort_key) or ctx.header(sort_key)
    title = roof_title(roof) + f"; each module's own work (self), by {by}"
    note = "Roofline time = max(FLOPs / peak, bytes / bandwidth): a lower bound on the time." + (
        " Eff = roofline / measured time; Lost = measured - roofline." if timed else ""
    )

    def lay_out(width: int) -> list[Line]:
        fitted = fit_table(table, width)
        return (
            wrap_text(title, "layerscope.header", width)
            + ctx.framed(fitted.lines, width)
            + wrap_text(note, "", width)
            + ctx.footer(fitted.rows_hidden(listed - len(rows)), listed, fitted.dropped, width)
        )

    return lay_out


def flat_path(node: Node) -> str:
    """A row's module in a flat list: its path, or for a folded entry the path through
    the folded names and how many modules it stands for (``blocks.0–11.attn ×12``)."""
    if len(node.members) < 2:
        return node.path or "<root>"
    names = []
    up: Node | None = node
    while up is not None and up.parent is not None:
        names.append(up.name)
        up = up.parent
    return f"{'.'.join(reversed(names))} ×{len(node.members)}"


#: The estimate's columns (keys of the catalog), its headers and what stays longest.
_ESTIMATE_HEADERS = {
    "flops": "FLOPs",
    "bytes_accessed": "Bytes",
    "intensity": "FLOP/B",
    "bound": "Bound",
    "roofline_time": "Fwd min",
    "forward_time_total": "Measured",
    "efficiency": "Eff",
    "backward_roofline_time": "Bwd min",
}
_ESTIMATE_PRIORITY = {
    "roofline_time": 95,
    "backward_roofline_time": 94,
    "forward_time_total": 90,
    "efficiency": 89,
    "bound": 80,
    "intensity": 70,
    "flops": 60,
    "bytes_accessed": 55,
}
#: View options that do not apply to an estimate: its view and device are its own.
_NOT_FOR_ESTIMATE = ("view", "device", "by_type")


def estimate_columns(estimate: Estimate) -> list[str]:
    """The estimate's columns: work, bound and lower bounds, and the measured time and
    efficiency when the profile was timed."""
    keys = ["flops", "bytes_accessed", "intensity", "bound", "roofline_time"]
    if any(m.measured is not None for m in estimate):
        keys += ["forward_time_total", "efficiency"]
    if any(m.backward_time is not None for m in estimate):
        keys += ["backward_roofline_time"]
    return keys


def render_estimate(estimate: Estimate, **options: Any) -> str:
    """``estimate`` as plain text: its title and whole-model times, then the table view of
    its profile with the estimate's columns (folded, filtered and sorted as ``options``
    say; inclusive lower-bound times), then what was hidden and the estimate's notices."""
    profile = estimate.profile
    if profile is None:
        raise InvalidInputError(
            "this estimate holds no profile to show: make it with ls.estimate(prof, device)"
        )
    for name in _NOT_FOR_ESTIMATE:
        if name in options:
            raise InvalidInputError(
                f"{name} does not apply to an estimate: it is the table of its profile on "
                f"{estimate.device} (ls.estimate(prof, device) picks the device)"
            )
    opts = view_options(**{"columns": estimate_columns(estimate), "pct": False, **options})
    roof = Roof(estimate.peak, estimate.bandwidth, estimate.device, estimate.dtype)
    ctx = ViewContext(profile, opts, roof=roof)
    table, hidden, total_rows = tree_table(ctx)
    table.total = None  # the first row is the whole model
    for col in table.columns:
        col.header = ctx.config.column(col.key).header or _ESTIMATE_HEADERS.get(col.key, col.header)
        if options.get("columns") is None and col.key in _ESTIMATE_PRIORITY:
            col.priority = _ESTIMATE_PRIORITY[col.key]
    width = opts.width or terminal_width()
    whole = estimate.model
    total = whole.time + (whole.backward_time or 0.0)
    lines = [roof_title(roof, estimate.device)]
    lines.append(
        f"Estimated time (a lower bound: no kernel does the work faster): forward "
        f"{units.seconds(whole.time)}"
        + (f", backward {units.seconds(whole.backward_time)}" if whole.backward_time else "")
        + (f", together {units.seconds(total)}" if whole.backward_time else "")
        + "."
    )
    # the title, the estimate and the table, a blank line apart
    parts = [plain_text(wrap_text(line, "", width)).rstrip("\n") for line in lines]
    fitted = fit_table(table, width)
    below = fitted.lines + ctx.footer(
        fitted.rows_hidden(hidden), total_rows, fitted.dropped, width, summary=False
    )
    for notice in estimate.notices:
        below += wrap_text(notice, "layerscope.notice", width)
    parts.append(plain_text(below).rstrip("\n"))
    return "\n\n".join(parts) + "\n"
