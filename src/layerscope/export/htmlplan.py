"""The plan section of the HTML report: one GPU's memory at the peak by part (a stacked
bar, the budget and reserve marked), the memory timeline of one training step (stacked by
part), the step time by part, the per-module table, the collectives, the notes and, when
given, a sweep as a table.

It reads the plan's JSON section (``Plan.section()``, or the ``plan`` object of a saved
plan) and a sweep's ``to_dict()``, both plain data, so a plan loaded from a file reports
as well as a fresh one. The section travels as its own JSON block after the report's;
``assets/plan.js`` draws it first on the page, above the analysis it was computed from.
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
from layerscope.export.jsonplan import PARTS, TIME_PARTS
from layerscope.hardware import DeviceLike
from layerscope.profile import Profile
from layerscope.render import units

__all__ = ["PARTS", "plan_data", "to_html", "to_html_text"]

#: What each timeline event says before its module (``planning.timeline.Point.event``).
EVENT_WORDS: dict[str, str] = {
    "enter": "enter",
    "exit": "exit",
    "peak": "peak in",
    "backward": "backward of",
    "end": "end of the backward",
    "gather": "all-gather for",
    "prefetch": "prefetch all-gather for",
    "reduce_scatter": "reduce-scatter of",
    "recompute": "recompute",
    "step": "optimizer step",
}
#: Events that name no module when their path is the root.
_WHOLE_STEP = {"end", "step"}

#: The per-module table: row key, header, kind, what the column is (its tooltip).
MODULE_COLUMNS: tuple[tuple[str, str, str, str], ...] = (
    ("path", "Module", "text", "the module's path"),
    ("type", "Type", "text", "the module's class"),
    ("params", "Params", "count", "parameters of the module and its children"),
    ("unit", "FSDP unit", "flag", "an FSDP unit: its parameters are gathered together"),
    ("checkpointed", "Checkpointed", "flag", "its forward is recomputed in the backward"),
    ("activation_bytes", "Saved", "bytes", "bytes its forward saves for the backward"),
    ("kept_activation_bytes", "Kept", "bytes", "of those, kept through the step"),
    ("recompute_bytes", "Recompute", "bytes", "bytes the recompute saves again"),
    ("recompute_flops", "Recompute FLOPs", "si", "FLOPs the backward recomputes"),
    ("shard_elements", "Shard elems", "count", "elements of this GPU's padded shard"),
    ("unsharded_bytes", "Unsharded", "bytes", "its parameters gathered, on this GPU"),
    ("gather_bytes", "All-gather", "bytes", "all-gather payload per call"),
    ("reduce_bytes", "Reduce-scatter", "bytes", "reduce-scatter payload per call"),
)

#: The sweep table: row key, header, kind (the options first, then the figures).
SWEEP_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("micro_batch", "Micro-batch", "count"),
    ("world_size", "World size", "count"),
    ("sharding", "Sharding", "text"),
    ("checkpoint", "Checkpoint", "text"),
    ("precision", "Precision", "text"),
    ("optimizer", "Optimizer", "text"),
    ("grad_accum", "Grad accum", "count"),
    ("fits", "Fits", "fits"),
    ("peak_bytes", "Peak", "bytes"),
    ("headroom_bytes", "Headroom", "bytes"),
    ("step_time", "Step time", "seconds"),
    ("tokens_per_s", "Tokens/s", "si"),
    ("mfu", "MFU", "ratio"),
    ("checkpointed", "Checkpointed", "count"),
)
_SWEEP_OPTIONS = 7  # the first SWEEP_COLUMNS are options, the rest figures


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
    """What the plan section shows, as plain JSON (floats to 6 significant digits, no NaN);
    ``ExportError`` when a part the page draws is missing or malformed."""
    memory = _mapping(section, "memory")
    peak = _int(section.get("peak_bytes"), "peak_bytes")
    parts = [[k, _int(memory.get(key, 0), f"memory.{key}")] for k, (key, _) in enumerate(PARTS)]
    where = section.get("peak_phase") or {}
    time = _mapping(section, "time")
    budget = _opt_int(section.get("budget"), "budget")
    reserve = _int(section.get("reserve_bytes", 0), "reserve_bytes")
    headroom = None if budget is None else budget - reserve - peak  # as Plan.headroom_bytes
    return {
        "part_names": [label for _, label in PARTS],
        "options": page_facts(section.get("options") or {}),
        "device": page_facts(section.get("device") or {}),
        "settings": _settings(section.get("options") or {}, section.get("device") or {}),
        "peak_bytes": peak,
        "parts": [p for p in parts if p[1]],
        "peak_at": {
            "phase": str(where.get("phase", "")),
            "label": describe(str(where.get("event", "")), str(where.get("path", ""))),
        },
        "budget": budget,
        "reserve_bytes": reserve,
        "fits": None if headroom is None else headroom >= 0,
        "headroom_bytes": headroom,
        "checkpoint": [str(p) for p in section.get("checkpoint") or []],
        "kept_activation_bytes": page_number(section.get("kept_activation_bytes")),
        "recompute_flops": page_number(section.get("recompute_flops")),
        "timeline": _timeline(_mapping(section, "timeline")),
        "time": [[label, page_number(time.get(key, 0))] for key, label in TIME_PARTS],
        "comm_time": page_number(time.get("comm")),
        "exposed_comm": page_number(time.get("exposed_comm")),
        "step_time": page_number(section.get("step_time")),
        "model_flops": page_number(section.get("model_flops")),
        "mfu": page_number(section.get("mfu")),
        "tokens": page_number(section.get("tokens")),
        "tokens_per_s": page_number(section.get("tokens_per_s")),
        "modules": _modules(section.get("modules") or []),
        "comm": _comm(section.get("comm") or {}),
        "notes": [str(n) for n in section.get("notes") or []],
        "sweep": None if sweep is None else _sweep(sweep),
    }


def describe(event: str, path: str) -> str:
    """A timeline point in words: ``peak in blocks.0.mlp``, ``optimizer step``."""
    word = EVENT_WORDS.get(event, event)
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
    for k, (key, _) in enumerate(PARTS):
        values = [_int(x, f"timeline.{key}") for x in _list(t, key)] if key in t else [0] * n
        if len(values) != n:
            raise ExportError(f"the plan's timeline is malformed: {key} has {len(values)} points")
        if any(values):
            parts.append([k, values])
    return {"phases": runs, "labels": list(labels), "at": at, "total": total, "parts": parts}


def _modules(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The per-module table: the columns some row has (a number column only where some
    value is not 0), then one list of cells per row."""
    cols: list[list[str]] = []
    for key, header, kind, what in MODULE_COLUMNS:
        values = [r.get(key) for r in rows]
        if key in ("path", "type") or any(v not in (None, 0, False) for v in values):
            cols.append([key, header, kind, what])
    known = {c[0] for c in MODULE_COLUMNS}
    extra = sorted({k for r in rows for k in r} - known)
    for key in extra:  # fields added later: shown, named by their key
        if any(isinstance(r.get(key), int | float) and r.get(key) for r in rows):
            kind = "bytes" if key.endswith("_bytes") else "si" if key.endswith("flops") else "count"
            cols.append([key, key, kind, key])
    cells = [
        [(r.get(k) or "<root>") if k == "path" else _cell(r.get(k)) for k, *_ in cols] for r in rows
    ]
    return {"columns": cols, "rows": cells}


def _comm(comm: Mapping[str, Any]) -> list[list[Any]]:
    """The collectives of a step summed over modules: ``[phase, kind, calls, bytes,
    wire_bytes]`` per phase and kind, forward first."""
    sums: dict[tuple[str, str], list[float]] = {}
    for phases in comm.values():
        if not isinstance(phases, Mapping):
            continue
        for phase, kinds in phases.items():
            for kind, c in (kinds or {}).items():
                s = sums.setdefault((str(phase), str(kind)), [0, 0, 0])
                for k, key in enumerate(("calls", "bytes", "wire_bytes")):
                    x = c.get(key, 0) if isinstance(c, Mapping) else 0
                    s[k] += x if isinstance(x, int | float) else 0
    order = {"forward": 0, "backward": 1}
    keys = sorted(sums, key=lambda pk: (order.get(pk[0], 2), pk[0], pk[1]))
    return [[p, k.replace("_", "-"), *(page_number(x) for x in sums[(p, k)])] for p, k in keys]


def _sweep(sweep: Mapping[str, Any]) -> dict[str, Any]:
    """The sweep's table: the options swept, then the figures; options the same in every
    row are said once (``same``) instead of repeated."""
    axes = [str(a) for a in sweep.get("axes") or []]
    rows = [r for r in sweep.get("rows") or [] if isinstance(r, Mapping)]
    known = {c[0]: c for c in SWEEP_COLUMNS}
    cols: list[tuple[str, str, str]] = [known.get(a, (a, a, "text")) for a in axes]
    same: list[list[str]] = []
    for key, header, kind in SWEEP_COLUMNS[:_SWEEP_OPTIONS]:
        if key in axes or not any(key in r for r in rows):
            continue
        values = {_text(r.get(key)) for r in rows}
        if len(values) == 1:
            same.append([header, values.pop()])
        else:
            cols.append((key, header, kind))
    cols += [c for c in SWEEP_COLUMNS[_SWEEP_OPTIONS:] if any(c[0] in r for r in rows)]
    taken = {c[0] for c in cols} | {c[0] for c in SWEEP_COLUMNS[:_SWEEP_OPTIONS]}
    cols += [(k, k, "count") for k in sorted({k for r in rows for k in r} - taken)]
    cells = [
        [_text(r.get(k)) if kind == "text" else _cell(r.get(k)) for k, _, kind in cols]
        for r in rows
    ]
    return {"columns": [list(c) for c in cols], "rows": cells, "same": same}


def _settings(options: Mapping[str, Any], device: Mapping[str, Any]) -> list[list[str]]:
    """The options and the device's facts as ``[name, text]``: bandwidths in B/s, bytes in
    binary units and in full, module paths with the root as ``<root>``."""
    out: list[list[str]] = []
    for prefix, facts in (("", options), ("device ", device)):
        for key, value in facts.items():
            text = _text(value)
            if isinstance(value, bool):
                text = str(value).lower()
            elif isinstance(value, int | float) and math.isfinite(value):
                if key.endswith("bandwidth") or key == "interconnect":
                    text = f"{units.si(value)}B/s"
                elif key.endswith("_bytes"):
                    text = f"{units.nbytes(value)} ({units.count(value)} B)"
                else:
                    text = f"{value:g}" if isinstance(value, float) else str(value)
            elif isinstance(value, list | tuple) and value:
                text = ", ".join(str(v) or "<root>" for v in value)
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
