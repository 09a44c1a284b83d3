"""Parallelism strategies as objects (``planning.strategy``): a strategy registered in
``planning.strategies.STRATEGIES`` alone is an option of ``ls.plan`` and plans, with
the phases (states, replay, collectives, time) untouched."""

from __future__ import annotations

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
