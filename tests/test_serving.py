"""``ls.plan_serving``: the memory split, the paged KV cache's capacity, the concurrency
and the latency rows, each held to arithmetic from the model's shapes."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

import layerscope as ls
from helpers.browser import embedded
from helpers.models import meta_mixtral
from layerscope.cli import main
from layerscope.generation.serving import plan_serving
from layerscope.generation.serving_result import ServingPlan

#: hidden 256, 2 layers, 4 heads of 64, 2 KV heads, MLP 512, vocab 1024, 4096 positions
CONFIG: dict[str, Any] = {
    "vocab_size": 1024, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 4096,
}  # fmt: skip
#: per layer: q 256x256, k and v 128x256, o 256x256, gate and up 512x256, down 256x512
LINEAR_ELEMENTS = 2 * (65_536 + 2 * 32_768 + 65_536 + 2 * 131_072 + 131_072)  # 1,179,648
#: embeddings and lm_head 1024x256 each, the linears, 2 x 2 norms of 256 and the last one
PARAMS = 2 * 262_144 + LINEAR_ELEMENTS + 2 * 512 + 256  # 1,705,216
#: keys and values, 2 KV heads of 64, bfloat16, in each of 2 layers: 2 x 2 x 64 x 2 x 2
KV_PER_TOKEN = 1024


def llama() -> Any:
    with torch.device("meta"):
        model: Any = LlamaForCausalLM(LlamaConfig(**CONFIG))
    return model.to(torch.bfloat16)


@cache
def plan() -> ServingPlan:
    return plan_serving(
        llama(), target="h100", max_context=4096, prompt=256, new_tokens=32, batch=[1, 8],
        memory_utilization=0.9, reserve_bytes=2 * 1024**3,
    )  # fmt: skip


def test_the_memory_split_and_the_kv_capacity() -> None:
    p = plan()
    # the rotary buffers inv_freq and original_inv_freq: head dim 64 / 2, bfloat16 each
    inv_freq = 2 * 32 * 2
    assert p.weight_bytes == PARAMS * 2 + inv_freq
    assert p.usable_bytes == 85_029_158_912  # the H100's usable memory (hardware table)
    assert p.budget == int(85_029_158_912 * 0.9)
    left = p.budget - p.weight_bytes - p.workspace_bytes - 2 * 1024**3
    assert p.kv_budget == left and 0 < p.workspace_bytes < 64 * 1024**2
    assert p.kv_bytes_per_token == KV_PER_TOKEN
    assert p.kv_tokens == left // KV_PER_TOKEN and p.kv_blocks == p.kv_tokens // 16
    # a sequence of 4,096 tokens: 256 whole blocks of 16, 4 MiB
    assert p.kv_bytes(4096) == 4096 * KV_PER_TOKEN
    assert p.max_concurrency == left // (4096 * KV_PER_TOKEN)


def test_a_paged_cache_rounds_each_sequence_up_to_whole_blocks() -> None:
    p = plan()
    assert p.kv_bytes(16) == 16 * KV_PER_TOKEN
    assert p.kv_bytes(17) == 32 * KV_PER_TOKEN  # 17 tokens take two blocks of 16
    # the longest context 100,000 sequences can each hold: whole blocks within the budget
    most = p.longest_context(100_000)
    assert 100_000 * p.kv_bytes(most) <= p.kv_budget < 100_000 * p.kv_bytes(most + 1)
    assert most == (p.kv_budget // 100_000 // KV_PER_TOKEN) // 16 * 16 < 4096
    assert p.longest_context(1) == 4096  # one sequence: the whole context


def test_the_rows_name_total_and_per_sequence_throughput_apart() -> None:
    p = plan()
    assert [r.batch for r in p.rows] == [1, 8]
    for r in p.rows:
        assert r.tokens_per_s == r.batch / r.tpot
        assert r.tokens_per_s_per_seq == 1 / r.tpot
        assert r.kv_bytes == r.batch * 288 * KV_PER_TOKEN  # 256 + 32 tokens: 18 blocks
        assert r.fits is True and r.ttft > 0
    assert p.rows[1].tokens_per_s > p.rows[0].tokens_per_s


def test_int4_weights_and_an_fp8_cache() -> None:
    """int4 group 128: every linear but lm_head at 0.5 B a weight plus 2.5 B per group
    (a float16 scale and a 4-bit zero); an fp8 cache: 1 byte an element."""
    p = plan_serving(
        llama(), target="h100", max_context=4096, prompt=64, new_tokens=8, batch=1,
        weights="int4", kv_dtype="fp8",
    )  # fmt: skip
    # groups per layer: rows x in/128: q 512, k 256, v 256, o 512, gate 1024, up 1024,
    # down 256 x 4 = 1024: 4,608, and 9,216 in both layers
    int4 = LINEAR_ELEMENTS // 2 + 9_216 * 2.5  # 612,864
    assert p.weight_bytes == plan().weight_bytes - (LINEAR_ELEMENTS * 2 - int4)
    assert p.kv_bytes_per_token == KV_PER_TOKEN / 2
    assert p.weights == "int4" and p.kv_dtype == "fp8"


def test_a_sliding_window_caps_a_sequences_cache() -> None:
    """Mistral with a 32-token window: each layer holds its window, a step's token and the
    31 before it (transformers' dynamic sliding layer keeps those 31 between steps and
    adds the new one), rounded up to 2 blocks of 16."""
    config = MistralConfig(
        vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, sliding_window=32,
        max_position_embeddings=256,
    )  # fmt: skip
    with torch.device("meta"):
        model = MistralForCausalLM(config)
    p = plan_serving(model, target="h100", max_context=128, prompt=16, new_tokens=8, batch=1)
    per_token = 2 * 2 * 32 * 4  # keys and values, 2 KV heads of 32, float32: 512 B a layer
    assert [(layer.bytes_per_token, layer.cap) for layer in p.layers] == [(per_token, 32)] * 2
    assert p.kv_bytes(128) == 2 * per_token * 32 and p.kv_bytes(8) == 2 * per_token * 16


def _decode_step_bytes(model: Any, cached: int) -> dict[str, float]:
    """Bytes each module moves in a paged decode step after ``cached`` tokens, batch 1."""
    import layerscope.metricspec as ms
    from layerscope.analysis.roofline import roof_of
    from layerscope.generation.estimate import Driver, check_options

    opts = check_options("h100", cached, 1, 1, "paged", None, None)
    driver = Driver(model, opts, roof_of(opts.spec, "bfloat16"))
    step = driver.analyse(driver.ids(1, 1), driver.fill(1, cached))
    return {n.path: float(n.metrics.get(ms.BYTES_ACCESSED) or 0) for n in step.root.walk()}


def test_a_paged_sliding_window_is_a_ring() -> None:
    """A paged server keeps a sliding-window layer as a ring of blocks: a decode step
    past the window writes its token in place and reads the window once, not the
    roll and copy of the whole window transformers' static layer does. So a 64-token
    window's layers move, after 256 or 512 cached tokens alike, exactly what a layer
    without a window moves after 63 (attention over 64 tokens, 4 blocks of 16); only
    the mask's construction (the model's own ops) differs."""

    def mistral(window: int | None) -> Any:
        config = MistralConfig(
            vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
            sliding_window=window,
        )  # fmt: skip
        with torch.device("meta"):
            model: Any = MistralForCausalLM(config)
        return model.to(torch.bfloat16)

    windowed, plain = mistral(64), mistral(None)
    after_256, after_512 = _decode_step_bytes(windowed, 256), _decode_step_bytes(windowed, 512)
    assert after_256 == after_512
    short = _decode_step_bytes(plain, 63)
    for i in range(2):
        layer = f"model.layers.{i}"
        assert after_256[layer] == short[layer]
    # the whole step: less than the same model without a window at 256 tokens
    common: dict[str, Any] = {"target": "h100", "prompt": 256, "new_tokens": 8, "batch": 1}
    ring = ls.estimate_generate(windowed, cache="paged", **common).sweep[0]
    full = ls.estimate_generate(plain, cache="paged", **common).sweep[0]
    assert ring.decode_bytes < full.decode_bytes


def test_refusals() -> None:
    with pytest.raises(ls.InvalidInputError, match="beyond LlamaForCausalLM's 4,096 positions"):
        plan_serving(llama(), max_context=8192)
    with pytest.raises(ls.InvalidInputError, match="kv_dtype must be one of"):
        plan_serving(llama(), max_context=512, kv_dtype="int3")
    # the limits name the flags beside the keywords, and which value was a default
    with pytest.raises(ls.InvalidInputError, match=r"prompt \(--prompt\) 500 \+ new_tokens "
                       r"\(--new-tokens\) 20 is over max_context \(--max-context\) 512: "
                       r"give a prompt of at most 492"):  # fmt: skip
        plan_serving(llama(), max_context=512, prompt=500, new_tokens=20)
    with pytest.raises(ls.InvalidInputError, match=r"256 unless given\) 256 leaves no room"):
        plan_serving(llama(), max_context=200)


def test_json_text_and_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = plan()
    data = p.to_dict()
    assert data["max_concurrency"] == p.max_concurrency
    assert data["kv"]["tokens"] == p.kv_tokens and data["rows"][1]["batch"] == 8
    text = p.render(width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    # the estimate's notes on its own columns (Prefill, Decode, Pred.) are not the plan's
    assert "Pred.:" not in text and "Bounds (Prefill" not in text
    assert f"Max concurrency at 4,096 tokens: {p.max_concurrency:,} sequences." in text.replace(
        "\n  ", " "
    )
    p.export(tmp_path / "s.json")
    loaded = ls.load_serving(tmp_path / "s.json")
    assert loaded.to_dict() == data and loaded.render(width=80) == text
    assert main(["show", str(tmp_path / "s.json"), "--width", "80"]) == 0
    assert capsys.readouterr().out.rstrip("\n") == text.rstrip("\n")
    damaged = {**data, "kv": {"layers": [{"bytes_per_token": "x", "cap": None}]}}
    with pytest.raises(ls.SchemaError, match=r"\$\.kv\.layers\[0\]\.bytes_per_token"):
        ls.ServingPlan.from_dict(damaged)
    with pytest.raises(ls.SchemaError, match="at least one layer"):
        ls.ServingPlan.from_dict({**data, "kv": {"layers": []}})
    # a derived figure is derived again on load; one edited is refused, not replaced
    edited = {**data, "max_concurrency": data["max_concurrency"] + 1}
    with pytest.raises(ls.SchemaError, match=r"\$\.max_concurrency is \d+, but the plan's"):
        ls.ServingPlan.from_dict(edited)
    kv = {**data["kv"], "tokens": data["kv"]["tokens"] * 2}
    with pytest.raises(ls.SchemaError, match=r"\$\.kv\.tokens is"):
        ls.ServingPlan.from_dict({**data, "kv": kv})
    spec = tmp_path / "llama.json"
    spec.write_text(LlamaConfig(**CONFIG).to_json_string())
    args = ["serve", f"transformers:{spec}", "--target", "h100", "--max-context", "4096",
            "--prompt", "256", "--new-tokens", "32", "--batch", "1,8", "--dtype", "bfloat16",
            "--width", "80"]  # fmt: skip
    assert main([*args, "--html", str(tmp_path / "c.html")]) == 0
    out = capsys.readouterr().out
    assert f"{p.max_concurrency:,} sequences" in out.replace("\n  ", " ")
    assert 'id="ls-serve-data"' in (tmp_path / "c.html").read_text()


def test_the_html_report(tmp_path: Path) -> None:
    """The section's memory bar splits the usable memory whole (weights, workspace,
    reserve, KV budget and what utilization leaves unused), its rows are the plan's; a
    plan read back from JSON has no analysis to report under it."""
    p = plan()
    p.export(tmp_path / "s.html")
    data = embedded((tmp_path / "s.html").read_text(), "ls-serve-data")
    parts = dict(data["memory"])
    assert parts["Not used"] == p.usable_bytes - p.budget
    assert sum(parts.values()) == p.usable_bytes
    assert parts["KV cache"] == p.kv_budget and data["cards"][0][1] == p.max_concurrency
    assert [r[0] for r in data["rows"]] == [1, 8]
    p.save(tmp_path / "s.json")
    with pytest.raises(ls.ExportError, match="no analysis to report"):
        ls.load_serving(tmp_path / "s.json").to_html(tmp_path / "t.html")


def test_a_decode_step_is_predicted_from_its_kernels_and_their_launches() -> None:
    """Eager: every kernel of the step is one launch at the rates' launch cost; graphs
    (a compiled step in CUDA graphs): its pointwise kernels fused as a compiled plan's,
    one launch for the step. The step takes the longer of running and launching, and
    never less than its roofline bound."""
    from layerscope.analysis.rates import rates_of

    launch = rates_of(ls.device_spec("h100")).launch
    eager = plan()
    graphs = plan_serving(
        llama(), target="h100", max_context=4096, prompt=256, new_tokens=32, batch=[1, 8],
        mode="graphs",
    )  # fmt: skip
    for e, g in zip(eager.rows, graphs.rows, strict=True):
        # 2 layers of 7 linears and SDPA, the embedding and the head at least: 17 that do
        # not fuse, and fewer kernels compiled than eager
        assert e.kernels > g.kernels >= 17
        assert e.launch_time == pytest.approx(e.kernels * launch) and g.launch_time == launch
        assert e.tpot >= max(e.launch_time, e.tpot_bound) and g.tpot >= g.tpot_bound
        assert g.tpot < e.tpot
    # a tiny model's decode step is all launches when eager
    assert eager.rows[0].bound == "launches" and eager.rows[0].tpot == eager.rows[0].launch_time
    with pytest.raises(ls.InvalidInputError, match="mode must be one of"):
        plan_serving(llama(), max_context=512, mode="compiled")


def test_the_report_in_the_browser(open_html: Any, tmp_path: Path) -> None:
    """The serving section draws first, with no console error and no request: a card
    per capacity figure, the memory bar's five parts in proportion to their bytes, a point
    per batch, the rows' table; at 700 pixels nothing overflows the page."""
    p = plan()
    p.to_html(tmp_path / "s.html")
    for width in (1400, 700):
        page = open_html(
            (tmp_path / "s.html").read_text(), width=width, ready="#ls-serve[data-ready]"
        )
        page.clean()
        pg = page.page
        order = pg.eval_on_selector_all("body > *", "es => es.map(e => e.id || e.className)")
        assert order.index("ls-serve") < order.index("sv-divider") < order.index("cards")
        cards = pg.eval_on_selector_all(
            "#ls-serve-cards .card span", "es => es.map(e => e.textContent)"
        )
        assert cards == [
            "Max concurrency",
            "KV cache tokens",
            "Blocks",
            "KV per token",
            "KV budget",
        ]
        shares = pg.eval_on_selector_all(
            "#ls-serve-bar > i", "es => es.map(e => parseFloat(e.style.width))"
        )
        parts = [p.weight_bytes, p.workspace_bytes, p.reserve_bytes, p.kv_budget,
                 p.usable_bytes - p.budget]  # fmt: skip
        # the page carries bytes to 6 significant digits
        assert shares == pytest.approx([100 * b / p.usable_bytes for b in parts], rel=1e-4)
        assert pg.locator("#ls-serve-chart circle.sv-pt").count() == 2
        assert pg.locator("#ls-serve-table tbody tr").count() == 2
        assert pg.evaluate("document.documentElement.scrollWidth") <= width


def test_a_model_that_does_not_fit_says_so() -> None:
    """A budget below the weights: nothing left for the cache, no sequence fits, and the
    text says how over it is and what would help."""
    p = plan_serving(
        llama(), target="h100", max_context=4096, prompt=64, new_tokens=8, batch=1,
        memory_utilization=0.00001,
    )  # fmt: skip
    assert p.kv_budget < 0 and p.max_concurrency == 0 and p.kv_tokens == 0
    assert p.longest_context(1) == 0 and p.rows[0].fits is False
    text = p.render(width=200)
    assert "nothing left for the KV cache (over by" in text and "It does not fit" in text
    # the report: no negative KV budget; the parts the server takes, then what it leaves
    # (the usable memory it may not take), summing to the weights, workspace and
    # reserve beside the usable bytes beyond the budget
    from layerscope.generation.serving_html import serving_data

    data = serving_data(p.to_dict())
    assert dict((c[0], c[1]) for c in data["cards"])["KV budget"] == 0
    memory = dict(data["memory"])
    assert memory["KV cache"] == 0
    assert memory["Not used"] == p.usable_bytes - p.budget


def test_a_mixture_of_experts_is_served_on_its_expected_experts() -> None:
    """A float32 Mixtral-shaped model (8 experts, top 2) plans on meta; its rows' bounds
    are the estimate's on the same paged cache, where a step reads the experts its tokens
    are expected to reach (``generation.moe``), and the estimate's MoE note is kept."""
    model = meta_mixtral(experts=8)
    p = plan_serving(model, target="h100", max_context=1024, prompt=64, new_tokens=16,
                     batch=[1, 8])  # fmt: skip
    est = ls.estimate_generate(model, target="h100", prompt=64, new_tokens=16, batch=[1, 8],
                               cache="paged")  # fmt: skip
    assert [r.tpot_bound for r in p.rows] == [r.decode_time_per_token for r in est.sweep]
    assert [r.ttft_bound for r in p.rows] == [r.prefill_time for r in est.sweep]
    moe = [n for n in est.notes if "expert" in n.lower()]
    assert moe and set(moe) <= set(p.notes)


def test_fp8_weights_run_their_matmuls_at_the_fp8_peak() -> None:
    """weights="fp8" is W8A8 where the target has FP8 tensor cores: every quantized linear's
    own work is priced at the FP8 peak (about twice bfloat16's on an H100), the rest at the
    compute dtype's; on an A100 (no FP8) at bfloat16's. The prefill's bound, summed by hand
    over its analysis's modules."""
    from layerscope.analysis.roofline import roof_of, work

    # hidden 2,048 over 2 x 512 tokens: each projection does ~680 FLOPs a byte, above
    # the H100's FP8 ridge (1,979 T / 3.35 T = 591), so the FP8 peak is what sets it
    config = LlamaConfig(
        vocab_size=256, hidden_size=2048, intermediate_size=4096, num_hidden_layers=1,
        num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=1024,
    )  # fmt: skip
    with torch.device("meta"):
        model: Any = LlamaForCausalLM(config)
    model = model.to(torch.bfloat16)
    # the H100's dense FP8 and bfloat16 peaks: 1,978.9 and 989.4 TFLOP/s (hardware table)
    for target, scale in (("h100", 1978.9 / 989.4), ("a100", 1.0)):
        est = ls.estimate_generate(model, target=target, prompt=512, new_tokens=4, batch=2,
                                   weights="fp8")  # fmt: skip
        int8 = ls.estimate_generate(model, target=target, prompt=512, new_tokens=4, batch=2,
                                    weights="int8")  # fmt: skip
        # the same bytes within a scale per row; on the H100 the FP8 matmuls are faster
        assert (est.prefill_time < int8.prefill_time) is (scale > 1)
        assert est.analysis is not None
        roof = roof_of(target, "bfloat16")
        expected = 0.0
        for node in est.analysis.root.walk():
            own = work(node.self_metrics, "forward")
            if own is None:
                continue
            fast = scale if node.type == "Linear" and not node.path.endswith("lm_head") else 1
            expected += max(own[0] / (roof.peak * fast), own[1] / roof.bandwidth)
        assert est.prefill_time == pytest.approx(expected)
        assert any("W8A8" in n for n in est.notes)


def test_tensor_parallel_serving_holds_one_gpus_share() -> None:
    """``tp=2``: the model split by its own plan (transformers' ``base_model_tp_plan``,
    the embedding vocabulary-parallel and the output projection column-wise): each GPU
    stores half of every linear, of the embedding and of the output projection, the
    norms and the rotary buffers whole, and half the keys and values (one KV head of
    two). Each decode step and prefill adds DTensor's collectives: per layer the
    row-wise o_proj's and down_proj's all-reduce, the embedding's, and the output
    projection's all-gather of the logits."""
    p = plan_serving(
        llama(), target="h100", max_context=4096, prompt=256, new_tokens=32, batch=[1, 8],
        memory_utilization=0.9, reserve_bytes=2 * 1024**3, tp=2,
    )  # fmt: skip
    inv_freq = 2 * 32 * 2
    halves = 2 * 262_144 + LINEAR_ELEMENTS
    assert p.weight_bytes == (halves // 2 + 2 * 512 + 256) * 2 + inv_freq
    assert p.kv_bytes_per_token == KV_PER_TOKEN // 2
    assert p.tp == 2 and p.max_concurrency > plan().max_concurrency
    assert ServingPlan.from_dict(p.to_dict()).tp == 2 and "tp" not in plan().to_dict()
    assert "x 2 (tensor parallel: memory per GPU, rows the 2 together)" in p.render(width=200)
    assert p.analysis is not None
    kinds = {
        (path, kind): row["calls"]
        for path, phases in p.analysis.comm.items()
        for kind, row in phases["forward"].items()
    }
    assert kinds == {
        **{(f"model.layers.{i}.{m}", "all_reduce"): 1 for i in (0, 1)
           for m in ("self_attn.o_proj", "mlp.down_proj")},
        ("model.embed_tokens", "all_reduce"): 1,
        ("lm_head", "all_gather"): 1,
    }  # fmt: skip
    # the prefill of one 256-token prompt: the all-reduces carry [1, 256, 256] bfloat16
    assert (
        p.analysis.comm["model.layers.0.self_attn.o_proj"]["forward"]["all_reduce"]["bytes"]
        == 256 * 256 * 2
    )
    single = plan().rows[0]
    assert p.rows[0].tpot_bound > single.tpot_bound / 2  # half the work, plus collectives
    with pytest.raises(ls.InvalidInputError, match="tp=16 spans more than one node of 8"):
        plan_serving(llama(), target="h100", max_context=4096, tp=16)
    with pytest.raises(ls.InvalidInputError, match="2 key value heads do not split evenly"):
        plan_serving(llama(), target="h100", max_context=4096, tp=4)


def test_a_tensor_parallel_estimate_keeps_its_tp() -> None:
    """``estimate_generate(tp=2)``: one GPU's weights and KV cache, ``tp`` in the
    document and read back (absent at 1)."""
    one = ls.estimate_generate(llama(), target="h100", prompt=64, new_tokens=4, batch=1)
    two = ls.estimate_generate(llama(), target="h100", prompt=64, new_tokens=4, batch=1, tp=2)
    assert two.sweep[0].kv_bytes * 2 == one.sweep[0].kv_bytes
    assert two.tp == 2 and ls.GenerateEstimate.from_dict(two.to_dict()).tp == 2
    assert "tp" not in one.to_dict()


def test_quantized_weights_split_over_gpus_are_read_at_their_width() -> None:
    """int4 weights at ``tp=2``: each GPU's decode step reads its shards of the
    quantized linears at 4 bits (plus their scales) once, so at least its stored weights
    but the embedding's rows a step does not look up (1,024 x 256 / 2 of them, bfloat16),
    and less than the same shards in bfloat16 do."""
    common: dict[str, Any] = {"target": "h100", "prompt": 64, "new_tokens": 4, "batch": 1}
    int4 = ls.estimate_generate(llama(), weights="int4", tp=2, **common).sweep[0]
    bf16 = ls.estimate_generate(llama(), tp=2, **common).sweep[0]
    embedding = 1024 * 256 // 2 * 2
    assert int4.weight_bytes - embedding <= int4.decode_bytes < bf16.decode_bytes


def test_a_mixture_of_experts_split_by_its_own_plan() -> None:
    """Mixtral's plan at ``tp=2``: every expert split (its packed gate and up projection
    by columns, its down projection by rows, transformers' ``packed_colwise`` and
    ``moe_tp_experts`` as ``from_pretrained(tp_plan="auto")`` applies them), the
    attention as Llama's, the router and the norms whole: hidden 256, 8 experts of MLP
    512, 2 layers, 8 heads of 32 and 4 KV heads, vocabulary 1,000, bfloat16. Per layer:
    q and o 256 x 256, k and v 128 x 256, experts 8 x (2 x 512 + 512) x 256, split in
    two; the router's 8 x 256 and two norms of 256 whole; the embedding and the output
    projection 1,000 x 256 each, split; the final norm whole."""
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(
        hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8,
        num_key_value_heads=4, vocab_size=1000, num_local_experts=8, num_experts_per_tok=2,
        max_position_embeddings=4096,
    )  # fmt: skip
    with torch.device("meta"):
        model: Any = MixtralForCausalLM(config)
    model = model.to(torch.bfloat16)
    p = plan_serving(model, target="h100", max_context=4096, prompt=64, new_tokens=4,
                     batch=[1], tp=2)  # fmt: skip
    split = 2 * (2 * 65_536 + 2 * 32_768 + 8 * 1536 * 256) + 2 * 256_000
    whole = 2 * (8 * 256 + 2 * 256) + 256
    inv_freq = 2 * 16 * 2  # rotary: head dim 32 / 2, bfloat16, two buffers
    assert p.weight_bytes == (split // 2 + whole) * 2 + inv_freq
    # one of the two KV heads' halves: 2 layers x 2 (K, V) x 2 heads x 32 x 2 B
    assert p.kv_bytes_per_token == 2 * 2 * 2 * 32 * 2


def test_the_workspace_is_a_prefill_chunk_without_its_keys_and_values() -> None:
    """The chunk's keys and values live in the paged pool the KV budget holds: the
    workspace is the prefill's peak without them, a cache filled with the 2,048-token
    chunk's 2,048 x 1,024 B less than the same prefill keeping one."""
    ids = torch.zeros(1, 2048, dtype=torch.long, device="meta")
    with torch.no_grad():  # as the plan analyses it: eval, no graph, the target's kernels
        kept = ls.profile(
            llama(), ids, kwargs={"use_cache": True, "logits_to_keep": 1}, memory=True,
            mode="eval", target="h100",
        ).root.metrics["peak_bytes"]  # fmt: skip
    assert plan().workspace_bytes == kept - 2048 * KV_PER_TOKEN
