"""A transformers base model (``LlamaModel``, ``transformers:llama``), which has no LM
head: ``ls.estimate_generate`` and ``ls.plan_serving`` say so as ``ls.plan`` does, from
the one detection (``planning.headless``), and the logits_to_keep note claims no LM head
for it; a model with its head gets neither."""

from __future__ import annotations

from typing import Any

import torch
from transformers import GPT2Config, GPT2Model, LlamaConfig, LlamaForCausalLM, LlamaModel

import layerscope as ls
from layerscope.planning.headless import base_model, headless_notes

SHAPE: dict[str, Any] = {
    "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
}  # fmt: skip
NOTE = (
    "LlamaModel is a transformers base model, without an LM head: it returns hidden "
    "states, no logits, so the head's matmul (hidden size x vocabulary) is missing from "
    "the prefill and from every decode step, and its weights from the memory unless tied "
    "to the embeddings; give the model with its head (transformers:LlamaForCausalLM) for "
    "a language model's generation."
)
#: a model without logits_to_keep (LlamaModel's forward takes none)
NO_KEEP = (
    "The forward takes no logits_to_keep: the prefill's output covers every prompt token, "
    "not the last one only."
)


def _meta(cls: Any) -> Any:
    with torch.device("meta"):
        return cls(LlamaConfig(**SHAPE))


def test_estimate_generate_notes_a_base_model() -> None:
    est = ls.estimate_generate(_meta(LlamaModel), target="h100", prompt=16, new_tokens=4,
                               batch=1)  # fmt: skip
    assert NOTE in est.notes
    assert NO_KEEP in est.notes  # no "(an LM head's too)": it has none
    assert est.notes.index(NOTE) + 1 == est.notes.index(NO_KEEP)
    assert not any("LM head's too" in n for n in est.notes)


def test_plan_serving_notes_a_base_model() -> None:
    p = ls.plan_serving(_meta(LlamaModel), target="h100", max_context=64, new_tokens=8,
                        batch=1)  # fmt: skip
    assert NOTE in p.notes and NO_KEEP in p.notes
    assert NOTE in " ".join(p.render(width=10_000).split())


def test_a_model_with_its_head_gets_no_note() -> None:
    est = ls.estimate_generate(_meta(LlamaForCausalLM), target="h100", prompt=16,
                               new_tokens=4, batch=1)  # fmt: skip
    assert not any("base model" in n for n in est.notes)
    p = ls.plan_serving(_meta(LlamaForCausalLM), target="h100", max_context=64,
                        new_tokens=8, batch=1)  # fmt: skip
    assert not any("base model" in n for n in p.notes)


def test_one_detection_for_a_module_and_its_analysis() -> None:
    """The module and its prefill's analysis are read alike: LlamaModel is a base model
    whose class with a head is named; LlamaForCausalLM holds its base model; GPT-2's head
    class is named by transformers' auto mapping (``GPT2LMHeadModel``, not a
    ``GPT2ForCausalLM``)."""
    base, headed = _meta(LlamaModel), _meta(LlamaForCausalLM)
    found = base_model(base)
    assert found is not None and found.headed == "transformers:LlamaForCausalLM"
    assert base_model(headed) is None
    assert base_model(ls.profile(base, input_shape=(1, 8))) == found
    assert base_model(ls.profile(headed, input_shape=(1, 8))) is None
    with torch.device("meta"):
        gpt2 = GPT2Model(GPT2Config(n_embd=64, n_layer=1, n_head=4, vocab_size=256))
    assert headless_notes(gpt2) == [
        "GPT2Model is a transformers base model, without an output head: the plan holds no "
        "logits; plan the model with its head (transformers:GPT2LMHeadModel) for a language "
        "model's training step"
    ]
    assert headless_notes(headed) == [] and headless_notes(torch.nn.Linear(2, 2)) == []
