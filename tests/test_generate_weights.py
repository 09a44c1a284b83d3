"""``weights=``: which weights a scheme stores narrower (``generation.weights``) beyond
``nn.Linear``: transformers' ``Conv1D`` (GPT-2) and the 3-D weights of fused experts
(Mixtral), the routers left at the model's width; each figure by hand."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

import layerscope as ls
from helpers.models import meta_mixtral
from layerscope.errors import InvalidInputError
from layerscope.generation.weights import quantized_weights


def _mixtral() -> Any:
    """2 layers, hidden 64, 4 heads of 16 (2 KV heads), 4 experts of MLP 128, top 2."""
    return meta_mixtral(dtype=torch.bfloat16)


def _gpt2() -> Any:
    """2 layers, hidden 64, float32; its projections are transformers' Conv1D."""
    config = GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=256, n_positions=128,
                        bos_token_id=0, eos_token_id=0)  # fmt: skip
    with torch.device("meta"):
        return GPT2LMHeadModel(config)


def test_fused_experts_are_stored_and_read_at_the_schemes_width() -> None:
    """int4, group 128 (0.5 B a weight, 2.5 B a group of 128 input channels, a row of
    64 or 128 inputs being one group). Per layer, bfloat16 before:

    - attention: q and o 64 x 64, k and v 32 x 64: 12,288 weights, 24,576 B; int4 q and
      o 2,048 + 64 x 2.5 = 2,208 B, k and v 1,024 + 32 x 2.5 = 1,104 B: 6,624 B, 17,952
      less;
    - experts: gate_up 4 x (256 x 64), down 4 x (64 x 128): 98,304 weights, 196,608 B
      (49,152 an expert); int4 an expert 8,192 + 256 x 2.5 + 4,096 + 64 x 2.5 = 13,088
      B, 52,352 for 4: 144,256 less;
    - the router (``mlp.gate``, 4 x 64) stays bfloat16, as AutoAWQ leaves it.

    Stored: 2 x (17,952 + 144,256) = 324,416 B less. A decode step at batch 1 (one token,
    top 2: 2 experts expected) reads each attention linear once and 2 experts a layer:
    2 x 17,952 + 2 x 2 x (49,152 - 13,088) = 35,904 + 144,256 = 180,160 B less."""
    model = _mixtral()
    common: dict[str, Any] = {"target": "h100", "prompt": 64, "new_tokens": 8, "batch": 1}
    bf16 = ls.estimate_generate(model, **common).sweep[0]
    int4 = ls.estimate_generate(model, weights="int4", **common)
    row = int4.sweep[0]
    assert bf16.weight_bytes - row.weight_bytes == 324_416
    assert row.experts_per_layer == 2.0
    assert bf16.decode_bytes - row.decode_bytes == 180_160
    kinds = {path: q.kind for path, q in quantized_weights(model).items()}
    assert kinds["model.layers.0.mlp.experts"] == "experts"
    assert "model.layers.0.mlp.gate" not in kinds and "lm_head" not in kinds
    note = next(n for n in int4.notes if n.startswith("Weights as deployed"))
    assert (
        "on 8 linear(s) and 2 fused experts module(s) (all but the output projection "
        "and the routers)" in note
    )


def test_gpt2s_conv1d_projections_are_quantized() -> None:
    """GPT-2's c_attn (64 -> 192), attn.c_proj (64 -> 64), c_fc (64 -> 256) and
    mlp.c_proj (256 -> 64) are Conv1D, weights stored (in, out): 49,152 weights a layer,
    98,304 in 2, float32 393,216 B. int8: 1 B a weight and a float16 scale per output
    channel (192 + 64 + 256 + 64 = 576 a layer): 98,304 + 2 x 576 x 2 = 100,608 B, so
    292,608 B less stored and read by each decode step (each projection called once;
    lm_head is tied to the embedding and stays float32)."""
    model = _gpt2()
    common: dict[str, Any] = {"target": "h100", "prompt": 16, "new_tokens": 4, "batch": 1}
    fp32 = ls.estimate_generate(model, **common).sweep[0]
    int8 = ls.estimate_generate(model, weights="int8", **common).sweep[0]
    assert fp32.weight_bytes - int8.weight_bytes == 292_608
    assert fp32.decode_bytes - int8.decode_bytes == 292_608


def test_a_model_with_nothing_to_quantize_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A decoder with no weight a scheme stores narrower (here: none found) is refused
    rather than labelled int8 and priced as before; only the output projection is not
    such a weight."""
    head_only = torch.nn.Module()
    head_only.lm_head = torch.nn.Linear(4, 8)
    assert quantized_weights(head_only) == {}
    import layerscope.generation.estimate as estimate

    monkeypatch.setattr(estimate, "quantized_weights", lambda model: {})
    with pytest.raises(InvalidInputError, match="GPT2LMHeadModel has no weights it stores"):
        ls.estimate_generate(_gpt2(), prompt=16, new_tokens=4, weights="int8")


def test_group_sizes_are_int4s_and_divide_the_input_channels() -> None:
    """A group size is int4's scale group: refused with another scheme or none; and it
    splits every quantized weight's input channels evenly (hidden 64 here: 48 does not
    divide it, 32 does)."""
    model = _mixtral()
    common: dict[str, Any] = {"target": "h100", "prompt": 16, "new_tokens": 2}
    with pytest.raises(InvalidInputError, match=r"group_size \(64\) is int4's .*'int8'"):
        ls.estimate_generate(model, weights="int8", group_size=64, **common)
    with pytest.raises(InvalidInputError, match=r"group_size \(64\) .* weights=None"):
        ls.estimate_generate(model, group_size=64, **common)
    with pytest.raises(InvalidInputError, match="group_size=48 does not divide the 64 input"):
        ls.estimate_generate(model, weights="int4", group_size=48, **common)
    assert ls.estimate_generate(model, weights="int4", group_size=32, **common).sweep
