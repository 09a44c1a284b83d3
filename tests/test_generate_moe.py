"""``estimate_generate`` on a mixture of experts: a step reads the experts its tokens are
routed to (expected under uniform routing) with all of them as the other side, against
bytes derived by hand (``generation.moe``, docs/generate.md "Mixture of experts").

The model: a Mixtral of 1 layer, hidden 64, 4 query heads and 2 KV heads of 16, 8
experts of intermediate 128, top 2, vocab 128. One expert's weights: gate and up
2 x 128 x 64 and down 64 x 128 = 24,576 elements: 49,152 B in bfloat16, 98,304 B in
float32; the layer's 8: 393,216 B in bfloat16.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers import (
    GraniteMoeConfig,
    GraniteMoeForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    Qwen2MoeConfig,
    Qwen2MoeForCausalLM,
)

from layerscope.errors import InvalidInputError
from layerscope.generation.estimate import estimate_generate
from layerscope.generation.estimate_result import GenerateEstimate
from layerscope.generation.moe import expected_experts

EXPERTS, TOP_K = 8, 2
EXPERT_ELEMENTS = 2 * 128 * 64 + 64 * 128  # 24,576
#: MACs of a decode step per token at cache length L: attention's projections q, o
#: 64 x 64 and k, v 64 x 32 (12,288), the router 64 x 8 (512), 2 experts (49,152), the LM
#: head 64 x 128 (8,192), the scores and weighted sum 2 x 4 heads x 16 x (L + 1).
STEP_MACS = 12_288 + 512 + TOP_K * EXPERT_ELEMENTS + 8_192


def mixtral(dtype: torch.dtype) -> Any:
    config = MixtralConfig(
        num_hidden_layers=1, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=128, vocab_size=128, num_local_experts=EXPERTS,
        num_experts_per_tok=TOP_K,
    )  # fmt: skip
    with torch.device("meta"):
        model: Any = MixtralForCausalLM(config)
    return model.to(dtype)


@pytest.fixture(scope="module", params=[torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def est(request: pytest.FixtureRequest) -> GenerateEstimate:
    return estimate_generate(mixtral(request.param), prompt=16, new_tokens=4, batch=(1, 8))


def test_expected_distinct_experts() -> None:
    """8 experts, top 2: a token misses an expert with probability 3/4. One token: 2; two:
    8 x (1 - 9/16) = 3.5; eight: 8 x (1 - 0.75^8) = 8 x 0.899887... = 7.19909668."""
    assert expected_experts(8, 2, 1) == 2.0
    assert expected_experts(8, 2, 2) == 3.5
    assert (
        expected_experts(8, 2, 8)
        == pytest.approx(8 * (1 - 0.75**8))
        == pytest.approx(7.19909668, abs=1e-8)
    )
    assert expected_experts(8, 2, 1000) == pytest.approx(8.0)


def test_decode_reads_the_routed_experts_and_all_of_them_at_worst(est: GenerateEstimate) -> None:
    """Per decode step at batch b (T = b tokens): the worst case reads the 8 experts, the
    expected case E·(1 - (1 - k/E)^b) of them; the rest of the step is the same. So the
    worst step moves (8 - expected) x one expert's bytes more: batch 1, 6 x 49,152 =
    294,912 B in bfloat16 (6 x 98,304 = 589,824 B in float32); batch 8,
    0.80090332 x 49,152 = 39,366.0 B (78,732.0 B)."""
    width = 2 if est.dtype == "bfloat16" else 4
    one = EXPERT_ELEMENTS * width
    rows = {r.batch: r for r in est.sweep}
    assert rows[1].experts_per_layer == 2.0
    assert rows[8].experts_per_layer == pytest.approx(7.19909668, abs=1e-8)
    for r in est.sweep:
        extra = (EXPERTS - expected_experts(EXPERTS, TOP_K, r.batch)) * one
        assert r.decode_bytes_all_experts is not None
        assert r.decode_bytes_all_experts - r.decode_bytes == pytest.approx(extra, abs=1e-6)
        assert r.decode_time_all_experts is not None
        assert r.decode_time_per_token < r.decode_time_all_experts
        assert r.prefill_time_all_experts is not None
        assert r.prefill_time <= r.prefill_time_all_experts
    if width == 2:
        assert (rows[1].decode_bytes_all_experts or 0) - rows[1].decode_bytes == 294_912
        assert 8 * one == 393_216  # the layer's experts


def test_the_flops_are_the_routed_tokens(est: GenerateEstimate) -> None:
    """Each token runs its 2 experts, whatever the routing: MACs b x (STEP_MACS + 128 x
    (L + 1)); at L = 16, b = 1: 70,144 + 2,176 = 72,320."""
    for fit in est.fit:
        for p in fit.points:
            assert p.macs == fit.batch * (STEP_MACS + 2 * 4 * 16 * (p.length + 1))
    assert est.fit[0].points[0].macs == 72_320


def test_the_prefill_reads_the_experts_its_tokens_touch(est: GenerateEstimate) -> None:
    """Batch 1 and 8 prompts of 16 tokens: T = 16 and 128 tokens touch 8 x (1 - 0.75^T)
    experts: 8 x (1 - 0.0100226) = 7.91982, and 8 less 3e-16: the worst case's prefill
    reads at most 0.08 experts more."""
    assert expected_experts(8, 2, 16) == pytest.approx(7.91982, abs=1e-5)
    for r in est.sweep:
        assert r.prefill_time_all_experts is not None
        assert r.prefill_time_all_experts >= r.prefill_time


def test_the_notes_and_the_document(est: GenerateEstimate) -> None:
    assert est.notes[1].startswith(
        "Mixture of experts (mixtral, 1 layer(s) of 8 experts, top 2): a step of T tokens "
        "reads the distinct experts they are routed to, E·(1 − (1 − k/E)^T) expected"
    )
    assert "batch 1: 2.00 per layer" in est.notes[1] and "batch 8: 7.20 per layer" in est.notes[1]
    data = est.to_dict()
    impl = "grouped_mm" if est.dtype == "bfloat16" else "batched_mm"
    assert data["moe"] == {"family": "mixtral", "experts": 8, "top_k": 2, "shared": None,
                           "layers": 1, "implementation": impl}  # fmt: skip
    assert GenerateEstimate.from_dict(data).to_dict() == data


def test_the_model_keeps_its_experts_kernel() -> None:
    """float32 is analysed with transformers' batched kernel (grouped_mm takes bfloat16
    only), switched back after."""
    model = mixtral(torch.float32)
    before = model.config._experts_implementation
    estimate_generate(model, prompt=4, new_tokens=1, batch=1)
    assert model.config._experts_implementation == before


def test_shared_experts_are_read_whole() -> None:
    """Qwen2-MoE: 8 experts of intermediate 32 (3 x 32 x 64 = 6,144 elements, 24,576 B in
    float32) top 2, and a shared expert run on every token. Batch 1: the worst case reads
    6 experts more, 147,456 B."""
    config = Qwen2MoeConfig(
        num_hidden_layers=1, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=128, intermediate_size=128, moe_intermediate_size=32,
        shared_expert_intermediate_size=64, num_experts=8, num_experts_per_tok=2,
    )  # fmt: skip
    with torch.device("meta"):
        model: Any = Qwen2MoeForCausalLM(config)
    est = estimate_generate(model, prompt=8, new_tokens=2, batch=1)
    row = est.sweep[0]
    assert est.moe is not None and est.moe["shared"] == 64
    assert row.decode_bytes_all_experts is not None
    assert row.decode_bytes_all_experts - row.decode_bytes == 6 * 3 * 32 * 64 * 4 == 147_456


def test_a_family_whose_routing_is_not_read_is_refused() -> None:
    config = GraniteMoeConfig(
        num_hidden_layers=1, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=128, intermediate_size=32, num_local_experts=8, num_experts_per_tok=2,
    )  # fmt: skip
    with torch.device("meta"):
        model: Any = GraniteMoeForCausalLM(config)
    with pytest.raises(InvalidInputError) as info:
        estimate_generate(model, prompt=8, new_tokens=2, batch=1)
    assert str(info.value) == (
        "GraniteMoeForCausalLM (granitemoe) has mixture-of-experts layers whose routing "
        "layerscope does not read: estimate_generate reads deepseek_v2, deepseek_v3, "
        "mixtral, olmoe, qwen2_moe, qwen3_moe (experts and num_experts_per_tok from the "
        "config)"
    )


def test_a_dense_row_writes_no_expert_fields() -> None:
    from layerscope.generation.estimate_result import MOE_KEYS, SweepRow

    row = SweepRow(1, 1.0, 1.0, 1.0, 1.0, "memory", 1, 1, True)
    assert not set(MOE_KEYS) & set(row.to_dict())


def test_graphs_mode_keeps_the_expert_matmuls_out_of_the_fused_chains() -> None:
    """transformers' grouped experts kernel is a matmul: under CUDA graphs (pointwise
    chains fused) it is not merged into a chain, so the bytes fusion saves leave it alone
    and each row's predicted decode step and prefill stay at or above their bounds."""
    from layerscope.planning.kernels import classify

    a, b = torch.empty(6, 64, device="meta"), torch.empty(8, 64, 128, device="meta")
    offs = torch.empty(8, dtype=torch.int32, device="meta")
    out = torch.empty(6, 128, device="meta")
    kind, detail, _ = classify(torch.ops.aten._grouped_mm.default, (a, b, offs), {}, out, False)
    assert (kind, detail) == ("matmul", (1, 6, 128))
    model = mixtral(torch.bfloat16)
    est = estimate_generate(model, prompt=16, new_tokens=4, batch=(1, 8), mode="graphs")
    for row in est.sweep:
        assert row.decode_time_predicted is not None and row.prefill_time_predicted is not None
        assert row.decode_time_predicted >= row.decode_time_per_token
        assert row.prefill_time_predicted >= row.prefill_time
