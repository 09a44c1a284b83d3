"""Chrome / Perfetto trace of a timed profile (Trace Event Format, JSON object form).

The timing pass keeps the timeline of one representative repeat in
``Profile.timing["trace"]`` (``docs/timing.md``); this exporter turns it into complete
events (``"ph": "X"``, microseconds) that chrome://tracing and ui.perfetto.dev open: one
process, a ``forward`` track (module calls, with their op spans nested inside) and a
``backward`` track (the stretches of backward work of each module, nested like the
forward). Each event's args carry the module's metrics from the profile and the median,
min and IQR of its time over all repeats. Memory is not a counter track: the analysis
pass measures it in op order, not in time.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from typing import Any

import layerscope.metricspec as ms
from layerscope.errors import ExportError
from layerscope.export.files import write_text
from layerscope.export.jsoncheck import Invalid, json_path
from layerscope.export.jsonspec import TRACE
from layerscope.profile import Node, Profile

__all__ = ["to_trace", "trace_events"]

PID = 1
FORWARD_TID = 1
BACKWARD_TID = 2


def span_args(phase: str) -> tuple[str, ...]:
    """Metrics copied into the args of ``phase``'s spans, when the module has them: those
    with ``phase`` in ``MetricSpec.spans``, what the module holds (a loop cycle keeps it)
    before its work, each in the table's order."""
    keys = [s.key for s in ms.METRICS.values() if phase in s.spans]
    held = ms.rule_keys("cycles", "keep")
    return tuple(sorted(keys, key=lambda k: k not in held))


def span_times(phase: str) -> tuple[str, ...]:
    """Time keys of ``phase``'s spans (per call, the table's order): the median, with
    ``_min`` / ``_iqr`` and the self median."""
    return tuple(s.key for s in ms.METRICS.values() if s.calls == "per_call" and s.phase == phase)


def to_trace(profile: Profile, path: str | os.PathLike[str]) -> None:
    """Write ``profile``'s timeline to ``path`` as a Chrome/Perfetto trace (atomically).

    Raises ``ExportError`` when the profile has no timeline: it was not timed (profile
    with ``timing=True``) or was saved by a layerscope that did not keep one.
    """
    target = os.fspath(path)
    try:
        events = trace_events(profile)
    except ExportError as e:
        raise ExportError(f"cannot write {target}: {e}") from e
    write_text(path, json.dumps(events, separators=(",", ":"), allow_nan=False) + "\n")


def trace_events(profile: Profile) -> dict[str, Any]:
    """The trace as a JSON-ready object: ``traceEvents``, ``displayTimeUnit``, ``otherData``."""
    timing = profile.timing
    trace = timing.get("trace") if isinstance(timing, dict) else None
    if not trace:
        what = "has no timing data" if not timing else "has no timeline of module calls"
        raise ExportError(
            f"the profile {what} (Profile.timing['trace']): a trace needs a timing pass. "
            "Profile with timing=True (ls.profile(model, x, timing=True), or the CLI's "
            "--time) and export that profile; files saved before layerscope kept the "
            "timeline have to be profiled again."
        )
    try:
        # The format's own check (what ls.load applies): rows of 4, indices into paths,
        # times a float can scale to microseconds.
        checked = TRACE.check(trace, (("$", "timing"), "trace"))
    except Invalid as e:
        raise ExportError(
            f"the profile's timing['trace'] is malformed: {json_path(e.where)}: {e.problem}"
        ) from None
    try:
        return _build(profile, checked)
    except (KeyError, IndexError, TypeError, ValueError, OverflowError, AttributeError) as e:
        raise ExportError(f"the profile's timing['trace'] is malformed ({e!r})") from e


def _build(profile: Profile, trace: dict[str, Any]) -> dict[str, Any]:
    paths: list[str] = [str(p) for p in trace["paths"]]
    nodes = _nodes_by_path(profile)
    keys = {phase: (span_args(phase), span_times(phase)) for phase in ("forward", "backward")}
    spans: list[dict[str, Any]] = []
    for row in trace.get("forward", []):
        spans.append(_module_event(nodes, paths, row, "forward", keys["forward"]))
    for row in trace.get("ops", []):
        spans.append(_op_event(nodes, paths, row, keys["forward"][1]))
    for row in trace.get("backward", []):
        spans.append(_module_event(nodes, paths, row, "backward", keys["backward"]))
    # Per track in start order. Rows are stored callers first and op rows come after the
    # modules, so this stable sort keeps an enclosing span before the spans it holds where
    # both start at the same time (and a zero-length span before the one that follows it).
    spans.sort(key=lambda e: (e["tid"], e["ts"]))
    root = profile.root
    meta: list[dict[str, Any]] = [
        _meta("process_name", 0, {"name": f"layerscope: {root.type}"}),
        _meta("thread_name", FORWARD_TID, {"name": "forward"}),
        _meta("thread_sort_index", FORWARD_TID, {"sort_index": FORWARD_TID}),
    ]
    if any(e["tid"] == BACKWARD_TID for e in spans):
        meta += [
            _meta("thread_name", BACKWARD_TID, {"name": "backward"}),
            _meta("thread_sort_index", BACKWARD_TID, {"sort_index": BACKWARD_TID}),
        ]
    timing = profile.timing
    other: dict[str, Any] = {
        "generator": "layerscope",
        "model": root.type,
        "timer": timing.get("timer"),
        "clock": trace.get("clock", timing.get("clock")),
        "device": timing.get("device"),
        "repeat": trace.get("repeat"),
        "repeats": trace.get("repeats", timing.get("repeats")),
        "warmup": timing.get("warmup"),
        "backward": timing.get("backward"),
        "repeat_duration_s": trace.get("duration"),
        "note": (
            "spans of one timed repeat (the one whose whole run took the median time); "
            "args: the module's metrics in base units (counts, FLOPs, bytes; totals over "
            "its calls) and its time per call over all repeats in seconds (median, min, "
            "IQR; inclusive and self)"
        ),
    }
    latency = timing.get("latency")
    if isinstance(latency, dict) and "median" in latency:
        other["latency_median_s"] = _finite(latency["median"])
    return {
        "traceEvents": meta + spans,
        "displayTimeUnit": "ms",
        "otherData": {k: v for k, v in other.items() if v is not None},
    }


def _meta(name: str, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": PID, "tid": tid, "args": args}


def _nodes_by_path(profile: Profile) -> dict[str, Node]:
    """Every node by path; in a folded view, member paths map to their folded entry."""
    out: dict[str, Node] = {}
    for node in profile.root.walk():
        out.setdefault(node.path, node)
        for member in node.members:
            out.setdefault(member, node)
    return out


def _times(row: Sequence[Any]) -> tuple[float, float]:
    """A row's start and duration in microseconds, rounded to the ns."""
    start = round(float(row[2]) * 1e6, 3)
    end = round(float(row[3]) * 1e6, 3)
    return start, round(max(end - start, 0.0), 3)


def _module_event(
    nodes: dict[str, Node],
    paths: list[str],
    row: Sequence[Any],
    phase: str,
    keys: tuple[tuple[str, ...], tuple[str, ...]],
) -> dict[str, Any]:
    """A module call's span; ``keys``: the phase's metric args and time keys."""
    path = paths[int(row[0])]
    ts, dur = _times(row)
    node = nodes.get(path)
    exact = node is not None and node.path == path  # not a folded stand-in
    args: dict[str, Any] = {
        "path": path,
        "type": node.type if node is not None else "",
        "phase": phase,
        # forward: which call of the module this is; backward: which of its stretches
        ("call" if phase == "forward" else "part"): int(row[1]),
    }
    if node is not None and exact:
        args["calls"] = node.calls
        for key in keys[0]:
            if key in node.metrics:
                args[key] = _finite(node.metrics[key])
        args.update(_time_args(node, keys[1]))
    return {
        "name": path or "<root>",
        "cat": node.type if node is not None else phase,
        "ph": "X",
        "ts": ts,
        "dur": dur,
        "pid": PID,
        "tid": FORWARD_TID if phase == "forward" else BACKWARD_TID,
        "args": args,
    }


def _op_event(
    nodes: dict[str, Node], paths: list[str], row: Sequence[Any], times: tuple[str, ...]
) -> dict[str, Any]:
    path = paths[int(row[0])]
    ts, dur = _times(row)
    module, _, name = path.partition("/")
    node = nodes.get(path)
    kind = node.type if node is not None else name
    args: dict[str, Any] = {"path": path, "module": module, "op": kind, "call": int(row[1])}
    if node is not None:
        args["calls"] = node.calls
        args.update(_time_args(node, times))
    return {
        "name": node.name if node is not None else name,
        "cat": kind,
        "ph": "X",
        "ts": ts,
        "dur": dur,
        "pid": PID,
        "tid": FORWARD_TID,
        "args": args,
    }


def _time_args(node: Node, keys: Sequence[str]) -> dict[str, Any]:
    """Median, min and IQR (inclusive) and the self median of each time key present."""
    out: dict[str, Any] = {}
    for key in keys:
        if key not in node.metrics:
            continue
        for suffix in ("", "_min", "_iqr"):
            if key + suffix in node.metrics:
                out[key + suffix] = _finite(node.metrics[key + suffix])
        if key in node.self_metrics:
            out["self_" + key] = _finite(node.self_metrics[key])
    return out


def _finite(value: float) -> float | None:
    """The value, or None where it is NaN or infinite (not valid in a JSON trace)."""
    return value if math.isfinite(value) else None
