"""Bytes moved per op and module (``bytes_accessed``), against hand-derived numbers.

The convention (docs/roofline.md): an op reads each distinct tensor argument once and
writes each tensor it returns once; views and allocations move nothing; an in-place op
reads and writes its argument, an overwrite (``copy_``, ``fill_``, ``zero_``) only writes
it. float32: 4 bytes per element.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import layerscope as ls
from layerscope.metrics.bytes import _Plan, op_bytes

F32 = 4


def _square_sum(out: torch.Tensor) -> torch.Tensor:
    """A loss whose gradient (2 * out) is a dense tensor: the default sum's gradient is a
    scalar expanded to the output's shape (stride 0), which reaches one element."""
    return (out * out).sum()


def _bytes(model: nn.Module, *args: torch.Tensor, backward: bool = False) -> ls.Profile:
    torch.manual_seed(0)
    loss = _square_sum if backward else None
    return ls.profile(model, args=args, backward=backward, loss_fn=loss)


def test_linear_forward_and_backward() -> None:
    """Linear(8, 16) on (2, 8): ``addmm(bias, x, W.t())`` reads the bias (16), x (2*8)
    and W (16*8; ``t`` is a view: 0 B) and writes (2, 16).

    Backward (x needs no grad): ``mm(grad.t(), x)`` reads grad (2*16) and x (2*8) and
    writes the weight grad (16*8); ``sum(grad, 0)`` reads grad (2*16) and writes the
    bias grad (16); the ``t``/``view`` steps are views."""
    prof = _bytes(nn.Linear(8, 16), torch.randn(2, 8), backward=True)
    m = prof.root.metrics
    assert m["bytes_accessed"] == F32 * ((16 + 2 * 8 + 16 * 8) + 2 * 16)  # 768
    assert m["backward_bytes_accessed"] == F32 * (
        (2 * 16 + 2 * 8 + 16 * 8) + (2 * 16 + 16)
    )  # 704 + 192 = 896


def test_conv2d() -> None:
    """Conv2d(3, 8, 3, padding=1) on (1, 3, 8, 8): one ``convolution`` reads the input
    (3*8*8), the weight (8*3*3*3) and the bias (8) and writes (1, 8, 8, 8)."""
    prof = _bytes(nn.Conv2d(3, 8, 3, padding=1), torch.randn(1, 3, 8, 8))
    assert prof.root.metrics["bytes_accessed"] == F32 * (3 * 64 + 8 * 27 + 8 + 8 * 64)


def test_layer_norm() -> None:
    """LayerNorm(16) on (4, 16): ``native_layer_norm`` reads x, weight and bias and writes
    the output and the per-row mean and rstd it keeps for backward ((4, 1) each)."""
    prof = _bytes(nn.LayerNorm(16), torch.randn(4, 16))
    assert prof.root.metrics["bytes_accessed"] == F32 * ((64 + 16 + 16) + (64 + 4 + 4))


class _Attention(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v)


def test_sdpa_fused_kernel_counts_only_its_inputs_and_outputs() -> None:
    """SDPA on CPU, (batch 1, heads 2, tokens 8, head dim 16): the flash kernel reads q, k
    and v (2*8*16 each) and writes the output (2*8*16) and the log-sum-exp per row
    (2*8); the (8, 8) attention matrix never reaches memory."""
    q, k, v = (torch.randn(1, 2, 8, 16) for _ in range(3))
    prof = _bytes(_Attention(), q, k, v)
    assert prof.root.metrics["bytes_accessed"] == F32 * (3 * 256 + 256 + 16)


def test_views_allocations_in_place_and_overwrites() -> None:
    x = torch.randn(4, 8)
    y = torch.randn(4, 8)
    aten = torch.ops.aten

    def moved(op: torch._ops.OpOverload, *args: object) -> tuple[int, int]:
        out = op(*args)
        return op_bytes(_Plan(op), args, {}, out)

    assert moved(aten.view.default, x, [32]) == (0, 0)  # a view
    assert moved(aten.t.default, x) == (0, 0)
    assert moved(aten.empty_like.default, x) == (0, 0)  # an allocation
    assert moved(aten.ones_like.default, x) == (0, 4 * 8 * F32)  # writes, reads the shape
    assert moved(aten.add.Tensor, x, y) == (2 * 32 * F32, 32 * F32)
    assert moved(aten.mul.Tensor, x, x) == (32 * F32, 32 * F32)  # one distinct argument
    z = x.clone()
    assert moved(aten.relu_.default, z) == (32 * F32, 32 * F32)  # read-modify-write
    assert moved(aten.copy_.default, z, y) == (32 * F32, 32 * F32)  # reads src only
    assert moved(aten.zero_.default, z) == (0, 32 * F32)  # an overwrite
    # an expanded argument reaches its 8 underlying elements once
    row = torch.randn(8).expand(4, 8)
    assert moved(aten.add.Tensor, x, row) == ((32 + 8) * F32, 32 * F32)


def test_self_and_inclusive_add_up_and_count_bytes_turns_it_off() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    prof = _bytes(model, torch.randn(2, 8), backward=True)
    prof.self_check()  # inclusive = self + children for bytes too
    # ReLU on (2, 16): reads 32 and writes 32 values; its backward
    # threshold_backward reads the gradient and the output (32 each), writes 32
    relu = prof.node("1")
    assert relu.metrics["bytes_accessed"] == F32 * 64
    assert relu.metrics["backward_bytes_accessed"] == F32 * 96
    off = ls.profile(model, torch.randn(2, 8), count_bytes=False)
    assert "bytes_accessed" not in off.root.metrics
    assert off.root.metrics["flops"] == prof.root.metrics["flops"]


def test_a_gather_reads_only_what_it_returns() -> None:
    """Embedding(100, 8) on (2, 5) int64 indices: reads the 10 rows it returns (10*8
    floats = 320 B, not the 100*8 table) and the indices (10 * 8 B = 80 B), writes
    (2, 5, 8) = 320 B: 720 B. Backward: ``embedding_dense_backward`` reads the output
    gradient (320 B) and the indices (80 B) and writes the dense weight gradient, the
    whole table (100*8*4 = 3,200 B): 3,600 B."""
    prof = _bytes(nn.Embedding(100, 8), torch.randint(0, 100, (2, 5)), backward=True)
    m = prof.root.metrics
    assert m["bytes_accessed"] == 10 * 8 * F32 + 10 * 8 + 2 * 5 * 8 * F32 == 720
    assert m["backward_bytes_accessed"] == 320 + 80 + 100 * 8 * F32 == 3600
    # index_select of 3 of 1,000 rows of 4; gather whose result is larger than its source
    # (4 elements gathered 6 times): at most the source, 16 B
    src, rows = torch.randn(1000, 4), torch.tensor([1, 5, 7])
    plan = _Plan(torch.ops.aten.index_select.default)
    out = torch.index_select(src, 0, rows)
    assert op_bytes(plan, (src, 0, rows), {}, out) == (3 * 4 * F32 + 3 * 8, 3 * 4 * F32)
    small, idx = torch.randn(4), torch.zeros(6, dtype=torch.long)
    plan = _Plan(torch.ops.aten.gather.default)
    out = torch.gather(small, 0, idx)
    assert op_bytes(plan, (small, 0, idx), {}, out) == (4 * F32 + 6 * 8, 6 * F32)


def test_metadata_queries_move_nothing_and_comparisons_read() -> None:
    """``prim::device`` (which a FakeTensorMode asks of every argument) reads metadata
    only: 0 B. ``equal`` returns a bool and writes nothing, but reads both tensors:
    2 * 6 floats = 48 B."""
    t, u = torch.randn(2, 3), torch.randn(2, 3)
    device = _Plan(torch.ops.prim.device.default)
    assert op_bytes(device, (t,), {}, t.device) == (0, 0)
    equal = _Plan(torch.ops.aten.equal.default)
    assert op_bytes(equal, (t, u), {}, False) == (2 * 6 * F32, 0)


def test_cat_and_stack_read_every_tensor_of_their_list() -> None:
    """``cat([a, b])`` of (2, 3) and (4, 3) reads both (6 + 12 elements) and writes
    (6, 3); ``stack([a, a2])`` of two (2, 3) reads 12 and writes (2, 2, 3)."""
    a, b = torch.zeros(2, 3), torch.zeros(4, 3)
    cat = _Plan(torch.ops.aten.cat.default)
    assert op_bytes(cat, ([a, b], 0), {}, torch.cat([a, b])) == (F32 * 18, F32 * 18)
    stack = _Plan(torch.ops.aten.stack.default)
    a2 = torch.zeros(2, 3)
    assert op_bytes(stack, ([a, a2],), {}, torch.stack([a, a2])) == (F32 * 12, F32 * 12)


def test_index_copy_writes_only_the_source() -> None:
    """A static KV cache's update: ``cache.index_copy_(2, pos, new)`` on a (1, 2, 100, 16)
    cache with one new token (1, 2, 1, 16) reads the index (one int64) and the 32 new
    elements and writes those 32, not the cache's 3,200."""
    cache, new, pos = torch.zeros(1, 2, 100, 16), torch.ones(1, 2, 1, 16), torch.tensor([5])
    plan = _Plan(torch.ops.aten.index_copy_.default)
    assert op_bytes(plan, (cache, 2, pos, new), {}, cache) == (8 + F32 * 32, F32 * 32)
