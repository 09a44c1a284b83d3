"""What ``ls.plan_serving`` refuses and what it advises: int4's group sizes that would
do (``generation.weights``), ``memory_utilization`` outside (0, 1], a plan's lengths and
batches below their floor, and what leaves no room when not one sequence fits (the
share, the reserve or the model itself)."""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from layerscope.errors import InvalidInputError
from layerscope.generation.serving import plan_serving
from layerscope.generation.serving_result import ServingPlan
from layerscope.generation.serving_view import no_room
from layerscope.generation.weights import group_sizes

#: hidden 64 (every linear's input but the MLP's down projection), MLP 192 (its input)
SHAPE: dict[str, Any] = {
    "vocab_size": 256, "hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
}  # fmt: skip
COMMON: dict[str, Any] = {"target": "h100", "max_context": 64, "new_tokens": 8, "batch": 1}
#: the H100's usable bytes (the hardware table)
USABLE = 85_029_158_912


def _llama() -> Any:
    with torch.device("meta"):
        return LlamaForCausalLM(LlamaConfig(**SHAPE))


@cache
def _plan(**options: Any) -> ServingPlan:
    return plan_serving(_llama(), **COMMON, **options)


def test_an_int4_group_size_that_does_not_divide_names_ones_that_do() -> None:
    """Group 128 does not divide the down projection's 192 input channels; the powers of
    two that divide every quantized weight's (64 and 192: their gcd 64) are named, the
    largest first, and 128 is not among them."""
    with pytest.raises(InvalidInputError) as caught:
        plan_serving(_llama(), **COMMON, weights="int4")
    assert str(caught.value) == (
        "group_size=128 does not divide the 192 input channels of "
        "model.layers.0.mlp.down_proj's weight: int4's groups split them evenly; give a "
        "group size that divides 192 (e.g. 64, 32, 16: powers of two that divide every "
        "quantized weight's input channels)"
    )
    # the first size named does: the plan is made
    assert plan_serving(_llama(), **COMMON, weights="int4", group_size=64).weights == "int4"


def test_the_group_sizes_named_are_powers_of_two_dividing_every_count() -> None:
    assert group_sizes([192, 64]) == [64, 32, 16]
    assert group_sizes([4096, 11008]) == [256, 128, 64]
    assert group_sizes([96]) == [32, 16, 8]
    assert group_sizes([6, 10]) == [2]
    assert group_sizes([7, 96]) == []  # an odd count: no power of two above 1


@pytest.mark.parametrize("share", [0, 0.0, -0.5, 1.01, float("nan")])
def test_memory_utilization_outside_zero_to_one_is_refused(share: float) -> None:
    """vLLM's rule for gpu_memory_utilization: above 0 (0 leaves a budget of 0 B), at most
    1."""
    with pytest.raises(InvalidInputError) as caught:
        plan_serving(_llama(), **COMMON, memory_utilization=share)
    assert str(caught.value) == (
        "memory_utilization (--memory-utilization) must be a share of the usable memory "
        "above 0 and at most 1 (vLLM's gpu_memory_utilization; 0.9 unless given), got "
        f"{share!r}"
    )


def test_memory_utilization_of_one_is_taken() -> None:
    assert _plan(memory_utilization=1).budget == USABLE


def test_a_negative_length_and_a_batch_below_one_are_refused() -> None:
    p = _plan()
    with pytest.raises(InvalidInputError) as caught:
        p.kv_bytes(-5)
    assert str(caught.value) == "length must be a number of tokens >= 0 (an int), got -5"
    with pytest.raises(InvalidInputError) as caught:
        p.longest_context(0)
    assert str(caught.value) == "batch must be a number of sequences >= 1 (an int), got 0"
    assert p.kv_bytes(0) == 0 and p.longest_context(1) == 64


def _advice(p: ServingPlan) -> str:
    """What the plan's text says after its "Max concurrency" count."""
    line = next(x for x in p.render(width=1000).splitlines() if x.startswith("Max concur"))
    return line.split("0 sequences. ", 1)[1]


def _own(p: ServingPlan) -> int:
    """The weights, the workspace and one sequence's KV cache at max_context."""
    return p.weight_bytes + p.workspace_bytes + p.kv_bytes(p.max_context)


def test_a_tiny_share_is_named_not_narrower_weights() -> None:
    """memory_utilization 0.00001 (830 KiB of the H100's 79 GiB) below a model of under 1
    MiB: the share is what leaves no room, and the advice gives the least that fits it
    beside the 2 GiB reserve (rounded up to hundredths), not narrower weights."""
    p = _plan(memory_utilization=0.00001)
    assert p.max_concurrency == 0 and p.reserve_bytes == 2 * 1024**3
    least = -(-(_own(p) + p.reserve_bytes) * 100 // USABLE) / 100
    assert least == 0.03
    advice = _advice(p)
    assert advice.startswith(
        "It does not fit: the budget (79.19 GiB usable x memory_utilization 1e-05 = "
        "830.36 KiB) less reserve_bytes (2.00 GiB) leaves no room, where the weights, the "
        "workspace and one sequence's KV cache take "
    )
    assert "memory_utilization (--memory-utilization) of at least 0.03" in advice
    assert "weights=" not in advice
    # the share named fits one sequence at least
    assert _plan(memory_utilization=least).max_concurrency >= 1


def test_a_reserve_beyond_the_budget_is_named() -> None:
    """reserve_bytes of 1 TB, beyond the whole 79 GiB: only a smaller reserve helps (at
    most the budget less the model's own needs), a larger share would not."""
    p = _plan(reserve_bytes=10**12)
    assert p.max_concurrency == 0
    most = p.budget - _own(p)
    advice = _advice(p)
    assert advice.startswith(
        "It does not fit: the budget (79.19 GiB usable x memory_utilization 0.9 = 71.27 "
        "GiB) less reserve_bytes (931.32 GiB) leaves no room, where the weights, the "
        "workspace and one sequence's KV cache take "
    )
    assert advice.endswith(f": give reserve_bytes of at most {most:,} B.")
    assert _plan(reserve_bytes=most).max_concurrency == 1


def test_a_model_larger_than_the_memory_is_advised_to_shrink() -> None:
    """The weights beyond the whole usable memory: neither the share nor the reserve
    would help, so the advice is the model's own (narrower weights, ...)."""
    data = _plan().to_dict()
    data["memory"] = {**data["memory"], "weight_bytes": USABLE + 1}
    assert no_room(data) == (
        "It does not fit: store the weights narrower (weights=int8 or int4), the cache "
        "narrower (kv_dtype=fp8), serve a shorter context, split the model over more "
        "GPUs (tp=), or a GPU with more memory."
    )


def test_a_reserve_and_a_share_that_together_leave_no_room() -> None:
    """The model's own needs within the usable memory, but over it with the reserve and
    over the budget without it: both the share and the reserve must change."""
    data = _plan().to_dict()
    m = data["memory"]
    own = m["weight_bytes"] + m["workspace_bytes"] + data["kv"]["bytes_per_sequence"]
    data["memory"] = {**m, "reserve_bytes": USABLE, "weight_bytes": m["budget_bytes"]}
    own += m["budget_bytes"] - m["weight_bytes"]
    assert no_room(data).endswith(
        f": give memory_utilization 1 and reserve_bytes below {USABLE - own:,} B."
    )
