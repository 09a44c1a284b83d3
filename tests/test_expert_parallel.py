"""Expert parallelism in plans (``planning.expertparallel``): a rule over the whole
model's analysis, checked by hand on a small Mixtral (transformers' expert-parallel
styles split their all-to-alls by routed counts that a meta analysis cannot read, and no
real expert-parallel run goes on CPU here).

The model: 2 layers, hidden 64, 8 experts of intermediate 128, top 2; a micro-batch of
[2, 32] tokens; bf16 mixed precision (FSDP2: bf16 gathers, float32 reduce-scatters).
Each layer's experts module holds gate_up [8, 256, 64] and down [8, 64, 128]: 8 x
(16,384 + 8,192) = 196,608 elements."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import layerscope as ls
from layerscope.errors import InvalidInputError
from layerscope.planning.collectives import collective_time, strided
from layerscope.planning.options import check_options
from layerscope.render.units import seconds

transformers = pytest.importorskip("transformers")

EXPERTS = 8 * (256 * 64 + 64 * 128)  # 196,608 elements a layer
TOKENS, TOP_K, HIDDEN = 2 * 32, 2, 64
A2A = TOKENS * TOP_K * HIDDEN * 2  # one all-to-all's bf16 payload: 16,384 B


def mixtral() -> Any:
    config = transformers.MixtralConfig(
        hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, vocab_size=256, num_local_experts=8,
        num_experts_per_tok=TOP_K, use_cache=False,
    )  # fmt: skip
    torch.manual_seed(0)
    return transformers.MixtralForCausalLM(config)


@pytest.fixture(scope="module")
def plans() -> tuple[Any, Any]:
    """(FSDP2 over 4 GPUs, the same with expert parallel 2)."""
    model = mixtral()
    plain = ls.plan(model, input_shape=(2, 32), mesh={"dp_shard": 4})
    return plain, ls.plan(model, input_shape=(2, 32), mesh={"dp_shard": 4, "ep": 2})


def test_states_are_fsdp2s_and_the_experts_gather_a_half(plans: tuple[Any, Any]) -> None:
    """Per GPU the same model-state bytes as FSDP2 over 4 (4 experts sharded over the 2
    ranks left is 1 / 4 of the 8 experts); each experts module a unit of its own whose
    gather holds its 4 experts, 98,304 elements (bf16: 196,608 B), over 2 ranks: a
    98,304 B shard each, gathered forward and backward, and reduce-scattered as 2 float32
    shards (393,216 B)."""
    plain, ep = plans
    assert ep.states == plain.states
    rows = {r["path"]: r for r in ep.modules}
    for layer in (0, 1):
        row = rows[f"model.layers.{layer}.mlp.experts"]
        assert row["unit"] and row["unsharded_bytes"] == EXPERTS // 2 * 2 == 196_608
        assert row["gather_bytes"] == 2 * (EXPERTS // 4 * 2)  # forward and backward
        assert row["reduce_bytes"] == 2 * (EXPERTS // 4) * 4 == 393_216
    assert ep.peak_bytes < plain.peak_bytes  # the experts gathered are half of them
    assert ep.options["mesh"]["ep"] == 2 and "x expert parallel 2" in ep.render(width=100)


def test_no_timeline_column_is_negative(plans: tuple[Any, Any]) -> None:
    """Both plans' timelines, every part and the total at every point, at least 0: layer
    0's experts' activations read -71,884 B after act_fn's backward while gate_up_proj's
    gradient (8 x 256 x 64 bf16: 262,144 B), not made until then, was counted from the
    experts' first backward moment (``tests/test_timeline_signs.py``: 190,260 B now)."""
    for plan in plans:
        columns = ["total", *(c for c in plan.timeline if c.endswith("_bytes"))]
        assert len(columns) == 10
        assert min(min(plan.timeline[c]) for c in columns) == 0  # the optimizer's activations


def test_the_all_to_alls(plans: tuple[Any, Any]) -> None:
    """Dispatch and combine a layer, forward and backward: 2 calls of [64 tokens x 2
    experts, 64] bf16 each way (16,384 B), half of it crossing to the other rank; priced
    on the 2 ranks' link, on the critical path, and said in the notes."""
    plain, ep = plans
    for layer in (0, 1):
        phases = ep.comm[f"model.layers.{layer}.mlp.experts"]
        for phase in ("forward", "backward"):
            assert phases[phase]["all_to_all"] == {
                "calls": 2, "bytes": 2 * A2A, "wire_bytes": 2 * A2A // 2
            }  # fmt: skip
    assert "all_to_all" not in str(plain.comm)
    link = strided(check_options({"target": "h100"}).network, 2, 1)
    expected = 2 * 2 * 2 * collective_time("all_to_all", A2A, link)  # layers x phases x calls
    assert any(
        n.startswith(f"expert-parallel all-to-alls: {seconds(expected)} per micro-batch")
        for n in ep.notes
    )


@pytest.mark.parametrize(
    ("mesh", "says"),
    [
        ({"dp_shard": 4, "ep": 3}, "ep must divide dp_shard"),
        ({"dp_replicate": 2, "ep": 2}, "ep must divide dp_shard"),
        ({"dp_shard": 4, "ep": 2, "tp": 2}, "beside tensor parallelism"),
        # 8 experts over 3 ranks: transformers refuses to shard them unevenly too
        ({"dp_shard": 6, "ep": 3}, r"8 experts, .* give an ep that divides 8: 2, 4, 8"),
    ],
)
def test_ep_refused(mesh: dict[str, int], says: str) -> None:
    with pytest.raises(InvalidInputError, match=says):
        ls.plan(mixtral(), input_shape=(2, 32), mesh=mesh)


def test_a_dense_model_has_no_experts() -> None:
    config = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=256,
    )  # fmt: skip
    with pytest.raises(InvalidInputError, match="has no expert-parallel plan"):
        ls.plan(transformers.LlamaForCausalLM(config), input_shape=(2, 32),
                mesh={"dp_shard": 4, "ep": 2})  # fmt: skip


def test_experts_over_a_pipeline() -> None:
    """ep 2 with pp 2: each stage's experts modules are its own units, the first
    layer's on stage 0, the second's on stage 1, gathering half of the experts."""
    plan = ls.plan(mixtral(), input_shape=(2, 32), mesh={"dp_shard": 4, "ep": 2, "pp": 2},
                   microbatches=2, stage=1)  # fmt: skip
    rows = {r["path"]: r for r in plan.modules}
    assert rows["model.layers.1.mlp.experts"]["unsharded_bytes"] == EXPERTS // 2 * 2
    assert "model.layers.0.mlp.experts" not in rows
    assert plan.comm["model.layers.1.mlp.experts"]["forward"]["all_to_all"]["bytes"] == 2 * A2A


@pytest.mark.parametrize(("precision", "dtype"), [("fp32", "float32"), ("fp16-mixed", "float16")])
def test_grouped_experts_outside_bfloat16_refused_with_the_fixes(
    precision: str, dtype: str
) -> None:
    """transformers' grouped_mm experts kernel takes bfloat16 only (torch._grouped_mm's
    CUDA checks, which its meta kernel repeats): a plan computing in another dtype is
    refused before the analysis, naming the fixes; with batched_mm it plans."""
    model = mixtral()
    assert model.config._experts_implementation == "grouped_mm"
    with pytest.raises(InvalidInputError, match=f"computes in {dtype}: plan precision='bf16'"):
        ls.plan(model, input_shape=(2, 32), world_size=1, precision=precision)
    model.config._experts_implementation = "batched_mm"
    plan = ls.plan(model, input_shape=(2, 32), world_size=1, precision=precision)
    assert plan.peak_bytes > 0 and model.config._experts_implementation == "batched_mm"


def test_grouped_experts_under_ddps_autocast_refused_with_the_fixes() -> None:
    """DDP's bf16-mixed is autocast over float32 weights, and autocast does not cast
    _grouped_mm's inputs (not among its lower-precision ops): the kernel would get
    float32 in the run as in the analysis, which raised the model's error from inside the
    experts. Refused before the analysis, naming the fixes; FSDP2's bf16-mixed, whose
    mixed precision casts the weights, plans."""
    model = mixtral()
    words = "computes in bfloat16 under autocast, with float32 weights, and autocast does not"
    with pytest.raises(InvalidInputError, match=words):
        ls.plan(model, input_shape=(2, 32), world_size=2, sharding="ddp")
    assert ls.plan(model, input_shape=(2, 32), world_size=2, sharding="fsdp").peak_bytes > 0
