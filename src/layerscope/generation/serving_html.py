"""A serving plan's HTML report (``ServingPlan.to_html``): its section (the capacity as
cards, the memory split as a bar, time per output token against tokens per second over
the batch sizes, the rows as a table, the notes and the setting) above the report of the
first batch's prefill, analysed on meta for the target. The section's script and style
are package data (``export/assets/serving.js``, ``serving.css``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from layerscope.export.files import write_text
from layerscope.export.html import page_number, section_page
from layerscope.generation.fields import SERVING_FIELDS
from layerscope.profile import Profile

#: The capacity cards: the to_dict path, label, kind, what it is.
CARDS: tuple[tuple[tuple[str, ...], str, str, str], ...] = (
    (("max_concurrency",), "Max concurrency", "count",
     "sequences of the longest context whose KV caches fit together"),
    (("kv", "tokens"), "KV cache tokens", "count", "tokens the KV budget holds in every layer"),
    (("kv", "blocks"), "Blocks", "count", "whole blocks of the paged cache"),
    (("kv", "bytes_per_token"), "KV per token", "bytes", "one token's keys and values, all layers"),
    (("memory", "kv_budget_bytes"), "KV budget", "bytes", "the memory left for the KV cache"),
)  # fmt: skip
#: The memory split, in the bar's order: the to_dict key under "memory", label.
PARTS = (
    ("weight_bytes", "Weights"),
    ("workspace_bytes", "Workspace"),
    ("reserve_bytes", "Reserve"),
    ("kv_budget_bytes", "KV cache"),
)
_SETTING = ("model", "target", "device_label", "dtype", "weights", "kv_dtype", "block_size",
            "max_context", "prompt", "new_tokens")  # fmt: skip


def _at(data: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        data = data[key]
    return data


def serving_data(d: Mapping[str, Any]) -> dict[str, Any]:
    """What the section shows, as plain JSON (floats whole: ``page_number``)."""
    m = d["memory"]
    shown = [(label, max(int(m[key]), 0)) for key, label in PARTS]
    # what the server may take and does not: none when the parts are over the usable
    # memory (the weights do not fit; the bar then spans the parts, and says so)
    unused = max(min(m["usable_bytes"], m["budget_bytes"]) - sum(b for _, b in shown), 0)
    unused += max(m["usable_bytes"] - m["budget_bytes"], 0)
    cards = [
        [label, page_number(max(_at(d, path), 0) if path[-1] == "kv_budget_bytes"
                            else _at(d, path)), kind, what]
        for path, label, kind, what in CARDS
    ]  # fmt: skip
    parts = [[label, page_number(b)] for label, b in shown]
    rows = [
        [r[f.key] if f.kind in ("text", "fits") else page_number(r[f.key]) for f in SERVING_FIELDS]
        for r in d["rows"]
    ]
    facts = [[k.replace("_", " "), "none" if d.get(k) is None else str(d[k])] for k in _SETTING]
    return {
        "title": f"Serving on {d['device_label']}",
        "cards": cards,
        "memory": [*parts, ["Not used", page_number(unused)]],
        "usable": page_number(m["usable_bytes"]),
        "columns": [[f.key, f.header, f.kind, f.description] for f in SERVING_FIELDS],
        "rows": rows,
        "notes": [str(n) for n in d["notes"]],
        "facts": facts,
    }


def to_html(profile: Profile, path: str | os.PathLike[str], data: Mapping[str, Any]) -> None:
    """Write the report of ``profile`` with the serving plan (its ``to_dict()``) first."""
    page = section_page(profile, None, "serving", "ls-serve-data", serving_data(data))
    write_text(path, page)


__all__ = ["serving_data", "to_html"]
