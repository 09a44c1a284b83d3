"""Context parallelism in plans (``planning.contextparallel``): a rule over one rank's
share of the sequence, checked by hand on a small Llama (torch's ``context_parallel``
runs its ring attention on CUDA kernels only, and no real run of it goes on CPU here).

The model: 2 layers, hidden 64, 4 heads of 16, 2 key/value heads; a micro-batch of
[2, 64] tokens; bf16 mixed precision; FSDP2 over dp_shard x cp."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import layerscope as ls
from layerscope.analysis.rates import rates_of
from layerscope.errors import InvalidInputError
from layerscope.hardware import device_spec
from layerscope.planning.kernels import _price, kernels_of, predict
from layerscope.planning.options import check_options
from layerscope.render.units import seconds

transformers = pytest.importorskip("transformers")

#: a layer's keys and values as its attention reads them: [2, 2 heads, 32 tokens, 16]
#: bf16 each, one rank's half of the sequence
KV = 2 * (2 * 2 * 32 * 16 * 2)  # 8,192 B


def llama() -> Any:
    config = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=256,
    )  # fmt: skip
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)


@pytest.fixture(scope="module")
def plans() -> tuple[Any, Any]:
    """(FSDP2 over 4 GPUs, FSDP2 over 2 x context parallel 2), the same micro-batch."""
    model = llama()
    plain = ls.plan(model, input_shape=(2, 64), mesh={"dp_shard": 4})
    return plain, ls.plan(model, input_shape=(2, 64), mesh={"dp_shard": 2, "cp": 2})


def test_one_ranks_share_of_the_sequence(plans: tuple[Any, Any]) -> None:
    """The analysis holds 2 x 32 tokens; the gradients are reduced over dp_shard x cp =
    4 GPUs, so the model states per GPU are FSDP2-over-4's; the notes say the rule."""
    plain, cp = plans
    assert (plain.tokens, cp.tokens) == (2 * 64, 2 * 32)
    assert cp.states == plain.states
    assert cp.analysis is not None and cp.analysis.model["cp"] == {"whole": 64, "local": 32}
    assert any(n.startswith("context parallel 2: the sequence of 64 tokens") for n in cp.notes)
    assert "x context parallel 2" in cp.render(width=100)


def test_the_keys_and_values_collectives(plans: tuple[Any, Any]) -> None:
    """Each layer's attention: its keys and values (8,192 B) all-gathered forward and
    backward (each rank sends its half to the other: 8,192 B on the wire), their
    gradients reduce-scattered (2 x 8,192 B in, half of it sent); priced on the 2
    ranks' link and said in the notes."""
    _, cp = plans
    for layer in (0, 1):
        phases = cp.comm[f"model.layers.{layer}.self_attn"]
        gather = {"calls": 1, "bytes": KV, "wire_bytes": KV}
        assert phases["forward"] == {"all_gather": gather}
        assert phases["backward"] == {
            "all_gather": gather,
            "reduce_scatter": {"calls": 1, "bytes": 2 * KV, "wire_bytes": KV},
        }
    from layerscope.planning.collectives import collective_time, strided

    link = strided(check_options({"target": "h100"}).network, 2, 1)
    per_layer = 2 * collective_time("all_gather", KV, link) + collective_time(
        "reduce_scatter", 2 * KV, link
    )
    assert any(
        n.startswith(f"context-parallel collectives: {seconds(2 * per_layer)} per micro-batch")
        for n in cp.notes
    )


def test_attention_at_its_share_of_the_whole(plans: tuple[Any, Any]) -> None:
    """A rank's 32 queries against all 64 keys, causal and load-balanced, are half of
    the whole causal attention: twice the analysis's 32-token attention. Pricing the
    attention kernels at 2x adds, to the root, exactly what 2x costs each attention
    record more, and nothing to the other modules."""
    _, cp = plans
    prof = cp.analysis
    assert prof is not None
    spec = device_spec("h100")
    rates, peak, bandwidth = rates_of(spec), spec.peak("bfloat16"), spec.bandwidth
    one = predict(prof, rates, peak, bandwidth)
    two = predict(prof, rates, peak, bandwidth, attention_scale=2)
    kernels = kernels_of(prof)
    assert kernels is not None
    rows = [(k, r) for k, r in kernels.rows.items() if k[2] == "attention"]
    assert rows
    more = sum(
        _price(rates, peak, bandwidth, k, [r[0], *(2 * x for x in r[1:])])
        - _price(rates, peak, bandwidth, k, r)
        for k, r in rows
    )
    for phase_one, phase_two in ((one.forward, two.forward), (one.backward, two.backward)):
        mlp = prof.node("model.layers.0.mlp")
        assert phase_two[id(mlp)] == phase_one[id(mlp)]
    total = (two.forward[id(prof.root)] + two.backward[id(prof.root)]) - (
        one.forward[id(prof.root)] + one.backward[id(prof.root)]
    )
    assert total == pytest.approx(more)
    # PaLM's attention count, 12 B H Sq Sk D, with Sk the whole 64 tokens: twice too
    assert two.attention_flops == 2 * one.attention_flops


def test_a_sequence_that_does_not_split_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="must split into 4 equal chunks"):
        ls.plan(llama(), input_shape=(2, 30), mesh={"dp_shard": 2, "cp": 2})


def test_context_parallel_alone_shards_the_model_over_its_ranks() -> None:
    """FSDP2 shards over dp_shard x cp (torchtitan's dp_shard_cp): cp 2 alone is FSDP2
    over 2, and dp_replicate 2 x cp 2 is HSDP with shard groups of 2 (before, the first
    was refused as one GPU and the second planned as DDP with whole model states).
    Parameters: 2 x 256 x 64 + 2 layers x 36,992 + 64 = 106,816, float32 masters."""
    model = llama()
    whole = (2 * 256 * 64 + 2 * 36_992 + 64) * 4
    alone = ls.plan(model, input_shape=(2, 64), mesh={"cp": 2})
    assert (alone.options["sharding"], alone.states["param_bytes"]) == ("fsdp", whole // 2)
    hsdp = ls.plan(model, input_shape=(2, 64), mesh={"dp_replicate": 2, "cp": 2})
    assert hsdp.options["hsdp"] == [2, 2] and hsdp.states["param_bytes"] == whole // 2


def test_attention_without_a_fused_kernel_is_refused() -> None:
    """Eager attention (or SDPA's math path) gives the ring nothing to pass: refused with
    the fix, not planned with no collectives."""
    config = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=256, attn_implementation="eager",
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config)
    with pytest.raises(InvalidInputError, match="attn_implementation='sdpa' and plan in"):
        ls.plan(model, input_shape=(2, 64), mesh={"dp_shard": 2, "cp": 2})
