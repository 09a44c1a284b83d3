"""``ls.Profiler(model, stages=...)``: one Profile per stage of any decoding loop, on
small transformers models with random weights, the figures derived by hand or against
``ls.profile_generate`` on the same calls."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import torch

import layerscope as ls
from helpers.models import tiny_bart as bart
from helpers.models import tiny_gpt2 as gpt2
from helpers.models import tiny_llama as llama
from layerscope.errors import InvalidInputError, LayerscopeError

transformers = pytest.importorskip("transformers")

#: the small Llama: hidden 64, 4 query heads and 2 KV heads of 16, MLP 128, 2 layers
D, HEADS, KV_HEADS, HEAD, MLP, LAYERS, VOCAB = 64, 4, 2, 16, 128, 2, 128
#: weight MACs per token: q, k, v, o, gate, up, down per layer, and the LM head:
#: 2 x (64x64 + 2 x 64x32 + 64x64 + 3 x 64x128) + 64x128 = 81,920
LLAMA_WEIGHT_MACS = LAYERS * (D * D + 2 * D * KV_HEADS * HEAD + D * D + 3 * D * MLP) + D * VOCAB
#: the KV cache per token and row: keys and values, 2 KV heads of 16 floats, 2 layers
KV_PER_TOKEN = LAYERS * 2 * KV_HEADS * HEAD * 4  # 512 B


def cache_keyword(model: Any) -> str:
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def output_cache(out: Any) -> Any:
    return out["cache"] if "cache" in out else out["past_key_values"]


def greedy(model: Any, ids: torch.Tensor, new: int) -> torch.Tensor:
    """A hand-written greedy loop: the prompt (the model makes the cache), then one token
    per row per call on that cache; ``new`` tokens, the last one not fed."""
    name = cache_keyword(model)
    with torch.no_grad():
        out = model(ids, use_cache=True, logits_to_keep=1)
        cache = output_cache(out)
        tokens = [out.logits[:, -1].argmax(-1, keepdim=True)]
        for _ in range(new - 1):
            out = model(tokens[-1], use_cache=True, logits_to_keep=1, **{name: cache})
            tokens.append(out.logits[:, -1].argmax(-1, keepdim=True))
    return torch.cat(tokens, dim=1)


def instance_keys(model: torch.nn.Module) -> dict[str, set[str]]:
    return {name: set(m.__dict__) for name, m in model.named_modules()}


def test_a_greedy_loop_by_hand() -> None:
    """Batch 2, a 16-token prompt, 5 new tokens: a prefill and 4 decode calls. A decode
    call on a cache of L tokens costs, per row, the weight MACs plus, per layer, q.k and
    p.v over L + 1 positions for 4 heads of 16. The rows are profile_generate's rows
    for the same calls; the tokens are those of the loop without the Profiler."""
    model = llama()
    ids = torch.randint(0, VOCAB, (2, 16))
    before = instance_keys(model)
    plain = greedy(model, ids, 5)
    with ls.Profiler(model, stages=True) as p:
        got = greedy(model, ids, 5)
    assert torch.equal(got, plain)
    assert instance_keys(model) == before  # no forward (nor anything) left behind
    assert list(p.stages) == ["prefill", "decode"]
    rows = p.calls
    assert [r.stage for r in rows] == ["prefill"] + ["decode"] * 4
    assert [r.cache_tokens for r in rows] == [0, 16, 17, 18, 19]
    assert [r.tokens for r in rows] == [16, 1, 1, 1, 1]
    for r in rows[1:]:
        attention = LAYERS * 2 * HEADS * HEAD * (r.cache_tokens + 1)
        assert r.macs == 2 * (LLAMA_WEIGHT_MACS + attention)
    assert rows[1].macs == 172_544  # 2 x (81,920 + 2 x 2 x 4 x 16 x 17)
    # the cache after each call: 16, 17, ... 20 tokens of 512 B for 2 rows
    assert [r.kv_bytes for r in rows] == [KV_PER_TOKEN * 2 * t for t in (16, 17, 18, 19, 20)]
    # profile_generate replays generate()'s calls, which also pass position ids (rotary
    # tables per row) and a cache made before the prefill: the same stages, lengths,
    # MACs and cache bytes (FLOPs and peaks differ by those ops)
    gen = ls.profile_generate(model, ids, max_new_tokens=5)

    def fields(r: Any) -> tuple[Any, ...]:
        return (r.stage, r.cache_tokens, r.tokens, r.macs, r.kv_bytes)

    assert [fields(r) for r in rows] == [fields(r) for r in gen.calls]
    assert p.generation.kv_cache == gen.kv_cache
    assert p.generation.kv_cache["bytes_final"] == 20_480  # 512 B x 20 tokens x 2 rows
    options = p.generation.options
    assert (options["prompt_tokens"], options["new_tokens"], options["rows"]) == (16, 5, 2)
    decode = p.stages["decode"].root
    assert decode.calls == 4
    assert decode.metrics["macs"] == sum(r.macs for r in rows[1:])
    # p.profile: every call together
    assert p.profile.root.calls == 5
    assert p.profile.root.metrics["macs"] == sum(r.macs for r in rows)


def test_generate_inside_the_profiler_against_profile_generate(tmp_path: Path) -> None:
    """``model.generate()`` in the block: the calls profile_generate replays, with the
    same stages, cache lengths, MACs and KV cache. (generate() also passes position
    ids, which the replay leaves to the model: a few elementwise FLOPs apart.)"""
    model = llama()
    ids = torch.randint(0, VOCAB, (2, 16))
    mask = torch.ones_like(ids)
    with ls.Profiler(model, stages=True) as p:
        out = model.generate(ids, attention_mask=mask, max_new_tokens=5, min_new_tokens=5)
    assert out.shape == (2, 21)
    gen = ls.profile_generate(model, ids, max_new_tokens=5, attention_mask=mask)
    keys = ("stage", "cache_tokens", "tokens", "macs", "kv_bytes")
    assert [[r.value(k) for k in keys] for r in p.calls] == [
        [r.value(k) for k in keys] for r in gen.calls
    ]
    for stage in ("prefill", "decode"):
        assert p.stages[stage].root.metrics["macs"] == gen.stages[stage].root.metrics["macs"]
    assert p.generation.kv_cache == gen.kv_cache
    # a Generation like any other: saved, read back, rendered
    p.generation.save(tmp_path / "g.json")
    loaded = ls.load_generation(tmp_path / "g.json")
    assert loaded.calls == p.calls
    assert loaded.render(width=80) == p.generation.render(width=80)
    assert "2 prompts of 16 tokens, 5 new tokens, 2 rows" in loaded.render(width=80)


def test_an_encoder_decoder_runs_its_encoder_in_the_prefill() -> None:
    """BART's generate() runs the encoder on its own, then the decoder from its start
    token: both calls are the prefill, whose MACs are profile_generate's prefill (one
    call of the whole model); the cross-attention cache holds the 10 encoder positions
    per layer."""
    model = bart()
    ids = torch.randint(3, 64, (1, 10))
    before = instance_keys(model)
    with ls.Profiler(model, stages=True) as p:
        model.generate(ids, max_new_tokens=3, min_new_tokens=3)
    assert instance_keys(model) == before  # the encoder's forward put back too
    assert [(r.stage, r.cache_tokens, r.tokens) for r in p.calls] == [
        ("prefill", 0, 10),  # the encoder, on the prompt
        ("prefill", 0, 1),  # the decoder's start token
        ("decode", 1, 1),
        ("decode", 2, 1),
    ]
    gen = ls.profile_generate(model, ids, max_new_tokens=3)
    prefill = p.stages["prefill"]
    assert prefill.root.metrics["macs"] == gen.stages["prefill"].root.metrics["macs"]
    assert prefill.node("model.encoder").calls == 1 and prefill.root.calls == 1
    assert p.calls[2:] == gen.calls[1:]
    kv = p.generation.kv_cache
    assert kv == gen.kv_cache
    assert kv["cross_bytes"] == 2 * 2 * 32 * 10 * 4  # 2 layers, k and v, 32 wide, 10 tokens
    assert p.generation.options["encoder_decoder"] is True
    # the summary counts the stage's calls: the encoder's and the decoder's first
    assert "prefill: 2 calls," in p.generation.render(width=100)
    assert "prefill: 1 call," in gen.render(width=100)  # the replay's one prefill call


def test_without_a_cache_every_call_is_full() -> None:
    """``use_cache=False``: each call a forward over the sequence so far (8, 9, 10
    tokens), as profile_generate replays it."""
    model = gpt2()
    ids = torch.randint(0, 64, (1, 8))
    with ls.Profiler(model, stages=True) as p, torch.no_grad():
        seq = ids
        for _ in range(3):
            positions = torch.arange(seq.shape[1])[None]  # as generate() passes them
            logits = model(seq, use_cache=False, logits_to_keep=1, position_ids=positions).logits
            seq = torch.cat([seq, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert list(p.stages) == ["full"]
    gen = ls.profile_generate(model, ids, max_new_tokens=3, use_cache=False)
    assert p.calls == gen.calls
    assert [r.tokens for r in p.calls] == [8, 9, 10]
    assert p.generation.kv_cache == {} and p.generation.options["new_tokens"] == 3
    assert p.generation.options["use_cache"] is False


def test_a_chunked_prefill_extends_and_a_rule_of_ones_own() -> None:
    """The default rule: 8 prompt tokens into an empty cache (prefill), 8 more on it
    (extend), then one (decode). A rule of one's own names stages from the call's
    arguments, and can wrap the default."""
    model = llama()
    ids = torch.randint(0, VOCAB, (1, 17))
    name = cache_keyword(model)

    def chunks() -> None:
        cache = transformers.DynamicCache(config=model.config)
        with torch.no_grad():
            for part in (ids[:, :8], ids[:, 8:16], ids[:, 16:]):
                model(part, use_cache=True, **{name: cache})

    with ls.Profiler(model, stages=True) as p:
        chunks()
    assert [(r.stage, r.cache_tokens, r.tokens) for r in p.calls] == [
        ("prefill", 0, 8),
        ("extend", 8, 8),
        ("decode", 16, 1),
    ]
    seen: list[tuple[int, list[str]]] = []

    def rule(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        seen.append((len(args), sorted(kwargs)))
        stage = ls.cache_stage(args, kwargs, model)
        return "chunk" if stage in ("prefill", "extend") else stage

    with ls.Profiler(model, stages=rule) as q:
        chunks()
    assert list(q.stages) == ["chunk", "decode"]
    assert q.stages["chunk"].root.calls == 2
    assert seen == [(1, [name, "use_cache"])] * 3  # the call's own arguments
    # without the model, the first positional argument is taken as the input ids
    assert ls.cache_stage((ids[:, :1],), {name: transformers.DynamicCache()}) == "prefill"


def test_the_loop_runs_as_without_the_profiler() -> None:
    """The model's own forward hooks run once per call, a forward of the instance's own
    is kept and put back, an error in the loop goes through with the forward restored,
    calls from another thread run unanalysed, and a bad rule's answer is refused."""
    model = gpt2()
    ids = torch.randint(0, 64, (1, 6))
    hooked: list[int] = []
    handle = model.register_forward_pre_hook(lambda m, a: hooked.append(1))
    own = model.forward  # a forward of the instance's own, as accelerate's hooks set
    model.forward = own
    try:
        with ls.Profiler(model, stages=True) as p:
            greedy(model, ids, 3)
        assert len(hooked) == 3  # once per call of the loop, not again for the analysis
        assert model.__dict__["forward"] is own
        other = threading.Thread(target=lambda: model(ids))
        with ls.Profiler(model, stages=True) as p, torch.no_grad():
            model(ids)
            other.start()
            other.join()
        assert len(p.calls) == 1  # the other thread's call ran, unanalysed
    finally:
        handle.remove()
        del model.forward
    before = instance_keys(model)
    with pytest.raises(IndexError), ls.Profiler(model, stages=True) as p:
        model(torch.tensor([[64]]))  # past the vocabulary
    assert instance_keys(model) == before
    with pytest.raises(InvalidInputError, match="must return a stage's name"):  # noqa: SIM117
        with ls.Profiler(model, stages=lambda a, k: None):  # type: ignore[arg-type,return-value]
            model(ids)
    assert instance_keys(model) == before


def test_refusals() -> None:
    model = gpt2()
    with pytest.raises(InvalidInputError, match=r"stages must be True .* or a callable"):
        ls.Profiler(model, stages="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=r"ls\.profile_generate\(\.\.\., timing=True\)"):
        ls.Profiler(model, stages=True, timing=True)
    with pytest.raises(InvalidInputError, match="schedule="):
        ls.Profiler(model, stages=True, schedule=ls.schedule(active=1))
    with ls.Profiler(model) as plain:
        pass
    with pytest.raises(LayerscopeError, match="needs a Profiler with stages"):
        plain.stages  # noqa: B018
    p = ls.Profiler(model, stages=True)
    with pytest.raises(LayerscopeError, match="after the `with` block"):
        p.calls  # noqa: B018
    with p:
        pass  # no call: a profile of the structure, no stages
    assert p.stages == {} and p.calls == [] and p.profile.root.calls == 0


@pytest.mark.cuda
def test_a_greedy_loop_on_cuda() -> None:
    """The same loop on a GPU: the loop's tokens as without the Profiler, and each decode
    call's MACs and KV bytes as on the CPU (decode attends one query over the cache,
    whatever the kernel; the prefill's attention kernel differs, test_generate.py)."""
    ids = torch.randint(0, VOCAB, (2, 16))
    with ls.Profiler(llama(), stages=True) as cpu:
        greedy(cpu.model, ids, 5)
    model = llama().cuda()
    plain = greedy(model, ids.cuda(), 5)
    with ls.Profiler(model, stages=True) as gpu:
        tokens = greedy(model, ids.cuda(), 5)
    assert torch.equal(tokens, plain)
    keys = ("stage", "cache_tokens", "macs", "kv_bytes")
    assert [[r[k] for k in keys] for r in gpu.calls[1:]] == [
        [r[k] for k in keys] for r in cpu.calls[1:]
    ]
    assert [r.cache_tokens for r in gpu.calls] == [0, 16, 17, 18, 19]
