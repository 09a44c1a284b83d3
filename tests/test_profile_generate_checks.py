"""What ``ls.profile_generate`` refuses before ``generate()`` runs, in words that say what
was given: a prompt + new tokens beyond the model's positions (the check the CLI makes,
``generation.run.check_positions``), a mask or token ids of the wrong shape (by shape,
not by value), and a base model without ``generate()`` (named, with its class that has a
head)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

import layerscope as ls
from layerscope.errors import InvalidInputError
from layerscope.generation.modelcheck import check_positions
from layerscope.generation.run import check_generates
from layerscope.planning.headless import head_class

transformers = pytest.importorskip("transformers")

GPT2 = {"n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 128}
LLAMA = {
    "num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2,
    "num_key_value_heads": 1, "intermediate_size": 64, "vocab_size": 128,
}  # fmt: skip


def gpt2(positions: int = 128) -> Any:
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(n_positions=positions, **GPT2))


def ids(*shape: int) -> torch.Tensor:
    return torch.randint(0, 128, shape)


def test_beyond_the_positions_is_refused_before_generate_runs() -> None:
    # was: ModelError "the model's generate() raised IndexError: index out of range in self"
    model = gpt2()

    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("generate() ran")

    setattr(model, "generate", never)  # noqa: B010 (an instance attribute)
    with pytest.raises(InvalidInputError) as info:
        ls.profile_generate(model, ids(2, 16), max_new_tokens=200)
    assert str(info.value) == (
        "prompt + new_tokens = 216 is beyond GPT2LMHeadModel's 128 positions "
        "(config.max_position_embeddings): give prompt + new_tokens <= 128 (input_ids' "
        "tokens and max_new_tokens)"
    )


def test_the_last_position_is_allowed() -> None:
    """16 + 8 tokens on 24 positions: the last token is the 24th."""
    gen = ls.profile_generate(gpt2(24), ids(1, 16), max_new_tokens=8)
    assert gen.options["new_tokens"] == 8


def test_the_cli_and_the_api_share_the_check() -> None:
    """One function, the lengths named as the caller sets them."""
    with pytest.raises(InvalidInputError) as info:
        check_positions(gpt2(), 129, "--input-shape's PROMPT and --max-new-tokens")
    assert str(info.value) == (
        "prompt + new_tokens = 129 is beyond GPT2LMHeadModel's 128 positions "
        "(config.max_position_embeddings): give prompt + new_tokens <= 128 (--input-shape's "
        "PROMPT and --max-new-tokens)"
    )
    check_positions(gpt2(), 128)


def test_an_encoder_decoder_is_not_judged_by_prompt_plus_new_tokens() -> None:
    """T5's n_positions is a legacy field (its positions are relative): not a limit."""
    config = transformers.T5Config(
        d_model=16, d_ff=32, num_layers=1, num_heads=2, d_kv=8, vocab_size=64, n_positions=8
    )
    check_positions(transformers.T5ForConditionalGeneration(config), 10_000)


@pytest.mark.parametrize(
    ("mask", "words"),
    [
        (torch.ones(2, 5), "got shape (2, 5)"),
        (torch.ones(16), "got shape (16,)"),
        ([[1] * 5] * 2, "got [[1, 1, 1, 1, 1], [1, 1, 1, 1, 1]]"),  # not a tensor: as given
    ],
)
def test_a_wrong_mask_is_named_by_its_shape(mask: Any, words: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        ls.profile_generate(gpt2(), ids(2, 16), max_new_tokens=2, attention_mask=mask)
    assert str(info.value) == (
        f"attention_mask must be a tensor of input_ids' shape (2, 16), {words}"
    )


@pytest.mark.parametrize(
    ("given", "words"),
    [
        (torch.randint(0, 128, (16,)), "got shape (16,)"),
        (torch.randint(0, 128, (1, 2, 16)), "got shape (1, 2, 16)"),
        ([1, 2, 3], "got [1, 2, 3]"),
    ],
)
def test_token_ids_not_batch_by_tokens_are_named_by_their_shape(given: Any, words: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        ls.profile_generate(gpt2(), given, max_new_tokens=2)
    assert str(info.value) == f"input_ids must be a (batch, tokens) tensor of token ids, {words}"


def test_a_base_model_is_named_with_its_class_that_has_a_head() -> None:
    model = transformers.LlamaModel(transformers.LlamaConfig(**LLAMA))
    with pytest.raises(InvalidInputError) as info:
        ls.profile_generate(model, ids(1, 8), max_new_tokens=2)
    assert str(info.value) == (
        "profile_generate needs a model with generate() (transformers): LlamaModel has none "
        "(a base model has no head to generate with); give LlamaForCausalLM, the same model "
        "with its language-modelling head"
    )
    with pytest.raises(InvalidInputError) as info:
        check_generates(model, "transformers:llama")
    assert str(info.value) == (
        "profile_generate needs a model with generate() (transformers): LlamaModel "
        "(transformers:llama) has none (a base model has no head to generate with); give "
        "transformers:LlamaForCausalLM, the same model with its language-modelling head"
    )


class _Base(nn.Module):
    """A module with a config transformers does not map: its architectures name the head."""

    def __init__(self) -> None:
        super().__init__()
        self.config = SimpleNamespace(model_type="unmapped", architectures=["MyForCausalLM"])


def test_the_configs_architectures_when_transformers_maps_none() -> None:
    assert head_class(_Base()) == (
        "MyForCausalLM",
        "the architecture its config names (config.architectures)",
    )
    with pytest.raises(InvalidInputError) as info:
        check_generates(_Base())
    assert str(info.value) == (
        "profile_generate needs a model with generate() (transformers): _Base has none "
        "(a base model has no head to generate with); give MyForCausalLM, the architecture "
        "its config names (config.architectures)"
    )


def test_a_module_with_nothing_to_point_to_and_a_non_module() -> None:
    with pytest.raises(InvalidInputError) as info:
        check_generates(nn.Linear(2, 2))
    assert str(info.value) == (
        "profile_generate needs a model with generate() (transformers): Linear has none "
        "(a base model has no head to generate with); give the model with a "
        "language-modelling head (a ...ForCausalLM)"
    )
    with pytest.raises(InvalidInputError) as info:
        ls.profile_generate("gpt2", ids(1, 8))  # type: ignore[arg-type]
    assert str(info.value) == (
        "profile_generate needs a model with generate() (a transformers model), got a str"
    )
