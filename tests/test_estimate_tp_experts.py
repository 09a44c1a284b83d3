"""``tp=`` on a mixture of experts: the all-experts (worst-case) times carry the same
tensor-parallel collectives as the expected ones, so the worst case is never faster.

The model (``meta_mixtral(8)``): 2 layers, hidden 64, 8 experts of MLP 128, top 2,
bfloat16. One expert: gate and up 2 x 128 x 64 and down 64 x 128 = 24,576 elements; at
``tp=2`` each GPU holds half of every expert: 12,288 elements, 24,576 B. Routing moves
no collective (the experts' all-reduce carries the hidden states, whichever experts ran),
so the worst and expected steps differ only by the experts' bytes: per step
``2 layers x (8 - expected experts) x 24,576 B`` over H100's 3.35 TB/s (every experts
module memory-bound at these batches), the collectives the same on both sides.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch

import layerscope as ls
from helpers.models import meta_mixtral
from layerscope.generation.moe import expected_experts

#: H100 SXM5's HBM3 bandwidth, bytes/s (datasheet: 3.35 TB/s)
BANDWIDTH = 3.35e12
#: one GPU's half of one expert at tp=2: 24,576 elements / 2 x 2 B
HALF_EXPERT = 24_576 // 2 * 2
LAYERS, EXPERTS, TOP_K = 2, 8, 2
COMMON: dict[str, Any] = {"target": "h100", "prompt": 112, "new_tokens": 16, "cache": "paged"}


def _extra(tokens: int) -> float:
    """Seconds the worst case adds to a step of ``tokens`` tokens: the experts it does not
    expect to read, at one GPU's half."""
    missed = EXPERTS - expected_experts(EXPERTS, TOP_K, tokens)
    return LAYERS * missed * HALF_EXPERT / BANDWIDTH


def test_the_worst_case_keeps_the_collectives() -> None:
    """Batch 1: 6 experts unread, 2 x 6 x 24,576 = 294,912 B more, 8.8033e-08 s; batch 8:
    8 x 0.75^8 = 0.80090332 unread, 39,366.0 B more, 1.1751e-08 s; batch 64: 8 x 0.75^64
    = 8.03e-08 unread, 1.18e-15 s, the worst case the expected one. The prefill of 112
    tokens (batch 1) reads all 8 expected: its worst case is its time. At tp=2 the
    collectives (8.8e-05 s a step here) dwarf those differences: without them on the
    worst side it was 1.5e-07 s against 8.8e-05 at batch 1."""
    est = ls.estimate_generate(meta_mixtral(8, torch.bfloat16), batch=[1, 8, 64], tp=2, **COMMON)
    assert est.device["bandwidth"] == BANDWIDTH
    assert _extra(1) == pytest.approx(294_912 / 3.35e12) == pytest.approx(8.8033e-08, rel=1e-4)
    assert _extra(8) == pytest.approx(1.1751e-08, rel=1e-4)
    assert _step_comm(1) == pytest.approx(8.7802e-05, rel=1e-4)
    for r in est.sweep:
        assert r.decode_time_all_experts is not None and r.prefill_time_all_experts is not None
        added = r.decode_time_all_experts - r.decode_time_per_token
        assert added == pytest.approx(_extra(r.batch), rel=1e-6, abs=1e-18)
        assert r.decode_time_all_experts >= r.decode_time_per_token
        prefill_added = r.prefill_time_all_experts - r.prefill_time
        assert prefill_added == pytest.approx(_extra(r.batch * 112), abs=1e-18)
        assert r.prefill_time_all_experts >= r.prefill_time
        # the step's collectives on both sides (below them, one GPU's roofline: < 2 us)
        comm = _step_comm(r.batch)
        assert comm < r.decode_time_per_token <= r.decode_time_all_experts < comm + 2e-6


def _step_comm(batch: int) -> float:
    """Seconds of a decode step's collectives on the H100 node's NVLink (NCCL's model,
    ``planning.collectives``): the all-reduces of the hidden states, ``batch x 64`` in
    bfloat16 = 128 B a row, after the vocabulary-parallel embedding and each layer's
    o_proj and experts (5); the all-gather of one GPU's half of the logits, 128 of 256
    in bfloat16 = 256 B a row (1). At batch 1: 5 x 15.2 us + 11.8 us = 87.8 us."""
    from layerscope.planning.cluster import default_cluster
    from layerscope.planning.collectives import collective_time, consecutive

    link = consecutive(default_cluster(ls.device_spec("h100")), 2)
    reduce = collective_time("all_reduce", 128 * batch, link)
    return 5 * reduce + collective_time("all_gather", 256 * batch, link)


def test_one_gpu_is_unchanged() -> None:
    """tp=1: no collectives; batch 64 reads all 8 experts expected, the worst case equal
    (1.63 us a step for this model), batch 1 the worst 2 x 6 x 49,152 B (whole experts)
    over 3.35 TB/s = 1.7606e-07 s slower."""
    est = ls.estimate_generate(meta_mixtral(8, torch.bfloat16), batch=[1, 64], **COMMON)
    one, many = est.sweep
    assert many.decode_time_all_experts == pytest.approx(many.decode_time_per_token, rel=1e-9)
    assert one.decode_time_all_experts is not None
    added = one.decode_time_all_experts - one.decode_time_per_token
    assert added == pytest.approx(2 * 6 * 49_152 / 3.35e12) == pytest.approx(1.7606e-07, rel=1e-4)


def test_the_serving_plans_note_says_the_same() -> None:
    """``plan_serving(tp=2)`` repeats the estimate's note: each batch's all-8 time is at
    least its expected one."""
    plan = ls.plan_serving(
        meta_mixtral(8, torch.bfloat16), target="h100", max_context=128, prompt=112,
        new_tokens=16, batch=[1, 8], tp=2,
    )  # fmt: skip
    note = next(n for n in plan.notes if n.startswith("Mixture of experts"))
    units = {"ns": 1e-9, "µs": 1e-6, "ms": 1e-3, "s": 1.0}
    pairs = re.findall(r"decode ([\d.]+) (\w+) per token \(all 8: ([\d.]+) (\w+)\)", note)
    assert len(pairs) == 2, note
    for time, unit, worst, worst_unit in pairs:
        assert unit == worst_unit == "µs", note  # collectives: tens of µs on both sides
        assert float(worst) * units[worst_unit] >= float(time) * units[unit]
