"""Tensor and sequence parallelism in a plan (``mesh={"tp": n}``, ``tp_plan=``,
``sequence_parallel=``), by hand on a stack of three blocks
``Sequential(Linear(64, 256), GELU, Linear(256, 64))``, float32, one micro-batch of
2 x 32 x 64: each block's first Linear split by columns, its last by rows, over 2 ranks.
The real runs these plans are checked against are ``tests/test_tp_steps.py``."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import layerscope as ls
from layerscope.errors import InvalidInputError
from layerscope.render.units import seconds

PLAN = {"*.0": "colwise", "*.2": "rowwise"}
#: the same blocks with a LayerNorm first: the linears are the block's 1 and 3
NORMED_PLAN = {"*.1": "colwise", "*.3": "rowwise"}
OPTIONS: dict[str, Any] = {"input_shape": (2, 32, 64), "precision": "fp32", "reserve_bytes": 0}
#: one activation between blocks, [2, 32, 64] float32
ACT = 2 * 32 * 64 * 4


def _model(norm: bool = False) -> nn.Module:
    torch.manual_seed(0)

    def block() -> nn.Module:
        first = [nn.LayerNorm(64)] if norm else []
        return nn.Sequential(*first, nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))

    return nn.Sequential(*(block() for _ in range(3)))


def _analysis(plan: ls.Plan) -> ls.Profile:
    assert plan.analysis is not None
    return plan.analysis


def _by_module(comm: dict[str, Any]) -> dict[tuple[str, str, str], tuple[int, int]]:
    return {
        (path, phase, kind): (row["calls"], row["bytes"])
        for path, phases in comm.items()
        for phase, kinds in phases.items()
        for kind, row in kinds.items()
    }


def test_each_rank_holds_its_shards() -> None:
    """Per block on each of 2 ranks: the column-wise Linear's 128 of 256 rows (128 x 64
    weight, 128 bias), the row-wise one's 128 of 256 columns (64 x 128) and its whole
    bias (64): 8,192 + 128 + 8,192 + 64 = 16,576 elements, 49,728 for the three, 198,912
    B in float32; gradients the same; AdamW two states of each and a 4-B step per tensor
    (12 tensors): 2 x 198,912 + 48 = 397,872 B. Unsplit: 2 x 16,448 + 256 + 64 = 33,088 x
    3 = 99,264 elements, 397,056 B."""
    plan = ls.plan(_model(), mesh={"tp": 2}, tp_plan=PLAN, **OPTIONS)
    assert (plan.options["world_size"], plan.options["sharding"]) == (2, "none")
    assert plan.states == {
        "param_bytes": 198_912, "grad_bytes": 198_912, "optimizer_state_bytes": 397_872,
        "master_weight_bytes": 0,
    }  # fmt: skip
    whole = ls.plan(_model(), world_size=1, sharding="none", **OPTIONS)
    assert whole.states["param_bytes"] == 397_056
    # FLOPs: 64 tokens; the column-wise Linear 2 x 64 x 64 x 128 and its bias 64 x 128,
    # half the unsplit one's; the row-wise 2 x 64 x 128 x 64 and its bias 64 x 64, plus
    # 64: DTensor halves the replicated bias to add it to the partial sums
    nodes = {n.path: n.metrics for n in _analysis(plan).nodes()}
    assert nodes["0.0"]["flops"] == 2 * 64 * 64 * 128 + 64 * 128 == 1_056_768
    assert 2 * nodes["0.0"]["flops"] == _analysis(whole).node("0.0").metrics["flops"]
    assert nodes["0.2"]["flops"] == 2 * 64 * 128 * 64 + 64 * 64 + 64 == 1_052_736
    assert plan.options["tp_plan"] == PLAN


def test_the_collectives_dtensor_issues() -> None:
    """Without sequence parallelism: each row-wise Linear all-reduces its [2, 32, 64]
    output (16,384 B) in the forward; each column-wise one all-reduces its input's
    gradient in the backward, but block 0's (its input needs none)."""
    plan = ls.plan(_model(), mesh={"tp": 2}, tp_plan=PLAN, **OPTIONS)
    expected = {(f"{b}.2", "forward", "all_reduce"): (1, ACT) for b in range(3)}
    expected |= {(f"{b}.0", "backward", "all_reduce"): (1, ACT) for b in (1, 2)}
    assert _by_module(plan.comm) == expected
    assert plan.time["exposed_comm"] == plan.time["comm"] > 0  # none hidden
    said = f"tensor-parallel collectives: {seconds(plan.time['comm'])} per micro-batch over 2"
    assert any(n.startswith(said) for n in plan.notes)


def test_sequence_parallelism_shards_the_norms() -> None:
    """With a LayerNorm first in each block and sequence parallelism: the norm saves its
    shard of the input, 2 x 16 x 64 x 4 = 8,192 B, and its mean and rstd (2 x 16 x 4 B
    each), 8,448 B against 16,384 + 256 + 256 = 16,896 B. The collectives: block 0 splits
    the input (no communication); each column-wise Linear all-gathers its [2, 16, 64]
    shard (8,192 B) and reduce-scatters its input's gradient (the whole 16,384 B); each
    row-wise one reduce-scatters its output and all-gathers its gradient; the last block
    gathers its output."""
    plain = ls.plan(_model(True), mesh={"tp": 2}, tp_plan=NORMED_PLAN, **OPTIONS)
    plan = ls.plan(
        _model(True), mesh={"tp": 2}, tp_plan=NORMED_PLAN, sequence_parallel=True, **OPTIONS
    )
    assert _analysis(plain).node("0.0").metrics["activation_bytes"] == ACT + 2 * 2 * 32 * 4
    assert _analysis(plan).node("0.0").metrics["activation_bytes"] == ACT // 2 + 2 * 2 * 16 * 4
    expected = {("2", "forward", "all_gather"): (1, ACT // 2)}
    for b in range(3):
        expected[f"{b}.1", "forward", "all_gather"] = (1, ACT // 2)
        expected[f"{b}.1", "backward", "reduce_scatter"] = (1, ACT)
        expected[f"{b}.3", "forward", "reduce_scatter"] = (1, ACT)
        expected[f"{b}.3", "backward", "all_gather"] = (1, ACT // 2)
    assert _by_module(plan.comm) == expected
    assert plan.states == plain.states
    assert plan.options["sequence_parallel"] is True


def test_data_parallelism_over_the_shards() -> None:
    """FSDP2 over 4 data-parallel ranks shards each rank's tensor-parallel shards: 49,728
    / 4 = 12,432 elements (every shard's rows divide by 4: no padding), 49,728 B; its
    all-gathers run between ranks 2 apart (the tensor-parallel group inside)."""
    plan = ls.plan(_model(), mesh={"dp_shard": 4, "tp": 2}, tp_plan=PLAN, **OPTIONS)
    assert (plan.options["world_size"], plan.options["sharding"]) == (8, "fsdp")
    assert plan.states["param_bytes"] == 49_728
    kinds = {k for (_, _, k) in _by_module(plan.comm)}
    assert kinds == {"all_gather", "reduce_scatter", "all_reduce"}


def test_tokens_and_mfu_are_per_gpu() -> None:
    """The 2 GPUs of a tensor-parallel group share one micro-batch: tokens/s per GPU is
    the micro-batch's tokens over 2 step times, and MFU counts 6 N per token over 2 (N
    the whole model's parameters)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(100, 64), *list(_model().children()))
    plan = ls.plan(model, input_shape=(2, 32), input_dtype=torch.long, mesh={"tp": 2},
                   tp_plan=PLAN, precision="fp32", reserve_bytes=0)  # fmt: skip
    assert plan.tokens == 64
    assert plan.tokens_per_s == pytest.approx(64 / (2 * plan.step_time), rel=1e-12)
    n = 100 * 64 + 3 * 33_088
    peak = ls.device_spec("h100").peak("float32")
    assert plan.mfu == pytest.approx(6 * n * 64 / 2 / (plan.step_time * peak), rel=1e-9)


def test_a_sweep_over_tp_keeps_the_gpus() -> None:
    """``tp=[1, 2]`` on 8 GPUs: FSDP2 over 8, then over 4 x tensor parallel 2."""
    sweep = ls.plan_sweep(_model(), world_size=8, tp=[1, 2], tp_plan=PLAN, **OPTIONS)
    assert [(r.tp, r.world_size) for r in sweep.rows] == [(1, 8), (2, 8)]
    alone = ls.plan(_model(), mesh={"dp_shard": 4, "tp": 2}, tp_plan=PLAN, **OPTIONS)
    assert (sweep.rows[1].peak_bytes, sweep.rows[1].step_time) == (
        alone.peak_bytes, alone.step_time
    )  # fmt: skip


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"mesh": {"tp": 2}}, "the model has no tensor-parallel plan"),
        ({"tp_plan": PLAN}, "tp_plan is tensor parallelism's plan: give a mesh with tp"),
        ({"mesh": {"tp": 2}, "tp_plan": {"*.0": "diagonal"}}, "style 'diagonal' is not planned"),
        ({"mesh": {"tp": 2}, "tp_plan": {"*.9": "colwise"}}, "'\\*.9' matches no module"),
        ({"sequence_parallel": True}, "sequence_parallel shards activations over the tensor"),
        ({"mesh": {"tp": 2}, "tp_plan": {"*.2": "rowwise"}, "sequence_parallel": True},
         "no 'colwise' entry of the plan lies in a block"),
    ],
)  # fmt: skip
def test_refusals(options: dict[str, Any], words: str) -> None:
    with pytest.raises(InvalidInputError, match=words):
        ls.plan(_model(), **OPTIONS, **options)


def test_a_given_profile_and_uneven_heads_are_refused() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    prof = ls.profile(_model().to("meta"), input_shape=(2, 32, 64), backward=True, memory=True)
    with pytest.raises(InvalidInputError, match="which a given profile cannot be"):
        ls.plan(prof, mesh={"tp": 2}, tp_plan=PLAN)
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=128)  # fmt: skip
    with torch.device("meta"):
        llama = LlamaForCausalLM(config)
    with pytest.raises(InvalidInputError, match="2 key value heads do not split evenly over 4"):
        ls.plan(llama, input_shape=(1, 16), input_dtype=torch.long, mesh={"tp": 4})


def test_a_given_plan_may_name_modules_under_the_base_model() -> None:
    """A config's ``base_model_tp_plan`` writes its patterns under the base model
    (``layers.*``); given so for a ``LlamaForCausalLM`` (whose layers are
    ``model.layers.*``) they shard the same modules as the full paths do. A pattern that
    matches nothing either way is refused with an example of the model's own paths."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=128)  # fmt: skip
    with torch.device("meta"):
        llama = LlamaForCausalLM(config)
    mlp = {"mlp.gate_proj": "colwise", "mlp.up_proj": "colwise", "mlp.down_proj": "rowwise"}
    plans = [
        ls.plan(llama, input_shape=(1, 16), input_dtype=torch.long, mesh={"tp": 2},
                tp_plan={f"{prefix}layers.*.{k}": v for k, v in mlp.items()})
        for prefix in ("", "model.")
    ]  # fmt: skip
    assert plans[0].memory == plans[1].memory and plans[0].step_time == plans[1].step_time
    with pytest.raises(InvalidInputError, match=r"e\.g\. 'model\.layers\.\*\.mlp\.up_proj'"):
        ls.plan(llama, input_shape=(1, 16), input_dtype=torch.long, mesh={"tp": 2},
                tp_plan={"layers.*.ffn.up_proj": "colwise"})  # fmt: skip


def test_tied_embeddings_stay_tied_and_replicated_norms_stay_whole() -> None:
    """A transformers Llama with tied embeddings (hidden 64, MLP 128, 2 layers, 4 heads
    of 16 and 2 key/value heads, vocabulary 128) at tensor parallel 2: the embedding's
    and the output projection's one weight is split by rows once, not twice: per layer
    the seven linears' (4,096 + 2,048 + 2,048 + 4,096 + 3 x 8,192) / 2 = 18,432 elements
    and the two norms' 128 whole; the final norm's 64; the tied weight's 128 x 64 / 2 =
    4,096: 2 x (18,432 + 128) + 64 + 4,096 = 41,280 elements, 165,120 B in float32.
    Qwen3's plan keeps its per-head q_norm and k_norm whole
    (``replicated_with_grad_allreduce``)."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    shape: dict[str, Any] = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128}  # fmt: skip
    with torch.device("meta"):
        llama = LlamaForCausalLM(LlamaConfig(**shape, tie_word_embeddings=True))
    ids = torch.zeros(1, 16, dtype=torch.long)
    plan = ls.plan(llama, ids, mesh={"tp": 2}, precision="fp32", reserve_bytes=0)
    assert plan.states["param_bytes"] == 41_280 * 4
    with torch.device("meta"):
        qwen = Qwen3ForCausalLM(Qwen3Config(**shape, head_dim=16))
    plan = ls.plan(qwen, ids, mesh={"tp": 2}, precision="fp32", reserve_bytes=0)
    assert plan.options["tp_plan"]["model.layers.*.self_attn.q_norm"] == (
        "replicated_with_grad_allreduce"
    )
    # q_norm and k_norm: 16 elements each, whole on each rank; untied embedding and head
    assert plan.states["param_bytes"] == (2 * (18_432 + 128 + 32) + 64 + 2 * 4_096) * 4


def test_a_style_torch_cannot_apply_is_refused_with_the_fix() -> None:
    """GPT-2's Conv1D holds its weight transposed: torch's colwise style refuses it,
    and the plan says so as an input error, naming what to do."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_embd=64, n_layer=1, n_head=4, vocab_size=256, n_positions=64,
                        bos_token_id=0, eos_token_id=0)  # fmt: skip
    with torch.device("meta"):
        gpt = GPT2LMHeadModel(config)
    with pytest.raises(InvalidInputError, match="Conv1D, for one, stores its weight"):
        ls.plan(gpt, input_shape=(1, 16), input_dtype=torch.long, mesh={"tp": 2},
                tp_plan={"transformer.h.*.mlp.c_fc": "colwise"})  # fmt: skip
