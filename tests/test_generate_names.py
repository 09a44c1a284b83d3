"""``estimate_generate``: tokens per second named apart (per sequence, all together), the
deprecated ``GenerateEstimate.tokens_per_s``, older documents, and the models and
lengths it refuses (``generation.modelcheck``, docs/generate.md "What is refused")."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from transformers import (
    BertConfig,
    BertForMaskedLM,
    BertLMHeadModel,
    BertModel,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    T5Config,
    T5ForConditionalGeneration,
)

import layerscope as ls
from layerscope.errors import InvalidInputError
from layerscope.generation import estimate_result
from layerscope.generation.estimate import estimate_generate
from layerscope.generation.estimate_result import GenerateEstimate
from layerscope.generation.modelcheck import check_generative, positions

SMALL: dict[str, Any] = {
    "num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2,
    "num_key_value_heads": 1, "intermediate_size": 64, "vocab_size": 64,
    "max_position_embeddings": 64,
}  # fmt: skip


def on_meta(cls: Any, config: Any) -> Any:
    with torch.device("meta"):
        return cls(config)


@pytest.fixture(scope="module")
def est() -> GenerateEstimate:
    model = on_meta(LlamaForCausalLM, LlamaConfig(**SMALL))
    return estimate_generate(model, prompt=8, new_tokens=4, batch=(4, 1))


def test_per_sequence_and_total_are_named_apart(est: GenerateEstimate) -> None:
    """Batch 1 first (sorted): its row's tokens/s is 1 / decode time, one sequence's and the
    total alike; batch 4's total is 4 / decode time, its per-sequence figure 1 / it."""
    one, four = est.sweep
    assert (one.batch, four.batch) == (1, 4)
    assert est.tokens_per_s_per_seq == 1 / one.decode_time_per_token
    assert est.tokens_per_s_total == one.tokens_per_s == 1 / one.decode_time_per_token
    assert four.tokens_per_s == 4 / four.decode_time_per_token
    assert four.tokens_per_s_per_seq == four.tokens_per_s_per_sequence
    assert four.tokens_per_s_per_seq == 1 / four.decode_time_per_token
    data = est.to_dict()
    assert data["tokens_per_s_per_seq"] == data["tokens_per_s"] == est.tokens_per_s_per_seq
    assert data["tokens_per_s_total"] == one.tokens_per_s


def test_the_old_name_returns_what_it_did_and_warns_once(
    est: GenerateEstimate, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(estimate_result, "_WARNED", set())
    with pytest.warns(DeprecationWarning, match="tokens_per_s_per_seq .* tokens_per_s_total"):
        assert est.tokens_per_s == est.tokens_per_s_per_seq
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert est.tokens_per_s == est.tokens_per_s_per_seq  # once: no second warning


def test_an_older_document_still_loads(est: GenerateEstimate) -> None:
    """A document written before the two keys: ``tokens_per_s`` (per sequence) only."""
    old = {k: v for k, v in est.to_dict().items() if not k.startswith("tokens_per_s_")}
    loaded = GenerateEstimate.from_dict(old)
    assert loaded.tokens_per_s_per_seq == old["tokens_per_s"] == est.tokens_per_s_per_seq
    assert loaded.to_dict() == est.to_dict()
    assert loaded.render(width=100) == est.render(width=100)


def test_a_sequence_beyond_the_positions_is_refused() -> None:
    """GPT-2 with 64 positions: 60 + 8 = 68 tokens have no position rows past 64. Its
    config maps ``max_position_embeddings`` to ``n_positions`` (``attribute_map``)."""
    gpt2 = on_meta(GPT2LMHeadModel, GPT2Config(n_layer=1, n_embd=32, n_head=2, n_positions=64))
    assert positions(gpt2) == (64, "max_position_embeddings")
    with pytest.raises(InvalidInputError) as info:
        estimate_generate(gpt2, prompt=60, new_tokens=8, batch=1)
    assert str(info.value) == (
        "prompt + new_tokens = 68 is beyond GPT2LMHeadModel's 64 positions "
        "(config.max_position_embeddings): give prompt + new_tokens <= 64 (the prompt's "
        "length and --max-new-tokens)"
    )
    llama = on_meta(LlamaForCausalLM, LlamaConfig(**SMALL))
    with pytest.raises(InvalidInputError, match=r"65 is beyond LlamaForCausalLM's 64 .*"
                       r"\(config.max_position_embeddings\)"):  # fmt: skip
        estimate_generate(llama, prompt=64, new_tokens=1, batch=1)
    check_generative(llama, 64)  # 64 tokens: the last position is the 64th


BERT = BertConfig(
    num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64,
    vocab_size=64, max_position_embeddings=64,
)  # fmt: skip


@pytest.mark.parametrize("cls", [BertForMaskedLM, BertModel])
def test_an_encoder_only_model_is_refused(cls: Any) -> None:
    with pytest.raises(InvalidInputError) as info:
        estimate_generate(on_meta(cls, BERT), prompt=8, new_tokens=2, batch=1)
    assert str(info.value).startswith(
        f"{cls.__name__} is encoder-only (bert): none of its attention is causal, so it "
        "does not generate token by token on a KV cache"
    )


def test_bert_as_a_decoder_is_not_encoder_only() -> None:
    """``is_decoder=True`` makes BERT's self-attention causal: a decoder."""
    decoder = BertConfig(**{**BERT.to_dict(), "is_decoder": True})
    check_generative(on_meta(BertLMHeadModel, decoder), 16)


def test_an_encoder_decoder_is_refused() -> None:
    config = T5Config(
        num_layers=1, num_decoder_layers=1, d_model=32, d_kv=16, d_ff=64, num_heads=2,
        vocab_size=64,
    )  # fmt: skip
    with pytest.raises(InvalidInputError) as info:
        ls.estimate_generate(
            on_meta(T5ForConditionalGeneration, config), prompt=8, new_tokens=2, batch=1
        )
    assert str(info.value).startswith(
        "T5ForConditionalGeneration is an encoder-decoder (t5): estimate_generate does not "
        "support encoder-decoders yet"
    )
