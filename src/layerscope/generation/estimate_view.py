"""The text of a generation estimate (``ls.estimate_generate(...).show()``), drawn from
its JSON data alone (``GenerateEstimate.to_dict()``): the run and the roof, the first
batch's figures, a table row per batch size, then the notes. The table uses the engine
and units of the other views: a narrow width drops the least important columns first
and says so below.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import IO, Any

from layerscope.generation.fields import SWEEP_FIELDS, SweepField, text_columns
from layerscope.render import config as display_config
from layerscope.render import units
from layerscope.render.layout import (
    Fitted,
    Line,
    Table,
    TableColumn,
    TableRow,
    fit_table,
    plain_text,
    terminal_width,
    too_narrow,
    wrap_texts,
)
from layerscope.render.terminal import check_file, print_lines
from layerscope.validate import check_int, refuse

__all__ = [
    "estimate_lines",
    "render_generate_estimate",
    "show_generate_estimate",
    "sweep_page",
    "sweep_table",
]


def render_generate_estimate(data: Mapping[str, Any], *, width: int | None = None) -> str:
    """The estimate as plain text, ``width`` characters wide (default: the terminal's)."""
    build = _builder(data, width)
    return plain_text(build(width or terminal_width()))


def show_generate_estimate(
    data: Mapping[str, Any], *, width: int | None = None, file: IO[str] | None = None
) -> None:
    """Print the estimate to the terminal (colours when it is one, at its width) or to
    ``file``."""
    check_file(file)
    print_lines(_builder(data, width), width, file)


def _builder(data: Mapping[str, Any], width: int | None) -> Callable[[int], list[Line]]:
    if not isinstance(data, Mapping) or not isinstance(data.get("sweep"), list):
        refuse("data", data, "a generation estimate's data (GenerateEstimate.to_dict())")
    if width is not None:
        check_int("width", width, 1)
    return lambda w: too_narrow(w) or estimate_lines(data, w)


def _heading(data: Mapping[str, Any]) -> list[tuple[str, str]]:
    device = data.get("device", {})
    label = device.get("label") or device.get("name") or data.get("target", "?")
    title = (
        f"Generation on {data.get('target', '?')} ({label}), {data.get('dtype', '?')}: "
        f"{units.si(device.get('peak_flops') or 0)}FLOP/s, "
        f"{units.si(device.get('bandwidth') or 0)}B/s"
    )
    run = (
        f"{data.get('model', '?')}: prompt {units.plural(data.get('prompt', 0), 'token')}, "
        f"{units.count(data.get('new_tokens', 0))} new tokens per sequence, "
        f"{data.get('cache', '?')} cache{_cache_words(data)}."
    )
    rows = data["sweep"]
    first = rows[0] if rows else {}
    per_s = data.get("tokens_per_s_per_seq", data.get("tokens_per_s")) or 0.0
    figures = (
        f"Batch {first.get('batch', '?')}: prefill {units.seconds(data.get('prefill_time', 0))}, "
        f"decode {units.seconds(data.get('decode_time_per_token', 0))} per token "
        f"({_rate(per_s)} tokens/s per sequence)."
    )
    return [(title, "layerscope.header"), (run, ""), (figures, "")]


def _cache_words(data: Mapping[str, Any]) -> str:
    """A paged cache's block and the KV cache's width, when the estimate has them."""
    words = []
    if data.get("block_size"):
        words.append(f"blocks of {units.count(data['block_size'])} tokens")
    if data.get("kv_dtype"):
        words.append(f"KV at {data['kv_dtype']}")
    return f" ({', '.join(words)})" if words else ""


def _rate(n: float) -> str:
    """Tokens per second in 3 significant digits: ``98.5``, ``1.23 K``."""
    return units.si(n) if abs(n) >= 1000 else f"{n:.3g}"


def _cell(kind: str, value: Any) -> str:
    if value is None:
        return "-"
    if kind == "rate":
        return _rate(value)
    if kind == "text":
        return str(value)
    if kind == "flag":
        return "yes" if value else "no"
    return units.BY_KIND[kind](value)


def sweep_table(
    fields: tuple[SweepField, ...], rows: list[Mapping[str, Any]], width: int
) -> Fitted:
    """A sweep's rows as a table of its text columns, fitted to ``width`` (a row that
    does not fit the memory in the notice style)."""
    shown = [(f.key, f.short or f.key, f.text_kind, f.priority) for f in text_columns(fields)]
    columns = [
        TableColumn(key, header, "left" if kind == "text" else "right", priority,
                    text=kind == "text")
        for key, header, kind, priority in shown
    ]  # fmt: skip
    body = [
        TableRow(
            [[(_cell(kind, r.get(key)), "")] for key, _, kind, _ in shown],
            "layerscope.notice" if r.get("fits") is False else "",
        )
        for r in rows
    ]
    t = display_config.current().table
    table = Table(
        columns=columns, rows=body, total=None, box=t.box, show_edge=t.show_edge,
        show_header=t.show_header, header_style=t.header_style, border_style=t.border_style,
        row_styles=t.row_styles,
    )  # fmt: skip
    return fit_table(table, width)


def sweep_page(
    heading: list[tuple[str, str]],
    fields: tuple[SweepField, ...],
    data: Mapping[str, Any],
    rows: str,
    legend: str,
    width: int,
) -> list[Line]:
    """A sweep's page at ``width``: the heading, ``data[rows]`` as a table of ``fields``
    (a column it hides named), the legend, then ``data``'s notes."""
    fitted = sweep_table(fields, data[rows], width)
    texts = [(legend, "")]
    if fitted.dropped:
        texts.insert(0, (
            f"Hidden to fit {width} columns: {', '.join(fitted.dropped)} (widen with "
            "--width / width=).", "layerscope.hidden",
        ))  # fmt: skip
    notes = [(str(n), "") for n in data.get("notes", ())]
    return [
        *wrap_texts(heading, width),
        [],
        *fitted.lines,
        *wrap_texts(texts, width),
        [],
        *wrap_texts(notes, width),
    ]


def estimate_lines(data: Mapping[str, Any], width: int) -> list[Line]:
    """The styled lines of an estimate at ``width``: heading, sweep table, notes."""
    legend = (
        "Decode: one decode step, a new token for every sequence, at its bound; Pred.: the "
        "same step predicted (kernels at achievable rates, launches); Tok/s/seq = 1 / Decode, "
        "Tok/s = Batch / Decode; Step bytes: one decode step's bytes moved; KV cache: at "
        "the last token; Fits: weights + KV cache within the memory."
    )
    return sweep_page(_heading(data), SWEEP_FIELDS, data, "sweep", legend, width)
