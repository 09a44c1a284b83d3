"""FSDP2's backward prefetch follows the reversed post-forward order: the root, whose
forward ends last, prefetches the last block's all-gather as the backward starts (its
``pre_backward`` then ``_backward_prefetch``), so the loss's backward runs beside that
block's gathered parameters. Checked against a real FSDP2 step on the fake process group
(rank 0 of 2, one process) measured by ``FSDPMemTracker``."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import torch
from torch import nn

import layerscope as ls

V, H, T = 512, 32, 64  # vocabulary, width, tokens


class LM(nn.Module):
    """An embedding, two blocks and an output projection; the root owns the embedding and
    the projection (FSDP2 units: the blocks, then the root)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, H)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(H, 4 * H), nn.ReLU(), nn.Linear(4 * H, H)) for _ in range(2)
        )
        self.head = nn.Linear(H, V, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        for block in self.blocks:
            x = x + block(x)
        logits: torch.Tensor = self.head(x)
        return nn.functional.cross_entropy(logits.view(-1, V), ids.view(-1))


REAL = textwrap.dedent(
    """
    import json, sys
    import torch, torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.testing._internal.distributed.fake_pg import FakeStore
    sys.path.insert(0, "tests")
    from test_fsdp_root_prefetch import LM, V, T
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    torch.manual_seed(0)
    model = LM()
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    ids = torch.randint(0, V, (1, T), generator=torch.Generator().manual_seed(0))
    def step():
        model(ids).backward()
        opt.step()
        opt.zero_grad()
    step()
    tracker = FSDPMemTracker(model, opt)
    tracker.track_inputs((ids,))
    with tracker:
        step()
    snap = tracker.get_tracker_snapshot("peak")
    print(json.dumps(next(v for k, v in snap.items() if str(k) == "cpu")["Total"]))
    dist.destroy_process_group()
    """
)


def test_the_root_prefetches_the_last_blocks_gather() -> None:
    """The plan's peak (at the start of the backward) is the run's to the byte; without
    the root's prefetch it was one block's all-gather output low: (32 x 128 + 128 +
    128 x 32 + 32) x 4 B = 33,408 B (747,272 against 713,864)."""
    done = subprocess.run(
        [sys.executable, "-c", REAL], capture_output=True, text=True, timeout=300, check=True
    )
    measured = int(done.stdout.strip().splitlines()[-1])
    ids = torch.randint(0, V, (1, T), generator=torch.Generator().manual_seed(0))
    plan = ls.plan(
        LM(), ids, world_size=2, rank=0, sharding="fsdp", precision="fp32", optimizer="sgd",
        reserve_bytes=0, units=["blocks.0", "blocks.1"],
    )  # fmt: skip
    assert plan.peak_bytes == measured == 747_272
    assert plan.peak_phase == {"phase": "backward", "event": "peak", "path": ""}
