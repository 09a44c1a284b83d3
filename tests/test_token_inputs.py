"""Random inputs from a shape for models that read token ids
(``collect.inputs.first_embedding``), and the cost of ``torch._check_tensor_all``'s op,
which transformers' multimodal models call."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import layerscope as ls
from layerscope.collect.inputs import first_embedding, random_inputs
from layerscope.metrics.flops import Cost, op_cost


class VisionFirst(nn.Module):
    """A vision tower defined before the text embedding, as a vision-language model
    defines them; its forward takes the token ids first."""

    def __init__(self) -> None:
        super().__init__()
        self.vision = nn.Conv2d(3, 8, 2)
        self.text = nn.Embedding(200, 8)

    def get_input_embeddings(self) -> nn.Module:
        return self.text

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.text(input_ids)
        return out


def test_the_input_embeddings_read_the_token_ids() -> None:
    """The first leaf is the convolution, but the model's input embeddings read its
    ``input_ids``: ids are long, in [0, 200); the profile runs."""
    model = VisionFirst()
    assert first_embedding(model) is model.text
    (ids,) = random_inputs(model, (4, 64))
    assert ids.dtype == torch.long and int(ids.min()) >= 0 and int(ids.max()) < 200
    assert ls.profile(model, input_shape=(4, 64)).root.metrics["params"] == 3 * 8 * 4 + 8 + 1600


def test_a_transformers_vision_language_model_gets_token_ids() -> None:
    """Qwen2-VL (vision tower first): float ids made its embedding raise before."""
    transformers = pytest.importorskip("transformers")
    text: dict[str, Any] = dict(
        vocab_size=200, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2,
        rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]},
    )  # fmt: skip
    vision = dict(depth=1, embed_dim=32, hidden_size=64, num_heads=4)
    config = transformers.Qwen2VLConfig(text_config=text, vision_config=vision)
    model = transformers.Qwen2VLForConditionalGeneration(config)
    assert first_embedding(model) is model.get_input_embeddings()
    prof = ls.profile(model, input_shape=(1, 12))
    assert prof.partial_metrics == []


def test_check_tensor_all_costs_its_input_elements() -> None:
    """``aten._is_all_true`` / ``_is_any_true``: one flop an input element, as ``all``
    and ``any`` (a model calling ``torch._check_tensor_all`` had partial FLOPs)."""
    flags = torch.ones(2, 4, dtype=torch.bool)
    for op in (torch.ops.aten._is_all_true.default, torch.ops.aten._is_any_true.default):
        assert op_cost(op, (flags,), {}, op(flags)) == Cost(0, 8)

    class Checked(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            torch._check_tensor_all(x.abs() >= 0)  # type: ignore[no-untyped-call]
            out: torch.Tensor = self.lin(x)
            return out

    assert ls.profile(Checked(), torch.randn(2, 4)).partial_metrics == []
