"""The roofline view of a profile and the text of a roofline estimate.

``view="roofline"`` (with ``device=``) lists every module by its own work (self FLOPs
and bytes, so nothing is counted twice): intensity, bound, roofline time and, with a
timing pass, measured time, efficiency and the time lost to inefficiency, sorted by the
time lost (by roofline time without timing). ``render_estimate`` writes an
``ls.estimate`` result as a table of modules with their lower-bound times.
"""

from __future__ import annotations

import layerscope.metricspec as ms
from layerscope.analysis.roofline import Estimate, Roof
from layerscope.analysis.transforms import filter_tree, matches, top_k
from layerscope.render import units
from layerscope.render.context import Builder, ViewContext
from layerscope.render.layout import (
    Line,
    Table,
    TableColumn,
    TableRow,
    fit_table,
    plain_text,
    terminal_width,
    wrap_text,
)

__all__ = ["render_estimate", "roof_title", "roofline_view"]


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
    shown = filter_tree(
        profile,
        max_depth=o.max_depth,
        exclude=o.exclude,
        hide_not_called=not o.show_not_called and ctx.ran,
    )
    nodes = [n for n in shown.root.walk() if n.self_metrics.get(ms.BYTES_ACCESSED)]
    if o.include:
        nodes = [n for n in nodes if matches(n, o.include)]
    nodes = top_k(nodes, lambda n: ctx.value(n, sort_key), o.top or len(nodes) or 1)
    rows = [
        TableRow(
            [[(n.path or "<root>", "layerscope.name")], [(n.type, "layerscope.type")]]
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
            + ctx.footer(0, 0, fitted.dropped, width)
        )

    return lay_out


_ESTIMATE_PRIORITY = {
    "Fwd min": 95,
    "Bwd min": 94,
    "Measured": 90,
    "Eff": 89,
    "Bound": 80,
    "FLOP/B": 70,
    "FLOPs": 60,
    "Bytes": 55,
    "Type": 30,
}


def render_estimate(
    estimate: Estimate, *, width: int | None = None, max_depth: int | None = None
) -> str:
    """``estimate`` as plain text: one row per module (inclusive, lower-bound times)."""
    if not width:
        width = terminal_width()
    roof = Roof(estimate.peak, estimate.bandwidth, estimate.device, estimate.dtype)
    backward = any(m.backward_time is not None for m in estimate)
    measured = any(m.measured is not None for m in estimate)
    headers = ["Module", "Type", "FLOPs", "Bytes", "FLOP/B", "Bound", "Fwd min"]
    if measured:
        headers += ["Measured", "Eff"]
    if backward:
        headers += ["Bwd min"]
    columns = [
        TableColumn(
            h,
            h,
            justify="left" if i < 2 or h == "Bound" else "right",
            text=i < 2,
            label=i == 0,
            priority=_ESTIMATE_PRIORITY.get(h),
        )
        for i, h in enumerate(headers)
    ]
    rows = []
    for m in estimate:
        if max_depth is not None and m.depth > max_depth:
            continue
        name = ("  " * m.depth) + (m.path.rsplit(".", 1)[-1] if m.path else "<model>")
        cells = [
            name,
            m.type,
            units.si(m.flops),
            units.nbytes(m.bytes),
            "" if m.intensity is None else f"{m.intensity:.3g}",
            m.bound,
            units.seconds(m.time),
        ]
        if measured:
            eff = m.efficiency
            cells += [
                "" if m.measured is None else units.seconds(m.measured),
                "" if eff is None else f"{100 * eff:.1f}%",
            ]
        if backward:
            cells += ["" if m.backward_time is None else units.seconds(m.backward_time)]
        rows.append(TableRow([[(c, "")] for c in cells]))
    table = Table(columns=columns, rows=rows)
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
    below = [plain_text(fitted.lines).rstrip("\n")]
    if fitted.dropped:
        hidden = f"Hidden to fit {width} columns: {', '.join(fitted.dropped)}."
        below.append(plain_text(wrap_text(hidden, "", width)).rstrip("\n"))
    below += [plain_text(wrap_text(n, "", width)).rstrip("\n") for n in estimate.notices]
    parts.append("\n".join(below))
    return "\n\n".join(parts) + "\n"
