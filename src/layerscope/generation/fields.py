"""The generation's field table: every column of a call row, written once.

One ``CallField`` per key of a call row (``callrow.CallRow``, ``Generation.calls``)
says what the value is (kind, description, whether every row has it) and how views show
it (header). The text view (``generation.view``), the JSON section and its check
(``generation.schema``), the HTML section (``generation.html``) and the trace
(``generation.trace``) read their columns and headers here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["CALL_FIELDS", "CallField", "call_field", "required"]

#: How a value is formatted (``render.units.BY_KIND``'s kinds, and "text").
Kind = Literal["text", "count", "si", "bytes", "seconds"]


@dataclass(frozen=True)
class CallField:
    key: str
    header: str
    kind: Kind
    description: str
    #: every row has it (a call's time only when the generation was timed)
    required: bool = True
    #: a trace span's argument (the stage names the span; the time is its length)
    span: bool = True


CALL_FIELDS: tuple[CallField, ...] = (
    CallField(
        "stage", "Stage", "text",
        "prefill: the prompt into an empty cache; decode: one token per row on the cache; "
        "full: a forward over the whole sequence (no cache)", span=False,
    ),
    CallField("cache_tokens", "Cache before", "count", "tokens in the KV cache before the call"),
    CallField("tokens", "Fed", "count", "tokens fed per row"),
    CallField("macs", "MACs", "si", "multiply-accumulates of the call"),
    CallField("flops", "FLOPs", "si", "floating-point operations of the call"),
    CallField("bytes_accessed", "Bytes moved", "bytes", "bytes the call's ops read and write"),
    CallField(
        "peak_bytes", "Peak", "bytes", "the highest live bytes above the call's entry level",
        required=False,
    ),
    CallField(
        "kv_bytes", "KV after", "bytes", "the KV cache's bytes after the call", required=False
    ),
    CallField(
        "time", "Time", "seconds",
        "the median of the timed repeats, each on a copy of the cache as it was before the "
        "call", required=False, span=False,
    ),
)  # fmt: skip


def call_field(key: str) -> CallField:
    return next(f for f in CALL_FIELDS if f.key == key)


def required() -> tuple[str, ...]:
    """The keys every call row has."""
    return tuple(f.key for f in CALL_FIELDS if f.required)
