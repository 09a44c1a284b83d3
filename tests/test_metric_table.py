"""The metric table (``layerscope.metricspec``): one row is all a new metric needs.

A made-up metric, ``widget_bytes``, is registered through the table alone; with no other
change it is rolled up, saved and loaded, written to CSV, shown in the table view, folded,
grouped by type, merged over a loop cycle's steps and diffed, and it reaches the HTML
report's table and chart and the trace's forward spans, with exact numbers.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator

import pytest
import torch
from torch import nn

import layerscope as ls
import layerscope.metricspec as ms
from layerscope.analysis.fold import fold
from layerscope.analysis.merge import merge_profiles
from layerscope.analysis.transforms import by_type
from layerscope.errors import InvalidInputError, SchemaError
from layerscope.export.html import to_html_text
from layerscope.export.trace import trace_events
from layerscope.metricspec import MetricSpec, register_metric, unregister_metric
from layerscope.profile import Profile

WIDGET = "widget_bytes"

#: Self widget bytes per module path of the three-Linear model (root "", then "0", "1", "2").
SELF = {"": 1000, "0": 100, "1": 20, "2": 3}
#: Inclusive at the root: 1000 + 100 + 20 + 3.
TOTAL = 1123


@pytest.fixture
def widget() -> Iterator[MetricSpec]:
    """``widget_bytes``: bytes, forward, additive, summed everywhere (the defaults); in the
    HTML report's table and chart (after the 7 built-in chart metrics) and forward spans."""
    spec = MetricSpec(
        WIDGET,
        "bytes",
        "forward",
        "bytes of widgets",
        header="Widgets",
        priority=50,
        report=True,
        chart=8,
        spans=("forward",),
    )
    register_metric(spec)
    try:
        yield spec
    finally:
        unregister_metric(WIDGET)
    assert WIDGET not in ms.METRICS and WIDGET not in ms.ADDITIVE_METRICS


def _profile(scale: int = 1, *, timing: bool = False) -> Profile:
    """Three alike Linear modules (they fold ×3), with ``SELF`` × ``scale`` widget bytes."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4))
    prof = ls.profile(model, torch.randn(2, 4), timing=timing)
    for path, value in SELF.items():
        prof.node(path).self_metrics[WIDGET] = value * scale
    prof.rollup()
    prof.self_check()
    return prof


def test_rollup_and_derived_key_sets(widget: MetricSpec) -> None:
    assert ms.METRICS[WIDGET] is widget
    assert WIDGET in ms.ADDITIVE_METRICS and WIDGET in ms.SUMMED_METRICS
    assert WIDGET in ms.AMOUNT_METRICS and WIDGET in ms.STORED_METRICS
    prof = _profile()
    assert prof.root.metrics[WIDGET] == TOTAL  # 1000 + 100 + 20 + 3
    assert prof.node("1").metrics[WIDGET] == 20  # a leaf: inclusive = self


def test_json_round_trip(widget: MetricSpec) -> None:
    prof = _profile()
    data = prof.to_dict()
    assert data["root"]["metrics"][WIDGET] == TOTAL
    back = Profile.from_dict(data)
    assert back.root.metrics[WIDGET] == TOTAL
    assert back.root.self_metrics[WIDGET] == 1000
    assert [back.node(p).self_metrics[WIDGET] for p in ("0", "1", "2")] == [100, 20, 3]
    # an amount (JSON type "finite"): the reader refuses a non-finite value under it
    data["root"]["self_metrics"][WIDGET] = "NaN"
    with pytest.raises(SchemaError, match=WIDGET):
        Profile.from_dict(data)


def test_csv(widget: MetricSpec) -> None:
    text = _profile().to_csv()
    assert text is not None
    rows = list(csv.DictReader(io.StringIO(text)))
    columns = list(rows[0])
    # the table's order: after the built-in metrics the profile has (bytes_accessed last)
    assert columns.index(WIDGET) == columns.index("bytes_accessed") + 1
    assert columns.index(f"self_{WIDGET}") == columns.index("self_bytes_accessed") + 1
    assert [(r["path"], r[WIDGET], r[f"self_{WIDGET}"]) for r in rows] == [
        ("", "1123", "1000"),
        ("0", "100", "100"),
        ("1", "20", "20"),
        ("2", "3", "3"),
    ]


def test_table_view(widget: MetricSpec) -> None:
    text = _profile().render(
        view="table",
        columns=[WIDGET, f"self_{WIDGET}", f"{WIDGET}_pct"],
        fold=False,
        width=120,
    )
    lines = text.splitlines()
    # headers from the row: "Widgets", self "Self widgets", % "% Widgets"
    assert lines[0].split() == ["Module", "Widgets", "Self", "widgets", "%", "Widgets"]
    # 1123 B = 1.10 KiB (1123 / 1024 = 1.097); % of 1123: 100 -> 8.9%, 20 -> 1.8%, 3 -> 0.3%
    assert lines[2].split() == ["Sequential", "1.10", "KiB", "1000", "B", "100%"]
    assert lines[3].split()[-5:] == ["100", "B", "100", "B", "8.9%"]
    assert lines[4].split()[-5:] == ["20", "B", "20", "B", "1.8%"]
    assert lines[5].split()[-5:] == ["3", "B", "3", "B", "0.3%"]


def test_fold(widget: MetricSpec) -> None:
    prof = _profile()
    folded = fold(prof)
    (entry,) = folded.root.children
    assert entry.repeat == 3
    assert entry.metrics[WIDGET] == 123  # summed: 100 + 20 + 3
    assert entry.self_metrics[WIDGET] == 123
    assert folded.root.metrics[WIDGET] == TOTAL  # folding keeps the total
    text = prof.render(view="table", columns=[WIDGET], fold=True, width=120)
    # the one metric named is the % metric: 123 / 1123 = 10.95% -> 11.0%
    assert text.splitlines()[3].split()[-3:] == ["123", "B", "11.0%"]


def test_by_type_group(widget: MetricSpec) -> None:
    prof = _profile()
    (group,) = by_type(prof.root.children)
    assert (group.type, group.repeat) == ("Linear", 3)
    assert group.metrics[WIDGET] == group.self_metrics[WIDGET] == 123  # 100 + 20 + 3
    text = prof.render(view="top", by_type=True, columns=[WIDGET], width=120)
    # with its % column (the one metric named): 123 / 1123 = 10.95% -> 11.0%
    assert text.splitlines()[3].split() == ["1", "Linear", "3", "123", "B", "11.0%"]


def test_merged_loop_profile(widget: MetricSpec) -> None:
    merged = merge_profiles([_profile(), _profile(scale=2)])
    assert merged.root.calls == 2
    assert merged.root.metrics[WIDGET] == 3 * TOTAL  # 1123 + 2246: summed over the steps
    assert merged.root.self_metrics[WIDGET] == 3000  # 1000 + 2000
    assert merged.node("2").metrics[WIDGET] == 9  # 3 + 6
    assert merged.root.metrics["params"] == 60  # static: the last step's, not summed
    merged.self_check()


def test_diff(widget: MetricSpec) -> None:
    d = ls.diff(_profile(), _profile(scale=2))
    assert WIDGET in d.metric_keys
    change = d.row("").metrics[WIDGET]
    assert (change.a, change.b, change.delta, change.ratio) == (TOTAL, 2 * TOTAL, TOTAL, 2.0)
    own = d.row("1").self_metrics[WIDGET]
    assert (own.a, own.b, own.delta) == (20, 40, 20)


def test_html_report(widget: MetricSpec) -> None:
    page = to_html_text(_profile())
    found = re.search(r'<script type="application/json" id="ls-data">(.*?)</script>', page)
    assert found is not None
    data = json.loads(found.group(1))
    keys = [c["key"] for c in data["columns"]]
    # the table's order: after the built-in report metrics this untimed profile has
    # (bytes_accessed last), before calls
    assert keys[keys.index(WIDGET) - 1 :] == [ms.BYTES_ACCESSED, WIDGET, "calls"]
    column = data["columns"][keys.index(WIDGET)]
    assert (column["header"], column["kind"]) == ("Widgets", "bytes")
    assert data["v"][WIDGET] == [TOTAL, 100, 20, 3]  # pre-order: root, 0, 1, 2
    assert data["s"][WIDGET] == [1000]  # self values of the one inner node, the root
    # the chart: offered last (chart=8), labelled by the header
    assert data["chart"][-1] == {"key": WIDGET, "label": "Widgets", "kind": "bytes"}


def test_trace_spans(widget: MetricSpec) -> None:
    events = trace_events(_profile(timing=True))["traceEvents"]
    seen = {
        e["args"]["path"]: e["args"][WIDGET]
        for e in events
        if e["ph"] == "X" and e["args"].get("phase") == "forward" and WIDGET in e["args"]
    }
    assert seen == {"": TOTAL, "0": 100, "1": 20, "2": 3}
    # a forward metric only: no backward span carries it
    assert not [e for e in events if e.get("tid") == 2 and WIDGET in e["args"]]


def test_the_table_refuses_what_no_stage_does() -> None:
    with pytest.raises(InvalidInputError, match="fold='median'"):
        MetricSpec(WIDGET, "bytes", "forward", "x", fold="median")
    with pytest.raises(InvalidInputError, match="additive"):
        MetricSpec(WIDGET, "bytes", "forward", "x", additive=False)  # but summed in folds
    with pytest.raises(InvalidInputError, match="already"):
        register_metric(ms.METRICS[ms.FLOPS])


def test_loop_cycle_rules_are_those_of_the_loop() -> None:
    """Static metrics keep the last step's value, work is summed, peaks take the max, the
    rest (times, keys not in the table) the last step's, else an earlier one's."""
    assert {
        "params",
        "trainable_params",
        "buffers",
        "param_bytes",
        "buffer_bytes",
        "grad_bytes",
        "local_params",
        "local_param_bytes",
        "local_buffer_bytes",
        "local_grad_bytes",
    } == ms.STATIC_METRICS
    assert frozenset(ms.ADDITIVE_METRICS) - ms.STATIC_METRICS == ms.SUMMED_METRICS
    later = {"params": 10, "flops": 5, "peak_bytes": 7, "forward_time": 0.5}
    earlier = {"params": 99, "grad_bytes": 4, "flops": 3, "peak_bytes": 9, "forward_time": 0.9}
    earlier |= {"backward_time": 0.25, "newer_key": 1}
    ms.merge_cycle_metrics(later, earlier)
    assert later == {
        "params": 10,  # static: the last step's
        "flops": 8,  # 5 + 3
        "peak_bytes": 9,  # max(7, 9)
        "forward_time": 0.5,  # the last step's
        "backward_time": 0.25,  # only an earlier step has it
        "newer_key": 1,
    }  # grad_bytes: static, and the last step has none: not taken from an earlier one


def test_headers_follow_one_naming_rule() -> None:
    from layerscope.analysis.catalog import column, known_keys

    # count or size: tensors held are a plural noun as a count, "<noun> size" as bytes
    pairs = [
        (ms.PARAMS, ms.PARAM_BYTES),
        (ms.BUFFERS, ms.BUFFER_BYTES),
        (ms.LOCAL_PARAMS, ms.LOCAL_PARAM_BYTES),
    ]
    assert [(column(a).header, column(b).header) for a, b in pairs] == [
        ("Params", "Param size"),
        ("Buffers", "Buffer size"),
        ("Local params", "Local param size"),
    ]
    assert column(ms.GRAD_BYTES).header == "Grad size"
    assert column(ms.LOCAL_BUFFER_BYTES).header == "Local buffer size"
    assert column(ms.LOCAL_GRAD_BYTES).header == "Local grad size"
    counts = [s.header for s in ms.METRICS.values() if s.unit == "count" and s.column]
    assert counts == ["Params", "Trainable params", "Buffers", "Local params"]
    # self or inclusive: "Self" starts exactly the self forms, % columns included
    for spec in ms.METRICS.values():
        if not spec.column:
            continue
        heads = spec.headers()
        for key, header in heads.items():
            assert header.startswith("Self ") == key.startswith("self_"), (key, header)
        if f"{spec.key}_pct" in heads:
            assert heads[f"self_{spec.key}_pct"] == "Self " + heads[f"{spec.key}_pct"]
    assert (column("forward_time_pct").header, column("self_forward_time_pct").header) == (
        "% fwd",
        "Self % fwd",
    )
    # no two columns share a header
    headers = [column(k).header for k in known_keys(numeric=False)]
    assert len(headers) == len(set(headers))
