"""Real-world architectures built from Hugging Face configs (random weights, no downloads),
profiled with every measurement at once: nothing unsupported, invariants hold, model
unchanged, and the FLOPs of the big matmuls match a count derived from the config."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import layerscope as ls
from helpers.snapshots import ModelSnapshot

transformers = pytest.importorskip("transformers")


def build(name: str) -> tuple[Any, Any, dict[str, int]]:
    dims = {"vocab": 128, "hidden": 32, "layers": 2, "heads": 4, "inner": 64}
    if name == "bert":
        config = transformers.BertConfig(
            vocab_size=dims["vocab"],
            hidden_size=dims["hidden"],
            num_hidden_layers=dims["layers"],
            num_attention_heads=dims["heads"],
            intermediate_size=dims["inner"],
            max_position_embeddings=64,
        )
        model = transformers.BertForMaskedLM(config)
    else:
        config = transformers.LlamaConfig(
            vocab_size=dims["vocab"],
            hidden_size=dims["hidden"],
            num_hidden_layers=dims["layers"],
            num_attention_heads=dims["heads"],
            num_key_value_heads=2,
            intermediate_size=dims["inner"],
            max_position_embeddings=64,
        )
        model = transformers.LlamaForCausalLM(config)
    return model, config, dims


@pytest.mark.parametrize("name", ["bert", "llama"])
def test_everything_at_once(name: str) -> None:
    model, _, dims = build(name)
    model.eval()
    ids = torch.randint(0, dims["vocab"], (2, 16))
    snap = ModelSnapshot.take(model)
    prof = ls.profile(
        model, kwargs={"input_ids": ids}, backward=True, memory=True, numerics="record"
    )
    snap.assert_unchanged(model)
    assert prof.unsupported_ops == {}
    assert prof.numerics["first_nonfinite"] is None
    assert prof.root.metrics["params"] == sum(p.numel() for p in model.parameters())
    assert prof.root.metrics["activation_bytes"] > 0 and prof.memory["forward_peak_bytes"] > 0
    prof.self_check()
    assert ls.Profile.from_dict(prof.to_dict()) == prof


def test_llama_projection_macs_from_the_config() -> None:
    model, _, dims = build("llama")
    tokens, h, inner, kv = 2 * 16, dims["hidden"], dims["inner"], 2 * (dims["hidden"] // 4)
    prof = ls.profile(model.eval(), kwargs={"input_ids": torch.zeros(2, 16, dtype=torch.long)})
    attn = prof.node("model.layers.0.self_attn")
    # q and o projections h x h, k and v projections h x (kv heads * head dim)
    proj = tokens * (h * h + h * kv + h * kv + h * h)
    children = sum(c.metrics["macs"] for c in attn.children)
    assert children == proj
    mlp = prof.node("model.layers.0.mlp")
    assert mlp.metrics["macs"] == tokens * 3 * h * inner  # gate, up and down projections
    assert prof.node("lm_head").metrics["macs"] == tokens * h * dims["vocab"]
