"""ZeRO under mixed precision holds the partition's gradients in float32 for the optimizer
step, as DeepSpeed's ``DeepSpeedZeroOptimizer.step`` does; by hand on a two-Linear model
(280 parameters in 4 tensors) over 2 GPUs: a partition of 140 elements."""

from __future__ import annotations

import torch
from torch import nn

import layerscope as ls

MODEL = nn.Sequential(nn.Sequential(nn.Linear(8, 16)), nn.Sequential(nn.Linear(16, 8)))


def test_zero2_peaks_at_the_step_with_the_float32_gradient_partition() -> None:
    torch.manual_seed(0)
    plan = ls.plan(MODEL, input_shape=(4, 8), world_size=2, sharding="zero2",
                   precision="bf16-mixed", budget=10**9, reserve_bytes=0)  # fmt: skip
    assert plan.peak_phase["phase"] == "optimizer"
    adam = 2 * 140 * 4 + 4 * 4  # exp_avg, exp_avg_sq of the partition; 4 step counters
    assert plan.peak_bytes == (
        280 * 2  # bf16 parameters, every one
        + 140 * 2  # the bf16 gradient partition
        + adam
        + 140 * 4  # the float32 master partition
        + 4 * 8 * 4  # the float32 input
        + adam // 2  # Adam's step temporaries (one state's size)
        + 140 * 4  # the float32 gradient partition of the step
    )


def test_zero1_holds_it_too() -> None:
    torch.manual_seed(0)
    fp32 = ls.plan(MODEL, input_shape=(4, 8), world_size=2, sharding="zero1",
                   precision="bf16-mixed", budget=10**9, reserve_bytes=0)  # fmt: skip
    # zero1 keeps every bf16 gradient (280 x 2) instead of the partition
    assert fp32.peak_bytes == 280 * 2 + 280 * 2 + 1136 + 140 * 4 + 128 + 568 + 140 * 4
