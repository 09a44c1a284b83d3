"""The user's ``record_function`` labels around module calls as region nodes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import Tensor, nn
from torch.autograd.profiler import record_function

import layerscope as ls
from layerscope.collect.labels import label_region_name
from layerscope.collect.regions import region
from layerscope.collect.timing import is_op_row
from layerscope.metricspec import FORWARD_TIME

B = 4  # batch
# Linear(16, 16) on B rows: 2·B·16·16 multiply-adds as FLOPs plus the bias add, B·16
LINEAR_FLOPS = 2 * B * 16 * 16 + B * 16  # 2112
ELEMENTWISE = B * 16  # one FLOP per element of a [B, 16] tensor: relu, y * 2


class Labelled(nn.Module):
    """``a``; a label "blk" around ``b`` and a relu; a label "ops" around one op only."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 16)

    def forward(self, x: Tensor) -> Tensor:
        x = self.a(x)
        with record_function("blk"):
            y: Tensor = self.b(x).relu()
        with record_function("ops"):
            return y * 2


def _x() -> Tensor:
    torch.manual_seed(0)
    return torch.randn(B, 16)


def _structure(prof: ls.Profile) -> list[tuple[str, str, str, str]]:
    return [(n.node_id, n.path, n.type, n.parent.path if n.parent else "-") for n in prof.nodes()]


def test_label_around_modules_is_a_region_node_and_one_around_ops_is_not() -> None:
    prof = ls.profile(Labelled(), _x(), backward=True)
    prof.self_check()
    assert _structure(prof) == [
        ("0", "", "Labelled", "-"),
        ("1", "a", "Linear", ""),
        ("2", "[blk]", "region", ""),
        ("2.1", "b", "Linear", "[blk]"),
    ]
    blk = prof.node("[blk]")
    assert (blk.name, blk.depth, blk.calls) == ("blk", 1, 1)
    # the region holds the relu itself, b below it; "ops" left its y * 2 in the root
    assert blk.self_metrics["flops"] == ELEMENTWISE
    assert blk.metrics["flops"] == LINEAR_FLOPS + ELEMENTWISE
    assert prof.root.self_metrics["flops"] == ELEMENTWISE
    assert prof.root.metrics["flops"] == 2 * LINEAR_FLOPS + 2 * ELEMENTWISE  # 4352
    # backward: the relu's threshold_backward in the region, y * 2's mul in the root
    assert blk.self_metrics["backward_flops"] == ELEMENTWISE
    assert prof.root.self_metrics["backward_flops"] == ELEMENTWISE
    assert blk.metrics["params"] == 16 * 16 + 16  # b's


def test_json_round_trip_keeps_label_regions(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    prof = ls.profile(Labelled(), _x())
    prof.save(str(path))
    again = ls.load(str(path))
    again.self_check()
    assert _structure(again) == _structure(prof)
    assert again.node("[blk]").metrics["flops"] == LINEAR_FLOPS + ELEMENTWISE


class Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x: Tensor) -> Tensor:
        with record_function("core"):
            out: Tensor = self.fc(x)
        return out


class Nested(nn.Module):
    """A label inside a submodule's forward; torch's and namespaced labels around modules;
    an ops-only label holding an ``ls.region``."""

    def __init__(self) -> None:
        super().__init__()
        self.body = Inner()
        self.c = nn.Linear(16, 16)
        self.d = nn.Linear(16, 16)

    def forward(self, x: Tensor) -> Tensor:
        x = self.body(x)
        with record_function("FSDP::pre_forward"):
            x = self.c(x)
        with record_function("Optimizer.step#SGD.step"):
            x = self.d(x)
        with record_function("outer"), region("inner"):
            return x * 2


def test_labels_nest_in_their_scope_and_torchs_labels_are_no_regions() -> None:
    prof = ls.profile(Nested(), _x())
    prof.self_check()
    assert _structure(prof) == [
        ("0", "", "Nested", "-"),
        ("1", "body", "Inner", ""),
        ("1.1", "body.[core]", "region", "body"),
        ("1.1.1", "body.fc", "Linear", "body.[core]"),
        ("2", "c", "Linear", ""),
        ("3", "d", "Linear", ""),
        # "outer" had no module call, but holds a region that stays: it stays too
        ("4", "[outer]", "region", ""),
        ("4.1", "[outer].[inner]", "region", "[outer]"),
    ]
    assert prof.node("[outer].[inner]").self_metrics["flops"] == ELEMENTWISE
    assert prof.node("[outer]").self_metrics["flops"] == 0


@pytest.mark.parametrize(
    "label",
    [
        "",
        "aten::mm",
        "autograd::engine::evaluate_function: MmBackward0",
        "layerscope::module::a",
        "layerscope::repeat",
        "FSDP::all_gather",
        "Optimizer.step#SGD.step",
        "Optimizer.zero_grad#SGD.zero_grad",
        "## 3 ##",
        "ProfilerStep#2",
        "DataLoader",
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
        "torch/nn/modules",
        "Torch-Compiled Region: 0/0",
        "TorchDynamo Cache Lookup",
        "CompiledFunction",
        "DistributedDataParallel",
        "a.b",
        "a/b",
    ],
)
def test_torch_and_layerscope_labels_name_no_region(label: str) -> None:
    assert label_region_name(label) is None


@pytest.mark.parametrize("label", ["blk", "Forward 0", "attention block", "[x]"])
def test_user_labels_name_a_region(label: str) -> None:
    assert label_region_name(label) == label


def test_without_a_dispatch_mode_labels_are_let_be() -> None:
    """A session that counts no op runs no dispatch mode: it does not see labels."""
    prof = ls.profile(Labelled(), _x(), count_flops=False, count_bytes=False)
    assert [n.path for n in prof.nodes()] == ["", "a", "b"]


def test_labels_outside_the_model_in_a_profiler_block() -> None:
    """A label around the model call in a ``Profiler`` block is a region outside the
    model; one around the loss only is dissolved into the outside totals."""
    model, x = Labelled(), _x()
    with ls.Profiler(model) as p, record_function("step"):
        out = model(x)
        with record_function("loss"):
            out.sum()
    prof = p.profile
    prof.self_check()
    assert [(r.path, r.calls) for r in region.outside(prof)] == [("<outside>.[step]", 1)]
    (step,) = region.outside(prof)
    assert step.children == []  # the model stays the model
    # the loss's sum is counted outside, as it is without the "loss" label
    with ls.Profiler(model) as q:
        model(x).sum()
    assert prof.outside["flops"] == q.profile.outside["flops"] > 0
    assert step.metrics["flops"] == prof.outside["flops"]
    # labels inside the model are regions there, as in ls.profile
    assert [n.path for n in prof.nodes()] == ["", "a", "[blk]", "b"]


def test_kineto_times_a_label_as_a_region() -> None:
    """Under the kineto timer the label's range is the region's time; the modules inside
    keep theirs; no op row for it; one repeat, so the self times of the modules (a
    region has none) add up exactly to the root's; the ops-only label stays an op row."""
    timing = {"repeats": 1, "warmup": 0, "timer": "kineto", "ops": True}
    prof = ls.profile(Labelled(), _x(), timing=timing)
    prof.self_check()
    modules = [n for n in prof.nodes() if not is_op_row(n)]
    assert [(n.path, n.type, n.parent.path if n.parent else "-") for n in modules] == [
        ("", "Labelled", "-"),
        ("a", "Linear", ""),
        ("[blk]", "region", ""),
        ("b", "Linear", "[blk]"),
    ]
    rows = [(n.path, n.type) for n in prof.nodes() if is_op_row(n)]
    assert rows == [
        ("a/aten::linear", "aten::linear"),
        ("b/aten::linear", "aten::linear"),
        ("/aten::relu", "aten::relu"),  # ops inside a region are rows of its module
        ("/ops", "user::ops"),
    ]
    blk, b, root = prof.node("[blk]"), prof.node("b"), prof.root
    assert FORWARD_TIME not in blk.self_metrics
    assert 0 < b.metrics[FORWARD_TIME] < blk.metrics[FORWARD_TIME] < root.metrics[FORWARD_TIME]
    own = [n.self_metrics[FORWARD_TIME] for n in (root, prof.node("a"), b)]
    assert sum(own) == pytest.approx(root.metrics[FORWARD_TIME], rel=1e-9)
    # the ops view's % column, every row's own time: modules, then op rows
    text = prof.render(view="ops", columns=["self_forward_time_pct"], raw=True, width=200)
    lines = text.splitlines()
    body = lines[3 : 3 + 8]  # root, a, b, [blk] (no time), 4 op rows
    shares = [float(x.split()[-1]) for x in body if x.split()[-1][0].isdigit()]
    assert len(shares) == 7
    assert sum(shares) == pytest.approx(100.0, abs=1e-6)


def test_kineto_table_view_self_shares_add_up_with_a_label_region() -> None:
    """Without op rows the table view's self % column (root, a, b; the region has no
    self time, so no cell) adds up to 100."""
    timing = {"repeats": 1, "warmup": 0, "timer": "kineto"}
    prof = ls.profile(Labelled(), _x(), timing=timing)
    table = prof.render(view="table", columns=["self_forward_time_pct"], raw=True, width=200)
    rows = [line.split() for line in table.splitlines()[2:6]]
    assert [r[-2:] for r in rows] == [
        ["Labelled", rows[0][-1]],
        ["Linear", rows[1][-1]],
        ["blk", "region"],
        ["Linear", rows[3][-1]],
    ]
    assert sum(float(rows[i][-1]) for i in (0, 1, 3)) == pytest.approx(100.0, abs=1e-6)


def test_hooks_timer_leaves_a_label_region_untimed() -> None:
    """The hooks timer does not see labels: the label's region has no time (its modules
    do), rather than the analysed run's, which had instrumentation in it."""
    timing = {"repeats": 1, "warmup": 0}
    prof = ls.profile(Labelled(), _x(), timing=timing)
    prof.self_check()
    assert FORWARD_TIME not in prof.node("[blk]").metrics
    assert prof.node("b").metrics[FORWARD_TIME] > 0
    own = [n.self_metrics[FORWARD_TIME] for n in (prof.root, prof.node("a"), prof.node("b"))]
    assert sum(own) == pytest.approx(prof.root.metrics[FORWARD_TIME], rel=1e-9)


def test_untimed_label_region_has_the_analysed_runs_time() -> None:
    prof = ls.profile(Labelled(), _x())
    assert prof.node("[blk]").metrics[FORWARD_TIME] > 0
