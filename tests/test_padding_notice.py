"""``ls.profile_generate``'s padding notice (``layerscope.generation.padding``): a
padded prompt's pad tokens are computed, so counted as work, whoever masks them: the
user's ``attention_mask``, the mask ``generate()`` builds from ``pad_token_id`` (a
decoder-only model); and pad tokens no given mask covers (an encoder-decoder given no
mask: ``generate()`` infers none for it) are said to be attended as any token unless the
model masks them itself, which BART does not and T5Gemma does (checked here).

The Llama is the one of ``docs/generate.md`` (2 layers, hidden 64, 4 query heads and 2
KV heads of 16, MLP 128, vocab 128), batch 2, 8-token prompts: a prefill's weights are
2 rows x 8 tokens x 73,728 MACs + 2 x 8,192 for the LM head on the last position =
1,196,032; its attention 2 layers x 4 heads x (16 + 16) = 256 MACs per query and key.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import layerscope as ls
from helpers.models import tiny_bart, tiny_llama

transformers = pytest.importorskip("transformers")

KEPT = (
    "the model computes them all the same, so the prefill's MACs, FLOPs and bytes count "
    "them as work, and their {} are in the KV cache, which every decode step attends over"
)
WEIGHTS = 2 * 8 * 73_728 + 2 * 8_192  # 1,196,032


def padded_ids(pad: int, *, left: bool = True) -> torch.Tensor:
    """Two 8-token prompts of ids 3..63, the second's first (or last) 3 the pad id."""
    torch.manual_seed(1)
    ids = torch.randint(3, 64, (2, 8))
    if left:
        ids[1, :3] = pad
    else:
        ids[1, 5:] = pad
    return ids


def t5gemma() -> Any:
    """A T5Gemma (1 encoder and 1 decoder layer, hidden 32, 2 heads and 1 KV head of 16,
    vocab 64, pad 0): its encoder masks the pad tokens itself when given no mask."""
    torch.manual_seed(0)
    sub = dict(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16,
        layer_types=["full_attention"], sliding_window=8,
    )  # fmt: skip
    config = transformers.T5GemmaConfig(
        encoder=transformers.T5GemmaModuleConfig(**sub),
        decoder=transformers.T5GemmaModuleConfig(**sub),
        vocab_size=64, pad_token_id=0, eos_token_id=1, bos_token_id=2,
    )  # fmt: skip
    return transformers.T5GemmaForConditionalGeneration(config).eval()


def test_a_padded_mask_given_is_noticed_and_counted() -> None:
    """The user's mask pads 3 of the second prompt's 8 tokens: the notice counts 3 of 16,
    and the prefill counts them: the padding mask makes SDPA compute every query against
    every key, 2 rows x 8 x 8 pairs x 256 = 32,768 attention MACs, where the unpadded
    prefill's causal triangle is 2 x 36 x 256 = 18,432. The decode steps are the same
    (one query over every key either way), and so is the cache (the pads' keys and
    values are in it: 8 + 2 tokens x 512 B x 2 rows = 10,240 B at the end)."""
    model = tiny_llama()
    ids = padded_ids(0) + 3
    mask = torch.ones_like(ids)
    plain = ls.profile_generate(model, ids, max_new_tokens=3, attention_mask=mask)
    mask[1, :3] = 0
    gen = ls.profile_generate(model, ids, max_new_tokens=3, attention_mask=mask)
    assert gen.notices == [
        "padding: 3 of the 16 prompt tokens (per prompt: 0, 3) are masked out by the "
        "attention_mask given; " + KEPT.format("keys and values")
    ]
    assert plain.notices == []
    assert gen.calls[0].macs == WEIGHTS + 2 * 8 * 8 * 256 == 1_228_800
    assert plain.calls[0].macs == WEIGHTS + 2 * 36 * 256 == 1_214_464
    assert [r.macs for r in gen.calls[1:]] == [r.macs for r in plain.calls[1:]]
    assert gen.kv_cache["bytes_final"] == plain.kv_cache["bytes_final"] == 10 * 512 * 2


def test_the_mask_generate_builds_from_the_pad_token_is_noticed() -> None:
    """No mask given, pad_token_id 0 (not the end token, 2): generate() masks the second
    prompt's 3 leading zeros itself, so the notice fires, and every row is the one of
    the same prompt given that mask (int64, as generate() makes it) by hand."""
    model = tiny_llama(pad_token_id=0)
    ids = padded_ids(0)
    gen = ls.profile_generate(model, ids, max_new_tokens=3)
    assert gen.notices == [
        "padding: 3 of the 16 prompt tokens (per prompt: 0, 3) are masked out by the "
        "attention mask generate() built from pad_token_id 0; " + KEPT.format("keys and values")
    ]
    by_hand = ls.profile_generate(model, ids, max_new_tokens=3, attention_mask=(ids != 0).long())
    assert gen.calls == by_hand.calls
    assert gen.calls[0].macs == 1_228_800  # as the mask given above


def test_a_pad_token_that_is_the_end_token_is_fed_as_any() -> None:
    """pad_token_id 2, the end token too: generate() cannot tell padding from an end
    token and builds no mask, so the 3 pads are fed unmasked: the prefill is the causal
    triangle of an unpadded one (1,214,464 MACs)."""
    model = tiny_llama(pad_token_id=2)
    gen = ls.profile_generate(model, padded_ids(2), max_new_tokens=3)
    assert gen.notices == [
        "padding: the prompt holds 3 pad tokens (pad_token_id 2; per prompt: 0, 3) and no "
        "attention mask masks them (generate() infers one only from a pad token other than "
        "the end token): the model is fed them as any token, and they are counted as work"
    ]
    assert gen.calls[0].macs == 1_214_464


def test_no_padding_no_notice() -> None:
    """An all-ones mask, no pad token declared, or no pad token in the prompt: none."""
    ids = padded_ids(0) + 3  # no 0: ids 6..66, the second's first 3 are 3
    assert ls.profile_generate(tiny_llama(), ids, max_new_tokens=2).notices == []
    model = tiny_llama(pad_token_id=0)
    assert ls.profile_generate(model, ids, max_new_tokens=2).notices == []
    ones = torch.ones_like(ids)
    gen = ls.profile_generate(model, padded_ids(0), max_new_tokens=2, attention_mask=ones)
    assert gen.notices == []


def unmasked(pad: int) -> str:
    """The notice for 3 pad tokens in the second prompt and no mask given."""
    return (
        f"padding: the prompt holds 3 pad tokens (pad_token_id {pad}; per prompt: 0, 3) and "
        "no attention mask: generate() infers a mask from pad_token_id for decoder-only "
        "models only, so the model attends to them as to any token unless it masks them "
        "itself; they are computed, counted as work (pass attention_mask to mask them)"
    )


def test_bart_given_a_padded_mask_keeps_the_pads_cross_attention() -> None:
    """BART with the padding mask given: the notice counts 3 of 16 masked, and the
    cross-attention cache holds all 16 positions: 2 decoder layers x K and V x width 32 x
    4 B = 512 B per position, x 8 positions x 2 rows = 8,192 B."""
    model = tiny_bart()
    ids = padded_ids(1, left=False)
    gen = ls.profile_generate(model, ids, max_new_tokens=2, attention_mask=(ids != 1).long())
    assert gen.notices == [
        "padding: 3 of the 16 prompt tokens (per prompt: 0, 3) are masked out by the "
        "attention_mask given; " + KEPT.format("cross-attention keys and values")
    ]
    assert gen.kv_cache["cross_bytes"] == 2 * 2 * 32 * 4 * 8 * 2 == 8_192


@pytest.mark.parametrize(
    ("build", "pad", "masks_itself"), [(tiny_bart, 1, False), (t5gemma, 0, True)]
)
def test_pads_no_mask_covers_are_noticed(build: Any, pad: int, masks_itself: bool) -> None:
    """An encoder-decoder given no mask, the second prompt right-padded with 3 pads:
    generate() infers no mask for it. BART's encoder builds none, so the pads are
    attended as any token; T5Gemma's builds its mask from pad_token_id (the test's own
    encoder runs: the other tokens' outputs change, or not, when the pads are masked).
    The notice is the same for both: attended unless the model masks them itself."""
    model = build()
    ids = padded_ids(pad, left=False)
    gen = ls.profile_generate(model, ids, max_new_tokens=2)
    assert gen.notices == [unmasked(pad)]
    keep = ids != pad
    with torch.no_grad():
        plain = model.get_encoder()(input_ids=ids).last_hidden_state
        masked = model.get_encoder()(input_ids=ids, attention_mask=keep.long()).last_hidden_state
    assert torch.equal(plain[keep], masked[keep]) is masks_itself
