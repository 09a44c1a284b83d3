"""The signs of a plan's timeline: no bytes column is ever negative, and a transformers
experts module's gradients appear in ``grad_bytes`` when its backward makes them.

The case that went negative: a fused experts module (``MixtralExperts``) runs the up
projection (``gate_up_proj``), then its ``act_fn`` child, then the down projection
(``down_proj``), so its backward makes ``down_proj``'s gradient, runs ``act_fn``'s
backward, and only then makes ``gate_up_proj``'s. The replay counted both gradients as
made at the module's first backward moment and took them out of the analysis's live
bytes (which hold gradients as made) from there: ``gate_up_proj``'s 8 x 256 x 64 bf16
elements, 262,144 B, were subtracted from the activations before the analysis had them,
and in the last layer's backward, where little else is live, the activations went
negative (``timeline.Setup.grads_after``, ``expertparallel.late_grads``)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import layerscope as ls

transformers = pytest.importorskip("transformers")

#: the small Mixtral of ``test_expert_parallel``: 2 layers, hidden 64, 8 experts of
#: intermediate 128, top 2, vocabulary 256; bf16 gradients
GATE_UP = 8 * 256 * 64 * 2  # 262,144 B
DOWN = 8 * 64 * 128 * 2  # 131,072 B
#: a small Qwen2-MoE: 4 experts of intermediate 32, hidden 64
QWEN_GATE_UP = 4 * 64 * 64 * 2  # 32,768 B
QWEN_DOWN = 4 * 64 * 32 * 2  # 16,384 B


def mixtral() -> Any:
    config = transformers.MixtralConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=256, num_local_experts=8, num_experts_per_tok=2,
        use_cache=False,
    )  # fmt: skip
    torch.manual_seed(0)
    return transformers.MixtralForCausalLM(config)


def qwen2_moe() -> Any:
    config = transformers.Qwen2MoeConfig(
        hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
        shared_expert_intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=256, num_experts=4, num_experts_per_tok=2,
        use_cache=False,
    )  # fmt: skip
    torch.manual_seed(0)
    return transformers.Qwen2MoeForCausalLM(config)


EP: dict[str, Any] = {"mesh": {"dp_shard": 4, "ep": 2}}
CONFIGS: dict[str, tuple[Any, dict[str, Any]]] = {
    "mixtral ep 2": (mixtral, EP),
    "mixtral ep 2, blocks checkpointed": (mixtral, {**EP, "checkpoint": "blocks"}),
    "mixtral ep 2, per-op checkpointing": (mixtral, {**EP, "checkpoint": "op"}),
    "mixtral ep 2, fused loss": (mixtral, {**EP, "loss": "fused"}),
    "mixtral fsdp over 4": (mixtral, {"mesh": {"dp_shard": 4}}),
    "mixtral one gpu": (mixtral, {"world_size": 1}),
    "mixtral zero-2, 2 micro-batches": (
        mixtral, {"world_size": 2, "sharding": "zero2", "grad_accum": 2}
    ),
    "qwen2-moe ep 2": (qwen2_moe, EP),
    "qwen2-moe ep 2, blocks checkpointed": (qwen2_moe, {**EP, "checkpoint": "blocks"}),
    "qwen2-moe one gpu": (qwen2_moe, {"world_size": 1}),
}  # fmt: skip


def bytes_columns(plan: Any) -> list[str]:
    return ["total", *(c for c in plan.timeline if c.endswith("_bytes"))]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_no_bytes_column_is_negative(name: str) -> None:
    """Every point of the timeline, every part and the total: at least 0 (before the
    fix, every Mixtral plan here had its last layer's experts' activations below 0)."""
    make, options = CONFIGS[name]
    plan = ls.plan(make(), input_shape=(2, 32), **options)
    columns = bytes_columns(plan)
    assert len(columns) == 10  # the total and the nine parts
    below = [
        (i, plan.timeline["event"][i], plan.timeline["path"][i], c)
        for c in columns
        for i, v in enumerate(plan.timeline[c])
        if v < 0
    ]
    assert below == []


def rows(plan: Any, event: str, path: str) -> list[int]:
    """The timeline's points of ``event`` at ``path``, in order."""
    t = plan.timeline
    return [i for i, (e, p) in enumerate(zip(t["event"], t["path"], strict=True))
            if e == event and p == path]  # fmt: skip


def test_the_row_that_was_negative() -> None:
    """The expert-parallel plan of ``test_expert_parallel`` (FSDP2 over 4, ep 2), at
    layer 0's experts' second backward moment (after ``act_fn``'s backward): the
    analysis holds 773,300 B there, among them the gradients made so far, in bf16:
    ``lm_head`` 256 x 64 (32,768 B), the final norm's 64 (128 B), all of layer 1 (q 64 x
    64 and o 64 x 64: 8,192 B each; k and v 32 x 64: 4,096 B each; two norms of 64:
    128 B each; the router 8 x 64: 1,024 B; the experts 393,216 B: 419,072 B), and
    layer 0's ``down_proj`` (131,072 B): 583,040 B. So the activations are 773,300 -
    583,040 = 190,260 B (-71,884 B before, ``gate_up_proj``'s 262,144 B taken out too
    early); at ``act_fn``'s backward just before, 838,836 - 583,040 = 255,796 B (was
    -6,348 B). The gradients there: those 163,968 B not yet reduce-scattered (``lm_head``,
    the norm, ``down_proj``) and the float32 shards of the units reduced (layer 1's
    experts: 196,608 elements / 4 x 4 B = 196,608 B; the rest of layer 1: 12,928 / 4 x 4
    B = 12,928 B): 373,504 B; ``gate_up_proj``'s appear at the next point."""
    plan = ls.plan(mixtral(), input_shape=(2, 32), **EP)
    path = "model.layers.0.mlp.experts"
    assert plan.analysis is not None
    analysed = plan.analysis.memory["timeline"]
    moments = [k for k, (e, p) in enumerate(zip(analysed["event"], analysed["path"], strict=True))
               if e == "backward" and p == path]  # fmt: skip
    assert [analysed["bytes"][k] for k in moments] == [725_172, 773_300]
    made = 32_768 + 128 + (2 * 8_192 + 2 * 4_096 + 2 * 128 + 1_024 + GATE_UP + DOWN) + DOWN
    assert made == 583_040
    second = rows(plan, "backward", path)[1]
    t = plan.timeline
    assert t["activation_bytes"][second] == 773_300 - made == 190_260
    act_fn = rows(plan, "backward", path + ".act_fn")[0]
    assert act_fn == second - 2 and t["activation_bytes"][act_fn] == 838_836 - made == 255_796
    assert t["grad_bytes"][second] == (32_768 + 128 + DOWN) + (196_608 + 12_928) == 373_504
    assert (t["event"][second + 1], t["path"][second + 1]) == ("peak", path)
    assert t["grad_bytes"][second + 1] - t["grad_bytes"][second] == GATE_UP


@pytest.mark.parametrize(
    ("make", "gate_up", "down"), [(mixtral, GATE_UP, DOWN), (qwen2_moe, QWEN_GATE_UP, QWEN_DOWN)]
)
def test_experts_gradients_appear_as_made(make: Any, gate_up: int, down: int) -> None:
    """One GPU (FSDP2 over 1: every analysed gradient held until the root's
    reduce-scatter): in each layer, the experts module's first backward moment makes
    ``down_proj``'s gradient, ``act_fn``'s backward none, and the experts' moment after
    it ``gate_up_proj``'s (Mixtral 8 x 256 x 64 and 8 x 64 x 128 bf16; Qwen2-MoE 4 x 64
    x 64 and 4 x 64 x 32)."""
    plan = ls.plan(make(), input_shape=(2, 32), world_size=1)
    grads = plan.timeline["grad_bytes"]
    for layer in (0, 1):
        path = f"model.layers.{layer}.mlp.experts"
        first, second = rows(plan, "backward", path)
        assert rows(plan, "peak", path)[-2:] == [first + 1, second + 1]
        assert grads[first + 1] - grads[first] == down
        assert grads[second] == grads[first + 1]
        assert grads[second + 1] - grads[second] == gate_up
