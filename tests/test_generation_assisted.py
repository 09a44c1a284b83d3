"""``ls.profile_generate`` with prompt-lookup and assisted decoding: ``generate()`` feeds
the model a draft of several tokens and then ``crop()``s its cache back to the tokens it
accepted; the replay crops its copy at the same points (``generation.calllog``), so the
cache before every call, the KV bytes after it and at the end are ``generate()``'s.

The models are the 2-layer Llama of ``docs/generate.md`` (hidden 64, 4 query heads and 2
KV heads of 16, MLP 128, vocab 128) made to predict one token always: its final norm
zeroed, its LM head a bias alone, so that which draft tokens are accepted follows by hand.
Figures used below, per row and token: weights 73,728 MACs (q 64x64, k and v 64x32, o
64x64, gate, up, down 64x128: 36,864 per layer) plus 8,192 per logit kept (the LM head
64x128); attention 2 layers x 4 heads x (16 for q.k + 16 for p.v) = 256 MACs per query
and key it attends; the KV cache 2 layers x K and V x 2 KV heads x 16 x 4 B = 512 B per
token.
"""

from __future__ import annotations

import copy
import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

import layerscope as ls
from helpers.models import tiny_gpt2, tiny_llama
from layerscope.errors import InvalidInputError
from layerscope.generation.calllog import recording

transformers = pytest.importorskip("transformers")

WEIGHTS, LOGIT, PAIR, TOKEN_BYTES = 73_728, 8_192, 256, 512


def predicting(token: int) -> Any:
    """The Llama predicting ``token`` whatever it is fed: its final norm zeroed, its LM
    head a bias of 30 on ``token`` (the same MACs as the LM head it replaces)."""
    model = tiny_llama()
    head = nn.Linear(64, 128)
    with torch.no_grad():
        model.model.norm.weight.zero_()
        head.weight.zero_()
        head.bias.zero_()
        head.bias[token] = 30.0
    model.lm_head = head
    return model


def macs(cache: int, fed: int, kept: int, causal: bool = False) -> int:
    """A call's MACs: ``fed`` tokens on a cache of ``cache``, ``kept`` logits; attention
    over the full rectangle the 4-D mask asks for, or the causal triangle of a prefill
    without a mask (SDPA's is_causal)."""
    pairs = fed * (fed + 1) // 2 if causal else fed * (cache + fed)
    return fed * WEIGHTS + kept * LOGIT + pairs * PAIR


def generate_rows(model: Any, ids: torch.Tensor, new: int, **options: Any) -> list[Any]:
    """generate()'s own calls as ``ls.Profiler(stages=True)`` takes them, their stage
    left out (it names a call fed a draft "extend", the replay "decode")."""
    with ls.Profiler(model, stages=True) as p, torch.random.fork_rng():
        model.generate(ids, max_new_tokens=new, min_new_tokens=new, **options)
    return [dataclasses.replace(r, stage="decode") for r in p.calls[1:]]


def test_prompt_lookup_crops_the_cache_as_generate_does() -> None:
    """The model always predicts 0; prompt [0, 0, 7, 8], drafts of up to 3 tokens looked
    up in the sequence (its last 2-gram, else 1-gram, found earlier), 6 new tokens:

    1. no earlier match: the prefill feeds the 4 prompt tokens (logits kept: 1); cache 4.
    2. [0, 0, 7, 8, 0]: the 1-gram 0 first at 0, draft [0, 7, 8]: 1 + 3 fed on 4 (8);
       0 accepted, 7 not: 2 new tokens, crop 2: 6.
    3. [..., 0, 0]: the 2-gram (0, 0) first at 0, draft [7, 8, 0]: 4 fed on 6 (10);
       none accepted: 1 new token, crop 3: 7.
    4. the same: 4 fed on 7 (11), crop 3: 8.
    5. 9 tokens of max_length 10: no draft; 1 fed on 8: 9 = 4 + 6 - 1 at the end.

    Before the crops were replayed, the replay's cache grew by every draft: 0, 4, 8, 12,
    16 tokens before the calls and 17 at the end (8,704 B where generate() held 4,608)."""
    model = predicting(0)
    ids = torch.tensor([[0, 0, 7, 8]])
    gen = ls.profile_generate(model, ids, max_new_tokens=6, prompt_lookup_num_tokens=3)
    steps = [(0, 4), (4, 4), (6, 4), (7, 4), (8, 1)]
    assert [(r.cache_tokens, r.tokens) for r in gen.calls] == steps
    # KV after each call: 4, 8, 10, 11, 9 tokens x 512 B
    assert [r.kv_bytes for r in gen.calls] == [2_048, 4_096, 5_120, 5_632, 4_608]
    assert [r.macs for r in gen.calls] == [
        macs(0, 4, 1, causal=True),  # 294,912 + 8,192 + 10 x 256 = 305,664
        macs(4, 4, 4),  # 294,912 + 32,768 + 4 x 8 x 256 = 335,872
        macs(6, 4, 4),  # 327,680 + 4 x 10 x 256 = 337,920
        macs(7, 4, 4),  # 327,680 + 4 x 11 x 256 = 338,944
        macs(8, 1, 1),  # 81,920 + 9 x 256 = 84,224
    ]
    assert [r.macs for r in gen.calls] == [305_664, 335_872, 337_920, 338_944, 84_224]
    assert gen.kv_cache["bytes_after_prefill"] == 4 * TOKEN_BYTES == 2_048
    assert gen.kv_cache["tokens_final"] == 4 + 6 - 1
    assert gen.kv_cache["bytes_final"] == 9 * TOKEN_BYTES == 4_608
    assert gen.notices == [
        "generate() cropped its cache 3 times, dropping 8 draft tokens it did not accept "
        "(assisted or prompt-lookup decoding), and the replay crops its copy alike: a "
        "call's KV after holds the draft it was fed, the next call's cache before only "
        "the tokens kept"
    ]  # 2 + 3 + 3 tokens
    assert gen.calls[1:] == generate_rows(model, ids, 6, prompt_lookup_num_tokens=3)


def test_assisted_decoding_crops_the_cache_as_generate_does() -> None:
    """The model always predicts 9, its assistant 7 (3 tokens a draft, a constant
    schedule, never more than max_length 6 + 5 = 11 less the tokens so far less 1):
    every draft is rejected, so each call keeps 1 new token and crops its draft.

    1. prompt 6 + draft 3: 9 fed on 0 (logits kept: 4); crop 3: 6.
    2. 7 tokens, draft min(3, 11 - 7 - 1) = 3: 4 fed on 6 (10); crop 3: 7.
    3. draft min(3, 2) = 2: 3 fed on 7 (10); crop 2: 8.
    4. draft 1: 2 fed on 8 (10); crop 1: 9.
    5. no room for a draft: 1 fed on 9: 10 = 6 + 5 - 1 at the end."""
    assistant = predicting(7)
    assistant.generation_config.num_assistant_tokens = 3
    assistant.generation_config.num_assistant_tokens_schedule = "constant"
    model = predicting(9)
    ids = torch.tensor([[20, 21, 22, 23, 24, 25]])
    gen = ls.profile_generate(model, ids, max_new_tokens=5, assistant_model=assistant)
    steps = [(0, 9), (6, 4), (7, 3), (8, 2), (9, 1)]
    assert [(r.cache_tokens, r.tokens) for r in gen.calls] == steps
    # KV after each call: 9, then 10 tokens x 512 B (each draft is cropped after it)
    assert [r.kv_bytes for r in gen.calls] == [4_608] + [5_120] * 4
    assert [r.macs for r in gen.calls] == [
        macs(0, 9, 4, causal=True),  # 663,552 + 32,768 + 45 x 256 = 707,840
        macs(6, 4, 4),  # 327,680 + 4 x 10 x 256 = 337,920
        macs(7, 3, 3),  # 245,760 + 3 x 10 x 256 = 253,440
        macs(8, 2, 2),  # 163,840 + 2 x 10 x 256 = 168,960
        macs(9, 1, 1),  # 81,920 + 10 x 256 = 84,480
    ]
    assert [r.macs for r in gen.calls] == [707_840, 337_920, 253_440, 168_960, 84_480]
    assert gen.kv_cache["bytes_final"] == 10 * TOKEN_BYTES == 5_120
    assert gen.notices == [
        "assisted decoding: the assistant model's calls (LlamaForCausalLM: its drafts) "
        "are not in this generation; the model's own calls are, each feeding the draft "
        "it verifies",
        "generate() cropped its cache 4 times, dropping 9 draft tokens it did not accept "
        "(assisted or prompt-lookup decoding), and the replay crops its copy alike: a "
        "call's KV after holds the draft it was fed, the next call's cache before only "
        "the tokens kept",
    ]  # 3 + 3 + 2 + 1 tokens
    assert gen.calls[1:] == generate_rows(model, ids, 5, assistant_model=assistant)


def test_a_gpt2_prompt_lookup_is_generates_own() -> None:
    """GPT-2 (random weights, a repeated prompt for the lookup to find): every row, KV
    bytes and peaks included, is the one the Profiler takes of generate()'s own call,
    and the cache at the end holds prompt + new - 1 = 18 + 8 - 1 tokens."""
    model = tiny_gpt2()
    ids = torch.tensor([[5, 9, 13, 17, 21, 25] * 3])
    gen = ls.profile_generate(model, ids, max_new_tokens=8, prompt_lookup_num_tokens=3)
    assert gen.calls[1:] == generate_rows(model, ids, 8, prompt_lookup_num_tokens=3)
    assert gen.kv_cache["tokens_final"] == 25


def test_a_cache_change_the_replay_does_not_repeat_is_refused() -> None:
    """A generate() that shortens its cache without crop() (2 of the prompt's 8 tokens
    dropped from every layer): the replay's copy holds 8 tokens before the second call
    where generate()'s held 6 (x 512 B: 3,072 B against 4,096), and it stops there."""
    model = tiny_llama()

    def generate(input_ids: torch.Tensor, **kwargs: Any) -> Any:
        cache = transformers.DynamicCache(config=model.config)
        out = model(input_ids, cache=cache, use_cache=True)
        for layer in cache.layers:
            layer.keys, layer.values = layer.keys[..., :-2, :], layer.values[..., :-2, :]
        token = out.logits[:, -1:].argmax(-1)
        model(token, cache=cache, use_cache=True)
        return SimpleNamespace(sequences=torch.cat([input_ids, token, token], 1))

    model.generate = generate
    with pytest.raises(InvalidInputError) as caught:
        ls.profile_generate(model, torch.randint(0, 128, (1, 8)), max_new_tokens=2)
    assert str(caught.value) == (
        "profile_generate cannot replay this generate(): before its call 2, generate()'s "
        "cache had seen 6 tokens and held 3072 B ([6, 6] tokens per layer), the replay's "
        "8 tokens and 4096 B ([8, 8]). generate() changed its cache between calls in a "
        "way the replay does not repeat (it repeats crop(), as assisted and prompt-lookup "
        "decoding use it), so the replay's figures would not be generate()'s"
    )


def test_a_model_drafting_for_itself_is_refused() -> None:
    """Early exit drafts with the model itself, its config cut to fewer layers around
    each draft call; the model as its own assistant records its drafts among its calls:
    both refused before generate() runs."""
    model = tiny_llama()
    ids = torch.randint(0, 128, (1, 8))
    with pytest.raises(InvalidInputError, match=r"^assistant_early_exit must be None for "):
        ls.profile_generate(model, ids, max_new_tokens=2, assistant_early_exit=1)
    with pytest.raises(InvalidInputError, match="its own assistant_model"):
        ls.profile_generate(model, ids, max_new_tokens=2, assistant_model=model)


def test_the_crop_watch_is_the_blocks_alone() -> None:
    """The ``crop`` bound on a cache given to the model notes the crops of that cache
    alone (a copy of it crops unnoted), with the calls made before it, and is taken off
    when the block ends."""
    model = tiny_llama()
    cache = transformers.DynamicCache(config=model.config)
    with recording(model) as log, torch.no_grad():
        model(torch.randint(0, 128, (1, 5)), cache=cache, use_cache=True)
        copy.deepcopy(cache).crop(-1)
        cache.crop(-2)
    assert [(c.calls, c.index, c.args) for c in log.crops] == [(1, 0, (-2,))]
    assert cache.get_seq_length() == 3
    assert "crop" not in vars(cache)
    assert log.final == {0: (3, (3, 3), (768, 768), (), ())}  # 3 tokens x 256 B per layer
