"""The generation section of the HTML report: the run's figures as cards, each model
call's bytes moved, FLOPs and time against the cache length (a line chart, the prefill
apart), the KV cache per layer (self- and cross-attention apart), the calls as a table,
the notes and, when given, an estimate on a target GPU (its batch sweep as a table and
its decode time against the batch).

It reads plain data: the figures ``Generation.section_for_views()`` returns (each
stage's totals, the calls, the KV cache, the options, the notices) and an estimate's
``to_dict()``, so a generation loaded from a file reports as a fresh one does. The page
is the report of one stage's Profile (the decode stage's, else the first) with the
section as its own JSON block; ``assets/generation.js`` draws it first on the page. A
profile's own report (``export.html``) is unchanged. See docs/exports.md.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from layerscope.errors import ExportError
from layerscope.export.files import write_text
from layerscope.export.html import page_facts, page_number, section_page
from layerscope.generation.cache import held_words
from layerscope.generation.fields import (
    CALL_FIELDS,
    CARD_FIELDS,
    KV_FIELDS,
    STAGE_FIELDS,
    SWEEP_FIELDS,
)
from layerscope.hardware import DeviceLike
from layerscope.profile import Profile
from layerscope.render import units

__all__ = ["CALL_COLUMNS", "ESTIMATE_COLUMNS", "generation_data", "to_html", "to_html_text"]

#: The calls table: row key, header, kind, what the column is (its tooltip).
CALL_COLUMNS: tuple[tuple[str, str, str, str], ...] = tuple(
    (f.key, f.header, f.kind, f.description) for f in CALL_FIELDS
)
#: Columns shown even where every value is 0.
_ALWAYS = frozenset({"stage", "tokens"})
#: What the calls chart can show: row key, button label, kind.
CHART_METRICS: tuple[tuple[str, str, str], ...] = tuple(
    (f.key, f.header, f.kind)
    for f in sorted((f for f in CALL_FIELDS if f.chart), key=lambda f: f.chart or 0)
)

#: An estimate's sweep table: row key, header, kind.
ESTIMATE_COLUMNS: tuple[tuple[str, str, str], ...] = tuple(
    (f.key, f.header, f.kind) for f in SWEEP_FIELDS
)
#: An estimate's headline figures (those of the sweep's first batch): key, card label,
#: kind, what it is.
ESTIMATE_CARDS = CARD_FIELDS
#: ``tokens_per_s`` is the per-sequence card's deprecated name
_ESTIMATE_PARTS = {"schema", "sweep", "notes", "tokens_per_s"} | {c[0] for c in ESTIMATE_CARDS}


def to_html(
    profile: Profile,
    path: str | os.PathLike[str],
    section: Mapping[str, Any],
    estimate: Mapping[str, Any] | None = None,
    *,
    stage: str | None = None,
    device: DeviceLike | None = None,
) -> None:
    """Write the report of ``profile`` (the generation's ``stage``) with the generation
    ``section`` first (and ``estimate``, an estimate's ``to_dict()``) to ``path``,
    atomically."""
    write_text(path, to_html_text(profile, section, estimate, stage=stage, device=device))


def to_html_text(
    profile: Profile,
    section: Mapping[str, Any],
    estimate: Mapping[str, Any] | None = None,
    *,
    stage: str | None = None,
    device: DeviceLike | None = None,
) -> str:
    """The report with the generation section, as one HTML document."""
    data = generation_data(section, estimate, stage=stage)
    return section_page(profile, device, "generation", "ls-gen-data", data)


def generation_data(
    section: Mapping[str, Any],
    estimate: Mapping[str, Any] | None = None,
    *,
    stage: str | None = None,
) -> dict[str, Any]:
    """What the generation section shows, as plain JSON (floats whole: ``page_number``,
    no NaN); ``ExportError`` when a part the page draws is malformed."""
    steps = section.get("calls") or []
    if not isinstance(steps, Sequence) or not all(isinstance(r, Mapping) for r in steps):
        raise ExportError("the generation's calls is not a list of calls")
    stages = section.get("stages") or {}
    if not isinstance(stages, Mapping):
        raise ExportError("the generation's stages is not an object")
    options = section.get("options") or {}
    if not isinstance(options, Mapping):
        raise ExportError("the generation's options is not an object")
    calls = _calls(steps)
    shown = stage if stage in stages else next(iter(stages), None)
    return {
        "options": page_facts({k: v for k, v in options.items() if k != "generate_kwargs"}),
        "settings": _settings(options),
        "stages": [_stage(str(name), t) for name, t in stages.items()],
        "stage": None if shown is None else [str(shown), _calls_of(stages.get(shown))],
        "calls": calls,
        "chart": _chart(steps, calls),
        "kv": _kv(section.get("kv_cache") or {}),
        "notes": [str(n) for n in section.get("notices") or []],
        "estimate": None if estimate is None else _estimate(estimate),
        # False on an estimate's own page: no generation was run, only the estimate shows
        "measured": bool(steps) or bool(stages),
    }


def _stage(name: str, totals: Any) -> dict[str, Any]:
    t = totals if isinstance(totals, Mapping) else {}
    return {"name": name, **{f.key: page_number(t.get(f.key)) for f in STAGE_FIELDS}}


def _calls_of(totals: Any) -> int:
    calls = totals.get("calls") if isinstance(totals, Mapping) else None
    return calls if isinstance(calls, int) and not isinstance(calls, bool) else 0


def _calls(steps: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The calls table: the columns some call has (a number column only where some value
    is not 0), then one list of cells per call."""
    cols: list[list[str]] = []
    for key, header, kind, what in CALL_COLUMNS:
        values = [r.get(key) for r in steps]
        if key in _ALWAYS or any(v not in (None, 0) for v in values):
            cols.append([key, header, kind, what])
    known = {c[0] for c in CALL_COLUMNS}
    for key in sorted({k for r in steps for k in r} - known):  # fields added later
        if any(_number(r.get(key)) and r.get(key) for r in steps):
            kind = "bytes" if key.endswith("bytes") else "seconds" if "time" in key else "si"
            cols.append([key, key, kind, key])
    rows = [
        [str(r.get(k, "")) if kind == "text" else page_number(r.get(k)) for k, _, kind, _ in cols]
        for r in steps
    ]
    return {"columns": cols, "rows": rows}


def _chart(steps: Sequence[Mapping[str, Any]], calls: Mapping[str, Any]) -> dict[str, Any]:
    """Where each call sits on the chart: x the tokens in the cache before it (for a
    call without a cache, the tokens it is fed), the prefill calls apart, and the metrics
    the calls have."""
    keys = {c[0] for c in calls["columns"]}
    x: list[Any] = []
    for r in steps:
        key = "tokens" if r.get("stage") == "full" else "cache_tokens"
        x.append(page_number(r.get(key)) if _number(r.get(key)) else None)
    cached = any(r.get("stage") != "full" for r in steps)
    return {
        "x": x,
        "x_label": "tokens in the cache before the call"
        if cached
        else "tokens fed per row (the sequence so far)",
        "apart": [k for k, r in enumerate(steps) if r.get("stage") == "prefill"],
        "metrics": [list(m) for m in CHART_METRICS if m[0] in keys],
    }


def _kv(kv: Any) -> dict[str, Any] | None:
    """The KV cache's figures and its bytes per layer, self- and cross-attention apart;
    None for a generation without a cache."""
    if not isinstance(kv, Mapping) or not kv:
        return None
    own = _ints(kv.get("per_layer"), "per_layer")
    cross = _ints(kv.get("cross_per_layer"), "cross_per_layer")
    tokens = _ints(kv.get("tokens_per_layer"), "tokens_per_layer")
    out: dict[str, Any] = {k: page_number(kv.get(k)) for k, kind, _ in KV_FIELDS if kind != "list"}
    out.update(self=own, cross=cross, tokens=tokens, held=held_words(kv))
    return out


def _estimate(estimate: Mapping[str, Any]) -> dict[str, Any]:
    """An estimate's cards, its other facts, its sweep as a table and its notes."""
    if not isinstance(estimate, Mapping):
        raise ExportError("the estimate is not an object (an estimate's to_dict())")
    # an older estimate names the per-sequence figure tokens_per_s only
    estimate = {"tokens_per_s_per_seq": estimate.get("tokens_per_s"), **estimate}
    cards = [
        [label, page_number(estimate[key]), kind, what]
        for key, label, kind, what in ESTIMATE_CARDS
        if _number(estimate.get(key))
    ]
    facts: list[list[str]] = []
    for key, value in estimate.items():
        if key in _ESTIMATE_PARTS:
            continue
        items = value.items() if isinstance(value, Mapping) else [("", value)]
        for sub, v in items:
            name = f"{key} {sub}".strip().replace("_", " ")
            if isinstance(v, str | int | float | bool) or v is None:
                facts.append([name, _fact(str(sub or key), v)])
            elif isinstance(v, list | tuple) and all(not isinstance(x, Mapping) for x in v):
                facts.append([name, ", ".join(str(x) for x in v) or "none"])
    rows = [r for r in estimate.get("sweep") or [] if isinstance(r, Mapping)]
    cols = [list(c) for c in ESTIMATE_COLUMNS if any(_shown(r.get(c[0])) for r in rows)]
    known = {c[0] for c in ESTIMATE_COLUMNS}
    for key in sorted({k for r in rows for k in r} - known):
        if any(_number(r.get(key)) for r in rows):
            kind = "bytes" if key.endswith("bytes") else "seconds" if "time" in key else "si"
            cols.append([key, key.replace("_", " "), kind])
    cells = [
        [_cell(r.get(key)) if kind in ("text", "fits") else page_number(r.get(key))
         for key, _, kind in cols]
        for r in rows
    ]  # fmt: skip
    return {
        "cards": cards,
        "facts": facts,
        "sweep": {"columns": cols, "rows": cells},
        "notes": [str(n) for n in estimate.get("notes") or []],
    }


def _settings(options: Mapping[str, Any]) -> list[list[str]]:
    """How it ran, as ``[name, text]``; ``generate()``'s own options as given."""
    out: list[list[str]] = []
    for key, value in options.items():
        if key == "generate_kwargs" and isinstance(value, Mapping):
            out += [[f"generate {k}", str(v)] for k, v in value.items()]
        else:
            out.append([str(key).replace("_", " "), _fact(str(key), value)])
    return out


def _fact(key: str, value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return "none" if value is None else str(value).lower()
    if isinstance(value, int | float) and math.isfinite(value):
        if key == "memory_bytes":  # the datasheet's label, decimal ("80 GB" is 80e9 B)
            return f"{value / 1e9:g} GB, the datasheet's ({units.count(value)} B)"
        if key.endswith("bytes"):
            return f"{units.nbytes(value)} ({units.count(value)} B)"
        if key.endswith("bandwidth"):
            return f"{units.si(value)}B/s"
        if key == "peak_flops":
            return f"{units.si(value)}FLOP/s"
        return f"{value:g}" if isinstance(value, float) else str(value)
    return str(value)


def _cell(value: Any) -> Any:
    if value is None or isinstance(value, bool | str):
        return value
    return page_number(value) if _number(value) else str(value)


def _shown(value: Any) -> bool:
    """A value a column is kept for: a flag, a text, a number but 0."""
    return value is not None and (isinstance(value, bool | str) or value != 0)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _ints(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list | tuple) or not all(_number(v) for v in value):
        raise ExportError(f"the generation's kv_cache.{what} is not a list of numbers")
    return [page_number(v) for v in value]
