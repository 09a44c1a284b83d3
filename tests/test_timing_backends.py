"""The ``kineto`` and ``fx`` timers: attribution, op rows, no double counting, clear errors."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest
import torch
from torch import Tensor, nn

import layerscope as ls
from helpers.snapshots import ModelSnapshot
from layerscope import examples
from layerscope.collect.timing import (
    BACKWARD_TIME,
    DEVICE_TIME,
    FORWARD_TIME,
    TimingResult,
    is_op_row,
    time_profile,
)
from layerscope.collect.timing.fx import UntraceableModelError
from layerscope.collect.timing.kineto import usdt_filtered
from layerscope.errors import InvalidInputError
from layerscope.profile import Node, Profile
from layerscope.session import profile_fx

NS = 1e-9


pytestmark = pytest.mark.usefixtures("seeded_one_thread")


def op_rows(node: Node) -> list[Node]:
    return [c for c in node.children if is_op_row(c)]


# ---- fx: exact arithmetic through a wrapped function that advances a fake clock ------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0
        self.tick = 0

    def __call__(self) -> int:
        t = self.now
        self.now += self.tick
        return t


FX_CLOCK = FakeClock()


def fx_burn(x: Tensor, ns: int) -> Tensor:
    """A leaf call for ``torch.fx`` that takes ``ns`` fake nanoseconds."""
    FX_CLOCK.now += ns
    return x


torch.fx.wrap("fx_burn")


class FxBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x: Tensor) -> Tensor:
        return fx_burn(self.lin(x), 30)


class FxNet(nn.Module):
    """root: block (30 ns of its own) twice, then 5 ns of the root's own."""

    def __init__(self) -> None:
        super().__init__()
        self.block = FxBlock()

    def forward(self, x: Tensor) -> Tensor:
        return fx_burn(self.block(self.block(x)), 5)


@pytest.mark.parametrize("tick", [0, 4])
def test_fx_exact_times_with_functional_nodes(tick: int) -> None:
    FX_CLOCK.tick = tick
    try:
        model = FxNet()
        x = torch.randn(2, 3)
        snap = ModelSnapshot.take(model)
        prof = profile_fx(model, x, warmup=0, repeats=3, clock=FX_CLOCK, progress=False)
        snap.assert_unchanged(model)
    finally:
        FX_CLOCK.tick = 0
    prof.self_check()
    block = prof.node("block")
    assert block.calls == 2
    assert block.metrics[FORWARD_TIME] == pytest.approx(30 * NS)  # per call
    assert block.self_metrics[FORWARD_TIME] == pytest.approx(30 * NS)
    assert prof.node("block.lin").metrics[FORWARD_TIME] == pytest.approx(0, abs=1e-15)
    assert prof.root.metrics[FORWARD_TIME] == pytest.approx((30 + 30 + 5) * NS)
    assert prof.root.self_metrics[FORWARD_TIME] == pytest.approx(5 * NS)
    rows = {c.path: c for c in op_rows(block)}
    assert set(rows) == {"block/fx_burn", "block/fx_burn_1"}  # one row per call site
    assert all(r.type == "fx::fx_burn" for r in rows.values())
    assert rows["block/fx_burn"].metrics[FORWARD_TIME] == pytest.approx(30 * NS)
    (root_row,) = op_rows(prof.root)
    assert root_row.path == "/fx_burn_2"
    assert root_row.metrics[FORWARD_TIME] == pytest.approx(5 * NS)
    assert prof.timing["timer"] == "fx"


def test_fx_maps_functional_nodes_to_their_module() -> None:
    ex = examples.get("tiny_resnet")
    model = ex.build().train()
    x = ex.example_input()
    prof = ls.profile(model, x)
    snap = ModelSnapshot.take(model)
    time_profile(
        prof, model, (x,), timer="fx", ops=True, warmup=1, repeats=2, backward=True, progress=False
    )
    snap.assert_unchanged(model)
    prof.self_check()
    block = prof.node("layer1.0")
    assert [r.path for r in op_rows(block)] == ["layer1.0/add"]
    assert op_rows(block)[0].type == "fx::add"
    assert [r.type for r in op_rows(prof.root)] == []  # TinyResNet's flatten is a module
    assert prof.node("layer1.0.relu").calls == 2
    for node in prof.nodes():
        if node.called and not is_op_row(node):
            assert 0 <= node.self_metrics[FORWARD_TIME] <= node.metrics[FORWARD_TIME]
            assert node.metrics[BACKWARD_TIME] >= node.self_metrics[BACKWARD_TIME] >= 0
    assert prof.root.metrics[FORWARD_TIME] > 0
    assert prof.root.metrics[BACKWARD_TIME] > 0


def test_fx_root_level_functions_land_in_root_self() -> None:
    ex = examples.get("shared_mlp")
    model = ex.build()
    x = ex.example_input()
    # Medians of 7 repeats: one stall of tens of microseconds in a repeat must not decide
    # the comparison of times this small.
    prof = profile_fx(model, x, warmup=1, repeats=7, progress=False)
    assert [r.type for r in op_rows(prof.root)] == [
        "fx::matmul",
        "fx::relu",
        "fx::add",
        "fx::softmax",
    ]
    assert prof.node("block").calls == 2
    own = prof.root.self_metrics[FORWARD_TIME]
    rows = sum(r.metrics[FORWARD_TIME] for r in op_rows(prof.root))
    assert own == pytest.approx(rows, rel=0.5)  # self = its functional nodes (+ get_attr)


class Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def forward(self, x: Tensor) -> Tensor:
        y: Tensor = self.lin(x)
        if y.sum() > 0:  # data-dependent control flow
            return y
        return -y


def test_fx_untraceable_model_gives_a_clear_error() -> None:
    model = Branchy()
    x = torch.randn(1, 2)
    snap = ModelSnapshot.take(model)
    with pytest.raises(UntraceableModelError, match="control flow") as info:
        profile_fx(model, x)
    assert isinstance(info.value, InvalidInputError)
    assert "timer='hooks'" in str(info.value)
    prof = ls.profile(model, x)
    with pytest.raises(UntraceableModelError):
        time_profile(prof, model, (x,), timer="fx", progress=False)
    snap.assert_unchanged(model)


# ---- kineto -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kineto_resnet() -> tuple[Profile, TimingResult, list[str]]:
    """One kineto pass shared by the tests below, with what it changed in the model."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ex = examples.get("tiny_resnet")
        model = ex.build().train()
        x = ex.example_input()
        prof = ls.profile(model, x)
        snap = ModelSnapshot.take(model)
        result = time_profile(
            prof,
            model,
            (x,),
            timer="kineto",
            ops=True,
            backward=True,
            warmup=1,
            repeats=2,
            progress=False,
        )
        changed = snap.differences(model)
    finally:
        torch.set_num_threads(threads)
    return prof, result, changed


def test_kineto_module_times(kineto_resnet: Any) -> None:
    prof, result, changed = kineto_resnet
    assert changed == []
    assert len(result.spans) == 2  # a timeline per timed repeat (warm run skipped)
    assert prof.timing["trace"]["clock"] == "torch.profiler"
    prof.self_check()
    assert prof.timing["timer"] == "kineto"
    for node in prof.nodes():
        if is_op_row(node):
            continue
        if node.called:
            assert 0 <= node.self_metrics[FORWARD_TIME] <= node.metrics[FORWARD_TIME], node.path
            assert node.metrics[BACKWARD_TIME] >= 0
    assert prof.node("layer1.0.conv1").metrics[FORWARD_TIME] > 0
    assert prof.node("layer1.0.conv1").metrics[BACKWARD_TIME] > 0
    assert DEVICE_TIME not in prof.root.metrics  # CPU only: no device activity


def test_kineto_op_rows_are_top_level_only(kineto_resnet: Any) -> None:
    prof, _, _ = kineto_resnet
    conv = prof.node("layer1.0.conv1")
    assert [r.type for r in op_rows(conv)] == ["aten::conv2d"]  # not also aten::convolution
    (row,) = op_rows(conv)
    assert row.path == "layer1.0.conv1/aten::conv2d"
    assert row.calls == 1
    assert row.self_metrics[FORWARD_TIME] < row.metrics[FORWARD_TIME]  # nested ops excluded
    block = prof.node("layer1.0")
    assert "aten::add" in [r.type for r in op_rows(block)]  # the residual add


def test_kineto_no_double_counting(kineto_resnet: Any) -> None:
    prof, result, _ = kineto_resnet
    ops_of: dict[str, list[Any]] = {}
    for op in result.ops:
        ops_of.setdefault(op.parent, []).append(op)
    for node in prof.nodes():
        row = result.modules.get(node.path)
        if row is None or is_op_row(node):
            continue
        kids = [result.modules[c.path] for c in node.children if c.path in result.modules]
        parts = kids + ops_of.get(node.path, [])
        for r, total in enumerate(row.series[FORWARD_TIME].inclusive):
            inside = 0.0
            for part in parts:
                values = part.series[FORWARD_TIME].inclusive
                inside += values[r] * part.calls if r < len(values) else 0.0
            assert inside <= total * row.calls + 1e-3, (node.path, r)


def test_kineto_leaves_out_torchs_usdt_lines(capfd: pytest.CaptureFixture[str]) -> None:
    """torch's C++ profiler writes ``USDT: ... profiler_start`` (and ``_stop``) to fd 2;
    the kineto timer's stderr has none of them."""
    ls.profile(nn.Linear(3, 3), torch.randn(2, 3), timing={"timer": "kineto", "repeats": 1})
    assert "USDT" not in capfd.readouterr().err


def test_usdt_filter_keeps_other_stderr_lines(capfd: pytest.CaptureFixture[str]) -> None:
    print("before", file=sys.stderr, flush=True)
    with usdt_filtered():
        os.write(2, b"USDT:2026-01-01 00:00:00 1:1 X.cpp:52] profiler_start\nkept\n")
        os.write(2, b"not USDT: kept too\n")
        os.write(2, b"USDT: profiler_stop\nno newline at the end")
    print("after", file=sys.stderr, flush=True)
    assert capfd.readouterr().err == (
        "before\nkept\nnot USDT: kept too\nno newline at the endafter\n"
    )


# ---- CUDA ---------------------------------------------------------------------------


@pytest.mark.cuda
def test_kineto_device_time_on_cuda() -> None:
    ex = examples.get("tiny_resnet")
    model = ex.build().cuda().eval()
    x = ex.example_input().cuda()
    prof = ls.profile(model, x)
    snap = ModelSnapshot.take(model)
    time_profile(prof, model, (x,), timer="kineto", ops=True, repeats=3, progress=False)
    snap.assert_unchanged(model)
    conv = prof.node("layer1.0.conv1")
    assert conv.metrics[DEVICE_TIME] > 0
    assert prof.root.metrics[DEVICE_TIME] >= conv.metrics[DEVICE_TIME]
    assert any(DEVICE_TIME in r.metrics for r in op_rows(conv))


@pytest.mark.cuda
def test_fx_on_cuda() -> None:
    ex = examples.get("tiny_resnet")
    model = ex.build().cuda().eval()
    x = ex.example_input().cuda()
    prof = profile_fx(model, x, repeats=3, progress=False)
    assert prof.timing["clock"] == "cuda_event"
    assert prof.root.metrics[FORWARD_TIME] > 0
