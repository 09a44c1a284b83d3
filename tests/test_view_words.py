"""The words of the views: headers from one naming rule (count or size, self or
inclusive), the ops view's title, and counts that agree with their nouns."""

from __future__ import annotations

from torch import nn

import layerscope as ls
from layerscope.analysis.catalog import column
from layerscope.export.html import report_data
from layerscope.render.summary import summary_lines
from viewmodels import build, node, small

W = 80


# ---- headers: one naming rule (count or size, self or inclusive) -----------------------


def _buffered() -> ls.Profile:
    """Net (own forward 1 ms) holding bn (5 buffer values, 40 B, forward 3 ms)."""
    prof = build(
        node(
            "Net",
            "Net",
            node("bn", "BatchNorm", buffers=5, buffer_bytes=40, forward_time=3e-3),
            forward_time=1e-3,
        )
    )
    prof.root.metrics["forward_time"] = 4e-3  # inclusive: 1 ms own + 3 ms in bn
    prof.node("bn").metrics["forward_time"] = 3e-3  # a leaf: inclusive = self
    return prof


HEADED = [
    "buffers",
    "buffer_bytes",
    "forward_time",
    "forward_time_pct",
    "self_forward_time",
    "self_forward_time_pct",
]


def test_headers_tell_count_from_size_and_self_from_inclusive() -> None:
    heads = {k: column(k).header for k in (*HEADED, "params", "param_bytes", "grad_bytes")}
    assert heads == {
        "buffers": "Buffers",
        "buffer_bytes": "Buffer size",
        "forward_time": "Fwd time",
        "forward_time_pct": "% fwd",
        "self_forward_time": "Self fwd",
        "self_forward_time_pct": "Self % fwd",
        "params": "Params",
        "param_bytes": "Param size",
        "grad_bytes": "Grad size",
    }
    text = _buffered().render(width=120, columns=HEADED, fold=False)
    # % fwd of the 4 ms total: Net 100%, bn 3/4 = 75.0%; self: Net 1/4 = 25.0%, bn 75.0%
    assert text.splitlines()[:4] == [
        "Module                Buffers   Buffer size   Fwd time   % fwd   Self fwd   Self % fwd",
        "─" * 86,
        "Net                         5          40 B       4 ms    100%       1 ms        25.0%",
        "└─ (1) bn BatchNorm         5          40 B       3 ms   75.0%       3 ms        75.0%",
    ]
    # Markdown and the HTML report take their headers from the same table
    md = _buffered().to_markdown(columns=HEADED, fold=False)
    assert md.splitlines()[0] == (
        "| Module | Buffers | Buffer size | Fwd time | % fwd | Self fwd | Self % fwd |"
    )
    cols = {c["key"]: c["header"] for c in report_data(_buffered())["columns"]}
    assert (cols["buffers"], cols["buffer_bytes"]) == ("Buffers", "Buffer size")


def test_ops_title_says_the_pct_column_adds_up_only_when_shown() -> None:
    wide = small().render(width=60, view="ops")
    assert wide.splitlines()[:3] == [
        "Modules by Self FLOPs: the work done directly in each",
        "  module, so the % column adds up to 100%",
        "Module     Self params   Self FLOPs   Self % FLOPs",
    ]
    narrow = small().render(width=45, view="ops")  # the % column is dropped to fit
    assert narrow.splitlines()[:3] == [
        "Modules by Self FLOPs: the work done directly",
        "  in each module",
        "Module     Self params   Self FLOPs",
    ]
    unasked = small().render(width=80, view="ops", pct=False)
    assert unasked.splitlines()[0] == "Modules by Self FLOPs: the work done directly in each module"


# ---- counts and their nouns agree ----------------------------------------------------------


def test_by_dtype_line_says_one_buffer_value_and_one_param() -> None:
    prof = ls.profile(nn.BatchNorm1d(2), input_shape=(3, 2))
    # float32: weight 2 + bias 2 = 4 params, running mean 2 + var 2 = 4 buffer values,
    # (4 + 4) * 4 B = 32 B; int64: num_batches_tracked, 1 value of 8 B
    assert "By dtype: float32 4 params + 4 buffer values (32 B); int64 1 buffer value (8 B)" in (
        prof.render(width=200)
    )
    prof = ls.profile(nn.Linear(1, 1, bias=False), input_shape=(1, 1))
    assert "By dtype: float32 1 param (4 B)\n" in prof.render(width=200)


def test_timing_lines_agree_with_their_counts() -> None:
    prof = small()
    prof.timing = {"source": "loop", "timed_steps": 1, "step_time": {"median": 2e-3}}
    assert ("Step (median of 1 timed step): 2 ms.", "") in summary_lines(prof)
    prof.timing = {
        "latency": {"median": 1e-3, "p90": 2e-3, "iqr": 5e-4},
        "timer": "hooks",
        "repeats": 1,
        "warmup": 1,
    }
    assert (
        "Latency (forward): median 1 ms, p90 2 ms, IQR 500 µs. Timer hooks, 1 repeat after 1 "
        "warmup run.",
        "",
    ) in summary_lines(prof)
    prof.timing["repeats"], prof.timing["warmup"] = 3, 0
    assert any("Timer hooks, 3 repeats after 0 warmup runs." in t for t, _ in summary_lines(prof))


def test_repr_and_numerics_counts_agree() -> None:
    prof = build(node("Net", "Net", flops=1))
    assert repr(prof).startswith("<Profile Net: 1 module,")
    prof.numerics = {"checked_calls": 1}
    assert "No NaN/Inf in 1 checked module call.\n" in prof.render(width=W)
