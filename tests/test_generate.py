"""``ls.profile_generate``: stages, decode steps and the KV cache of Hugging Face
``generate()`` on small models with random weights, every figure derived by hand."""

from __future__ import annotations

import dataclasses
import json
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import layerscope as ls
from helpers.models import tiny_bart
from helpers.models import tiny_gpt2 as gpt2
from helpers.models import tiny_llama as llama
from layerscope.errors import InvalidInputError

transformers = pytest.importorskip("transformers")

#: the small Llama: hidden 64, 4 query heads and 2 KV heads of 16, MLP 128, 2 layers
D, HEADS, KV_HEADS, HEAD, MLP, LAYERS, VOCAB = 64, 4, 2, 16, 128, 2, 128
#: weight MACs per token: q, k, v, o, gate, up, down per layer, and the LM head
LLAMA_WEIGHT_MACS = LAYERS * (D * D + 2 * D * KV_HEADS * HEAD + D * D + 3 * D * MLP) + D * VOCAB


def test_llama_calls_by_hand() -> None:
    """Batch 2, a 16-token prompt, 5 new tokens: a prefill and 4 decode steps (the last
    token is not fed). A step on a cache of L tokens costs the weight MACs for each row
    plus, per layer, q.k and p.v over L + 1 positions for every query head."""
    model = llama()
    ids = torch.randint(0, VOCAB, (2, 16))
    gen = ls.profile_generate(model, ids, max_new_tokens=5)
    assert list(gen.stages) == ["prefill", "decode"]
    steps = gen.calls
    assert [s.stage for s in steps] == ["prefill"] + ["decode"] * 4
    for step in steps[1:]:
        cache = step.cache_tokens
        attention = LAYERS * 2 * HEADS * HEAD * (cache + 1)
        assert step.macs == 2 * (LLAMA_WEIGHT_MACS + attention), cache
    assert [s.cache_tokens for s in steps[1:]] == [16, 17, 18, 19]
    assert steps[1].macs == 172_544  # 2 x (81,920 + 2 x 2 x 4 x 16 x 17)
    # the cache: keys and values, 2 KV heads of 16 floats per layer, token and row
    per_token = LAYERS * 2 * KV_HEADS * HEAD * 4  # 512 B
    kv = gen.kv_cache
    assert kv["bytes_per_token"] == per_token
    assert kv["bytes_after_prefill"] == per_token * 16 * 2
    assert kv["bytes_final"] == per_token * (16 + 5 - 1) * 2  # 20,480 B
    assert kv["tokens_final"] == 20 and kv["rows"] == 2
    assert [s.kv_bytes for s in steps] == [per_token * 2 * t for t in (16, 17, 18, 19, 20)]
    # the decode stage sums its 4 steps
    assert gen.stages["decode"].root.metrics["macs"] == sum(s.macs for s in steps[1:])
    assert gen.stages["decode"].root.calls == 4


def test_prefill_is_one_call_with_the_cache() -> None:
    """The prefill equals the model called on the prompt with a cache, its position ids
    and ``logits_to_keep=1``, as ``generate()`` calls it (the LM head on one position)."""
    model = gpt2()
    ids = torch.randint(0, 64, (1, 12))
    gen = ls.profile_generate(model, ids, max_new_tokens=3)
    with torch.no_grad():
        kwargs = {"use_cache": True, "logits_to_keep": 1, "position_ids": torch.arange(12)[None]}
        alone = ls.profile(model, ids, kwargs=kwargs)
    for key in ("macs", "flops", "bytes_accessed"):
        assert gen.stages["prefill"].root.metrics[key] == alone.root.metrics[key], key
    head = gen.stages["prefill"].node("lm_head").metrics["macs"]
    assert head == 32 * 64  # one position: hidden x vocab


def test_without_a_cache_every_step_is_full() -> None:
    """``use_cache=False``: 3 full forwards over 8, 9 and 10 tokens, no cache."""
    model = gpt2()
    ids = torch.randint(0, 64, (1, 8))
    gen = ls.profile_generate(model, ids, max_new_tokens=3, use_cache=False)
    assert list(gen.stages) == ["full"]
    assert [s.tokens for s in gen.calls] == [8, 9, 10]
    assert gen.kv_cache == {}
    macs = [s.macs for s in gen.calls]
    assert macs[0] < macs[1] < macs[2]


def test_a_sliding_window_stops_growing() -> None:
    """Mistral with a window of 8: a layer stores at most 7 tokens (window - 1)."""
    torch.manual_seed(0)
    config = transformers.MistralConfig(
        vocab_size=VOCAB, hidden_size=D, intermediate_size=MLP, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, sliding_window=8,
    )  # fmt: skip
    model = transformers.MistralForCausalLM(config).eval()
    gen = ls.profile_generate(model, torch.randint(0, VOCAB, (1, 12)), max_new_tokens=4)
    kv = gen.kv_cache
    assert kv["tokens_per_layer"] == [7, 7]
    per_token = LAYERS * 2 * KV_HEADS * HEAD * 4
    assert kv["bytes_final"] == per_token * 7 == kv["bytes_after_prefill"]


def test_beams_and_samples_are_rows() -> None:
    """Beam search with 3 beams computes 3 rows per prompt from the prefill on; sampling
    with 2 returned sequences, 2."""
    model = llama()
    ids = torch.randint(0, VOCAB, (2, 6))
    beams = ls.profile_generate(model, ids, max_new_tokens=3, num_beams=3)
    assert beams.options["rows"] == 6 and beams.kv_cache["rows"] == 6
    per_token = LAYERS * 2 * KV_HEADS * HEAD * 4
    assert beams.kv_cache["bytes_final"] == per_token * (6 + 3 - 1) * 6
    sampled = ls.profile_generate(
        model, ids, max_new_tokens=3, do_sample=True, num_return_sequences=2
    )
    assert sampled.options["rows"] == 4
    assert sampled.calls[1].macs == 4 * (LLAMA_WEIGHT_MACS + LAYERS * 2 * HEADS * HEAD * 7)


def test_encoder_decoder_has_a_cross_attention_cache() -> None:
    """BART: the prefill runs the encoder and the first decoder step; the cross-attention
    cache holds the encoder's 10 positions per layer, and does not grow."""
    model = tiny_bart()
    gen = ls.profile_generate(model, torch.randint(3, 64, (1, 10)), max_new_tokens=3)
    assert gen.stages["prefill"].node("model.encoder").calls == 1
    kv = gen.kv_cache
    assert kv["cross_bytes"] == 2 * 2 * 32 * 10 * 4  # 2 layers, k and v, 32 wide, 10 tokens
    # the decoder's own cache: the start token and 2 fed tokens
    assert kv["bytes_final"] - kv["cross_bytes"] == 2 * 2 * 32 * 3 * 4


def test_calls_replace_decode_steps(tmp_path: Path) -> None:
    """``calls`` holds every call, the prefill's first (3 new tokens: a prefill and 2
    decode calls); ``decode_steps`` is its deprecated name, warned once; a document
    written with the old key loads."""
    from layerscope.generation import result

    gen = ls.profile_generate(gpt2(), torch.randint(0, 64, (1, 6)), max_new_tokens=3)
    assert [r.stage for r in gen.calls] == ["prefill", "decode", "decode"]
    result._WARNED.clear()
    with pytest.warns(DeprecationWarning, match="use Generation.calls"):
        assert gen.decode_steps is gen.calls
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert gen.decode_steps is gen.calls  # once per process
    old = gen.to_dict()
    section = old["generation"]
    old["generation"] = {("decode_steps" if k == "calls" else k): v for k, v in section.items()}
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert ls.load_generation(tmp_path / "old.json").calls == gen.calls


def test_round_trip_and_refusals(tmp_path: Path) -> None:
    model = gpt2()
    ids = torch.randint(0, 64, (1, 6))
    state = torch.random.get_rng_state()
    gen = ls.profile_generate(model, ids, max_new_tokens=3)
    assert torch.equal(torch.random.get_rng_state(), state)  # generate()'s draws undone
    gen.save(tmp_path / "g.json")
    loaded = ls.load_generation(tmp_path / "g.json")
    assert loaded.calls == gen.calls and loaded.kv_cache == gen.kv_cache
    assert list(loaded.stages) == ["prefill", "decode"]
    assert loaded.stages["decode"].root.metrics == gen.stages["decode"].root.metrics
    assert ls.load(tmp_path / "g.json").root.metrics == gen.stages["prefill"].root.metrics
    assert loaded.render(width=80) == gen.render(width=80)
    # the load lets each parsed module go once read; from_dict leaves the caller's data be
    data = json.loads((tmp_path / "g.json").read_text())
    again = ls.Generation.from_dict(data)
    assert json.loads((tmp_path / "g.json").read_text()) == data
    assert again.to_dict() == loaded.to_dict() == gen.to_dict()
    assert all(len(line) <= 80 for line in gen.render(width=80).splitlines())
    with pytest.raises(InvalidInputError, match="a model with generate"):
        ls.profile_generate(torch.nn.Linear(2, 2), ids)
    with pytest.raises(InvalidInputError, match="max_new_tokens must be"):
        ls.profile_generate(model, ids, max_new_tokens=0)
    with pytest.raises(InvalidInputError, match="estimate on meta"):
        ls.profile_generate(model, ids.to("meta"))


def test_timing_runs_on_copies_of_the_cache() -> None:
    """Timed calls run on copies of the cache as it was: the analysed steps and the cache
    are the same as without timing, and each call has a median time."""
    model = gpt2()
    ids = torch.randint(0, 64, (1, 6))
    plain = ls.profile_generate(model, ids, max_new_tokens=3)
    timed = ls.profile_generate(model, ids, max_new_tokens=3, timing=2)
    strip = [dataclasses.replace(r, time=None) for r in timed.calls]
    assert strip == plain.calls
    assert timed.kv_cache == plain.kv_cache
    assert all(r.time is not None and r.time > 0 for r in timed.calls)
    assert timed.options["timing_repeats"] == 2
    assert "Time" in timed.render(width=120)
    # a stage's Profile in any view
    table = timed.render(stage="decode", view="table", width=120)
    assert "GPT2LMHeadModel" in table
    with pytest.raises(InvalidInputError, match="stage must be 'prefill' or 'decode'"):
        timed.render(stage="full")


def test_trace_marks_the_stages(tmp_path: Path) -> None:
    """The calls back to back, each as long as its median time (microseconds), the
    stages as spans over them, the KV cache's bytes after each call as a counter."""
    import json

    model = gpt2()
    gen = ls.profile_generate(model, torch.randint(0, 64, (1, 6)), max_new_tokens=3, timing=1)
    gen.to_trace(tmp_path / "g.trace.json")
    events = json.loads((tmp_path / "g.trace.json").read_text())["traceEvents"]
    calls = [e for e in events if e["ph"] == "X" and e["tid"] == 1]
    assert [c["name"] for c in calls] == ["prefill", "decode @ 6", "decode @ 7"]
    times = [(r.time or 0.0) * 1e6 for r in gen.calls]
    assert [c["dur"] for c in calls] == pytest.approx(times)
    assert [c["ts"] for c in calls] == pytest.approx([0, times[0], times[0] + times[1]])
    stages = {e["name"]: e for e in events if e["ph"] == "X" and e["tid"] == 2}
    assert stages["decode"]["ts"] == pytest.approx(times[0])
    assert stages["decode"]["dur"] == pytest.approx(times[1] + times[2])
    counters = [e["args"]["bytes"] for e in events if e["ph"] == "C"]
    assert counters == [r.kv_bytes for r in gen.calls]
    # export by the extension writes the same trace, not the generation's JSON
    gen.export(tmp_path / "e.trace.json")
    assert (tmp_path / "e.trace.json").read_bytes() == (tmp_path / "g.trace.json").read_bytes()
    # a document without a trace refuses the extension instead of writing its JSON there
    est = ls.estimate_generate(gpt2().to("meta"), prompt=4, new_tokens=2, batch=1)
    with pytest.raises(ls.ExportError, match=r"the format of .*x\.trace\.json"):
        est.export(tmp_path / "x.trace.json")
    untimed = ls.profile_generate(model, torch.randint(0, 64, (1, 6)), max_new_tokens=2)
    with pytest.raises(ls.ExportError, match="timing=True"):
        untimed.to_trace(tmp_path / "x.json")


def test_a_static_cache_is_replayed_static() -> None:
    """``cache_implementation="static"``: the cache holds prompt + new - 1 = 20 tokens
    from the prefill on, as ``generate()`` sizes it (the last token made is never fed
    back), and every decode step attends over all 20 (masked or not)."""
    model = llama()
    gen = ls.profile_generate(
        model, torch.randint(0, VOCAB, (2, 16)), max_new_tokens=5, cache_implementation="static"
    )
    per_token = LAYERS * 2 * KV_HEADS * HEAD * 4
    assert gen.kv_cache["bytes_after_prefill"] == gen.kv_cache["bytes_final"] == per_token * 20 * 2
    for step in gen.calls[1:]:
        assert step.macs == 2 * (LLAMA_WEIGHT_MACS + LAYERS * 2 * HEADS * HEAD * 20)


@pytest.mark.cuda
def test_generate_on_cuda_against_the_cpu() -> None:
    """On a GPU the same decoding loop (the same weights, greedy): every decode step's
    MACs and the KV cache's bytes as on the CPU, a median time per call. The prefill
    differs by the kernel: float32 attention with grouped KV heads runs torch's math path
    on a GPU (flash and cuDNN take 16-bit inputs, memory-efficient no grouped heads), the
    full 16 x 16 scores, where the CPU's fused kernel computes the causal 136 (16 x 17 / 2)."""
    ids = torch.randint(0, VOCAB, (2, 16))
    cpu = ls.profile_generate(llama(), ids, max_new_tokens=5)
    gpu = ls.profile_generate(llama().cuda(), ids.cuda(), max_new_tokens=5, timing=2)
    keys = ("stage", "cache_tokens", "macs", "kv_bytes")
    assert [[r.value(k) for k in keys] for r in gpu.calls[1:]] == [
        [r.value(k) for k in keys] for r in cpu.calls[1:]
    ]
    # q.k and p.v over the 256 - 136 masked pairs, per row, layer and query head
    masked = 2 * LAYERS * HEADS * (16 * 16 - 136) * HEAD * 2  # 61,440
    assert gpu.calls[0].macs == cpu.calls[0].macs + masked
    assert gpu.kv_cache["bytes_final"] == 512 * (16 + 5 - 1) * 2
    assert all(r.time is not None and r.time > 0 for r in gpu.calls)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"max_new_tokens": 4097}, "max_new_tokens must be an int from 1 to 4096, got 4097"),
        ({"timing": 10**9}, "timing must be an int from 1 to 10000, got 1000000000"),
        ({"attention_mask": [[1] * 5] * 2}, "attention_mask must be a tensor of input_ids' "
         "shape (2, 5), got [[1, 1, 1, 1, 1], [1, 1, 1, 1, 1]]"),
        ({"attention_mask": torch.ones(5, dtype=torch.long)}, "attention_mask must be a "
         "tensor of input_ids' shape (2, 5), got shape (5,)"),
        ({"attention_mask": torch.ones(2, 4, dtype=torch.long)}, "attention_mask must be"),
    ],
)  # fmt: skip
def test_what_generate_cannot_take_is_refused_first(options: dict[str, Any], words: str) -> None:
    with pytest.raises(InvalidInputError, match=re.escape(words)):
        ls.profile_generate(llama(), torch.randint(1, 128, (2, 5)), **options)


def test_an_error_in_generate_is_the_models() -> None:
    """An error raised inside the model's generate() (here its own forward's): a
    ModelError naming the model, the original chained."""
    model = llama()

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ValueError("no such token")

    model.model.forward = broken
    with pytest.raises(ls.ModelError, match=re.escape(
        "the model's generate() raised ValueError: no such token"
    )) as e:  # fmt: skip
        ls.profile_generate(model, torch.randint(1, 128, (1, 5)))
    assert isinstance(e.value.__cause__, ValueError) and e.value.module_type == "LlamaForCausalLM"


def test_a_left_padded_prompt_replays() -> None:
    """Row 0 padded by 2 on the left: 5 prompt tokens and 2 new ones, both rows."""
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    gen = ls.profile_generate(llama(pad_token_id=0), torch.randint(1, 128, (2, 5)),
                              max_new_tokens=2, attention_mask=mask)  # fmt: skip
    assert gen.options["rows"] == 2 and gen.options["new_tokens"] == 2
    assert len(gen.calls) == 2  # the prefill, then one decode step


def test_a_cache_with_some_layers_windowed_adds_up() -> None:
    """Qwen2 with layer 1 on a sliding window of 8: after 12 + 12 tokens layer 0 holds 23
    (prompt + new - 1) and layer 1 holds 7 (window - 1); each token of one row costs
    2 (K and V) x 2 KV heads x 16 dims x 4 B = 256 B per layer: (23 + 7) x 256 = 7,680 B
    = 7.50 KiB, which the sentence multiplies out to."""
    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        vocab_size=VOCAB, hidden_size=D, intermediate_size=MLP, num_hidden_layers=2,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, use_sliding_window=True,
        sliding_window=8, max_window_layers=1,
    )  # fmt: skip
    model = transformers.Qwen2ForCausalLM(config).eval()
    gen = ls.profile_generate(model, torch.randint(0, VOCAB, (1, 12)), max_new_tokens=12)
    kv = gen.kv_cache
    assert kv["tokens_per_layer"] == [23, 7] and kv["per_layer"] == [23 * 256, 7 * 256]
    assert kv["bytes_final"] == 7_680
    text = " ".join(gen.render(width=200).split())
    assert (
        "7.50 KiB at the end (1 row; 23 tokens in 1 layer, 7 in 1 (a sliding window); "
        "256 B per token, row and layer)."
    ) in text
