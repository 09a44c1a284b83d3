"""The generation's field table (``generation.fields``) is the one place a call row's
keys and headers are written: the row's constructor, the JSON check, the HTML and the
trace all follow it."""

from __future__ import annotations

import torch
from torch import nn

import layerscope as ls
from layerscope.generation import html, schema, trace
from layerscope.generation.callrow import CallRow
from layerscope.generation.fields import CALL_FIELDS, required

KEYS = [f.key for f in CALL_FIELDS]


def test_every_format_reads_the_table() -> None:
    prof = ls.profile(nn.Linear(4, 4), torch.randn(2, 4), memory=True)
    row = CallRow.measured("decode", 7, 1, prof, 64).to_dict()
    # every key but the time, which only a timed generation has
    assert list(row) == [k for k in KEYS if k != "time"]
    assert (row["macs"], row["flops"]) == (2 * 4 * 4, 2 * 32 + 2 * 4)  # and 8 bias adds
    assert [c[0] for c in html.CALL_COLUMNS] == KEYS
    assert [c[1] for c in html.CALL_COLUMNS] == [f.header for f in CALL_FIELDS]
    assert list(trace._ARGS) == [f.key for f in CALL_FIELDS if f.span]
    assert list(schema.STEP.props) == KEYS
    assert tuple(schema.STEP.required) == required() == (
        "stage", "cache_tokens", "tokens", "macs", "flops", "bytes_accessed",
    )  # fmt: skip


def test_call_row_reads_back_as_written() -> None:
    """A row read from a document writes the same object: an older row without peak and
    KV bytes stays without them, a newer key is kept after the known ones."""
    old = {"stage": "decode", "cache_tokens": 7, "tokens": 1, "macs": 32, "flops": 72,
           "bytes_accessed": 200, "newer": [1]}  # fmt: skip
    row = CallRow.from_dict(old)
    assert (row.peak_bytes, row.kv_bytes, row.time, row.extra) == (None, None, None, {"newer": [1]})
    assert list(row.to_dict().items()) == list(old.items())
    timed = CallRow.from_dict({**old, "peak_bytes": 64, "kv_bytes": 512, "time": 0.5})
    assert timed.to_dict() == {**old, "peak_bytes": 64, "kv_bytes": 512, "time": 0.5}
    assert list(timed.to_dict())[-1] == "newer"


def test_stage_totals_chart_and_sweep_read_the_table() -> None:
    """The stage totals, the calls chart, the estimate's sweep (text and HTML) and its
    cards take their keys and headers from ``generation.fields``."""
    from dataclasses import fields as dataclass_fields

    from layerscope.generation.estimate_result import SweepRow
    from layerscope.generation.fields import (
        CARD_FIELDS,
        STAGE_FIELDS,
        SWEEP_FIELDS,
        text_columns,
    )

    assert [f.key for f in STAGE_FIELDS] == [
        "calls", "macs", "flops", "bytes_accessed", "peak_bytes", "time",
    ]  # fmt: skip
    assert [m[0] for m in html.CHART_METRICS] == ["bytes_accessed", "flops", "time"]
    # every attribute of a sweep row is a column, in the row's order
    assert [f.key for f in SWEEP_FIELDS] == [f.name for f in dataclass_fields(SweepRow)]
    assert [c[0] for c in html.ESTIMATE_COLUMNS] == [f.key for f in SWEEP_FIELDS]
    assert html.ESTIMATE_CARDS is CARD_FIELDS
    # the text view: 10 of the columns, the predicted decode step beside its bound and
    # "Step bytes" between "Bound" and "KV cache"
    assert [f.short for f in text_columns()] == [
        "Batch", "Prefill", "Decode", "Pred.", "Tok/s/seq", "Tok/s", "Bound", "Step bytes",
        "KV cache", "Fits",
    ]  # fmt: skip


def test_stage_totals_are_the_stage_profile_and_its_calls() -> None:
    """A stage's totals: its rows' count, its Profile's root figures, and the summed time
    of its timed calls (None when none was timed)."""
    from layerscope.generation.callrow import StageTotals

    prof = ls.profile(nn.Linear(4, 4), torch.randn(2, 4), memory=True)
    rows = [CallRow.measured("decode", 7, 1, prof, 64).timed(t) for t in (0.25, 0.5)]
    totals = StageTotals.of(prof, rows)
    assert (totals.calls, totals.macs, totals.time) == (2, 32, 0.75)  # 2 x 4 x 4 MACs
    assert StageTotals.of(prof, []).calls == prof.root.calls == 1
    assert StageTotals.of(prof, []).time is None
    assert list(totals.to_dict()) == [
        "calls", "macs", "flops", "bytes_accessed", "peak_bytes", "time",
    ]  # fmt: skip


def test_kv_summary_from_cache_facts_and_back() -> None:
    """Two layers of 2 rows: 8 tokens of 512 B and 8 of 256 B per row at the end, so
    8 x 2 x 512 = 8,192 B and 4,096 B; 768 B per token and row over both layers."""
    from layerscope.generation.cache import KVSummary
    from layerscope.generation.fields import KV_FIELDS

    final = {"bytes": 12_288, "rows": 2, "tokens": [8, 8], "per_layer": [8_192, 4_096],
             "cross_bytes": 0, "cross_per_layer": []}  # fmt: skip
    kv = KVSummary.of({"bytes": 9_216}, final)
    assert (kv.bytes_per_token, kv.tokens_final, kv.rows) == (512 + 256, 8, 2)
    assert list(kv.to_dict()) == [k for k, _, _ in KV_FIELDS]
    assert KVSummary.from_dict(kv.to_dict()) == kv
