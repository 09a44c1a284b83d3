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

__all__ = [
    "CALL_FIELDS",
    "CARD_FIELDS",
    "KV_BYTES",
    "KV_FIELDS",
    "STAGE_FIELDS",
    "SWEEP_FIELDS",
    "CallField",
    "SweepField",
    "call_field",
    "required",
    "text_columns",
]

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
    #: a metric the HTML calls chart can plot: its button's place (None: not plotted)
    chart: int | None = None


CALL_FIELDS: tuple[CallField, ...] = (
    CallField(
        "stage", "Stage", "text",
        "prefill: the prompt into an empty cache; decode: one token per row on the cache; "
        "full: a forward over the whole sequence (no cache)", span=False,
    ),
    CallField("cache_tokens", "Cache before", "count", "tokens in the KV cache before the call"),
    CallField("tokens", "Fed", "count", "tokens fed per row"),
    CallField("macs", "MACs", "si", "multiply-accumulates of the call"),
    CallField("flops", "FLOPs", "si", "floating-point operations of the call", chart=2),
    CallField(
        "bytes_accessed", "Bytes moved", "bytes", "bytes the call's ops read and write",
        chart=1,
    ),
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
        "call", required=False, span=False, chart=3,
    ),
)  # fmt: skip

#: A call row's KV-cache bytes after the call (the trace's counter).
KV_BYTES = "kv_bytes"

#: A stage's totals (``Generation.section_for_views``): the calls' count and, from the
#: stage's merged Profile, its work and peak; the summed time of its timed calls.
STAGE_FIELDS: tuple[CallField, ...] = (
    CallField("calls", "Calls", "count", "the model's calls of the stage"),
    *(f for f in CALL_FIELDS if f.key in ("macs", "flops", "bytes_accessed", "peak_bytes")),
    CallField("time", "Time", "seconds", "the summed time of the stage's timed calls",
              required=False),
)  # fmt: skip

#: The KV cache's facts (``Generation.kv_cache``, ``cache.KVSummary``): key, kind, what
#: it is; the scalars (count, bytes) are the HTML cards' figures, the lists per layer.
KV_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("bytes_after_prefill", "bytes", "the cache's bytes after the prefill"),
    ("bytes_final", "bytes", "the cache's bytes at the end"),
    ("bytes_per_token", "bytes", "bytes per token and row, summed over the layers"),
    ("tokens_final", "count", "the most tokens a layer holds at the end"),
    ("rows", "count", "rows the cache holds (batch x beams or samples)"),
    ("per_layer", "list", "self-attention bytes per layer at the end"),
    ("tokens_per_layer", "list", "tokens per layer at the end"),
    ("cross_bytes", "bytes", "cross-attention bytes at the end"),
    ("cross_per_layer", "list", "cross-attention bytes per layer at the end"),
)

#: A sweep field's kind in the text view (``render.units``'s, "rate", "flag", "text").
TextKind = Literal["count", "seconds", "rate", "bytes", "flag", "text"]
#: A sweep field's kind in the HTML report's tables.
HtmlKind = Literal["count", "seconds", "si", "rate", "bytes", "fits", "text"]


@dataclass(frozen=True)
class SweepField:
    """One column of ``ls.estimate_generate``'s sweep (``SweepRow``)."""

    key: str
    #: the HTML table's header
    header: str
    #: the text view's header (None: the text view leaves the column out)
    short: str | None
    kind: HtmlKind
    text_kind: TextKind
    description: str
    #: which column a narrow terminal drops first (lower first; None: always kept)
    priority: int | None = None
    #: the text view's column order (None: not shown there)
    text_rank: int | None = None
    #: the JSON type (``SweepRow``'s attribute)
    json_type: str = "number"


SWEEP_FIELDS: tuple[SweepField, ...] = (
    SweepField("batch", "Batch", "Batch", "count", "count", "sequences generated together",
               None, 0, "integer"),
    SweepField("prefill_time", "Prefill", "Prefill", "seconds", "seconds",
               "the roofline time of the prefill", 60, 1),
    SweepField("decode_time_per_token", "Decode per token", "Decode", "seconds", "seconds",
               "the roofline time of one decode step, the mean over the steps", None, 2),
    SweepField("tokens_per_s_per_sequence", "Tokens/s per sequence", "Tok/s/seq", "rate",
               "rate", "each sequence's new tokens per second", 70, 3),
    SweepField("tokens_per_s", "Tokens/s", "Tok/s", "rate", "rate",
               "new tokens per second, all sequences together", 80, 4),
    SweepField("bound", "Bound", "Bound", "text", "text",
               "what limits a decode step: memory or compute", 75, 5, "string"),
    SweepField("weight_bytes", "Weights", None, "bytes", "bytes",
               "parameters and buffers, once each", json_type="integer"),
    SweepField(KV_BYTES, "KV cache", "KV cache", "bytes", "bytes",
               "the KV cache at prompt + new tokens, every sequence", 65, 7, "integer"),
    SweepField("fits", "Fits", "Fits", "fits", "flag",
               "weights and KV cache within the target's memory", 85, 8, "boolean"),
    SweepField("decode_flops", "Decode FLOPs", None, "si", "count",
               "one decode step's FLOPs at the mean cache length"),
    SweepField("decode_bytes", "Decode bytes moved", "Step bytes", "bytes", "bytes",
               "one decode step's bytes moved at the mean cache length", 40, 6),
    SweepField("prefill_flops", "Prefill FLOPs", None, "si", "count", "the prefill's FLOPs"),
    SweepField("prefill_bytes", "Prefill bytes moved", None, "bytes", "bytes",
               "the prefill's bytes moved"),
    # a mixture of experts' (absent for a dense model)
    SweepField("experts_per_layer", "Experts read", None, "count", "count",
               "distinct experts a decode step reads per layer, expected under uniform "
               "routing"),
    SweepField("decode_time_all_experts", "Decode, all experts", None, "seconds", "seconds",
               "the decode step reading every expert: the bound's other side"),
    SweepField("decode_bytes_all_experts", "Decode bytes, all experts", None, "bytes",
               "bytes", "the decode step's bytes moved reading every expert"),
    SweepField("prefill_time_all_experts", "Prefill, all experts", None, "seconds",
               "seconds", "the prefill reading every expert"),
    # predicted (``generation.predicted``; absent from an older estimate)
    SweepField("prefill_time_predicted", "Prefill, predicted", None, "seconds", "seconds",
               "the prefill's kernels at the achievable rates, or its launches when slower"),
    SweepField("decode_time_predicted", "Decode, predicted", "Pred.", "seconds", "seconds",
               "a decode step's kernels at the achievable rates, or its launches when "
               "slower", 72, 2),
    SweepField("launch_time", "Launch time", None, "seconds", "seconds",
               "the host's time to launch a decode step's kernels"),
    SweepField("kernels", "Kernels", None, "count", "count", "kernels a decode step runs",
               json_type="integer"),
)  # fmt: skip

#: ``ls.plan_serving``'s rows (``ServingRow``): latency and throughput per batch size.
SERVING_FIELDS: tuple[SweepField, ...] = (
    SweepField("batch", "Batch", "Batch", "count", "count", "sequences served together",
               None, 0, "integer"),
    SweepField("ttft", "Time to first token", "TTFT", "seconds", "seconds",
               "the prefill of every prompt of the batch at once, predicted", 60, 1),
    SweepField("ttft_bound", "TTFT bound", None, "seconds", "seconds",
               "the prefill at the roofline: the lower bound"),
    SweepField("tpot", "Time per output token", "TPOT", "seconds", "seconds",
               "one decode step, predicted: its kernels at the achievable rates, or the "
               "host's launches when slower", None, 2),
    SweepField("tpot_bound", "TPOT bound", "Bound TPOT", "seconds", "seconds",
               "one decode step at the roofline: the lower bound", 50, 3),
    SweepField("launch_time", "Launch time", "Launch", "seconds", "seconds",
               "the host's time to launch one decode step's kernels", 45, 4),
    SweepField("kernels", "Kernels", None, "count", "count",
               "kernels one decode step runs", json_type="integer"),
    SweepField("tokens_per_s", "Tokens/s", "Tok/s", "rate", "rate",
               "output tokens per second, all sequences together", 80, 5),
    SweepField("tokens_per_s_per_seq", "Tokens/s per sequence", "Tok/s/seq", "rate", "rate",
               "each sequence's output tokens per second", 70, 6),
    SweepField("bound", "Bound", "Limit", "text", "text",
               "what limits a decode step: memory, compute or launches", 75, 7, "string"),
    SweepField(KV_BYTES, "KV cache", "KV cache", "bytes", "bytes",
               "the paged KV cache at prompt + new tokens, every sequence", 65, 8, "integer"),
    SweepField("fits", "Fits", "Fits", "fits", "flag",
               "the batch's KV cache within the KV budget", 85, 9, "boolean"),
)  # fmt: skip

#: The estimate's headline figures (those of the sweep's first batch): key, card label,
#: kind, what it is.
CARD_FIELDS: tuple[tuple[str, str, str, str], ...] = (
    ("prefill_time", "Prefill", "seconds", "the prompt's call, at the roofline"),
    ("decode_time_per_token", "Decode per token", "seconds",
     "one decode step (a token for every sequence), at the roofline"),
    ("tokens_per_s_per_seq", "Tokens/s per sequence", "rate",
     "each sequence's new tokens per second"),
    ("tokens_per_s_total", "Tokens/s", "rate", "new tokens per second, all sequences together"),
)  # fmt: skip


def call_field(key: str) -> CallField:
    return next(f for f in CALL_FIELDS if f.key == key)


def text_columns(table: tuple[SweepField, ...] = SWEEP_FIELDS) -> tuple[SweepField, ...]:
    """A sweep's columns in the text view (the estimate's, or ``SERVING_FIELDS``), in
    its order."""
    shown = [f for f in table if f.text_rank is not None]
    return tuple(sorted(shown, key=lambda f: f.text_rank or 0))


def required() -> tuple[str, ...]:
    """The keys every call row has."""
    return tuple(f.key for f in CALL_FIELDS if f.required)
