"""``ls.profile_generate`` replays the calls ``model.generate()`` makes, with the
arguments it passes them (``generation.calllog``), and a generation read back is the
one saved.

The reference for every call is ``generate()`` itself: the same ``generate()`` run inside
``ls.Profiler(model, stages=True)``, which analyses each call ``generate()`` makes as it
makes it, and the arguments a forward pre-hook of the test's own sees.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import layerscope as ls
from helpers.models import tiny_bart
from helpers.models import tiny_gpt2 as gpt2
from helpers.models import tiny_llama as llama
from layerscope.generation.calllog import CallLog, recording

transformers = pytest.importorskip("transformers")

#: the small decoders: hidden 64, 4 query heads and 2 KV heads of 16, MLP 96, 2 layers,
#: vocab 128 (Qwen2, Mistral with a window of 6, Gemma3 with a sliding and a full layer)
COMMON = dict(
    vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2,
)  # fmt: skip


def qwen2() -> Any:
    torch.manual_seed(0)
    config = transformers.Qwen2Config(**COMMON, attn_implementation="sdpa")
    return transformers.Qwen2ForCausalLM(config).eval()


def mistral() -> Any:
    torch.manual_seed(0)
    return transformers.MistralForCausalLM(
        transformers.MistralConfig(**COMMON, sliding_window=6)
    ).eval()


def gemma3() -> Any:
    torch.manual_seed(0)
    config = transformers.Gemma3TextConfig(
        **COMMON, head_dim=16, sliding_window=6,
        layer_types=["sliding_attention", "full_attention"],
    )  # fmt: skip
    return transformers.Gemma3ForCausalLM(config).eval()


def generate_calls(model: Any, ids: torch.Tensor, mask: torch.Tensor, **options: Any) -> Any:
    """``model.generate()`` in a staged Profiler: a row per call generate() makes."""
    with ls.Profiler(model, stages=True) as p, torch.random.fork_rng():
        model.generate(ids, attention_mask=mask, max_new_tokens=3, min_new_tokens=3, **options)
    return p


def test_the_audits_qwen2_call_by_call() -> None:
    """Qwen2, batch 2, an 8-token prompt, 3 new tokens: generate() passes position ids
    of shape (2, L) and, the mask being all ones, no mask. The replay's FLOPs per call are
    those an independent counter (docs/flops.md's formulas) measured in generate()'s own
    calls, 2,089,200, 294,862 and 295,982 (the replay without position ids counted
    2,088,649, 294,810 and 295,932), and every row is the one the Profiler takes of
    generate()'s calls, bytes and peaks included."""
    model = qwen2()
    ids = torch.randint(1, 128, (2, 8))
    mask = torch.ones_like(ids)
    gen = ls.profile_generate(model, ids, max_new_tokens=3, attention_mask=mask)
    assert [r.flops for r in gen.calls] == [2_089_200, 294_862, 295_982]
    assert gen.calls == generate_calls(model, ids, mask).calls
    # the prefill alone, as generate() calls it: position ids (2, 8), an empty cache
    alone = ls.profile(model, kwargs=dict(
        input_ids=ids, cache=transformers.DynamicCache(config=model.config),
        position_ids=torch.arange(8).expand(2, 8), logits_to_keep=1, use_cache=True,
    ))  # fmt: skip
    assert alone.root.metrics["flops"] == 2_089_200


def _describe(value: Any) -> Any:
    """An argument as compared: a tensor's shape, dtype and values, a cache's type."""
    if isinstance(value, torch.Tensor):
        return (tuple(value.shape), value.dtype, value.tolist())
    if isinstance(value, dict):
        return {k: _describe(v) for k, v in value.items()}
    if isinstance(value, transformers.cache_utils.Cache):
        return type(value).__name__
    return value


def test_the_replay_passes_what_generate_passed() -> None:
    """A hook of the test's own on the model sees generate()'s 3 calls, then the replay's
    3: the same keywords, the same tensors (a left-padded row: position ids from the mask,
    the mask grown by a column per call), the same kind of cache."""
    model = llama(pad_token_id=0)
    ids = torch.randint(1, 128, (2, 6))
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1] * 6])
    seen: list[dict[str, Any]] = []

    def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        seen.append({"args": _describe(list(args)), **{k: _describe(v) for k, v in kwargs.items()}})

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        ls.profile_generate(model, ids, max_new_tokens=3, attention_mask=mask)
    finally:
        handle.remove()
    assert len(seen) == 6
    assert seen[3:] == seen[:3]
    keywords = ["attention_mask", "cache", "input_ids", "logits_to_keep", "position_ids",
                "return_dict", "use_cache"]  # fmt: skip
    assert sorted(seen[0]) == ["args", *keywords]
    assert seen[0]["position_ids"][2] == [[0, 0, 0, 1, 2, 3], [0, 1, 2, 3, 4, 5]]
    assert seen[2]["position_ids"][2] == [[5], [7]]
    assert seen[2]["attention_mask"][0] == (2, 8)


@pytest.mark.parametrize(
    ("build", "options", "padded"),
    [
        (llama, {}, True),
        (mistral, {}, False),
        (mistral, {}, True),
        (gemma3, {}, False),
        (gemma3, {"cache_implementation": "static"}, True),
        (qwen2, {"num_beams": 2}, True),
        (qwen2, {"do_sample": True, "num_return_sequences": 2}, False),
        (gpt2, {"use_cache": False}, True),
    ],
    ids=["llama-padded", "mistral", "mistral-padded", "gemma3", "gemma3-static-padded",
         "qwen2-beams", "qwen2-samples", "gpt2-no-cache"],
)  # fmt: skip
def test_every_row_is_generates_own(build: Any, options: dict[str, Any], padded: bool) -> None:
    """Llama, Mistral (a sliding window), Gemma3 (a sliding and a full layer, a static cache),
    beams, samples, no cache: every row (stage, cache, tokens, MACs, FLOPs, bytes, peak,
    KV bytes) as the Profiler takes it of generate()'s own calls, and the KV cache."""
    model = build()
    vocab = model.config.vocab_size
    ids = torch.randint(1, vocab, (2, 8))
    mask = torch.ones_like(ids)
    if padded:
        mask[0, :3] = 0
    gen = ls.profile_generate(model, ids, max_new_tokens=3, attention_mask=mask, **options)
    p = generate_calls(model, ids, mask, **options)
    assert gen.calls == p.calls
    assert gen.kv_cache == p.generation.kv_cache


def test_a_static_cache_is_as_long_as_generates() -> None:
    """``cache_implementation="static"``: generate() makes its StaticCache max_length - 1
    = 16 + 5 - 1 = 20 tokens long (its last token is never fed), and so does the replay:
    2 layers x K and V x 2 KV heads x 16 x 4 B = 512 B per token and row, 20 x 2 rows x
    512 = 20,480 B from the prefill on; every decode step attends over the 20 positions:
    2 rows x (81,920 weight MACs + 2 layers x 2 x 4 heads x 16 x 20)."""
    model = llama()
    ids = torch.randint(0, 128, (2, 16))
    gen = ls.profile_generate(model, ids, max_new_tokens=5, cache_implementation="static")
    assert gen.kv_cache["bytes_after_prefill"] == gen.kv_cache["bytes_final"] == 20_480
    assert [r.macs for r in gen.calls[1:]] == [2 * (81_920 + 2 * 2 * 4 * 16 * 20)] * 4
    seen: list[int] = []

    def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        seen.append(int(kwargs["cache"].get_max_length()))

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        model.generate(ids, max_new_tokens=5, min_new_tokens=5, cache_implementation="static")
    finally:
        handle.remove()
    assert seen == [20] * 5


def test_an_encoder_decoder_runs_its_encoder_once() -> None:
    """BART: generate() runs the encoder once and passes its output to every decoder
    call, with a cache or without. The replay's first call runs the encoder and the first
    decoder step (MACs: the Profiler's encoder row and first decoder row together); every
    later row is generate()'s own, so without a cache the later full calls feed 2 and 3
    decoder tokens and run no encoder."""
    model = tiny_bart()
    ids = torch.randint(3, 64, (1, 10))
    mask = torch.ones_like(ids)
    for options in ({}, {"use_cache": False}):
        gen = ls.profile_generate(model, ids, max_new_tokens=3, attention_mask=mask, **options)
        p = generate_calls(model, ids, mask, **options)
        assert gen.calls[0].macs == p.calls[0].macs + p.calls[1].macs
        assert gen.calls[1:] == p.calls[2:]
    assert [(r.stage, r.tokens) for r in gen.calls] == [("full", 10), ("full", 2), ("full", 3)]
    assert gen.stages["full"].node("model.encoder").calls == 1


def test_a_growing_argument_is_kept_as_its_tails() -> None:
    """A left-padded run's mask grows by a column per call: the log keeps the first
    whole and then each new column; the calls rebuilt are the tensors generate() gave."""
    model = llama(pad_token_id=0)
    ids = torch.randint(1, 128, (2, 6))
    mask = torch.tensor([[0, 1, 1, 1, 1, 1], [1] * 6])
    given: list[torch.Tensor] = []

    def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        given.append(kwargs["attention_mask"].clone())

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        with recording(model) as log, torch.no_grad():
            model.generate(ids, attention_mask=mask, max_new_tokens=4, min_new_tokens=4)
    finally:
        handle.remove()
    assert isinstance(log, CallLog) and len(log.calls) == 4
    kept = [kwargs["attention_mask"] for _, kwargs in log.calls]
    assert isinstance(kept[0], torch.Tensor) and kept[0].shape == (2, 6)
    assert [tuple(k.tail.shape) for k in kept[1:]] == [(2, 1)] * 3
    rebuilt = [kwargs["attention_mask"] for _, kwargs in log.replayed()]
    assert all(torch.equal(a, b) for a, b in zip(rebuilt, given, strict=True))
    assert not model._forward_pre_hooks  # the hook is gone


def test_a_generation_read_back_is_the_one_saved(tmp_path: Path) -> None:
    """Saved and read back, each stage equals the original: the ``generation`` section
    lives once, on the Generation, not also in the first stage's ``extra``; the prefill
    saved alone writes the same bytes from either, and the generation saved again writes
    the file it was read from."""
    model = qwen2()
    ids = torch.randint(1, 128, (2, 8))
    gen = ls.profile_generate(model, ids, max_new_tokens=3, attention_mask=torch.ones_like(ids))
    gen.save(tmp_path / "gen.json")
    loaded = ls.load_generation(tmp_path / "gen.json")
    assert loaded.stages == gen.stages
    assert loaded.stages["prefill"].extra == {} == gen.stages["prefill"].extra
    gen.stages["prefill"].save(tmp_path / "a.json")
    loaded.stages["prefill"].save(tmp_path / "b.json")
    a, b = (tmp_path / "a.json").read_bytes(), (tmp_path / "b.json").read_bytes()
    assert a == b and "generation" not in json.loads(a)
    loaded.save(tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == (tmp_path / "gen.json").read_bytes()
    # the file: the prefill's document plus the section, the section written once
    doc = json.loads((tmp_path / "gen.json").read_text())
    assert {k: v for k, v in doc.items() if k != "generation"} == json.loads(a)
    assert (tmp_path / "gen.json").read_text().count('"generation"') == 1
    # read as a plain profile, the section is an unknown top-level key, kept in extra
    assert ls.load(tmp_path / "gen.json").extra["generation"] == doc["generation"]


def test_a_config_without_a_cache_replays_full_forwards() -> None:
    """A GPT-2 whose config says ``use_cache=False``: generate() calls it without a cache
    (the keyword it passes), so the replay is full forwards over 8, 9, 10, 11 tokens, no
    KV cache, as a Profiler around generate() has them."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=128, n_positions=64, pad_token_id=0,
        bos_token_id=1, eos_token_id=2, use_cache=False,
    )  # fmt: skip
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(3, 128, (2, 8))
    gen = ls.profile_generate(model, ids, max_new_tokens=4)
    assert list(gen.stages) == ["full"] and gen.kv_cache == {}
    assert gen.options["use_cache"] is False
    assert [r.tokens for r in gen.calls] == [8, 9, 10, 11]
    with ls.Profiler(model, stages=True) as p:
        model.generate(ids, max_new_tokens=4, do_sample=False)
    assert p.calls == gen.calls
