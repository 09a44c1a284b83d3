"""The plan section of the HTML report: one GPU's memory at the peak by part (a stacked
bar, the budget and reserve marked), the memory timeline of one training step (stacked by
part), the step time by part, the per-module table, the collectives, the notes and, when
given, a sweep as a table.

It reads the plan's JSON section (``Plan.section()``, or the ``plan`` object of a saved
plan) and a sweep's ``to_dict()``, both plain data, so a plan loaded from a file reports
as well as a fresh one. Its tables' columns and headers, the parts' names and the
events' words come from the field table (``planning.fields``). The section travels as
its own JSON block after the report's; ``export/assets/plan.js`` draws it first on the
page, above the analysis it was computed from.
A profile without a plan gets the report of ``export.html`` unchanged. See
docs/exports.md.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from layerscope.errors import ExportError
from layerscope.export.files import write_text
from layerscope.export.html import page_facts, page_number, section_page
from layerscope.hardware import DeviceLike
from layerscope.planning import fields as F
from layerscope.planning.fields import EVENTS, PlanField, fields
from layerscope.planning.sweepbest import best_row
from layerscope.planning.view import checkpointing_words
from layerscope.profile import Profile
from layerscope.render import units

__all__ = ["describe", "plan_data", "row_said", "to_html", "to_html_text"]

#: Events that name no module when their path is the root.
_WHOLE_STEP = {"end", "step"}


#: Ints at least this large do not convert to a float: their digits are shown.
_HUGE = 2**1023


def to_html(
    profile: Profile,
    path: str | os.PathLike[str],
    section: Mapping[str, Any],
    sweep: Mapping[str, Any] | None = None,
    *,
    device: DeviceLike | None = None,
) -> None:
    """Write the report of ``profile`` with the plan ``section`` first (and ``sweep``, a
    ``Sweep.to_dict()``, as a table) to ``path``, atomically."""
    write_text(path, to_html_text(profile, section, sweep, device=device))


def to_html_text(
    profile: Profile,
    section: Mapping[str, Any],
    sweep: Mapping[str, Any] | None = None,
    *,
    device: DeviceLike | None = None,
) -> str:
    """The report with the plan section, as one HTML document."""
    return section_page(profile, device, "plan", "ls-plan-data", plan_data(section, sweep))


def plan_data(section: Mapping[str, Any], sweep: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What the plan section shows, as plain JSON (floats whole: ``page_number``; no NaN);
    ``ExportError`` when a part the page draws is missing or malformed."""
    memory = _mapping(section, "memory")
    peak = _int(section.get(F.PEAK_BYTES), F.PEAK_BYTES)
    part_keys = [f.key for f in fields("memory")]
    parts = [[k, _int(memory.get(key, 0), f"memory.{key}")] for k, key in enumerate(part_keys)]
    where = section.get("peak_phase") or {}
    time = _mapping(section, "time")
    budget = _opt_int(section.get(F.BUDGET), F.BUDGET)
    reserve = _int(section.get(F.RESERVE_BYTES, 0), F.RESERVE_BYTES)
    headroom = None if budget is None else budget - reserve - peak  # as Plan.headroom_bytes
    figures = {
        key: page_number(section.get(key))
        for key in (F.KEPT_ACTIVATION_BYTES, F.RECOMPUTE_FLOPS, F.STEP_TIME, F.MODEL_FLOPS,
                    F.MFU, F.TOKENS, F.TOKENS_PER_S, F.STEP_TIME_BOUND, F.TOKENS_PER_S_BOUND,
                    F.MFU_COUNTED)
    }  # fmt: skip
    given = section.get("time_bound")
    bound = None
    if isinstance(given, Mapping):
        bound = [
            [f.header, page_number(given.get(f.key, 0))]
            for f in fields("time")
            if f.default and (f.required or f.key in given)  # the bound's own parts
        ]
    return {
        "part_names": [f.header for f in fields("memory")],
        "labels": {f.key: f.header for f in fields("plan") if f.header},
        "options": page_facts(section.get("options") or {}),
        "device": page_facts(section.get("device") or {}),
        "settings": _settings(section.get("options") or {}, section.get("device") or {}),
        F.PEAK_BYTES: peak,
        "parts": [p for p in parts if p[1]],
        "peak_at": {
            "phase": str(where.get("phase", ""))
            + (f" of micro-batch {where['micro_batch']}" if where.get("micro_batch") else ""),
            "label": describe(str(where.get("event", "")), str(where.get("path", ""))),
        },
        F.BUDGET: budget,
        F.RESERVE_BYTES: reserve,
        F.FITS: None if headroom is None else headroom >= 0,
        F.HEADROOM_BYTES: headroom,
        "checkpoint": [str(p) for p in section.get("checkpoint") or []],
        "checkpointing": checkpointing_words(
            (section.get("options") or {}).get("checkpoint"), len(section.get("checkpoint") or [])
        ),
        F.KEPT_ACTIVATION_BYTES: figures[F.KEPT_ACTIVATION_BYTES],
        F.RECOMPUTE_FLOPS: figures[F.RECOMPUTE_FLOPS],
        "timeline": _timeline(_mapping(section, "timeline")),
        "time": [
            [f.header, page_number(time.get(f.key, 0))]
            for f in fields("time")
            if f.default and (f.required or f.key in time)
        ],
        "comm_time": page_number(time.get("comm")),
        "exposed_comm": page_number(time.get("exposed_comm")),
        **{k: figures[k] for k in (F.STEP_TIME, F.MODEL_FLOPS, F.MFU, F.TOKENS, F.TOKENS_PER_S)},
        # the roofline bound beside the prediction (null in a document from before it)
        **{k: figures[k] for k in (F.STEP_TIME_BOUND, F.TOKENS_PER_S_BOUND, F.MFU_COUNTED)},
        "time_bound": bound,
        "rates": str(section.get("rates") or ""),
        "modules": _modules(section.get("modules") or []),
        "comm": _comm(section.get("comm") or {}),
        "comm_columns": [_column(f) for f in fields("comm")],
        "notes": [str(n) for n in section.get("notes") or []],
        "sweep": None if sweep is None else _sweep(sweep) | _shown(sweep, section),
        "stages": _stages(section.get("pipeline")),
    }


def _stages(pipeline: Any) -> dict[str, Any] | None:
    """A pipeline's table, a row per stage (None without a pipeline), and what it is."""
    if not isinstance(pipeline, Mapping):
        return None
    # the pieces in words (Modules), not the first and last apart
    cols = [_column(f) for f in fields("stage") if f.key not in ("first", "last")]
    rows = [r for r in pipeline.get("rows") or [] if isinstance(r, Mapping)]
    cells = [[_text(r.get(k)) if kind == "text" else _cell(r.get(k)) for k, _, kind, _ in cols]
             for r in rows]  # fmt: skip
    said = (
        f"{pipeline.get('stages')} stages, {pipeline.get('schedule')}, "
        f"{pipeline.get('microbatches')} microbatches; this plan is stage "
        f"{pipeline.get('stage')}'s ({pipeline.get('chosen')}); the bubble is "
        f"{100 * float(pipeline.get('bubble') or 0):.0f} % of the step."
    )
    return {"columns": cols, "rows": cells, "said": said}


def _column(f: PlanField) -> list[str]:
    """A column of a table on the page: key, header, display format, what it is."""
    return [f.key, f.header, f.kind, f.description]


def describe(event: str, path: str) -> str:
    """A timeline point in words: ``peak in blocks.0.mlp``, ``optimizer step``."""
    word = EVENTS.get(event, event)
    if event in _WHOLE_STEP and not path:
        return word
    return f"{word} {path or '<root>'}"


def _timeline(t: Mapping[str, Any]) -> dict[str, Any]:
    """The timeline's points: phases as runs ``[phase, first, last + 1]``, each point's
    words as an index into ``labels``, the total and the parts that are ever non-zero."""
    phase, event, path = (_list(t, key) for key in ("phase", "event", "path"))
    total = [_int(x, "timeline.total") for x in _list(t, "total")]
    n = len(total)
    if not len(phase) == len(event) == len(path) == n:
        raise ExportError("the plan's timeline is malformed: its columns differ in length")
    runs: list[list[Any]] = []
    for k, p in enumerate(phase):
        if runs and runs[-1][0] == p:
            runs[-1][2] = k + 1
        else:
            runs.append([str(p), k, k + 1])
    labels: dict[str, int] = {}
    at = [
        labels.setdefault(describe(str(e), str(p)), len(labels))
        for e, p in zip(event, path, strict=True)
    ]
    parts: list[list[Any]] = []
    for k, key in enumerate(f.key for f in fields("memory")):
        values = [_int(x, f"timeline.{key}") for x in _list(t, key)] if key in t else [0] * n
        if len(values) != n:
            raise ExportError(f"the plan's timeline is malformed: {key} has {len(values)} points")
        if any(values):
            parts.append([k, values])
    return {"phases": runs, "labels": list(labels), "at": at, "total": total, "parts": parts}


def _modules(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The per-module table: the table's ``module`` columns some row has (text always, a
    number column only where some value is not 0), then one list of cells per row."""
    table = fields("module")
    label = table[0].key
    cols = [
        _column(f)
        for f in table
        if f.kind == "text" or any(r.get(f.key) not in (None, 0, False) for r in rows)
    ]
    extra = sorted({k for r in rows for k in r} - {f.key for f in table})
    for key in extra:  # keys the table does not know (a newer file): shown, named by key
        if any(isinstance(r.get(key), int | float) and r.get(key) for r in rows):
            kind = "bytes" if key.endswith("_bytes") else "si" if key.endswith("flops") else "count"
            cols.append([key, key, kind, key])
    cells = [
        [(r.get(k) or "<root>") if k == label else _cell(r.get(k)) for k, *_ in cols] for r in rows
    ]
    return {"columns": cols, "rows": cells}


def _comm(comm: Mapping[str, Any]) -> list[list[Any]]:
    """The collectives of a step summed over modules: ``[phase, kind, calls, bytes,
    wire_bytes]`` per phase and kind, forward first."""
    amounts = [f.key for f in fields("comm") if f.kind != "text"]
    sums: dict[tuple[str, str], list[float]] = {}
    for phases in comm.values():
        if not isinstance(phases, Mapping):
            continue
        for phase, kinds in phases.items():
            for kind, c in (kinds or {}).items():
                s = sums.setdefault((str(phase), str(kind)), [0] * len(amounts))
                for k, key in enumerate(amounts):
                    x = c.get(key, 0) if isinstance(c, Mapping) else 0
                    s[k] += x if isinstance(x, int | float) else 0
    order = {"forward": 0, "backward": 1}
    keys = sorted(sums, key=lambda pk: (order.get(pk[0], 2), pk[0], pk[1]))
    return [[p, k.replace("_", "-"), *(page_number(x) for x in sums[(p, k)])] for p, k in keys]


def _sweep(sweep: Mapping[str, Any]) -> dict[str, Any]:
    """The sweep's table: the options swept, then the figures; options the same in every
    row are said once (``same``: the option in words and its value) instead of repeated."""
    axes = [str(a) for a in sweep.get("axes") or []]
    rows = [r for r in sweep.get("rows") or [] if isinstance(r, Mapping)]
    options = {f.key: f for f in fields("axis")}
    cols = [_column(options[a]) if a in options else [a, a, "text", a] for a in axes]
    same: list[list[str]] = []
    for key, f in options.items():
        if key in axes or not any(key in r for r in rows):
            continue
        values = {_text(r.get(key)) for r in rows}
        if len(values) == 1:
            same.append([f.word, values.pop()])
        else:
            cols.append(_column(f))
    cols += [_column(f) for f in fields("row") if any(f.key in r for r in rows)]
    taken = {c[0] for c in cols} | set(options)
    cols += [[k, k, "count", k] for k in sorted({k for r in rows for k in r} - taken)]
    cells = [
        [_text(r.get(k)) if kind == "text" else _cell(r.get(k)) for k, _, kind, _ in cols]
        for r in rows
    ]
    return {"columns": cols, "rows": cells, "same": same}


def row_said(axes: Sequence[str], row: Any, best: bool = True) -> str:
    """The sweep row a report shows, in the words the terminal and the page both use:
    ``the plan of the row micro_batch 4 (the most tokens/s that fits)`` (why it was
    chosen only when it is ``Sweep.best``'s row)."""
    words = ", ".join(f"{a} {_said(row[a])}" for a in axes)
    if not best:
        return f"the plan of the row {words}"
    why = (
        "the most tokens/s that fits" if row["fits"] is not False else "none fits: the lowest peak"
    )
    return f"the plan of the row {words} ({why})"


def _said(value: Any) -> str:
    """A sweep row's value as the --sweep flag writes it (no checkpointing: none)."""
    if value is None:
        return "none"
    return "+".join(map(str, value)) if isinstance(value, list | tuple) else str(value)


def _shown(sweep: Mapping[str, Any], section: Mapping[str, Any]) -> dict[str, Any]:
    """Which sweep row the plan is (``shown``: its index, None when no row has its peak
    and step time) and that row in words (``shown_said``)."""
    axes = [str(a) for a in sweep.get("axes") or []]
    rows = [r for r in sweep.get("rows") or [] if isinstance(r, Mapping)]
    same = [k for k, r in enumerate(rows)
            if r.get(F.PEAK_BYTES) == section.get(F.PEAK_BYTES)
            and r.get(F.STEP_TIME) == section.get(F.STEP_TIME)]  # fmt: skip
    try:
        best = best_row(rows)
        said = [row_said(axes, r, k == best) for k, r in enumerate(rows)]
    except (KeyError, TypeError, ValueError):
        return {"shown": None, "shown_said": None}
    shown = best if best in same else same[0] if len(same) == 1 else None
    return {"shown": shown, "shown_said": None if shown is None else said[shown]}


def _settings(options: Mapping[str, Any], device: Mapping[str, Any]) -> list[list[str]]:
    """The options and the device's facts as ``[name, text]``: bandwidths in B/s, bytes in
    binary units and in full, module paths with the root as ``<root>``."""
    out: list[list[str]] = []
    flat = {k: v for k, v in options.items() if not isinstance(v, Mapping)}
    for key, value in options.items():  # a nested option (the cluster): a row per field
        if isinstance(value, Mapping):
            flat |= {f"{key} {k}": v for k, v in value.items()}
    for prefix, facts in (("", flat), ("device ", device)):
        for key, value in facts.items():
            text = _text(value)
            if isinstance(value, bool):
                text = str(value).lower()
            elif (isinstance(value, int) and abs(value) < _HUGE) or (
                isinstance(value, float) and math.isfinite(value)
            ):  # an int past a float's range (a damaged file) shows as its digits
                if key.endswith("bandwidth") or key == "interconnect":
                    text = f"{units.si(value)}B/s"
                elif key.endswith("latency"):
                    text = units.seconds(value)
                elif key.endswith("_bytes"):
                    text = f"{units.nbytes(value)} ({units.count(value)} B)"
                else:
                    text = f"{value:g}" if isinstance(value, float) else str(value)
            elif isinstance(value, list | tuple) and value:
                text = ("; " if key.endswith("sources") else ", ").join(
                    str(v) or "<root>" for v in value
                )
            out.append([prefix + str(key), text])
    return out


def _text(value: Any) -> str:
    """An option as the table shows it: ``none`` for None, a list's items joined."""
    if value is None:
        return "none"
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value) or "none"
    return str(value)


def _cell(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return page_number(value)
    return _text(value)


def _mapping(section: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = section.get(key)
    if not isinstance(value, Mapping):
        raise ExportError(f"the plan's {key} is missing or not an object")
    return value


def _list(t: Mapping[str, Any], key: str) -> list[Any]:
    value = t.get(key)
    if not isinstance(value, list | tuple):
        raise ExportError(f"the plan's timeline is malformed: {key} is not a list")
    return list(value)


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ExportError(f"the plan's {what} is not a number of bytes: {value!r}")
    return int(value)


def _opt_int(value: Any, what: str) -> int | None:
    return None if value is None else _int(value, what)
