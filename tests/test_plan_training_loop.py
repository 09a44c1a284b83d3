"""A plan's memory is a training loop's: the model's output dropped once the loss is made
(``loss = model(ids, labels=ids).loss``, torchtitan's ``del pred``), and a checkpointed
block's recompute beside exactly what a real checkpointed run holds there. Each checked
against a real CPU step measured by torch's ``MemTracker``."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.distributed._tools.mem_tracker import MemTracker
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

import layerscope as ls

COMMON: dict[str, Any] = dict(
    target="h100", world_size=1, sharding="none", precision="fp32", optimizer="sgd",
    reserve_bytes=0,
)  # fmt: skip


def _peak(step: Any, *external: Any) -> int:
    tracker = MemTracker()
    tracker.track_external(*external)
    with tracker:
        step()
    snap: dict[Any, dict[Any, int]] = tracker.get_tracker_snapshot("peak")
    return next(v for k, v in snap.items() if str(k) == "cpu")["Total"]


def test_the_logits_go_before_the_backward() -> None:
    """transformers' Llama given ``labels`` (vocabulary 4,096, 2 x 128 tokens, float32):
    the plan's peak is the real loop's to the byte; a loop that holds the output through
    the backward peaks higher by the logits, 2 x 128 x 4,096 x 4 = 4,194,304 B."""
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=4096, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        attn_implementation="eager", use_cache=False, tie_word_embeddings=False,
    )  # fmt: skip

    def model(device: str) -> Any:
        torch.manual_seed(0)
        with torch.device(device):
            return transformers.LlamaForCausalLM(config).train()

    ids = torch.randint(0, 4096, (2, 128), generator=torch.Generator().manual_seed(0))
    plan = ls.plan(model("meta"), kwargs={"input_ids": ids, "labels": ids}, **COMMON)
    peaks = []
    for hold in (False, True):
        m = model("cpu")
        opt = torch.optim.SGD(m.parameters(), lr=1e-3)

        def step(m: nn.Module = m, opt: Any = opt, hold: bool = hold) -> None:
            if hold:
                out = m(input_ids=ids, labels=ids)
                out.loss.backward()
                del out
            else:
                m(input_ids=ids, labels=ids).loss.backward()
            opt.step()
            opt.zero_grad()

        step()  # the optimizer's state made
        peaks.append(_peak(step, m, opt, ids))
    assert plan.peak_bytes == peaks[0]
    assert peaks[1] - peaks[0] == 2 * 128 * 4096 * 4


class Block(nn.Module):
    """Four bias-free Linears (64 wide) with ReLUs between them."""

    def __init__(self) -> None:
        super().__init__()
        self.mm = nn.ModuleList(nn.Linear(64, 64, bias=False) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, lin in enumerate(self.mm):
            x = lin(x) if i == 0 else lin(torch.relu(x))
        return x


def _blocks(device: str) -> nn.Sequential:
    torch.manual_seed(0)
    with torch.device(device):
        return nn.Sequential(Block(), Block(), Block())


def _loss(out: torch.Tensor) -> torch.Tensor:
    return out.pow(2).mean()


def test_each_blocks_recompute_stands_where_the_run_does() -> None:
    """Three checkpointed blocks, 256 tokens: before every block's recompute the real
    run holds the same bytes (the gradient flowing into the block replaces the freed
    input of the block after it), and so does the plan; a block's output saved only by
    the next block is freed with that block's backward in the analysis too, so it is not
    taken off again (the plan was one 256 x 64 x 4 = 65,536 B activation low before
    every block's recompute but the last's). The peaks agree to the byte."""
    x = torch.randn(256, 64)
    real = _blocks("cpu")
    for block in real:
        block.forward = (lambda f: lambda *a: checkpoint(f, *a, use_reentrant=False))(block.forward)
    levels: dict[int, int] = {}
    tracker: list[MemTracker] = []

    def level(i: int) -> Any:
        def hook(module: nn.Module, args: Any) -> None:
            if tracker and torch._C._current_autograd_node() is not None and i not in levels:
                snap: dict[Any, dict[Any, int]] = tracker[0].get_tracker_snapshot("current")
                levels[i] = next(v for k, v in snap.items() if str(k) == "cpu")["Total"]

        return hook

    for i, block in enumerate(real):
        assert isinstance(block, Block)
        block.mm[0].register_forward_pre_hook(level(i))
    opt = torch.optim.SGD(real.parameters(), lr=1e-3)

    def step() -> None:
        with set_checkpoint_early_stop(False):
            _loss(real(x)).backward()  # type: ignore[no-untyped-call]
        opt.step()
        opt.zero_grad()

    step()
    t = MemTracker()
    tracker.append(t)
    t.track_external(real, opt, x)
    with t:
        step()
    snap: dict[Any, dict[Any, int]] = t.get_tracker_snapshot("peak")
    measured = next(v for k, v in snap.items() if str(k) == "cpu")["Total"]
    plan = ls.plan(_blocks("meta"), x, checkpoint="blocks", loss_fn=_loss, **COMMON)
    tl = plan.timeline
    planned = {
        int(tl["path"][k]): tl["total"][k] - tl["recompute_bytes"][k]
        for k in range(len(tl["total"]))
        if tl["event"][k] == "recompute"
    }
    assert len(set(levels.values())) == 1 and planned == levels
    assert plan.peak_bytes == measured
