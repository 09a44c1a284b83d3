"""CSV: one row per node in pre-order, every number in base units, no markup.

Columns: ``path``, ``node_id``, ``depth``, ``name``, ``type``, ``calls``, ``repeat``, then
every metric the profile has under its metric key (inclusive values), the same with a
``self_`` prefix (work done directly in the module), the scalar numerics statistics, and
the first call's ``input_shape`` and ``output_shape``. Units: counts (params, MACs,
FLOPs, calls), bytes (``*_bytes``), seconds per call (``*_time``). An empty cell means the
profile has no such value for that node.
"""

from __future__ import annotations

import csv
import io
import os
from typing import Any

import layerscope.metricspec as ms
from layerscope.export.files import write_text
from layerscope.profile import Node, Profile, Signature
from layerscope.render import units
from layerscope.render.layout import printable

__all__ = ["columns", "rows", "to_csv"]

_IDENTITY = ("path", "node_id", "depth", "name", "type", "calls", "repeat")
_STATS = ("absmax", "min", "max", "mean", "std", "nan", "inf")


def columns(profile: Profile) -> list[str]:
    """The CSV's columns for this profile: identity, metrics, self metrics, statistics,
    shapes (only what some node has)."""
    nodes = profile.nodes()
    inclusive = {k for n in nodes for k in n.metrics}
    own = {k for n in nodes for k in n.self_metrics}
    order = {k: i for i, k in enumerate(ms.STORED_METRICS)}  # the table's order first
    ranked = sorted(inclusive | own, key=lambda k: (order.get(k, len(order)), k))
    cols = list(_IDENTITY)
    cols += [k for k in ranked if k in inclusive]
    cols += [f"self_{k}" for k in ranked if k in own]
    cols += [k for k in _STATS if any(_stat(n, k) is not None for n in nodes)]
    if any(n.inputs or n.outputs for n in nodes):
        cols += ["input_shape", "output_shape"]
    if any(n.grad_inputs or n.grad_outputs for n in nodes):
        cols += ["grad_input_shape", "grad_output_shape"]
    return cols


def rows(profile: Profile) -> list[dict[str, Any]]:
    """One dict per node, pre-order, keyed by ``columns(profile)`` (missing values absent)."""
    out = []
    for n in profile.root.walk():
        row: dict[str, Any] = {
            "path": n.path,
            "node_id": n.node_id,
            "depth": n.depth,
            "name": n.name,
            "type": n.type,
            "calls": n.calls,
            "repeat": n.repeat,
        }
        row.update(n.metrics)
        row.update({f"self_{k}": v for k, v in n.self_metrics.items()})
        for key in _STATS:
            value = _stat(n, key)
            if value is not None:
                row[key] = value
        if n.inputs:
            row["input_shape"] = _shapes(n.inputs[0])
        if n.outputs:
            row["output_shape"] = _shapes(n.outputs[0])
        if n.grad_inputs:
            row["grad_input_shape"] = _shapes(n.grad_inputs[0])
        if n.grad_outputs:
            row["grad_output_shape"] = _shapes(n.grad_outputs[0])
        out.append(row)
    return out


def to_csv(profile: Profile, path: str | os.PathLike[str] | None = None) -> str | None:
    """The CSV text, or write it to ``path`` (atomically) and return None."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns(profile), lineterminator="\n")
    writer.writeheader()
    for row in rows(profile):
        writer.writerow({k: _cell(v) for k, v in row.items()})
    text = buf.getvalue()
    if path is None:
        return text
    write_text(path, text)
    return None


#: What a spreadsheet takes for the start of a formula (OWASP's CSV injection list).
_FORMULA_START = ("=", "+", "-", "@")


def _cell(value: Any) -> Any:
    if isinstance(value, str):  # text from the model: never a formula, never a control
        text = printable(value)
        return "'" + text if text.startswith(_FORMULA_START) else text
    if isinstance(value, float):
        return units.raw(value) if value == value and abs(value) != float("inf") else str(value)
    return value


def _stat(node: Node, key: str) -> float | int | None:
    value = node.numerics.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


def _shapes(sig: Signature) -> str:
    """The tensor shapes of one call, ``[2, 3] [2]`` (dtype added when not floating)."""
    return units.signature(sig, limit=len(sig))
