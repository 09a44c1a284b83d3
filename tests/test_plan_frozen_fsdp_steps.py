"""A LoRA-style model (frozen embedding, output projection and base weights, trainable
rank-8 adapters) under FSDP2 on 2 ranks, each block checkpointed by a per-op policy:
the plan's peak against a real step's on the fake process group (rank 0 of 2, one
process) measured by ``FSDPMemTracker``. FSDP2 shards the frozen parameters too (no
gradient, no optimizer state), and the policy keeps its saved outputs to each block's
backward."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest
import torch
from torch import nn

import layerscope as ls

V, H, T, R = 512, 64, 128, 8  # vocabulary, width, tokens, adapter rank


class LoRALinear(nn.Module):
    """A frozen bias-free Linear plus a trainable ``b(a(x))`` of rank ``R``."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.base = nn.Linear(n_in, n_out, bias=False)
        self.base.weight.requires_grad_(False)
        self.a = nn.Linear(n_in, R, bias=False)
        self.b = nn.Linear(R, n_out, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.base(x) + self.b(self.a(x))
        return out


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = LoRALinear(H, 4 * H)
        self.down = LoRALinear(4 * H, H)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = x + self.down(torch.relu(self.up(x)))
        return out


class LM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, H)
        self.blocks = nn.ModuleList(Block() for _ in range(3))
        self.head = nn.Linear(H, V, bias=False)
        self.emb.weight.requires_grad_(False)
        self.head.weight.requires_grad_(False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        for block in self.blocks:
            x = block(x)
        return nn.functional.cross_entropy(self.head(x).view(-1, V), ids.view(-1))


def relus(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
    """A policy saving every ReLU's output, recomputing the rest."""
    from torch.utils.checkpoint import CheckpointPolicy

    save = func == torch.ops.aten.relu.default
    return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE


REAL = textwrap.dedent(
    """
    import functools, json, sys
    import torch, torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from torch.utils.checkpoint import (
        checkpoint, create_selective_checkpoint_contexts, set_checkpoint_early_stop,
    )
    sys.path.insert(0, "tests")
    from test_plan_frozen_fsdp_steps import LM, V, T, relus
    from test_plan_op_checkpoint import _torchtitan_policy
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    def peak(policy):
        torch.manual_seed(0)
        model = LM()
        for block in model.blocks:
            def run(*args, _forward=block.forward):
                contexts = functools.partial(create_selective_checkpoint_contexts, policy())
                return checkpoint(_forward, *args, use_reentrant=False, context_fn=contexts)
            block.forward = run
            fully_shard(block)
        fully_shard(model)
        opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-3)
        ids = torch.randint(0, V, (1, T), generator=torch.Generator().manual_seed(0))
        def step():
            with set_checkpoint_early_stop(False):
                model(ids).backward()
            opt.step()
            opt.zero_grad()
        step()
        tracker = FSDPMemTracker(model, opt)
        tracker.track_inputs((ids,))
        with tracker:
            step()
        snap = tracker.get_tracker_snapshot("peak")
        return next(v for k, v in snap.items() if str(k) == "cpu")["Total"]
    print(json.dumps({"op": peak(lambda: _torchtitan_policy({})), "relus": peak(lambda: relus)}))
    dist.destroy_process_group()
    """
)


@pytest.fixture(scope="module")
def measured() -> dict[str, int]:
    """Each policy's real peak (``REAL``)."""
    done = subprocess.run(
        [sys.executable, "-c", REAL], capture_output=True, text=True, timeout=300, check=True
    )
    peaks: dict[str, int] = json.loads(done.stdout.strip().splitlines()[-1])
    return peaks


@pytest.mark.parametrize(("name", "checkpoint"), [("op", "op"), ("relus", relus)])
def test_a_lora_model_under_fsdp2_and_a_policy_plans_as_it_runs(
    measured: dict[str, int], name: str, checkpoint: Any
) -> None:
    """The plan's peak (at the start of the backward, beside the root's gathered
    parameters) is the run's to the byte, under torchtitan's policy and under one saving
    the ReLUs; the frozen weights sit sharded: (512 x 64 + 3 x (2 x 64 x 256) + 64 x
    512) x 4 B / 2 ranks = 327,680 B, and only the adapters' shards have gradients."""
    ids = torch.randint(0, V, (1, T), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    plan = ls.plan(
        LM(), ids, world_size=2, rank=0, sharding="fsdp", precision="fp32", optimizer="sgd",
        reserve_bytes=0, units=["blocks.0", "blocks.1", "blocks.2"], checkpoint=checkpoint,
    )  # fmt: skip
    frozen = (V * H + 3 * 2 * H * 4 * H + H * V) * 4 // 2
    adapters = 3 * 2 * (H * R + R * 4 * H) * 4 // 2  # a and b of up and down, per block
    assert plan.states["param_bytes"] == frozen + adapters
    assert plan.states["grad_bytes"] == adapters
    assert plan.peak_bytes == measured[name]
    assert plan.peak_phase == {"phase": "backward", "event": "peak", "path": ""}
