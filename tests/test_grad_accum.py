"""Gradient accumulation in a plan's memory: a micro-batch after the first runs beside
the gradients accumulated so far, and each gradient it makes is added into them (held
until then), checked against a real CPU step measured by torch's ``MemTracker``."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.distributed._tools.mem_tracker import MemTracker

import layerscope as ls


def _model(device: str) -> nn.Module:
    torch.manual_seed(0)
    with torch.device(device):
        return nn.Sequential(
            nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 128)
        )


def _second_micro_batch_peak(batch: int) -> int:
    """A real step's second micro-batch and its SGD step, its peak as MemTracker has it
    (the first micro-batch's gradients held; the output dropped once the loss is made,
    as a training loop drops it)."""
    model, x = _model("cpu"), torch.randn(batch, 128)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    model(x).sum().backward()
    tracker = MemTracker()
    tracker.track_external(model, opt, x)
    with tracker:
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
    snap: dict[Any, dict[Any, int]] = tracker.get_tracker_snapshot("peak")
    return next(v for k, v in snap.items() if str(k) == "cpu")["Total"]


def test_a_later_micro_batch_runs_beside_the_accumulated_gradients() -> None:
    """128 -> 256 -> 256 -> 128 (131,712 parameters, 526,848 B of float32 gradients):
    with 2 micro-batches the plan's peak is the second's, the real one to the byte, and
    above one micro-batch's peak by what the accumulated gradients add where the first
    held none yet (the peak moves to micro-batch 2)."""
    x = torch.empty(512, 128, device="meta")
    common: dict[str, Any] = dict(target="h100", world_size=1, sharding="none",
                                  precision="fp32", optimizer="sgd")  # fmt: skip
    one = ls.plan(_model("meta"), x, **common)
    two = ls.plan(_model("meta"), x, **common, grad_accum=2)
    assert two.peak_bytes == _second_micro_batch_peak(512)
    assert two.peak_bytes > one.peak_bytes
    assert two.peak_phase["micro_batch"] == "2" and "micro_batch" not in one.peak_phase
    assert "of micro-batch 2 (as of every one after the first" in two.render(width=200)
    # the step itself (the optimizer's point) is the same: the gradients accumulated
    assert two.timeline["total"][-1] == one.timeline["total"][-1]
    grads = (128 * 256 + 256 + 256 * 256 + 256 + 256 * 128 + 128) * 4
    assert grads == 526_848 and two.states["grad_bytes"] == grads


def test_fsdp2_and_zero2_accumulate_their_shards() -> None:
    """Sharded, the accumulated gradients are the shards (FSDP2: float32 shards under
    mixed precision; ZeRO-2: the partition): a later micro-batch holds them from its
    start, so its forward's points stand that much above the first's."""
    x = torch.empty(64, 128, device="meta")
    for sharding in ("fsdp", "zero2"):
        common: dict[str, Any] = dict(target="h100", world_size=4, sharding=sharding)
        two = ls.plan(_model("meta"), x, **common, grad_accum=2)
        t = two.timeline
        n = t["phase"].index("backward")  # the first micro-batch's forward: points 0 .. n-1
        later = t["phase"].index("forward", n)
        assert t["grad_bytes"][later] == two.states["grad_bytes"] > 0, sharding
        assert t["grad_bytes"][0] == 0
        first, second = t["total"][:n], t["total"][later : later + n]
        assert [b - a for a, b in zip(first, second, strict=True)] == [two.states["grad_bytes"]] * n
