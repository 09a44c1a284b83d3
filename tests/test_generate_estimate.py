"""``estimate_generate``: prefill and decode time on a GPU you do not have, against numbers
derived by hand (docs/generate.md).

The model: a Llama of 2 layers, hidden 64, 4 query heads and 2 KV heads of head_dim 16,
MLP 128, vocab 128, in bfloat16 (2 bytes), built on meta; prompt 16 tokens, 8 new tokens,
so the decode steps see caches of 16 .. 23 tokens (analysed at 16, 20 and 23) and the
cache ends at 24 tokens. On the H100 a bfloat16 decode step runs cuDNN attention.

Weight MACs per token, every Linear in x out: per layer q 64x64 = 4,096, k and v 64x32 =
2,048 each, o 4,096, gate, up and down 64x128 = 8,192 each: 36,864; two layers 73,728;
the LM head 64x128 = 8,192; together 81,920.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

import layerscope as ls
from layerscope.analysis.roofline import roof_of, work
from layerscope.cli import main
from layerscope.collect.hfmeta import meta_values
from layerscope.errors import InvalidInputError
from layerscope.generation.decodefit import AffineFit, Point, decode_lengths
from layerscope.generation.estimate import estimate_generate
from layerscope.generation.estimate_result import GenerateEstimate

LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, MLP, VOCAB = 2, 64, 4, 2, 16, 128, 128
BF16 = 2
PROMPT, NEW = 16, 8
WEIGHT_MACS = LAYERS * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128) + 64 * 128  # 81,920
#: One token's keys and values in one layer, bf16: 2 x 2 heads x 16 x 2 B = 128 B.
KV_TOKEN_LAYER = 2 * KV_HEADS * HEAD_DIM * BF16
#: The H100's bfloat16 roof: 989.4 TFLOP/s dense, 3.35 TB/s.
PEAK, BANDWIDTH = 989.4e12, 3.35e12

SMALL: dict[str, Any] = {
    "num_hidden_layers": LAYERS, "hidden_size": HIDDEN, "num_attention_heads": HEADS,
    "num_key_value_heads": KV_HEADS, "intermediate_size": MLP, "vocab_size": VOCAB,
}  # fmt: skip


def small_llama(device: str = "meta") -> Any:
    with torch.device(device):
        model: Any = LlamaForCausalLM(LlamaConfig(**SMALL))
    return model.to(torch.bfloat16)


@pytest.fixture(scope="module")
def meta_llama() -> Any:
    return small_llama()


@pytest.fixture(scope="module")
def dynamic(meta_llama: Any) -> GenerateEstimate:
    return estimate_generate(meta_llama, prompt=PROMPT, new_tokens=NEW, batch=(1, 2))


@pytest.fixture(scope="module")
def static(meta_llama: Any) -> GenerateEstimate:
    return estimate_generate(
        meta_llama, prompt=PROMPT, new_tokens=NEW, batch=(1, 2), cache="static"
    )


def test_the_decode_lengths_are_the_first_middle_and_last_steps() -> None:
    assert decode_lengths(PROMPT, NEW) == [16, 20, 23]  # 16, 16 + 8 // 2, 16 + 8 - 1
    assert decode_lengths(16, 2) == [16, 17]  # the middle is the last
    assert decode_lengths(16, 1) == [16]


def test_decode_macs_are_the_weights_per_token_and_attention_over_the_cache(
    dynamic: GenerateEstimate,
) -> None:
    """MACs at cache length L, batch b = b x (81,920 + per layer 2 x 4 heads x 16 x (L + 1)):
    the scores q.k and the weighted sum p.v, each over the L cached tokens and the new one.
    L = 16, b = 1: 81,920 + 2 x 128 x 17 = 86,272."""
    for fit in dynamic.fit:
        b = fit.batch
        for p in fit.points:
            attention = LAYERS * 2 * HEADS * HEAD_DIM * (p.length + 1)
            assert p.macs == b * (WEIGHT_MACS + attention)
    assert dynamic.fit[0].points[0].macs == 86_272


def test_kv_bytes_at_the_last_token(dynamic: GenerateEstimate, static: GenerateEstimate) -> None:
    """2 (keys, values) x 2 layers x 2 KV heads x 16 x 24 tokens x b x 2 B = 6,144 x b: the
    dynamic cache after the last step holds prompt + new tokens, the static one always."""
    for est in (dynamic, static):
        for row in est.sweep:
            kv = 2 * LAYERS * KV_HEADS * HEAD_DIM * (PROMPT + NEW) * row.batch * BF16
            assert row.kv_bytes == kv == 6_144 * row.batch


def test_the_affine_fit_holds_and_its_slopes_are_the_cache(dynamic: GenerateEstimate) -> None:
    """Per token of cache and row: MACs 2 layers x 2 x 4 heads x 16 = 256; bytes per layer
    3 x 128 B (attention reads the keys and values, torch.cat reads and writes them again):
    2 x 384 = 768 B."""
    assert dynamic.fit_held is True
    for fit in dynamic.fit:
        assert fit.held is True
        assert fit.errors()["macs"] == fit.errors()["bytes"] == fit.errors()["flops"] == 0.0
        assert fit.line("macs")[1] == 256 * fit.batch
        assert fit.line("bytes")[1] == 3 * LAYERS * KV_TOKEN_LAYER * fit.batch
        assert fit.mean_length == (16 + 23) / 2
        assert fit.mean("time") == pytest.approx(fit.at("time", 19.5))
    row = dynamic.sweep[0]
    assert row.decode_time_per_token == dynamic.fit[0].mean("time")


def test_a_static_cache_costs_the_same_at_every_length(static: GenerateEstimate) -> None:
    """The static cache holds 24 positions from the start and attention reads all of them:
    MACs b x (81,920 + 2 x 128 x 24) = 88,064 x b at every length; no slope anywhere. Its
    update (index_copy_) writes only the new token, and nothing is concatenated."""
    for fit in static.fit:
        for quantity in ("time", "flops", "macs", "bytes"):
            assert fit.line(quantity)[1] == 0.0
        assert all(p.macs == fit.batch * (WEIGHT_MACS + 256 * 24) for p in fit.points)
    assert static.fit[0].points[0].macs == 88_064
    assert any("constant in the cache length" in n for n in static.notes)


def test_dynamic_moves_the_cache_three_times_where_static_reads_it_once(
    dynamic: GenerateEstimate, static: GenerateEstimate
) -> None:
    """At the last step (L = 23) both attend over 24 tokens, which attention reads once.
    The dynamic cache also copies them (torch.cat reads 23 + 1 tokens and writes 24, keys
    and values): 2 x 24 x 128 B per layer, 12,288 B for 2 layers. The static cache writes
    only the new token (index_copy_: 2 x (8 + 64 + 64) B per layer) and reads a mask,
    which its model builds each step: together under 2 KiB. So the dynamic step moves
    between 10,240 and 12,288 B more, and is slower."""
    copy = 2 * LAYERS * 24 * KV_TOKEN_LAYER
    assert copy == 12_288
    more = dynamic.fit[0].points[-1].bytes - static.fit[0].points[-1].bytes
    assert copy - 2048 < more < copy
    assert static.decode_time_per_token < dynamic.decode_time_per_token


def test_decode_time_is_the_roofline_of_the_step_one_module_by_hand(
    meta_llama: Any, dynamic: GenerateEstimate
) -> None:
    """The first decode step (batch 1, 16 tokens cached) analysed as the estimate does:
    its time is the sum over modules of max(FLOPs / peak, bytes / bandwidth) of each
    module's own work. By hand, ``mlp.down_proj`` (Linear(128, 64), no bias) on one token:
    FLOPs 2 x 128 x 64 = 16,384; bytes: input 128 x 2 + weight 128 x 64 x 2 + output
    64 x 2 = 16,768 B; 16,768 / 3.35e12 = 5.005 ns > 16,384 / 989.4e12 = 0.017 ns:
    memory-bound, 5.005 ns."""
    cache = DynamicCache(config=meta_llama.config)
    one = torch.zeros(1, 1, dtype=torch.long, device="meta")
    with torch.no_grad(), meta_values():
        meta_llama(torch.zeros(1, PROMPT, dtype=torch.long, device="meta"), cache=cache)
        prof = ls.profile(
            meta_llama, one, kwargs={"cache": cache, "use_cache": True, "logits_to_keep": 1},
            target="h100", mode="eval",
        )  # fmt: skip
    roof = roof_of("h100", "bfloat16")
    assert (roof.peak, roof.bandwidth) == (PEAK, BANDWIDTH)
    total = 0.0
    for node in prof.root.walk():
        own = work(node.self_metrics, "forward")
        total += roof.time(*own) if own is not None else 0.0
    assert dynamic.fit[0].points[0].time == pytest.approx(total, rel=1e-12)
    down = prof.node("model.layers.0.mlp.down_proj").self_metrics
    assert down["flops"] == 2 * 128 * 64 == 16_384
    assert down["bytes_accessed"] == 128 * 2 + 128 * 64 * 2 + 64 * 2 == 16_768
    assert roof.time(16_384, 16_768) == pytest.approx(16_768 / 3.35e12)
    assert roof.bound(16_384, 16_768) == "memory"


def test_the_sweep_rows(dynamic: GenerateEstimate) -> None:
    """Weights: 90,432 parameters (embedding and LM head 128 x 64 each, per layer 36,864
    in the projections and 2 x 64 in the norms, the final norm 64) x 2 B = 180,864 B, and
    the rotary tables (inv_freq and its original, 8 x 2 B each) 32 B: 180,896 B."""
    assert [r.batch for r in dynamic.sweep] == [1, 2]
    params = 2 * 128 * 64 + LAYERS * (36_864 + 2 * 64) + 64
    assert params == 90_432
    for row in dynamic.sweep:
        assert row.weight_bytes == params * BF16 + 2 * 8 * BF16 == 180_896
        assert row.tokens_per_s_per_sequence == pytest.approx(1 / row.decode_time_per_token)
        assert row.tokens_per_s == pytest.approx(row.batch / row.decode_time_per_token)
        assert row.bound == "memory"  # far below the ridge: 295 FLOP/B
        assert row.decode_flops / row.decode_bytes < PEAK / BANDWIDTH
        assert row.fits is True  # 180,896 + 6,144 x b bytes of the usable 79.19 GiB
        assert row.prefill_time > row.decode_time_per_token
    first = dynamic.sweep[0]
    assert dynamic.prefill_time == first.prefill_time
    assert dynamic.decode_time_per_token == first.decode_time_per_token
    assert dynamic.tokens_per_s_per_seq == first.tokens_per_s_per_sequence
    assert dynamic.memory_bound and dynamic.crossover is None
    assert dynamic.notes[0].startswith(
        "By the roofline, decode stays memory-bound at every batch (1 and 2)"
    )
    # 2 layers x (the prefill and 3 decode steps)
    assert dynamic.kernels["scaled_dot_product_attention"] == {"cudnn_attention": 8}


def test_fits_holds_to_the_usable_memory(meta_llama: Any) -> None:
    """Fits holds the weights and KV cache to what a process can use on the target (an
    H100's 85,029,158,912 B, as ``serve`` budgets), not the datasheet's 80e9 B: a KV
    cache that takes the step between the two fits."""
    model = meta_llama
    est = estimate_generate(model, target="h100", prompt=8, new_tokens=4, batch=1)
    assert est.device["usable_bytes"] == 85_029_158_912
    assert est.device["memory_bytes"] == 80_000_000_000
    row = est.sweep[0]
    # a batch whose weights and cache land between 80e9 and the usable bytes
    per_seq = row.kv_bytes
    batch = (82_000_000_000 - row.weight_bytes) // per_seq
    big = estimate_generate(model, target="h100", prompt=8, new_tokens=4, batch=batch)
    total = big.sweep[0].weight_bytes + big.sweep[0].kv_bytes
    assert 80_000_000_000 < total <= 85_029_158_912 and big.sweep[0].fits is True
    assert "within h100's 79.19 GiB usable" in " ".join(big.notes)


def test_to_dict_is_json_and_render_fits_the_width(dynamic: GenerateEstimate) -> None:
    data = json.loads(json.dumps(dynamic.to_dict(), allow_nan=False))
    assert data["sweep"][1]["batch"] == 2 and data["fit"][0]["held"] is True
    assert data["memory_bound"] is True and data["crossover_batch"] is None
    text = dynamic.render(width=80)
    assert all(len(line) <= 80 for line in text.splitlines())
    assert "decode stays memory-bound at every batch" in text
    assert text.splitlines()[0].startswith("Generation on h100 (NVIDIA H100 SXM5 80GB)")


def test_save_load_and_show_as_itself(
    dynamic: GenerateEstimate, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An estimate saved reads back to the same object: the same dict, the same text, the
    same file written again; ``layerscope show`` shows it as itself."""
    from layerscope.generation.estimate_result import load_estimate as load_generate_estimate

    path = tmp_path / "est.json"
    dynamic.export(path)
    loaded = load_generate_estimate(path)
    assert loaded.to_dict() == dynamic.to_dict()
    assert loaded.sweep == dynamic.sweep and loaded.fit[0].points == dynamic.fit[0].points
    assert loaded.render(width=100) == dynamic.render(width=100)
    loaded.save(tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == path.read_bytes()
    assert main(["show", os.fspath(path), "--width", "90"]) == 0
    assert capsys.readouterr().out == dynamic.render(width=90)
    with pytest.raises(ls.SchemaError, match="missing key 'fit'"):
        GenerateEstimate.from_dict({k: v for k, v in dynamic.to_dict().items() if k != "fit"})
    # a row without its decode step's bytes is damaged, not a step that moves 0 B
    doc = dynamic.to_dict()
    doc["sweep"] = [{k: v for k, v in r.items() if k != "decode_bytes"} for r in doc["sweep"]]
    with pytest.raises(ls.SchemaError, match="missing key 'decode_bytes'"):
        GenerateEstimate.from_dict(doc)
    with pytest.raises(ls.ExportError, match="an estimate exports as json"):
        dynamic.export(tmp_path / "est.md")
    # loaded from JSON it has no analysis, so no HTML report: refused, saying why
    with pytest.raises(ls.ExportError, match="the estimate has no analysis to report"):
        loaded.export(tmp_path / "est.html")


def test_the_crossover_batch_where_decode_turns_compute_bound() -> None:
    """One layer of hidden 8192 (MLP 8192, 64 heads): a decode step's matmuls do 2 x 7 x
    8192^2 FLOPs per row for ~1 GB of weights read once, so the step's intensity grows
    with the batch and crosses the ridge (295 FLOP/B) between 512 and 4096 rows."""
    config = LlamaConfig(
        num_hidden_layers=1, hidden_size=8192, num_attention_heads=64, num_key_value_heads=64,
        intermediate_size=8192, vocab_size=128,
    )  # fmt: skip
    with torch.device("meta"):
        model: Any = LlamaForCausalLM(config)
    model = model.to(torch.bfloat16)
    est = estimate_generate(model, prompt=4, new_tokens=2, batch=(4096, 1, 512))
    assert [r.batch for r in est.sweep] == [1, 512, 4096]  # sorted
    assert [r.bound for r in est.sweep] == ["memory", "memory", "compute"]
    assert est.crossover == 4096 and not est.memory_bound
    assert est.notes[0] == (
        "By the roofline, decode turns compute-bound at batch 4096 (memory-bound up to batch 512)."
    )
    assert est.fit_held is None  # lengths 4 and 5 only: no middle point


def test_a_model_with_real_weights_is_copied_to_meta_and_left_alone() -> None:
    torch.manual_seed(0)
    model = small_llama("cpu")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    est = estimate_generate(model, prompt=PROMPT, new_tokens=NEW, batch=1)
    assert all(p.device.type == "cpu" for p in model.parameters())
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert est.fit[0].points[0].macs == 86_272


def test_dtype_converts_the_meta_copy_and_picks_the_peak(meta_llama: Any) -> None:
    """float32: 4 bytes a weight, the TF32 peak (494.7 TFLOP/s); the model stays bf16."""
    est = estimate_generate(meta_llama, prompt=4, new_tokens=2, batch=1, dtype="float32")
    assert est.dtype == "float32" and est.device["peak_flops"] == 494.7e12
    assert est.sweep[0].weight_bytes == 90_432 * 4 + 2 * 8 * 4
    assert next(meta_llama.parameters()).dtype == torch.bfloat16


def test_a_fit_that_misses_uses_the_broken_line() -> None:
    """Points (0, 1.0), (5, 2.0), (10, 2.0): the line through the ends gives 1.5 at 5, 25 %
    off; the mean of the broken line over 0 .. 10 is ((1 + 2) / 2 x 5 + 2 x 5) / 10 = 1.75."""
    fit = AffineFit(1, 0, 10, [Point(n, t, 0, 0, 0) for n, t in ((0, 1.0), (5, 2.0), (10, 2.0))])
    assert fit.errors()["time"] == pytest.approx(0.25)
    assert fit.held is False
    assert fit.mean("time") == pytest.approx(1.75)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"prompt": 0}, "prompt must be an int >= 1, got 0"),
        ({"prompt": -5}, "prompt must be an int >= 1, got -5"),
        ({"new_tokens": 0}, "new_tokens must be an int >= 1, got 0"),
        ({"batch": []}, "batch must be a batch size or a non-empty list of them"),
        ({"batch": [1, 0]}, "batch[1] must be an int >= 1, got 0"),
        ({"cache": "pagd"}, "cache must be one of 'dynamic', 'static', 'paged', got 'pagd'"),
        ({"target": "h100x"}, "target must be one of"),
        ({"target": "cpu"}, "target must be one of"),
        ({"dtype": "float33"}, "dtype must be a torch.dtype or a dtype name"),
        ({"dtype": torch.int64}, "dtype must be a floating-point dtype"),
    ],
)
def test_refusals(meta_llama: Any, options: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        estimate_generate(meta_llama, **options)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_a_model_without_a_cache_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="whose forward takes a KV cache"):
        estimate_generate(torch.nn.Linear(4, 4), prompt=4, new_tokens=2, batch=1)


# ---- the command line ----------------------------------------------------------------------
@pytest.fixture
def eighty(monkeypatch: pytest.MonkeyPatch, default_display_config: None) -> Iterator[None]:
    monkeypatch.setenv("COLUMNS", "80")
    yield


SPEC = ["generate", "transformers:LlamaForCausalLM", "--model-args", json.dumps(SMALL)]


def test_cli_estimates_on_meta_and_saves_json(
    tmp_path: Path, eighty: None, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gen.json"
    code = main([*SPEC, "--dtype", "bfloat16", "--input-shape", "1,16", "--max-new-tokens",
                 "8", "--batch", "1,2", "--json", os.fspath(path)])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("Generation on h100 (NVIDIA H100 SXM5 80GB), bfloat16")
    assert all(len(line) <= 80 for line in out.splitlines())
    data = json.loads(path.read_text())
    assert [r["batch"] for r in data["sweep"]] == [1, 2]
    assert data["fit"][0]["points"][0]["macs"] == 86_272


def test_cli_takes_the_batch_from_the_input_shape(
    eighty: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([*SPEC, "--input-shape", "3,8", "--max-new-tokens", "2", "--cache", "static"])
    out = capsys.readouterr().out
    assert code == 0 and "prompt 8 tokens, 2 new tokens per sequence, static" in out
    assert "\n    3 " in out  # one row, batch 3


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--input-shape", "1,2,3"], "--input-shape must be BATCH,PROMPT"),
        (["--input-shape", "1,8", "--batch", "1,x"], "--batch must be batch sizes"),
        (["--input-shape", "1,8", "--cache", "pagd"], "--cache must be one of"),
        (["--input-shape", "1,8", "--kv-dtype", "fp4"], "--kv-dtype must be one of"),
        (["--input-shape", "1,8", "--device", "cpu", "--cache", "paged"], "estimates' (on meta)"),
        (["--input-shape", "1,8", "--target", "h1000"], "--target must be one of"),
        (["--input-shape", "1,8", "--time"], "--time needs a real device"),
        (["--input-shape", "1,8", "--device", "cpu", "--batch", "1,2"], "--batch lists"),
        (["--input-shape", "1,8", "--device", "cpu", "--mode", "graphs"], "--mode are"),
        (["--input-shape", "1,8", "--block-size", "8"], "--block-size is a paged cache's"),
        ([], "generate needs the prompt's shape"),
    ],
)
def test_cli_refusals_are_one_line_and_exit_2(
    flags: list[str], message: str, eighty: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([*SPEC, *flags])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1


def test_cli_estimates_a_paged_fp8_cache(eighty: None, capsys: pytest.CaptureFixture[str]) -> None:
    code = main([*SPEC, "--input-shape", "1,8", "--max-new-tokens", "2", "--cache", "paged",
                 "--block-size", "8", "--kv-dtype", "fp8", "--width", "200"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "2 new tokens per sequence, paged cache (blocks of 8 tokens, KV at fp8)." in out


def test_cli_measures_generate_on_a_real_device(
    eighty: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([*SPEC, "--device", "cpu", "--input-shape", "2,8", "--max-new-tokens", "3"])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("Generation: 2 prompts of 8 tokens, 3 new tokens")


def test_cli_output_file_holds_what_a_measured_generation_printed(
    eighty: None, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """-o writes what was printed, at the terminal's 80 columns, not a default width."""
    written = tmp_path / "gen.txt"
    code = main([*SPEC, "--device", "cpu", "--input-shape", "2,8", "--max-new-tokens", "3",
                 "-o", str(written)])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and written.read_text() == out
    assert max(len(line) for line in out.splitlines()) <= 80


def test_each_row_predicts_its_calls_beside_the_bounds(
    meta_llama: Any, dynamic: GenerateEstimate
) -> None:
    """Eager: the decode step's kernels each cost the rates' launch time; graphs (CUDA
    graphs, pointwise kernels fused): one launch and fewer kernels. A predicted call is
    never below its bound here (eager adds no fusion), and the prediction survives JSON."""
    from layerscope.analysis.rates import rates_of

    launch = rates_of(ls.device_spec("h100")).launch
    graphs = estimate_generate(meta_llama, prompt=PROMPT, new_tokens=NEW, batch=(1, 2),
                               mode="graphs")  # fmt: skip
    assert dynamic.mode == "eager" and graphs.mode == "graphs"
    for e, g in zip(dynamic.sweep, graphs.sweep, strict=True):
        assert e.kernels is not None and g.kernels is not None and e.launch_time is not None
        assert e.launch_time == pytest.approx(e.kernels * launch) and g.launch_time == launch
        assert g.kernels < e.kernels
        assert e.decode_time_predicted is not None and e.prefill_time_predicted is not None
        assert e.decode_time_predicted >= max(e.decode_time_per_token, e.launch_time)
        assert e.prefill_time_predicted >= e.prefill_time
    loaded = GenerateEstimate.from_dict(json.loads(json.dumps(dynamic.to_dict())))
    assert loaded.sweep == dynamic.sweep and loaded.mode == "eager"
    with pytest.raises(InvalidInputError, match="mode must be one of 'eager', 'graphs'"):
        estimate_generate(meta_llama, target="h100", prompt=16, new_tokens=4, mode="jit")
