"""Parallelism strategies as objects (``planning.strategy``): a strategy registered in
``planning.strategies.STRATEGIES`` alone is an option of ``ls.plan`` and plans, with
the phases (states, replay, collectives, time) untouched."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import layerscope as ls
from layerscope.planning.strategies import STRATEGIES, model_states
from layerscope.planning.strategies.replicated import DDP
from layerscope.planning.strategy import Step, Strategy, Times


class SyncDDP(DDP):
    """DDP whose all-reduces all run after the backward: nothing overlaps."""

    name = "ddp_sync"

    def comm_time(self, step: Step, times: Times) -> tuple[float, float]:
        total, _ = super().comm_time(step, times)
        return total, total


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(1024, 1024), nn.GELU(), nn.Linear(1024, 1024))


def test_a_registered_strategy_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(STRATEGIES, "ddp_sync", SyncDDP())
    # two buckets (the second layer's 4 MiB closes DDP's first, 1 MiB, bucket), the first
    # all-reduce under the backward
    x = torch.randn(4096, 1024)
    ddp = ls.plan(_mlp(), x, world_size=8, sharding="ddp")
    sync = ls.plan(_mlp(), x, world_size=8, sharding="ddp_sync")
    assert ddp.comm[""]["backward"]["all_reduce"]["calls"] == 2
    assert sync.options["sharding"] == "ddp_sync"
    assert sync.peak_bytes == ddp.peak_bytes and sync.states == ddp.states
    assert sync.comm == ddp.comm
    assert sync.time["comm"] == ddp.time["comm"] > ddp.time["exposed_comm"]
    assert sync.time["exposed_comm"] == sync.time["comm"]
    shapes = [(1024, 1024), (1024,), (1024, 1024), (1024,)]
    assert model_states(shapes, world_size=8, sharding="ddp_sync", precision="fp32") == (
        model_states(shapes, world_size=8, sharding="ddp", precision="fp32")
    )


def test_every_strategy_is_named_by_its_option() -> None:
    assert list(STRATEGIES) == ["none", "ddp", "fsdp", "zero1", "zero2"]
    for name, strategy in STRATEGIES.items():
        assert isinstance(strategy, Strategy) and strategy.name == name
    # autocast is DDP's mixed precision only
    assert [n for n, s in STRATEGIES.items() if s.autocast] == ["ddp"]


def test_nested_units_share_out_the_forward(monkeypatch: pytest.MonkeyPatch) -> None:
    """Units nested three deep (the root, ``0``, ``0.1``) over four equal Linears (t
    seconds of forward each): a unit's own time is its module's less the units directly
    inside it, so the root owns Linear ``1`` (t), ``0`` owns ``0.0`` (t) and ``0.1`` its
    two (2t): 4t in all, the root's. Subtracting every unit below, as before, left the
    root 4t - 3t - 2t = -t."""
    import layerscope.planning.strategies.fsdp as fsdp

    seen: list[Any] = []
    exposed = fsdp.fsdp_exposed

    def spy(works: Any, *args: Any) -> Any:
        seen.extend(works)
        return exposed(works, *args)

    monkeypatch.setattr(fsdp, "fsdp_exposed", spy)
    inner = nn.Sequential(nn.Linear(32, 32), nn.Linear(32, 32))
    model = nn.Sequential(nn.Sequential(nn.Linear(32, 32), inner), nn.Linear(32, 32))
    ls.plan(model, torch.randn(8, 32), sharding="fsdp", world_size=2, units=["0", "0.1"],
            precision="fp32")  # fmt: skip
    own = {w.path: w.forward for w in seen}
    assert list(own) == ["", "0", "0.1"]
    t = own["0"]
    assert t > 0
    assert own[""] == pytest.approx(t, rel=1e-12, abs=0)
    assert own["0.1"] == pytest.approx(2 * t, rel=1e-12, abs=0)
