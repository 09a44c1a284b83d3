"""A custom device spec (``ls.device_spec({...})``) is analysed with the kernels of its
``arch``, as a built-in spec of that arch is, not with the CPU's."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import layerscope as ls
from helpers.models import tiny_gpt2


def analysis(model: Any, ids: torch.Tensor, target: Any) -> ls.Profile:
    plan = ls.plan(model, ids, target=target, world_size=1, sharding="none", precision="bf16")
    assert plan.analysis is not None
    return plan.analysis


def custom(arch: str) -> Any:
    h100 = ls.device_spec("h100")
    return ls.device_spec(
        {"name": "my-gpu", "bandwidth": h100.bandwidth, "peak_flops": dict(h100.peak_flops),
         "memory_bytes": h100.memory_bytes, "arch": arch}
    )  # fmt: skip


@pytest.mark.parametrize(
    ("arch", "twin", "kernel"),
    # sm90 with the assumed runtime cuDNN (9.20, newer than 9.15) puts cuDNN first
    [("sm90", "h100", "cudnn_attention"), ("sm80", "a100-80gb", "flash_attention")],
)
def test_a_custom_gpu_follows_its_archs_kernels(arch: str, twin: str, kernel: str) -> None:
    pytest.importorskip("transformers")
    model = tiny_gpt2()
    ids = torch.randint(0, 64, (2, 32), generator=torch.Generator().manual_seed(0))
    mine, theirs = analysis(model, ids, custom(arch)), analysis(model, ids, twin)
    assert mine.model["target"] == f"my-gpu (cuda {arch})"
    # bf16 attention of 2 heads of 16 on the GPU's fused kernel, in each of the 2 layers
    assert mine.model["kernels"] == {"scaled_dot_product_attention": {kernel: 2}}
    assert mine.model["kernels"] == theirs.model["kernels"]
    assert [n.metrics for n in mine.nodes()] == [n.metrics for n in theirs.nodes()]


def test_a_custom_gpu_without_a_compute_capability_follows_the_cpu() -> None:
    pytest.importorskip("transformers")
    model = tiny_gpt2()
    ids = torch.randint(0, 64, (2, 32), generator=torch.Generator().manual_seed(0))
    assert analysis(model, ids, custom("custom")).model["target"] == "cpu"
