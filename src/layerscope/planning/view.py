"""The text of a training plan (``ls.plan(...).show()``) and of a sweep of plans
(``ls.plan_sweep(...).show()``), drawn from their JSON data alone (``Plan.section()``,
``Sweep.to_dict()``), so a plan read from a file shows as a fresh one does.

A plan is a summary (the run, the memory at the peak by part, the budget, the step time
by part, throughput, checkpointing, the notes) and the per-module table; a sweep is one
table, a row per combination. Every column, header and legend comes from the field table
(``planning.fields``). Tables use the engine and the units of the other views: a narrow
width drops the least important columns first and says so below.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

import layerscope.planning.fields as F
from layerscope.planning.fields import PlanField, field, fields
from layerscope.planning.pipelineview import pipeline_words, stage_lines
from layerscope.planning.viewtables import fitted as _fitted
from layerscope.planning.viewtables import row as _row
from layerscope.planning.viewtables import table as _table
from layerscope.render import units
from layerscope.render.layout import (
    Justify,
    Line,
    TableColumn,
    TableRow,
    plain_text,
    terminal_width,
    too_narrow,
    wrap_text,
    wrap_texts,
)
from layerscope.render.terminal import print_lines
from layerscope.validate import check_bool, check_int, refuse

__all__ = ["plan_lines", "render_plan", "render_sweep", "show_plan", "show_sweep", "sweep_lines"]

ROOT = "<root>"


# ---- entry points ----------------------------------------------------------------------
def render_plan(
    section: Mapping[str, Any],
    *,
    width: int | None = None,
    max_rows: int | None = None,
    fold: bool = True,
) -> str:
    """The plan as plain text, ``width`` characters wide (default: the terminal's);
    ``max_rows``: the most rows of the per-module table; ``fold``: a run of repeated
    blocks with equal rows as one (``layers.1–11 ×11``, their sum)."""
    build = _plan_builder(section, width, max_rows, fold)
    return plain_text(build(width or terminal_width()))


def show_plan(
    section: Mapping[str, Any],
    *,
    file: IO[str] | None = None,
    width: int | None = None,
    max_rows: int | None = None,
    fold: bool = True,
) -> None:
    """Print the plan to the terminal (colours when it is one, at its width) or ``file``."""
    print_lines(_plan_builder(section, width, max_rows, fold), width, file)


def render_sweep(
    sweep: Mapping[str, Any], *, width: int | None = None, max_rows: int | None = None
) -> str:
    """The sweep's table as plain text, ``width`` characters wide (default: the terminal's);
    ``max_rows``: the most rows of the table (the plan's option of that name)."""
    build = _sweep_builder(sweep, width, max_rows)
    return plain_text(build(width or terminal_width()))


def show_sweep(
    sweep: Mapping[str, Any],
    *,
    file: IO[str] | None = None,
    width: int | None = None,
    max_rows: int | None = None,
) -> None:
    """Print the sweep's table to the terminal (at its width) or to ``file``."""
    print_lines(_sweep_builder(sweep, width, max_rows), width, file)


def _plan_builder(
    section: Mapping[str, Any], width: int | None, max_rows: int | None, fold: bool
) -> Callable[[int], list[Line]]:
    if not isinstance(section, Mapping) or "modules" not in section:
        refuse("section", section, "a plan's section (Plan.section(), or a file's 'plan')")
    if width is not None:
        check_int("width", width, 1)
    if max_rows is not None:
        check_int("max_rows", max_rows, 1)
    fold = check_bool("fold", fold)
    return lambda w: too_narrow(w) or plan_lines(section, w, max_rows, fold)


def _sweep_builder(
    sweep: Mapping[str, Any], width: int | None, max_rows: int | None
) -> Callable[[int], list[Line]]:
    if not isinstance(sweep, Mapping) or not isinstance(sweep.get("rows"), list):
        refuse("sweep", sweep, "a sweep's data (Sweep.to_dict())")
    if width is not None:
        check_int("width", width, 1)
    if max_rows is not None:
        check_int("max_rows", max_rows, 1)
    return lambda w: too_narrow(w) or sweep_lines(sweep, w, max_rows)


# ---- pieces shared by both -------------------------------------------------------------
def _share(part: float, whole: float) -> str:
    """``part`` as a percentage of ``whole``, as the views write them."""
    return units.pct(100.0 * part / whole) if whole else "-"


def _checkpoint_words(asked: Any, count: int) -> str:
    """What was asked of checkpointing and what it chose: ``blocks (2)``, ``none``."""
    if asked is None or (not count and not asked):
        return "none"
    if isinstance(asked, str):
        return f"{asked} ({count})"
    return units.plural(count, "module")


def checkpointing_words(asked: Any, count: int) -> str:
    """The heading's words: ``checkpointing blocks: 2 modules``, ``no checkpointing``."""
    if asked is None:
        return "no checkpointing"
    modules = units.plural(count, "module")
    return (
        f"checkpointing {asked}: {modules}"
        if isinstance(asked, str)
        else f"checkpointing {modules}"
    )


# ---- the plan ----------------------------------------------------------------------------
def plan_lines(
    section: Mapping[str, Any], width: int, max_rows: int | None = None, fold: bool = True
) -> list[Line]:
    """The styled lines of a plan at ``width``: the summary, then the module table."""
    parts = [
        _heading(section, width),
        _memory(section, width),
        _step(section, width),
        stage_lines(section, width),
        _modules(section, width, max_rows, fold),
    ]
    notes = [(f"Note: {n}", "layerscope.notice") for n in section.get("notes", ())]
    if notes:
        parts.append(wrap_texts(notes, width))
    out: list[Line] = []
    for n, lines in enumerate(p for p in parts if p):
        if n:
            out.append([])
        out += lines
    return out


def _heading(section: Mapping[str, Any], width: int) -> list[Line]:
    """The run in two sentences: the target and world size; the strategy and the batch."""
    o, device = section.get("options", {}), section.get("device", {})
    world = o.get("world_size", 1)
    label = device.get("label") or device.get("name") or o.get("target", "?")
    title = f"Plan for one GPU of {world}: {label}" + (
        f" ({device['name']})" if device.get("name") and device.get("name") != label else ""
    )
    sharding = str(o.get("sharding", "?"))
    if sharding == "fsdp":
        n_units = len(o.get("fsdp_units") or ())
        reshard = "" if o.get("reshard_after_forward", True) else ", no reshard after forward"
        hsdp = o.get("hsdp")
        mesh = f", hsdp: {hsdp[0]} replicas of {hsdp[1]}-way shards" if hsdp else ""
        sharding += f" ({units.plural(n_units, 'unit')}{reshard}{mesh})"
    tp = (o.get("mesh") or {}).get("tp", 1)
    if tp > 1:
        sequence = " (sequence parallel)" if o.get("sequence_parallel") else ""
        sharding += f" x tensor parallel {tp}{sequence}"
    for axis, words in (("cp", "context parallel"), ("ep", "expert parallel")):
        size = (o.get("mesh") or {}).get(axis, 1)
        sharding += f" x {words} {size}" if size > 1 else ""
    pipe = section.get("pipeline")
    if isinstance(pipe, Mapping):
        sharding += pipeline_words(pipe)
    tokens = section.get(F.TOKENS)
    batch = f"{units.count(tokens)} tokens" if tokens else "without token ids"
    checkpointed = len(section.get("checkpoint", ()))
    loss = f", loss {o['loss']}" if o.get("loss", "plain") != "plain" else ""
    loss += ", compiled" if o.get("compile") else ""
    loss += ", float8 linears" if o.get("float8") else ""
    loss += " gathered in float8" if o.get("float8_all_gather") else ""
    text = (
        f"Sharding {sharding}, precision {o.get('precision', '?')}, optimizer "
        f"{o.get('optimizer', '?')}{loss}; micro-batch {batch}, grad_accum "
        f"{o.get('grad_accum', 1)}; "
        f"{checkpointing_words(o.get('checkpoint'), checkpointed)}; "
        f"rank {o.get('rank', 0)}."
    )
    states = section.get("states", {})
    held = ", ".join(
        f"{part.word} {units.nbytes(states[part.key])}"
        for part in fields("memory")
        if states.get(part.key)
    )
    facts = [(title, "layerscope.header"), (text, "")]
    if held:
        facts.append((f"Model states at rest on this GPU: {held}.", ""))
    return wrap_texts(facts, width)


def _memory(section: Mapping[str, Any], width: int) -> list[Line]:
    """The memory at the peak by part, where the peak is, and the budget's verdict."""
    peak = int(section.get(F.PEAK_BYTES, 0))
    memory: Mapping[str, int] = section.get("memory", {})
    labels = {part.key: part.header for part in fields("memory")}
    columns = [
        TableColumn("part", "Peak memory", "left", None, label=True, text=True),
        TableColumn("bytes", "Bytes", priority=None),
        TableColumn("share", "Share", priority=10, style="layerscope.pct"),
    ]
    rows = [
        _row(labels.get(key, key), units.nbytes(value), _share(value, peak))
        for key, value in memory.items()
    ]
    total = _row("Peak", units.nbytes(peak), _share(peak, peak), style="layerscope.total")
    lines = _fitted(_table(columns, rows, total), width)[0]
    where = section.get("peak_phase", {})
    facts = [
        (
            f"The peak is in the {where.get('phase', '?')} phase"
            + (
                f" of micro-batch {where['micro_batch']} (as of every one after the first: "
                "beside the gradients accumulated)"
                if where.get("micro_batch")
                else ""
            )
            + ", at the "
            f"{where.get('event', '?')} event of {where.get('path') or ROOT}.",
            "",
        ),
        _budget(section),
    ]
    return lines + wrap_texts(facts, width)


def _budget(section: Mapping[str, Any]) -> tuple[str, str]:
    budget, reserve = section.get(F.BUDGET), int(section.get(F.RESERVE_BYTES, 0))
    if budget is None:
        return ("No budget (the target's memory is not known): fits and headroom are not "
                "decided.", "")  # fmt: skip
    head = f"Budget {units.nbytes(budget)}, reserve {units.nbytes(reserve)}: "
    headroom = section.get(F.HEADROOM_BYTES)
    if headroom is None:
        headroom = budget - reserve - int(section.get(F.PEAK_BYTES, 0))
    if headroom >= 0:
        return (head + f"fits, headroom {units.nbytes(headroom)}.", "")
    return (head + f"does not fit, {units.nbytes(-headroom)} over.", "layerscope.notice")


def _throughput(section: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The bound beside the predicted step, tokens/s and MFU (both conventions)."""
    out: list[tuple[str, str]] = []
    bound = section.get(F.STEP_TIME_BOUND)
    if bound is not None:
        out.append((
            f"Predicted at the achievable rates of {section.get('rates') or 'the target'}, "
            f"{units.si(section.get('kernels') or 0)} kernels per step; the roofline lower "
            f"bound is {units.seconds(bound)} per step.", "",
        ))  # fmt: skip
    tps, mfu = section.get(F.TOKENS_PER_S), section.get(F.MFU)
    rate = (
        f"{units.si(round(tps))} tokens/s per GPU" if tps else "tokens/s not known (no token ids)"
    )
    top = section.get(F.TOKENS_PER_S_BOUND)
    if tps and top:
        rate += f" (at most {units.si(round(top))})"
    counted = section.get(F.MFU_COUNTED)
    if bound is None:  # a document from before predictions: its step time is the bound
        mfu_text = f"MFU {units.pct(100.0 * mfu)} (an upper bound)" if mfu is not None else ""
    else:
        mfu_text = f"MFU {units.pct(100.0 * mfu)} (6 N per token + attention)" if mfu else ""
        if counted is not None:
            mfu_text += ", " if mfu_text else ""
            mfu_text += f"{units.pct(100.0 * counted)} of the analysis's FLOPs"
    flops = section.get(F.MODEL_FLOPS)
    per_step = f"; {units.si(flops)} model FLOPs per step" if flops else ""
    out.append((f"Throughput: {rate}; {mfu_text or 'MFU not known'}{per_step}.", ""))
    return out


def _step(section: Mapping[str, Any], width: int) -> list[Line]:
    """The step time by part, the collectives, throughput and checkpointing."""
    time: Mapping[str, float] = section.get("time", {})
    step = float(section.get(F.STEP_TIME, 0.0))
    columns = [
        TableColumn("part", "Step time", "left", None, label=True, text=True),
        TableColumn("time", "Time", priority=None),
        TableColumn("share", "Share", priority=10, style="layerscope.pct"),
    ]
    bound: Mapping[str, float] | None = section.get("time_bound")
    if bound is not None:
        columns.append(TableColumn("bound", "Bound", priority=20))
    rows = [
        _row(part.header, units.seconds(time.get(part.key, 0.0)),
             _share(time.get(part.key, 0.0), step),
             *([units.seconds(bound.get(part.key, 0.0))] if bound is not None else []))
        for part in fields("time")
        if part.default and (part.required or part.key in time)
    ]  # fmt: skip
    total = _row("Step", units.seconds(step), _share(step, step),
                 *([units.seconds(section.get(F.STEP_TIME_BOUND) or 0.0)]
                   if bound is not None else []),
                 style="layerscope.total")  # fmt: skip
    lines = _fitted(_table(columns, rows, total), width)[0]
    comm, exposed = time.get("comm", 0.0), time.get("exposed_comm", 0.0)
    facts: list[tuple[str, str]] = []
    if comm:
        facts.append((
            f"Collectives: {units.seconds(comm)} per step, {units.seconds(exposed)} of it "
            "exposed (the rest overlaps compute).", "",
        ))  # fmt: skip
    else:
        facts.append(("Collectives: none in this step.", ""))
    facts.extend(_throughput(section))
    kept = section.get(F.KEPT_ACTIVATION_BYTES, 0)
    recompute = section.get(F.RECOMPUTE_FLOPS, 0)
    facts.append((
        f"Activations kept for the backward: {units.nbytes(kept)}; recompute "
        f"{units.si(recompute)} FLOPs per step.", "",
    ))  # fmt: skip
    return lines + wrap_texts(facts, width)


def _cell(kind: str, value: Any) -> str:
    if kind == "text":
        return str(value)
    if kind == "flag":
        return "yes" if value else "-"
    return units.BY_KIND[kind](value or 0)


def _modules(
    section: Mapping[str, Any], width: int, max_rows: int | None, fold: bool
) -> list[Line]:
    """One row per FSDP unit or checkpointed module, in the model's order: the table's
    ``module`` fields shown by default, where some row makes them (``shown_if``); with
    ``fold``, a run of repeated blocks with equal rows as one (``_folded``)."""
    modules: list[Mapping[str, Any]] = list(section.get("modules", ()))
    if not modules:
        return wrap_text("No module rows: no FSDP units and no checkpointed modules.", "", width)
    label, *table = fields("module")
    specs = [
        f
        for f in table
        if f.default and (not f.shown_if or any(m.get(f.shown_if) for m in modules))
    ]
    columns = [TableColumn(label.key, label.header, "left", None, label=True, text=True)]
    for f in specs:
        justify: Justify = "left" if f.kind == "text" else "right"
        columns.append(TableColumn(f.key, f.header, justify, f.priority, text=f.kind == "text"))
    if fold:
        modules = _folded(modules, label.key, [f for f in table if f.kind != "text"])
    listed = modules[:max_rows] if max_rows is not None else modules
    rows = []
    for m in listed:
        cells: list[Line] = [[(m.get(label.key) or ROOT, "layerscope.name")]]
        for f in specs:
            style = "layerscope.type" if f.kind == "text" else ""
            cells.append([(_cell(f.kind, m.get(f.key)), style)])
        rows.append(TableRow(cells))
    lines, dropped = _fitted(_table(columns, rows, None), width)
    facts: list[tuple[str, str]] = []
    if len(listed) < len(modules):
        facts.append((f"Showing {len(listed)} of {len(modules)} rows (max_rows {max_rows}).",
                      "layerscope.hidden"))  # fmt: skip
    if any("×" in str(m.get(label.key)) for m in listed):
        facts.append(("A row ×N is N repeated blocks with equal rows: their sum.", ""))
    legend = _legend([f for f in specs if f.header not in dropped])
    if legend:
        facts.append((legend, ""))
    return lines + wrap_texts(facts, width)


def _folded(
    modules: list[Mapping[str, Any]], label: str, numbers: Sequence[PlanField]
) -> list[Mapping[str, Any]]:
    """``modules`` with each run of two or more repeated blocks (``layers.1``,
    ``layers.2``, ...: one parent, consecutive indices, one type, equal values) as one
    row ``layers.1–11 ×11`` holding their sum, as the profile's views fold."""
    out: list[Mapping[str, Any]] = []
    run: list[Mapping[str, Any]] = []

    def same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
        (pa, ia), (pb, ib) = _indexed(a.get(label)), _indexed(b.get(label))
        alike = all(a.get(k) == b.get(k) for k in b if k != label)
        return pa is not None and pa == pb and ia is not None and ib == ia + 1 and alike

    def close() -> None:
        if len(run) < 2:
            out.extend(run)
        else:
            first, last = _indexed(run[0].get(label))[1], _indexed(run[-1].get(label))[1]
            row = dict(run[0])
            row[label] = f"{_indexed(run[0].get(label))[0]}.{first}–{last} ×{len(run)}"
            for f in numbers:
                if f.kind != "flag" and isinstance(row.get(f.key), int | float):
                    row[f.key] = sum(m.get(f.key) or 0 for m in run)
            out.append(row)
        run.clear()

    for m in modules:
        if run and not same(run[-1], m):
            close()
        run.append(m)
    close()
    return out


def _indexed(path: Any) -> tuple[str | None, int | None]:
    """(parent, index) of a path ending in an integer (``layers.3``), else (None, None)."""
    parent, _, last = str(path or "").rpartition(".")
    return (parent, int(last)) if parent and last.isdigit() else (None, None)


def _legend(shown: Sequence[PlanField]) -> str:
    """What the module table's byte columns hold (of those it shows)."""
    said = [f"{f.header}: {f.description}" for f in shown if f.legend]
    return "; ".join(said) + "." if said else ""


# ---- the sweep ---------------------------------------------------------------------------
def _axis_cell(axis: str, row: Mapping[str, Any]) -> str:
    value = row.get(axis)
    if axis == "checkpoint":
        return _checkpoint_words(value, int(row.get(F.CHECKPOINTED, 0)))
    if isinstance(value, int) and not isinstance(value, bool):
        return units.count(value)
    return "-" if value is None else str(value)


def _figure_cell(f: PlanField, value: Any) -> str:
    """A sweep row's figure as its column shows it ("-" where there is none)."""
    if f.unit == "fits":
        return "-" if value is None else ("yes" if value else "no")
    if f.unit == "seconds":
        return units.seconds(value or 0.0)
    if f.unit == "rate":
        return units.si(round(value)) if value else "-"
    if value is None:
        return "-"
    if f.unit == "ratio":
        return units.pct(100.0 * value)
    return units.BY_KIND[f.kind](value) if f.kind in units.BY_KIND else str(value)


def sweep_lines(sweep: Mapping[str, Any], width: int, max_rows: int | None = None) -> list[Line]:
    """The styled lines of a sweep at ``width``: what is fixed, then a row per plan (the
    first ``max_rows``)."""
    axes = [str(a) for a in sweep.get("axes", ())]
    rows: list[Mapping[str, Any]] = sweep["rows"]
    options = {f.key: f for f in fields("axis")}
    fixed = [
        f"{a} {_axis_cell(a, rows[0])}"
        for a in options
        if a not in axes
        and rows
        and len({_axis_cell(a, r) for r in rows}) == 1
        and rows[0].get(a) is not None  # an axis added later, which no row has
    ]
    title = f"Plan sweep: {units.plural(len(rows), 'plan')} over " + " × ".join(axes)
    facts = [(title, "layerscope.header")]
    setting = sweep.get("setting") or {}
    if setting:
        budget = setting.get("budget")
        facts.append((
            f"On {setting.get('device')} ({setting.get('target')}), budget "
            + (units.nbytes(budget) if isinstance(budget, int | float) else "none")
            + f"; input {setting.get('input')} per GPU"
            + (f"; loss {setting['loss']}" if setting.get("loss") else "")
            + ("; compiled" if setting.get("compile") else "")
            + ("; float8" if setting.get("float8") else "")
            + (" gathered in float8 under FSDP2" if setting.get("float8_all_gather") else "")
            + ".", "",
        ))  # fmt: skip
    if fixed:
        facts.append(("The same in every plan: " + ", ".join(fixed) + ".", ""))
    # a figure added after the first documents shows where some row has it
    figures = [
        f
        for f in fields("row")
        if f.default and (f.required or any(r.get(f.key) is not None for r in rows))
    ]
    columns = [TableColumn(a, options[a].header if a in options else a, priority=None)
               for a in axes]  # fmt: skip
    columns += [
        TableColumn(f.key, f.header, priority=f.priority,
                    style="layerscope.pct" if f.unit == "ratio" else "")
        for f in figures
    ]  # fmt: skip
    listed = rows[:max_rows] if max_rows is not None else rows
    body = []
    for r in listed:
        cells = [_axis_cell(a, r) for a in axes]
        cells += [_figure_cell(f, r.get(f.key)) for f in figures]
        notice = r.get(F.FITS) is False
        body.append(_row(*cells, style="layerscope.notice" if notice else ""))
    table, dropped = _fitted(_table(columns, body, None), width)
    bounded = any(r.get(F.STEP_TIME_BOUND) is not None for r in rows)
    after = [(_sweep_note(dropped, bounded), "")]
    if len(listed) < len(rows):
        after.insert(0, (f"Showing {len(listed)} of {len(rows)} rows (max_rows {max_rows}).",
                         "layerscope.hidden"))  # fmt: skip
    return wrap_texts(facts, width) + table + wrap_texts(after, width)


def _sweep_note(dropped: Sequence[str] = (), bounded: bool = False) -> str:
    """What the sweep's figures are, of the columns shown (not those in ``dropped``, the
    headers the width left out): predictions and bounds (``bounded``: the rows have a
    bound beside the prediction; else a document from before predictions, whose step
    time is the bound), and what the headroom is."""
    h = {f.key: f.header for f in fields("row") if f.header not in dropped}
    if F.STEP_TIME not in h:
        return ""
    if bounded:
        note = f"{h[F.STEP_TIME]} is predicted (each kernel at its achievable rate)"
        if F.STEP_TIME_BOUND in h:
            note += f"; {h[F.STEP_TIME_BOUND]} is a lower bound (roofline compute, "
            note += "collectives at NCCL's rates)"
        if F.MFU in h:
            note += f"; {h[F.MFU]} counts 6 N per token plus attention"
        if F.HEADROOM_BYTES in h:
            note += f"; {h[F.HEADROOM_BYTES]} is {field('row', F.HEADROOM_BYTES).description}"
        return note + "."
    bounds = [h[k] for k in (F.TOKENS_PER_S, F.MFU) if k in h]
    note = f"{h[F.STEP_TIME]} is a lower bound (roofline compute, collectives at NCCL's"
    note += " rates)"
    if bounds:
        verb = "are upper bounds" if len(bounds) > 1 else "is an upper bound"
        note += f", so {' and '.join(bounds)} {verb}"
    if F.HEADROOM_BYTES in h:
        note += f"; {h[F.HEADROOM_BYTES]} is {field('row', F.HEADROOM_BYTES).description}"
    return note + "."
