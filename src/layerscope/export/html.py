"""A self-contained HTML report: one file, inline JS and CSS, nothing fetched, opens from disk.

The page shows the module tree as a table (sort by any column, filter by name or type,
expand and collapse), an icicle chart of time, FLOPs, parameters or memory per module, the
memory timeline of the analysis pass, a roofline chart (one point per module's own work,
with the roof of a device spec when one is given), and the facts below every view
(``summary_lines``).

The profile's numbers travel as one JSON document, column by column (a value per node in
pre-order; paths, node ids, self times and time totals only where the tree and the other
columns do not imply them), inside a
``<script type="application/json">``; the page's script (``ASSETS``: ``assets/*.js``) formats
them with the console's units and builds every element with ``textContent``, so no
string from the model is ever parsed as markup. Floats travel whole, as in the JSON
export: the page rounds each once, to the console's digits. A training plan's report is
this page with the plan's section added before it (``planning.html``). See
docs/exports.md.
"""

from __future__ import annotations

import html
import json
import math
import os
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

import layerscope.metricspec as ms
from layerscope.analysis.catalog import Values, column
from layerscope.analysis.roofline import (
    PHASE_KEYS,
    Roof,
    device_note,
    profile_dtype,
    roof_of,
    target_spec,
    work,
)
from layerscope.errors import ExportError
from layerscope.export.files import write_text
from layerscope.export.jsoncheck import Invalid, json_path
from layerscope.export.jsonspec import TIMELINE
from layerscope.hardware import DeviceLike
from layerscope.profile import Node, Number, Profile
from layerscope.render import units
from layerscope.render.layout import printable
from layerscope.render.summary import BASELINE_WORDS, summary_lines

__all__ = ["page_text", "report_data", "report_roof", "script_json", "to_html", "to_html_text"]

#: Columns of the table before and after the metrics, when some node has them.
_TEXT_KEYS = ("input_shape", "output_shape")
_OTHER_KEYS = ("flops_per_s", "absmax", "nan", "inf", "calls")


def table_keys() -> tuple[str, ...]:
    """Columns of the table, in order, when some node has them: the shapes, the metrics
    of the table (``MetricSpec.report``; a self column after those with ``default_self``),
    achieved FLOP/s, the numerics statistics and calls."""
    metrics: list[str] = []
    for spec in ms.METRICS.values():
        if spec.report:
            metrics += (spec.key, f"self_{spec.key}") if spec.default_self else (spec.key,)
    return (*_TEXT_KEYS, *metrics, *_OTHER_KEYS)


#: Shown before the user picks columns: the console's high-priority ones, but not MACs
#: beside FLOPs (half of them, for most ops), so that the table fits a 1400-px window.
_SHOWN_PRIORITY = 55
_SHOWN_ALWAYS = frozenset({"output_shape", ms.PEAK_BYTES})
_HIDDEN_BESIDE = {ms.MACS: ms.FLOPS}

#: Peaks per module call: a module never entered has none (a blank cell, as for time).
_PER_CALL_PEAKS = frozenset({ms.PEAK_BYTES, ms.SIMULATED_PEAK_BYTES})


def chart_metrics() -> tuple[tuple[str, str, str], ...]:
    """What the chart can size modules by, when the profile has it: (value key, label,
    kind) of the metrics with ``MetricSpec.chart``, in that order (a time by its total)."""
    specs = sorted((s for s in ms.METRICS.values() if s.chart > 0), key=lambda s: s.chart)
    out: list[tuple[str, str, str]] = []
    for spec in specs:
        key = f"{spec.key}_total" if spec.calls == "per_call" else spec.key
        out.append((key, spec.chart_label or spec.header, column(key).kind))
    return tuple(out)


_EVENTS = {"enter": "e", "exit": "x", "backward": "b", "peak": "p", "end": "n"}


def to_html(
    profile: Profile, path: str | os.PathLike[str], *, device: DeviceLike | None = None
) -> None:
    """Write the report for ``profile`` to ``path`` (atomically; ``ExportError`` on
    failure). ``device`` (a spec name such as ``"h100"`` or ``"cpu"``, a ``DeviceSpec`` or
    a mapping; default: the target a meta analysis followed, if a spec) draws its roof in
    the roofline chart."""
    write_text(path, to_html_text(profile, device=device))


def to_html_text(profile: Profile, *, device: DeviceLike | None = None) -> str:
    """The report as one HTML document."""
    return page_text(profile, report_data(profile, report_roof(profile, device)))


def report_roof(profile: Profile, device: DeviceLike | None) -> Roof | None:
    """The roof the roofline chart draws: ``device``'s, else the target a meta analysis
    followed (if a spec), else none."""
    device = device if device is not None else target_spec(profile)
    return roof_of(device, profile_dtype(profile)) if device is not None else None


def page_text(
    profile: Profile,
    data: dict[str, Any],
    *,
    kind: str = "report",
    css: str = "",
    tail: str = "",
) -> str:
    """The page around ``data`` (``report_data``'s); ``css`` is added to the report's
    style and ``tail`` (more elements) after its script, for sections of other objects."""
    title = profile.model.get("name") or profile.root.type or "model"
    base_css, js = page_assets("report")
    return _PAGE.format(
        title=html.escape(printable(f"{title} — layerscope {kind}"), quote=True),
        css=base_css + css,
        data=script_json(data),
        js=js,
        tail=tail,
    )


def reported(
    analysis: Profile | None, path: str | os.PathLike[str], subject: str, where: str
) -> Profile:
    """The analysis a subject's section is written above (a plan's, an estimate's);
    ``ExportError`` naming the file when there is none (``where``: which have one)."""
    if analysis is None:
        raise ExportError(
            f"cannot write {os.fspath(path)}: the {subject} has no analysis to report ({where})"
        )
    return analysis


def section_page(
    profile: Profile, device: DeviceLike | None, kind: str, data_id: str, section: Any
) -> str:
    """The report of ``profile`` with a section of another object first: the section's
    data (``section``, plain JSON) in a ``<script id=data_id>`` element, read by the
    ``assets/KIND.js`` that follows it, styled by ``assets/KIND.css``."""
    data = report_data(profile, report_roof(profile, device))
    css, js = page_assets(kind)
    tail = (
        f'<script type="application/json" id="{data_id}">'
        + script_json(section)
        + "</script>\n<script>\n"
        + js
        + "</script>\n"
    )
    return page_text(profile, data, kind=kind, css=css, tail=tail)


#: What ``script_json`` writes as ``\\u`` escapes besides JSON's own (C0 controls): the
#: characters that end a script or a comment early, the line separators JavaScript
#: reads as line ends, and DEL and the C1 controls, which a terminal would run when the
#: file is printed (``cat report.html``).
_SCRIPT_ESCAPES = {
    **{ord(c): f"\\u{ord(c):04x}" for c in "<>&\u2028\u2029"},
    **{c: f"\\u{c:04x}" for c in range(0x7F, 0xA0)},
}


def script_json(value: Any) -> str:
    """JSON that is safe inside ``<script type="application/json">`` and in a terminal:
    no ``</``, no ``<!--``, no U+2028/U+2029, no control character (``_SCRIPT_ESCAPES``)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.translate(_SCRIPT_ESCAPES)


def report_data(profile: Profile, roof: Roof | None = None) -> dict[str, Any]:
    """Everything the page shows, as plain JSON (no NaN: non-finite floats as strings);
    ``roof``: the device whose roof the roofline chart draws."""
    nodes = profile.nodes()
    values = Values(profile)
    tree = _tree(nodes)
    inner: list[int] = tree["inner"]
    # numerics as the text view has them (RenderContext._present): a column only where
    # some module has a non-zero value (NaN/Inf counts all 0 show nothing)
    present = {k for n in nodes for k in n.metrics} | {
        k for n in nodes for k, x in n.numerics.items() if isinstance(x, int | float) and x
    }
    partial = set(profile.partial_metrics)
    cols, v, s = _table(nodes, values, present, partial, inner)
    chart = _chart(nodes, values, present, cols, v)
    derived = _derivable(v, s, inner, [n.calls for n in nodes])
    for key in derived:
        del v[key]
    return {
        "schema": profile.schema,
        "model": page_facts(profile.model),
        "env": page_facts(profile.env),
        "headline": _headline(profile),
        **tree,
        "rep": {str(i): n.repeat for i, n in enumerate(nodes) if n.repeat > 1},
        "columns": cols,
        "v": v,
        "derived": derived,
        "s": s,
        "chart": chart,
        "partial": sorted(partial),
        "facts": [[text, style] for text, style in summary_lines(profile)],
        "unsupported": _unsupported(profile),
        "timeline": _timeline(profile, {n.path: i for i, n in enumerate(nodes)}),
        "roofline": _roofline(profile, nodes, values, roof),
        "not_called": [i for i, n in enumerate(nodes) if not n.calls],
    }


def _tree(nodes: list[Node]) -> dict[str, Any]:
    """The tree in pre-order: depths, names, type ids, the inner nodes, and only the paths
    and ids that differ from what the page derives from the tree."""
    index = {id(n): i for i, n in enumerate(nodes)}
    types: dict[str, int] = {}
    depth: list[int] = []
    names: list[str] = []
    type_ids: list[int] = []
    paths: dict[str, str] = {}
    ids: dict[str, str] = {}
    inner: list[int] = []
    position: dict[int, int] = {}  # id(node) -> its place among its siblings, from 1
    for i, n in enumerate(nodes):
        names.append(n.name)
        type_ids.append(types.setdefault(n.type, len(types)))
        parent = n.parent
        if parent is None:
            want_path, want_id = "", "0"
            depth.append(0)
        else:
            # the page rebuilds the tree from pre-order and depths, and derives paths
            # and ids from it: only those that differ travel
            want_path = f"{parent.path}.{n.name}" if parent.path else n.name
            k = position[id(n)]
            want_id = str(k) if parent.node_id == "0" else f"{parent.node_id}.{k}"
            depth.append(depth[index[id(parent)]] + 1)
        if n.path != want_path:
            paths[str(i)] = n.path
        if n.node_id != want_id:
            ids[str(i)] = n.node_id
        if n.children:
            inner.append(i)
            for k, child in enumerate(n.children, start=1):
                position[id(child)] = k
    return {
        "types": list(types),
        "depth": depth,
        "name": names,
        "type": type_ids,
        "path": paths,
        "id": ids,
        "inner": inner,
    }


def _table(
    nodes: list[Node], values: Values, present: set[str], partial: set[str], inner: list[int]
) -> tuple[list[dict[str, Any]], dict[str, list[Any]], dict[str, list[Any]]]:
    """The table's columns, their values per node (``v``) and the self values of the
    inner nodes for the additive and time columns (``s``)."""
    cols: list[dict[str, Any]] = []
    v: dict[str, list[Any]] = {}
    s: dict[str, list[Any]] = {}
    for key in table_keys():
        base = key.removeprefix("self_")
        if key in ("input_shape", "output_shape"):
            sigs = [(n.inputs if key == "input_shape" else n.outputs) for n in nodes]
            if not any(sigs):
                continue
            v[key] = [units.signature(sig[0], limit=4) if sig else None for sig in sigs]
        elif key == "calls":
            v[key] = [n.calls for n in nodes]
        elif base in present:
            v[key] = [
                None if key in _PER_CALL_PEAKS and not n.calls else page_number(values.get(n, key))
                for n in nodes
            ]
            if all(x is None for x in v[key]):
                del v[key]
                continue
            if not key.startswith("self_") and (column(key).additive or key in ms.TIMES):
                s[key] = [page_number(nodes[i].self_metrics.get(key)) for i in inner]
        else:
            continue
        col = column(key)
        cols.append(
            {
                "key": key,
                "header": col.header + ("*" if base in partial else ""),
                "kind": col.kind,
                "shown": col.priority >= _SHOWN_PRIORITY or key in _SHOWN_ALWAYS,
            }
        )
    keys = {c["key"] for c in cols}
    for c in cols:
        if _HIDDEN_BESIDE.get(c["key"]) in keys:
            c["shown"] = False
    return cols, v, s


def _chart(
    nodes: list[Node],
    values: Values,
    present: set[str],
    cols: list[dict[str, Any]],
    v: dict[str, list[Any]],
) -> list[dict[str, Any]]:
    """The metrics the chart can show (a positive whole-model total); adds their values
    to ``v``."""
    chart: list[dict[str, Any]] = []
    for key, label, kind in chart_metrics():
        base = key.removesuffix("_total")
        if base not in present:
            continue
        if key not in v:
            v[key] = [page_number(values.get(n, key)) for n in nodes]
        total = v[key][0]
        if isinstance(total, int | float) and total > 0:
            chart.append({"key": key, "label": label, "kind": kind})
        elif key not in (c["key"] for c in cols):
            del v[key]
    return chart


def _derivable(
    v: dict[str, list[Any]], s: dict[str, list[Any]], inner: list[int], calls: list[int]
) -> dict[str, list[str]]:
    """Value columns the page can rebuild, so they need not travel: ``self_<time>`` (the
    inclusive value on leaves, the self value on the others) and ``<time>_total``
    (per-call time × calls), each only where that gives exactly the values sent (to the
    last bit: the page shows the console's digits of them)."""
    out: dict[str, list[str]] = {}
    is_inner = set(inner)
    for key, values in v.items():
        if key.startswith("self_") and key.removeprefix("self_") in s:
            base = key.removeprefix("self_")
            own = dict(zip(inner, s[base], strict=True))
            if all(x == (own[i] if i in is_inner else v[base][i]) for i, x in enumerate(values)):
                out[key] = ["self", base]
        elif key.endswith("_total") and key.removesuffix("_total") in v:
            per_call = v[key.removesuffix("_total")]
            # exactly: the page multiplies as Python does, and shows what the console does
            if all(
                (x is None and y is None) or (_finite(x) and _finite(y) and x == y * c)
                for x, y, c in zip(values, per_call, calls, strict=True)
            ):
                out[key] = ["total", key.removesuffix("_total")]
    return out


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)


def page_number(x: Any) -> Number | str | None:
    """A value for the page: ints as they are, floats whole (the shortest digits that read
    back as the same float, so the page rounds the value once, as the console does, and
    shows the same digits), non-finite ones as the strings ``"NaN"``, ``"Infinity"``,
    ``"-Infinity"`` (JSON has no NaN); None and what is not a number as None."""
    if x is None or isinstance(x, bool):
        return None if x is None else int(x)
    if not isinstance(x, int | float):
        return None
    if isinstance(x, int):
        return x
    if not math.isfinite(x):
        return "NaN" if x != x else ("Infinity" if x > 0 else "-Infinity")
    if x == int(x) and abs(x) < 2**53:
        return int(x)
    return x


def page_facts(value: Any) -> Any:
    """JSON-safe copy of a small dict of facts (non-finite floats as strings)."""
    if isinstance(value, Mapping):
        return {str(k): page_facts(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [page_facts(v) for v in value]
    if isinstance(value, float):
        return page_number(value)
    if value is None or isinstance(value, str | int | bool):
        return value
    return str(value)


#: The memory cards: ``profile.memory`` key, label, what the figure is (the card's tooltip).
_MEMORY_CARDS: tuple[tuple[str, str, str], ...] = (
    (
        "session_peak_bytes",
        "Peak live",
        "the highest live bytes of the run, above the level at its start: the memory "
        "timeline's highest point",
    ),
    (
        "forward_peak_bytes",
        "Fwd peak",
        "the highest live bytes during the forward, above the level at its start",
    ),
    (
        ms.BACKWARD_PEAK_BYTES,
        "Bwd peak over bwd start",
        "the highest live bytes during the backward, above the level when it started "
        "(the dashed line of the memory timeline)",
    ),
    (ms.ACTIVATION_BYTES, "Saved", "bytes saved for backward by the forward"),
)


def _headline(profile: Profile) -> list[list[Any]]:
    """The few whole-model figures shown first: ``[label, value, kind, key]`` (``key``
    and a fifth item, the card's tooltip, for the memory figures)."""
    m = profile.root.metrics
    out: list[list[Any]] = []
    for key in (ms.PARAMS, ms.FLOPS, ms.BACKWARD_FLOPS, ms.FORWARD_TIME, ms.BACKWARD_TIME):
        if key in m:
            col = column(key)
            label = col.header + ("*" if key in profile.partial_metrics else "")
            out.append([label, page_number(m[key]), col.kind, key])
    mem = profile.memory
    for key, label, what in _MEMORY_CARDS:
        if key in mem and (key != "session_peak_bytes" or ms.BACKWARD_PEAK_BYTES in mem):
            out.append([label, page_number(mem[key]), "bytes", key, what])
    latency = profile.timing.get("latency")
    if isinstance(latency, dict) and "median" in latency:
        out.append(["Latency", page_number(latency["median"]), "seconds", "latency"])
    return out


def _unsupported(profile: Profile) -> list[list[Any]]:
    """Ops without a FLOP formula: ``[op, count, forward, backward, modules]``, most first."""
    rows: list[tuple[str, int, int, int, list[str]]] = []
    for op, e in profile.unsupported_ops.items():
        modules = e.get("modules", {})
        where = sorted(modules) if isinstance(modules, dict | list) else []
        rows.append(
            (
                str(op),
                int(e.get("count", 0)),
                int(e.get("forward", 0)),
                int(e.get("backward", 0)),
                [p or "<root>" for p in where],
            )
        )
    rows.sort(key=lambda r: (-r[1], r[0]))
    return [list(r) for r in rows]


def _timeline(profile: Profile, by_path: dict[str, int]) -> dict[str, Any] | None:
    """The memory timeline with module paths as node indices (a path the tree lacks stays
    a string) and events as one letter: ``e`` enter, ``x`` exit, ``b`` backward."""
    t = profile.memory.get("timeline")
    if not isinstance(t, dict) or not t.get("op"):
        return None
    try:  # the format's own check (what ls.load applies): parallel lists, all there
        t = TIMELINE.check(t, (("$", "memory"), "timeline"))
    except Invalid as e:
        raise ExportError(
            f"the profile's memory['timeline'] is malformed: {json_path(e.where)}: {e.problem}"
        ) from None
    return {
        "op": list(t["op"]),
        "event": "".join(_EVENTS.get(e, "?") for e in t["event"]),
        "node": [by_path.get(p, p) for p in t["path"]],
        "bytes": list(t["bytes"]),
        "allocator": t.get("allocator", "simulated"),
        "dropped": t.get("dropped", 0),
        **_baseline(profile.memory),
    }


def _baseline(mem: dict[str, Any]) -> dict[str, Any]:
    """What was held when the run began (``memory["baseline"]``): its bytes, the kinds
    held, and the absolute peak; nothing for a profile without it."""
    total, peak, kinds = (
        mem.get("baseline_bytes"),
        mem.get("session_peak_bytes"),
        mem.get("baseline"),
    )
    if not isinstance(total, int) or not isinstance(peak, int) or not isinstance(kinds, dict):
        return {}
    held = [[word, kinds[key]] for key, word in BASELINE_WORDS.items() if kinds.get(key)]
    return {"baseline": total, "baseline_kinds": held, "absolute_peak": total + peak}


def _roofline(
    profile: Profile, nodes: list[Node], values: Values, roof: Roof | None
) -> dict[str, Any] | None:
    """The roofline chart's points: per phase, every module whose own work has FLOPs and
    bytes moved, as node indices (``i``), own FLOPs (``f``), own bytes (``b``) and own
    measured time, all calls (``t``; None where not timed). None when no module has a
    point that can be placed: timed work, or any work once a roof is given."""
    phases: dict[str, dict[str, Any]] = {}
    for phase, (_, _, time_key) in PHASE_KEYS.items():
        points: dict[str, list[Any]] = {"i": [], "f": [], "b": [], "t": []}
        no_flops = 0
        for i, n in enumerate(nodes):
            w = work(n.self_metrics, phase)
            if w is None or not w[1]:
                continue
            if not w[0]:
                no_flops += 1
                continue
            t = values.time_total(n, time_key, own=True)
            points["i"].append(i)
            points["f"].append(page_number(w[0]))
            points["b"].append(page_number(w[1]))
            points["t"].append(page_number(t) if t else None)
        timed = any(t is not None for t in points["t"])
        if points["i"] and (timed or roof is not None):
            phases[phase] = {**points, "no_flops": no_flops, "timed": timed}
    if not phases:
        return None
    return {
        "roof": None
        if roof is None
        else {
            "name": roof.name,
            "dtype": roof.dtype,
            "peak": page_number(roof.peak),
            "bandwidth": page_number(roof.bandwidth),
            # which device the profile measured or followed, where the roof is another's
            "note": device_note(profile, roof.name),
        },
        "phases": phases,
    }


#: The files of each page script and its style, in ``assets/``, in order. A script's
#: files share one function scope (``page_assets`` wraps them), so each file holds one
#: job: the report's number formats, sorting rules and DOM helpers (which the plan's and
#: the generation's sections use too, as ``window.lsFormat`` and ``window.lsDom``), its
#: data, then each part of the page in the order it is drawn.
_REPORT_JS = (
    "units.js", "sorting.js", "dom.js", "tree.js", "header.js", "icicle.js", "timeline.js",
    "roofline.js", "table.js", "notes.js",
)  # fmt: skip
ASSETS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "report": (("report.css",), _REPORT_JS),
    "plan": (("plan.css",), ("plan.js",)),
    "generation": (("generation.css",), ("generation.js",)),
    "serving": (("serving.css",), ("serving.js",)),
}


@cache
def page_assets(name: str) -> tuple[str, str]:
    """The CSS and JS of the report, a plan's or a generation's section (``ASSETS``), read
    once; the JS is its files in one strict function scope, so it leaks no name."""
    folder = resources.files("layerscope.export").joinpath("assets")
    styles, scripts = ASSETS[name]
    css = "".join(folder.joinpath(f).read_text(encoding="utf-8") for f in styles)
    js = "\n".join(folder.joinpath(f).read_text(encoding="utf-8") for f in scripts)
    js = '(function () {\n  "use strict";\n' + js + "})();\n"
    # Our own code must not end its <script>/<style> element early either.
    assert "</script" not in js.lower() and "</style" not in css.lower()
    return css, js


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; \
script-src 'unsafe-inline'; style-src 'unsafe-inline'">
<title>{title}</title>
<style>
{css}</style>
</head>
<body>
<noscript>This report needs JavaScript to draw its tables and charts.</noscript>
<script type="application/json" id="ls-data">{data}</script>
<script>
{js}</script>
{tail}</body>
</html>
"""
