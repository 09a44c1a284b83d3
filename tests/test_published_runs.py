"""The published-run benches build the models as the runs ran them."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

import layerscope as ls

#: a 2-layer Llama: 64 wide, 4 heads (2 KV), MLP 128, vocab 128, 32 tokens
TINY: dict[str, Any] = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, vocab_size=128,
)  # fmt: skip


def _titan() -> ModuleType:
    sys.path.insert(0, str(Path(__file__).parents[1] / "bench"))
    import published_runs_torchtitan

    return published_runs_torchtitan


def _kept(fused: bool, monkeypatch: pytest.MonkeyPatch) -> int:
    titan = _titan()
    monkeypatch.setitem(titan.SHAPES, "tiny-1", TINY)
    monkeypatch.setitem(titan.SEQ, "tiny", 32)
    monkeypatch.setattr(titan, "FUSED_NORM", frozenset({"tiny-1"} if fused else ()))
    model = titan.build(titan.Run("tiny-1", 2, "no", 1, 1.0, "a test"))
    norms = [type(m).__name__ for m in model.modules() if "RMSNorm" in type(m).__name__]
    assert norms == ["FusedRMSNorm" if fused else "LlamaRMSNorm"] * 5
    ids = torch.zeros(2, 32, dtype=torch.long, device="meta")
    plan = ls.plan(
        model, kwargs={"input_ids": ids, "labels": ids}, target="a100-80gb", world_size=64,
        sharding="fsdp", precision="bf16-mixed", optimizer="adamw", progress=False,
    )  # fmt: skip
    return plan.kept_activation_bytes


@pytest.mark.slow
def test_fused_rmsnorm_keeps_what_torchtitans_kernel_saves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """torchtitan's fused RMSNorm saves its 16-bit input (2 B an element) and rstd;
    transformers' keeps a float32 copy (4 B) and the normalised 16-bit tensor (2 B): 4 B
    more an element of each norm's input. 5 norms (2 a layer and the final one) over 2 x
    32 tokens 64 wide: 5 x 4 x 2 x 32 x 64 = 81,920 B."""
    assert _kept(False, monkeypatch) - _kept(True, monkeypatch) == 5 * 4 * 2 * 32 * 64
