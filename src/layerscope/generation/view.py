"""A measured generation as text (``Generation.render``/``show``): one line per stage,
the KV cache, and a table of the model calls, from the figures of
``Generation.section_for_views`` (numbers only; nothing here imports the generation)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from layerscope.generation.cache import held_words
from layerscope.generation.fields import CALL_FIELDS, CallField
from layerscope.render import units
from layerscope.render.layout import (
    Table,
    TableColumn,
    TableRow,
    fit_table,
    plain_text,
    terminal_width,
    wrap_text,
)
from layerscope.validate import check_int

__all__ = ["render_generation", "show_generation"]


def _cell(value: Any, kind: str) -> str:
    if value is None:
        return "-"
    if kind == "bytes":
        return units.nbytes(value)
    return units.si(value) if kind == "si" else units.count(value)


def _call_cell(f: CallField, row: Mapping[str, Any]) -> str:
    """One cell of the calls table, as its field's kind says ("-" for a call untimed)."""
    if f.kind == "text":
        return str(row.get(f.key, ""))
    if f.kind == "count":
        return units.count(row.get(f.key, 0))
    if f.kind == "seconds":
        return units.seconds(row[f.key]) if f.key in row else "-"
    return _cell(row.get(f.key), f.kind)


def render_generation(
    section: Mapping[str, Any], *, width: int | None = None, max_rows: int | None = None
) -> str:
    """The summary and the table of calls, at ``width`` columns (default 100)."""
    width = 100 if width is None else check_int("width", width, 20)
    limit = None if max_rows is None else check_int("max_rows", max_rows, 1)
    o, kv = section.get("options", {}), section.get("kv_cache", {})
    lines = [
        f"Generation: {units.plural(o.get('batch', 0), 'prompt')} of "
        f"{units.plural(o.get('prompt_tokens', 0), 'token')}, "
        f"{units.plural(o.get('new_tokens', 0), 'new token')}, "
        f"{units.plural(o.get('rows', 0), 'row')} "
        f"({'a KV cache' if o.get('use_cache', True) else 'no cache: full forwards'}).",
    ]
    for name, t in section.get("stages", {}).items():
        lines.append(
            f"  {name}: {units.plural(t.get('calls') or 0, 'call')}, {_cell(t.get('macs'), 'si')} "
            f"MACs, {_cell(t.get('flops'), 'si')} FLOPs, "
            f"{_cell(t.get('bytes_accessed'), 'bytes')} moved"
            + (f", {units.seconds(t['time'])}" if t.get("time") is not None else "")
        )
    if kv:
        lines.append(
            f"KV cache: {units.nbytes(kv.get('bytes_after_prefill', 0))} after the prefill, "
            f"{units.nbytes(kv.get('bytes_final', 0))} at the end ({held_words(kv)}"
            + (f"; cross-attention {units.nbytes(kv['cross_bytes'])}"
               if kv.get("cross_bytes") else "")
            + ")."
        )  # fmt: skip
    steps = list(section.get("calls", []))
    timed = any("time" in r for r in steps)
    fields = [f for f in CALL_FIELDS if f.key != "time" or timed]
    columns = [
        TableColumn(
            f.key, f.header, justify="left" if f.kind == "text" else "right",
            priority=None if f.key == "stage" else 80 if f.key == "time" else 50,
        )
        for f in fields
    ]  # fmt: skip
    shown = steps if limit is None else steps[:limit]
    rows = [TableRow([[(_call_cell(f, r), "")] for f in fields]) for r in shown]
    table = fit_table(Table(columns, rows), width)
    lines = [plain_text(wrap_text(line, "", width)).rstrip("\n") for line in lines]
    lines.append("")
    lines.append(plain_text(table.lines).rstrip("\n"))
    if table.dropped:
        lines.append(f"Hidden to fit {width} columns: {', '.join(table.dropped)}.")
    tail = [f"Showing {len(shown)} of {len(steps)} calls (max_rows {limit})."] if (
        len(shown) < len(steps)
    ) else []  # fmt: skip
    tail += [f"Note: {n}" for n in section.get("notices", [])]
    lines += [plain_text(wrap_text(line, "", width)).rstrip("\n") for line in tail]
    return "\n".join(lines)


def show_generation(section: Mapping[str, Any], **options: Any) -> None:
    """Print ``render_generation`` at the terminal's width by default."""
    if options.get("width") is None:
        options["width"] = terminal_width()
    print(render_generation(section, **options))
