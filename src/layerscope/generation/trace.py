"""Chrome / Perfetto trace of a timed generation (``Generation.to_trace``): the model
calls one after another on a ``calls`` track (each a complete event as long as its
measured median, named by its stage and cache length, its figures in the args), the
stages as spans over their calls on a ``stages`` track, and the KV cache's bytes after
each call as a counter. Calls are placed back to back: the time between them
(``generate()``'s own loop, sampling) is not measured."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from layerscope.errors import ExportError
from layerscope.export.files import write_text
from layerscope.generation.fields import CALL_FIELDS, KV_BYTES

__all__ = ["generation_trace", "to_trace"]

PID = 1
CALLS_TID, STAGES_TID = 1, 2
_ARGS = tuple(f.key for f in CALL_FIELDS if f.span)


def generation_trace(steps: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The trace as a JSON-ready object, from ``Generation.calls`` (timed)."""
    if not steps or any(not isinstance(s.get("time"), int | float) for s in steps):
        raise ExportError(
            "the generation has no times: a trace needs them; profile with "
            "ls.profile_generate(..., timing=True) (the CLI's --time)"
        )
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": PID, "name": "process_name", "args": {"name": "generation"}},
        {"ph": "M", "pid": PID, "tid": CALLS_TID, "name": "thread_name", "args": {"name": "calls"}},
        {"ph": "M", "pid": PID, "tid": STAGES_TID, "name": "thread_name",
         "args": {"name": "stages"}},
    ]  # fmt: skip
    now = 0.0
    spans: list[list[Any]] = []  # [stage, start, end]
    for i, step in enumerate(steps):
        stage, length = str(step.get("stage", "")), float(step["time"]) * 1e6
        name = stage if stage != "decode" else f"decode @ {step.get('cache_tokens', 0)}"
        args = {k: step[k] for k in _ARGS if k in step}
        events.append({"ph": "X", "pid": PID, "tid": CALLS_TID, "name": name, "ts": now,
                       "dur": length, "args": {"call": i, **args}})  # fmt: skip
        if KV_BYTES in step:
            events.append({"ph": "C", "pid": PID, "name": "KV cache", "ts": now + length,
                           "args": {"bytes": step[KV_BYTES]}})  # fmt: skip
        if spans and spans[-1][0] == stage:
            spans[-1][2] = now + length
        else:
            spans.append([stage, now, now + length])
        now += length
    for stage, start, end in spans:
        events.append({"ph": "X", "pid": PID, "tid": STAGES_TID, "name": stage, "ts": start,
                       "dur": end - start, "args": {}})  # fmt: skip
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"source": "layerscope generation"}}  # fmt: skip


def to_trace(steps: Sequence[Mapping[str, Any]], path: str | os.PathLike[str]) -> None:
    """Write the trace to ``path`` (atomically); ``ExportError`` names the file."""
    target = os.fspath(path)
    try:
        events = generation_trace(steps)
    except ExportError as e:
        raise ExportError(f"cannot write {target}: {e}") from e
    write_text(target, json.dumps(events, separators=(",", ":"), allow_nan=False) + "\n")
