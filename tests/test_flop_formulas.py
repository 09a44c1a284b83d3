"""The FLOP formula registry against hand-derived counts.

Every expected value is written as the arithmetic of the documented convention
(docs/flops.md), never copied from another counter. Ops are run for real (CPU) and on
``meta`` where the op has a meta kernel; both must give the same Cost. Ops with no
kernel here (CUDA-only) are priced through ``op_cost`` on meta arguments.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch._ops import OpOverload, OpOverloadPacket
from torch.utils._python_dispatch import TorchDispatchMode

from layerscope import examples
from layerscope.errors import InvalidInputError
from layerscope.metrics.flops import (
    FLOP_REGISTRY,
    Cost,
    FlopFormulaError,
    Formula,
    is_zero_cost,
    lookup,
    op_cost,
    register_flop_formula,
)
from layerscope.metrics.flops.attention import attended_entries
from layerscope.metrics.flops.pointwise import ELEMENTWISE_FLOPS

aten = torch.ops.aten
DEVICES = ["cpu", "meta"]


class Recorder(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Prices every aten op that runs inside it with ``op_cost``."""

    def __init__(self, overrides: dict[Any, Formula] | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.overrides = overrides
        self.calls: list[tuple[OpOverload, Cost | None]] = []

    def __torch_dispatch__(
        self,
        func: OpOverload,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.calls.append((func, op_cost(func, args, kwargs, out, self.overrides)))
        return out

    def cost(self, *ops: OpOverloadPacket) -> Cost:
        """Total cost of the calls of ``ops`` (all calls when none given)."""
        total = Cost()
        for func, cost in self.calls:
            if cost is not None and (not ops or func.overloadpacket in ops):
                total = total + cost
        return total

    def ops(self) -> set[str]:
        return {str(func) for func, _ in self.calls}

    def unsupported(self) -> set[str]:
        return {str(func) for func, cost in self.calls if cost is None}


@contextmanager
def recording(overrides: dict[Any, Formula] | None = None) -> Iterator[Recorder]:
    rec = Recorder(overrides)
    with rec:
        yield rec
    assert rec.unsupported() == set()


def run(op: OpOverload, *args: Any, **kwargs: Any) -> Cost:
    """Run ``op`` and price it from what it received and returned."""
    out = op(*args, **kwargs)
    cost = op_cost(op, args, kwargs, out)
    assert cost is not None
    return cost


def price(op: OpOverload, *args: Any, out: Any = None, **kwargs: Any) -> Cost:
    """Price ``op`` without running it (ops with no kernel on this machine)."""
    cost = op_cost(op, args, kwargs, out)
    assert cost is not None
    return cost


def randn(*shape: int, device: str = "cpu", grad: bool = False) -> Tensor:
    return torch.randn(*shape, device=device, requires_grad=grad)


def backward(t: Tensor) -> None:
    """``t.backward()`` with a gradient of ones (for non-scalar ``t`` too)."""
    torch.autograd.backward(t, torch.ones_like(t))


# --- Cost and the registry API -------------------------------------------------------------


def test_cost_adds_and_is_frozen() -> None:
    assert Cost(1, 2) + Cost(3, 4) == Cost(macs=4, flops=6)
    assert Cost() == Cost(0, 0)
    with pytest.raises(AttributeError):
        Cost().macs = 1  # type: ignore[misc]


def test_lookup_prefers_overload_then_packet_and_overrides_first() -> None:
    mm = aten.mm.default
    builtin = lookup(mm)
    assert builtin is FLOP_REGISTRY[aten.mm]

    def by_packet(*_: Any, out: Any = None, **__: Any) -> Cost:
        return Cost(0, 1)

    def by_overload(*_: Any, out: Any = None, **__: Any) -> Cost:
        return Cost(0, 2)

    assert lookup(mm, overrides={aten.mm: by_packet}) is by_packet
    assert lookup(mm, overrides={aten.mm: by_packet, mm: by_overload}) is by_overload
    assert lookup(mm, overrides={aten.bmm: by_packet}) is builtin
    a, b = randn(2, 3), randn(3, 4)
    assert op_cost(mm, (a, b), {}, a @ b, overrides={mm: by_overload}) == Cost(0, 2)
    # an overload's own formula wins over its packet's: max(a, b) is not a reduction
    assert lookup(aten.max.other) is not lookup(aten.max.default)


@torch.library.custom_op("layerscope_flops_test::triple", mutates_args=())
def triple(x: Tensor) -> Tensor:
    return x * 3


def test_register_custom_op_formula() -> None:
    op = torch.ops.layerscope_flops_test.triple
    with Recorder() as rec:
        triple(randn(2, 5))
    assert rec.unsupported() == {"layerscope_flops_test.triple.default"}

    @register_flop_formula(op)
    def triple_cost(x: Tensor, *, out: Tensor) -> Cost:
        return Cost(flops=out.numel())  # one multiply per element

    try:
        with recording() as rec:
            triple(randn(2, 5))
        assert rec.cost() == Cost(0, 2 * 5)
        with pytest.raises(ValueError, match="already registered"):
            register_flop_formula(op)(triple_cost)
        register_flop_formula(op, replace=True)(triple_cost)
    finally:
        del FLOP_REGISTRY[op]
    local: dict[Any, Formula] = {}
    register_flop_formula(op.default, registry=local)(triple_cost)
    assert local == {op.default: triple_cost} and op not in FLOP_REGISTRY
    with pytest.raises(InvalidInputError) as info:  # as flop_formulas= refuses it
        register_flop_formula(torch.mm)  # type: ignore[arg-type]
    assert str(info.value) == (
        "register_flop_formula: torch.mm is a Python callable, not an op; pass the aten op "
        "it runs, such as torch.ops.aten.mm (all overloads) or torch.ops.aten.mm.default "
        "(one), as unsupported_ops names them"
    )


def test_formula_errors_name_the_op() -> None:
    with pytest.raises(FlopFormulaError, match=r"aten\.mm\.default"):
        op_cost(aten.mm.default, (randn(2, 3, 4), randn(3, 4)), {}, None)


def test_zero_cost_and_unsupported() -> None:
    for op in (
        aten.view.default,
        aten._unsafe_view.default,
        aten.expand.default,
        aten.permute.default,
        aten.t.default,
        aten.slice.Tensor,
        aten.cat.default,
        aten.clone.default,
        aten._to_copy.default,
        aten.copy_.default,
        aten.empty.memory_format,
        aten.zeros.default,
        aten.arange.default,
        aten.detach.default,
        aten.where.self,  # a select: no arithmetic
        aten.masked_fill.Scalar,
        aten.embedding.default,
        aten.gather.default,
        aten.scatter.src,
        aten.bernoulli_.float,
        aten._local_scalar_dense.default,
        aten.upsample_nearest2d.default,
        torch.ops.prim.device.default,
        aten._linalg_check_errors.default,  # linalg's check of its info tensor
    ):
        assert is_zero_cost(op), op
    assert op_cost(aten.view.default, (randn(6), [2, 3]), {}, randn(2, 3)) == Cost()
    # the arithmetic relatives of zero-cost ops have formulas
    assert not is_zero_cost(aten.scatter_add.default)
    assert lookup(aten.scatter.reduce) is not None
    # an op with neither is reported (None), never a silent 0
    assert op_cost(aten.linalg_eigh.default, (randn(3, 3),), {}, None) is None
    assert not is_zero_cost(aten.linalg_eigh.default)


# --- matrix products -------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_matrix_products(device: str) -> None:
    def r(*shape: int) -> Tensor:
        return randn(*shape, device=device)

    assert run(aten.mm.default, r(2, 3), r(3, 4)) == Cost(2 * 3 * 4, 2 * 2 * 3 * 4)
    # addmm: + one bias add per output element (beta/alpha scaling not counted)
    assert run(aten.addmm.default, r(4), r(2, 3), r(3, 4)) == Cost(24, 2 * 24 + 2 * 4)
    assert run(aten.addmm.default, r(4), r(2, 3), r(3, 4), beta=0) == Cost(24, 2 * 24)
    assert run(aten.bmm.default, r(5, 2, 3), r(5, 3, 4)) == Cost(5 * 2 * 3 * 4, 2 * 120)
    assert run(aten.baddbmm.default, r(5, 2, 4), r(5, 2, 3), r(5, 3, 4)) == Cost(
        120, 2 * 120 + 5 * 2 * 4
    )
    # addbmm: the batch sum is part of the contraction; + M*N bias adds
    assert run(aten.addbmm.default, r(2, 4), r(5, 2, 3), r(5, 3, 4)) == Cost(120, 240 + 8)
    assert run(aten.mv.default, r(3, 4), r(4)) == Cost(3 * 4, 2 * 12)
    assert run(aten.addmv.default, r(3), r(3, 4), r(4)) == Cost(12, 24 + 3)
    assert run(aten.dot.default, r(5), r(5)) == Cost(5, 10)
    # addr: each outer-product term is accumulated into self: one MAC per output
    assert run(aten.addr.default, r(3, 4), r(3), r(4)) == Cost(3 * 4, 2 * 12)
    # fused epilogues: ReLU 1 or tanh-GELU 9 per output element
    act = aten._addmm_activation.default
    assert run(act, r(4), r(2, 3), r(3, 4)) == Cost(24, 48 + 8 + 1 * 8)
    assert run(act, r(4), r(2, 3), r(3, 4), use_gelu=True) == Cost(24, 48 + 8 + 9 * 8)
    # linear, should it ever reach the dispatcher: (B*T, F) @ (F, N) + bias
    x, w, b = r(2, 3, 5), r(6, 5), r(6)
    assert price(aten.linear.default, x, w, b, out=F.linear(x, w, b)) == Cost(
        2 * 3 * 5 * 6, 2 * 180 + 2 * 3 * 6
    )
    assert price(aten.matmul.default, x, w.t(), out=x @ w.t()) == Cost(180, 360)


def test_mm_out_variant_and_int_mm() -> None:
    a, b = randn(2, 3), randn(3, 4)
    out = torch.empty(2, 4)
    with recording() as rec:
        torch.mm(a, b, out=out)  # aten.mm.out: the out= tensor is not a formula argument
    assert rec.ops() == {"aten.mm.out"} and rec.cost() == Cost(24, 48)


@pytest.mark.parametrize(
    ("shapes", "ops", "macs"),
    [
        (((5,), (5,)), {"aten.dot.default"}, 5),
        (((3, 5), (5,)), {"aten.mv.default"}, 3 * 5),
        (((5,), (5, 3)), {"aten.mm.default"}, 1 * 5 * 3),  # unsqueeze to (1, 5) @ (5, 3)
        (((2, 3, 5), (5,)), {"aten.mv.default"}, 2 * 3 * 5),  # folded to (6, 5) @ (5,)
        (((5,), (2, 5, 3)), {"aten.bmm.default"}, 2 * 1 * 5 * 3),
        (((2, 4, 5), (5, 6)), {"aten.mm.default"}, 2 * 4 * 5 * 6),  # folded to (8, 5)
        (((2, 3, 4, 5), (3, 5, 6)), {"aten.bmm.default"}, 2 * 3 * 4 * 5 * 6),  # broadcast
    ],
)
def test_matmul_decompositions(
    shapes: tuple[tuple[int, ...], tuple[int, ...]], ops: set[str], macs: int
) -> None:
    a, b = randn(*shapes[0]), randn(*shapes[1])
    with recording() as rec:
        a @ b
    assert {str(f) for f, c in rec.calls if c != Cost()} == ops
    assert rec.cost() == Cost(macs, 2 * macs)


def test_einsum_and_linear_on_3d_input_forward_and_backward() -> None:
    with recording() as rec:
        torch.einsum("bij,bjk->bik", randn(2, 3, 4), randn(2, 4, 5))
    assert "aten.bmm.default" in rec.ops() and rec.cost() == Cost(2 * 3 * 4 * 5, 2 * 120)

    lin = nn.Linear(5, 6)
    x = randn(2, 3, 5, grad=True)
    with recording() as rec:
        y = lin(x)  # addmm on (6, 5) @ (5, 6)
        fwd = rec.cost()
        backward(y.sum())
    assert fwd == Cost(6 * 5 * 6, 2 * 180 + 6 * 6)  # + one bias add per output
    bwd = Cost(
        2 * 180,  # grad_input (6,6)@(6,5) and grad_weight (6,6)^T@(6,5)
        2 * 2 * 180 + 36 + 36,  # + y.sum() and the bias grad sum over 36 grad elements
    )
    assert rec.cost() == fwd + bwd


# --- convolutions ----------------------------------------------------------------------


def conv_cost(device: str, conv: nn.Module, x: Tensor) -> Cost:
    conv, x = conv.to(device), x.to(device)
    with recording() as rec:
        conv(x)
    reshapes = {"aten.unsqueeze.default", "aten.squeeze.dim"}
    assert rec.ops() - reshapes == {"aten.convolution.default"}
    return rec.cost()


@pytest.mark.parametrize("device", DEVICES)
def test_convolutions(device: str) -> None:
    # Conv1d(4, 6, 3, groups=2): out (2, 6, 8); each output sums (4/2)*3 products
    c1 = conv_cost(device, nn.Conv1d(4, 6, 3, groups=2), randn(2, 4, 10))
    assert c1 == Cost(2 * 6 * 8 * 2 * 3, 2 * 576 + 2 * 6 * 8)
    # Conv2d stride 2, padding 1, dilation 2, groups 2 on 9x9: out 4x4
    # ((9 + 2*1 - 2*(3-1) - 1) // 2 + 1 = 4)
    conv = nn.Conv2d(4, 6, 3, stride=2, padding=1, dilation=2, groups=2)
    c2 = conv_cost(device, conv, randn(2, 4, 9, 9))
    assert c2 == Cost(2 * 6 * 4 * 4 * (2 * 3 * 3), 2 * 3456 + 2 * 6 * 16)
    # Conv3d(2, 4, 3) without bias on 5^3: out 3^3
    c3 = conv_cost(device, nn.Conv3d(2, 4, 3, bias=False), randn(1, 2, 5, 5, 5))
    assert c3 == Cost(1 * 4 * 27 * (2 * 27), 2 * 5832)
    # depthwise
    cd = conv_cost(device, nn.Conv2d(4, 4, 3, groups=4, bias=False), randn(2, 4, 9, 9))
    assert cd == Cost(2 * 4 * 7 * 7 * (1 * 9), 2 * 3528)
    # ConvTranspose2d(4, 6, 3, stride=2, groups=2) on 5x5: each input element meets
    # (6/2)*3*3 weights; out (2, 6, 11, 11) gets the bias
    ct = conv_cost(device, nn.ConvTranspose2d(4, 6, 3, stride=2, groups=2), randn(2, 4, 5, 5))
    assert ct == Cost(2 * 4 * 25 * (3 * 9), 2 * 5400 + 2 * 6 * 11 * 11)
    # unbatched input is unsqueezed to a batch of 1 before aten.convolution
    cu = conv_cost(device, nn.Conv1d(4, 6, 3, groups=2), randn(4, 10))
    assert cu == Cost(1 * 6 * 8 * 2 * 3, 2 * 288 + 6 * 8)


@pytest.mark.parametrize("device", DEVICES)
def test_convolution_backward_with_groups_is_not_overcounted(device: str) -> None:
    conv = nn.Conv2d(4, 6, 3, groups=2).to(device)
    x = randn(2, 4, 5, 5, device=device, grad=True)
    y = conv(x)  # (2, 6, 3, 3)
    fwd = 2 * 6 * 3 * 3 * (2 * 3 * 3)  # N*Cout*H*W*(Cin/groups)*k*k = 1944
    with recording() as rec:
        backward(y)
    # grad_input and grad_weight each cost the forward MACs (not groups x more); grad_bias
    # sums the 2*6*3*3 = 108 gradient elements
    assert rec.cost(aten.convolution_backward) == Cost(2 * fwd, 2 * 2 * fwd + 108)

    tconv = nn.ConvTranspose2d(4, 6, 3, stride=2, groups=2, bias=False).to(device)
    x = randn(2, 4, 5, 5, device=device, grad=True)
    y = tconv(x)
    tfwd = 2 * 4 * 25 * (3 * 9)  # 5400
    with recording() as rec:
        backward(y)
    assert rec.cost(aten.convolution_backward) == Cost(2 * tfwd, 4 * tfwd)

    # a first layer: no grad_input requested
    g = randn(2, 6, 3, 3, device=device)
    xi, wi = randn(2, 4, 5, 5, device=device), randn(6, 2, 3, 3, device=device)
    args = ([6], [1, 1], [0, 0], [1, 1], False, [0, 0], 2, [False, True, True])
    cost = run(aten.convolution_backward.default, g, xi, wi, *args)
    assert cost == Cost(fwd, 2 * fwd + 108)


# --- attention -------------------------------------------------------------------------


def test_attended_entries() -> None:
    assert attended_entries(6, 7) == 6 * 7
    assert attended_entries(6, 6, causal=1) == 6 * 6 - 6 * 5 // 2  # 21, lower triangle
    assert attended_entries(6, 7, causal=1) == 1 + 2 + 3 + 4 + 5 + 6  # top-left: j <= i
    assert attended_entries(7, 6, causal=1) == 21 + 6  # the last row sees all 6 keys
    assert attended_entries(6, 7, causal=2) == 2 + 3 + 4 + 5 + 6 + 7  # bottom-right
    # bottom-right causal with a left window of 2: row i sees keys i-1 .. i+1 (in 0..6)
    assert attended_entries(6, 7, causal=2, window_left=2) == 2 + 3 + 3 + 3 + 3 + 3


@pytest.mark.parametrize("device", DEVICES)
def test_sdpa_cpu_kernel(device: str) -> None:
    b, h, lq, lk, d = 2, 3, 6, 7, 4
    q, k = randn(b, h, lq, d, device=device), randn(b, h, lk, d, device=device)
    v = randn(b, h, lk, d, device=device)
    op = aten._scaled_dot_product_flash_attention_for_cpu.default
    # dense: A = 6*7 entries per head; QK^T and PV: A*d MACs each; per entry 1 (scale)
    # + 5 (softmax)
    entries = b * h * lq * lk  # 252
    dense = Cost(entries * (d + d), 2 * entries * 8 + entries * (1 + 5))
    assert run(op, q, k, v) == dense
    # causal (top-left): 1 + 2 + ... + 6 = 21 entries per head
    causal_entries = b * h * 21
    causal = Cost(causal_entries * 8, 2 * causal_entries * 8 + causal_entries * 6)
    assert run(op, q, k, v, 0.0, True) == causal
    # an additive mask: + one add per entry
    mask = torch.zeros(lq, lk, device=device)
    assert run(op, q, k, v, attn_mask=mask) == dense + Cost(0, entries)
    # backward: 5 matmuls (S recomputed, dV, dP, dQ, dK) = A*(3*dk + 2*dv); per entry 6;
    # D = rowsum(dO * O): 2*B*H*Lq*dv
    o, lse = op(q, k, v, 0.0, True)
    bwd_op = aten._scaled_dot_product_flash_attention_for_cpu_backward.default
    got = run(bwd_op, o, q, k, v, o, lse, 0.0, True)
    assert got == Cost(
        causal_entries * (3 * d + 2 * d),
        2 * causal_entries * 20 + 6 * causal_entries + 2 * b * h * lq * d,
    )


def test_sdpa_through_functional_on_cpu() -> None:
    b, h, t, d = 2, 2, 5, 4
    q, k, v = (randn(b, h, t, d, grad=True) for _ in range(3))
    with recording() as rec:
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        backward(y)
    assert rec.ops() >= {
        "aten._scaled_dot_product_flash_attention_for_cpu.default",
        "aten._scaled_dot_product_flash_attention_for_cpu_backward.default",
    }
    a = b * h * (t * (t + 1) // 2)  # 60 unmasked entries
    fwd = Cost(a * 2 * d, 2 * a * 2 * d + 6 * a)
    bwd = Cost(a * 5 * d, 2 * a * 5 * d + 6 * a + 2 * b * h * t * d)
    assert rec.cost() == fwd + bwd


def test_sdpa_grouped_query_attention_counts_query_heads() -> None:
    q, kv = randn(2, 4, 6, 8), randn(2, 2, 6, 8)
    cost = run(aten._scaled_dot_product_flash_attention_for_cpu.default, q, kv, kv)
    entries = 2 * 4 * 6 * 6
    assert cost == Cost(entries * 16, 2 * entries * 16 + 6 * entries)


def test_cuda_attention_kernels_priced_on_meta() -> None:
    m = "meta"
    b, h, lq, lk, d = 2, 3, 6, 7, 4
    q, k = randn(b, h, lq, d, device=m), randn(b, h, lk, d, device=m)
    dense_entries = b * h * lq * lk

    def fwd(entries: int, extra: int = 0) -> Cost:
        return Cost(entries * 2 * d, 2 * entries * 2 * d + (6 + extra) * entries)

    assert run(aten._scaled_dot_product_flash_attention.default, q, k, k) == fwd(dense_entries)
    qs = randn(b, h, lk, d, device=m)  # SDPA sends only square causal to flash
    square_causal = b * h * (7 * 8 // 2)
    flash = aten._scaled_dot_product_flash_attention.default
    assert run(flash, qs, k, k, 0.0, True) == fwd(square_causal)
    bias = randn(b, h, lq, lk, device=m)
    eff = aten._scaled_dot_product_efficient_attention.default
    assert run(eff, q, k, k, bias, True) == fwd(dense_entries, extra=1)  # + bias add
    assert run(eff, q, k, k, None, True, 0.1, True) == fwd(b * h * 21, extra=1)  # + dropout
    # raw kernels take (B, L, H, D)
    qr, kr = q.transpose(1, 2), k.transpose(1, 2)
    raw_flash = aten._flash_attention_forward.default
    br_causal = b * h * (2 + 3 + 4 + 5 + 6 + 7)  # bottom-right alignment
    args: tuple[Any, ...] = (None, None, lq, lk, 0.0, True, False)
    assert run(raw_flash, qr, kr, kr, *args) == fwd(br_causal)
    windowed = b * h * (2 + 3 * 5)
    assert run(raw_flash, qr, kr, kr, *args, window_size_left=2) == fwd(windowed)
    raw_eff = aten._efficient_attention_forward.default
    assert run(raw_eff, qr, kr, kr, None, None, None, lq, lk, 0.0, 2, True) == fwd(br_causal)
    assert run(raw_eff, qr, kr, kr, None, None, None, lq, lk, 0.0, 1, True) == fwd(b * h * 21)
    # backward: 5 matmuls; per entry 6 (+1 mask, +1 bias grad); D term 2*B*H*Lq*d
    o, lse, seed, offset = eff(q, k, k, bias, True)
    eff_bwd = aten._scaled_dot_product_efficient_attention_backward.default
    e = dense_entries
    got = run(eff_bwd, o, q, k, k, bias, o, lse, seed, offset, 0.0, [True, True, True, True])
    assert got == Cost(e * 5 * d, 2 * e * 5 * d + (6 + 1 + 1) * e + 2 * b * h * lq * d)
    # variable length: per-sequence lengths are values, never read: bound total_q * max_k
    total_q, heads = 10, 3
    qv, kv = randn(total_q, heads, d, device=m), randn(12, heads, d, device=m)
    cu = torch.zeros(3, dtype=torch.int32, device=m)
    varlen = price(raw_flash, qv, kv, kv, cu, cu, 6, 7, 0.0, False, False)
    assert varlen == fwd(total_q * heads * 7)


def test_multihead_attention_fast_path_matches_slow_path() -> None:
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = randn(2, 5, 8)
    b, t, e, heads = 2, 5, 8, 2
    macs = (
        b * t * e * e * 3  # q, k, v in-projections
        + 2 * b * heads * t * t * (e // heads)  # QK^T and PV
        + b * t * e * e  # out-projection
    )
    weights = Cost(
        macs,
        2 * macs
        + 3 * b * t * e  # in-projection biases
        + b * t * e  # q * 1/sqrt(d)
        + 5 * b * heads * t * t  # softmax
        + b * t * e  # out-projection bias
        + b * heads * t * t
        + b * t * t,  # average of the weights over heads
    )
    with recording() as rec, torch.no_grad():
        mha(x, x, x)
    assert rec.ops() == {"aten._native_multi_head_attention.default"}
    assert rec.cost() == weights
    with recording() as rec:  # grad-enabled: the decomposed path, same count
        mha(x.clone().requires_grad_(), x, x)
    assert "aten._native_multi_head_attention.default" not in rec.ops()
    assert rec.cost() == weights
    # need_weights=False runs SDPA inside: scale per score entry, no averaging
    no_weights = Cost(macs, 2 * macs + 3 * b * t * e + 6 * b * heads * t * t + b * t * e)
    with recording() as rec, torch.no_grad():
        mha(x, x, x, need_weights=False)
    assert rec.cost() == no_weights
    # on meta, through the op itself
    xm = x.to("meta")
    w = [p.to("meta") for p in (mha.in_proj_weight, mha.in_proj_bias)]
    pw = [p.to("meta") for p in (mha.out_proj.weight, mha.out_proj.bias)]
    assert run(aten._native_multi_head_attention.default, xm, xm, xm, 8, 2, *w, *pw) == weights


def test_transformer_encoder_layer_fast_path() -> None:
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, dropout=0.0).eval()
    x = randn(2, 5, 8)
    b, t, e, heads, hidden = 2, 5, 8, 2, 16
    tokens = b * t
    attn_macs = 4 * tokens * e * e + 2 * b * heads * t * t * (e // heads)
    ffn_macs = 2 * tokens * e * hidden
    flops = (
        2 * (attn_macs + ffn_macs)
        + 4 * tokens * e  # q, k, v and out-projection biases
        + 6 * b * heads * t * t  # scale + softmax per score entry (SDPA inside)
        + tokens * hidden  # linear1 bias
        + 1 * tokens * hidden  # ReLU
        + tokens * e  # linear2 bias
        + 2 * tokens * e  # two residual adds
        + 2 * (8 * tokens * e + 4 * tokens)  # two layer norms
    )
    expected = Cost(attn_macs + ffn_macs, flops)
    with recording() as rec, torch.no_grad():
        layer(x)
    assert rec.ops() == {"aten._transformer_encoder_layer_fwd.default"}
    assert rec.cost() == expected
    with recording() as rec:  # the decomposed path agrees
        layer(x.clone().requires_grad_())
    assert rec.cost() == expected


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_transformer_encoder_fast_path_on_a_padding_mask() -> None:
    """nn.TransformerEncoder turns a padding mask into a nested tensor; the fused layer
    then projects only the real tokens and runs the attention matmuls padded."""
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, dropout=0.0)
    encoder = nn.TransformerEncoder(layer, 1).eval()
    x = randn(2, 5, 8)
    padding = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])  # lengths 5 and 3
    b, t, e, heads, hidden = 2, 5, 8, 2, 16
    tokens = 5 + 3
    macs = (
        3 * tokens * e * e  # q, k, v projections of the real tokens: 1,536
        + 2 * b * t * t * e  # Q K^T and P V, padded to T=5: 800
        + tokens * e * e  # out-projection: 512
        + 2 * tokens * e * hidden  # FFN: 2,048
    )  # 4,896
    flops = (
        2 * macs
        + 3 * b * t * e  # q, k, v biases, added to the padded projection: 240
        + b * t * e  # q * 1/sqrt(d), padded: 80
        + 5 * heads * (5 * 5 + 3 * 3)  # softmax over each sequence's own scores: 340
        + tokens * e  # out-projection bias: 64
        + tokens * hidden  # linear1 bias: 128
        + tokens * hidden  # ReLU: 128
        + tokens * e  # linear2 bias: 64
        + 2 * tokens * e  # two residual adds: 128
        + 2 * (8 * tokens * e + 4 * tokens)  # two layer norms: 1,088
    )  # 12,052
    with recording() as rec, torch.no_grad():
        encoder(x, src_key_padding_mask=padding)
    assert "aten._transformer_encoder_layer_fwd.default" in rec.ops()
    assert rec.cost(aten._transformer_encoder_layer_fwd) == Cost(4896, 12052) == Cost(macs, flops)
    # The attention alone, on nested input given to nn.MultiheadAttention's fast path
    nested = torch.nested.nested_tensor([randn(5, e), randn(3, e)])
    attn_macs = 1536 + 800 + 512  # projections, padded Q K^T and P V, out-projection
    attn = Cost(attn_macs, 2 * attn_macs + 240 + 80 + 340 + 64)  # biases, scale, softmax
    with recording() as rec, torch.no_grad():
        layer.self_attn.eval()(nested, nested, nested, need_weights=False)
    assert rec.ops() == {"aten._native_multi_head_attention.default"}
    assert rec.cost() == attn == Cost(2848, 6420)


# --- recurrent layers ------------------------------------------------------------------


def lstm_layer(rows: int, i: int, h: int, bias: bool = True) -> Cost:
    macs = rows * 4 * h * (i + h)
    return Cost(macs, 2 * macs + rows * h * (13 + (8 if bias else 0)))


def test_lstm_cpu_kernel_forward_and_backward() -> None:
    lstm = nn.LSTM(4, 6, num_layers=2, bidirectional=True)
    x = randn(5, 3, 4, grad=True)  # T=5, B=3: 15 rows per layer and direction
    with recording() as rec:
        y, _ = lstm(x)
        fwd = rec.cost()
        backward(y)
    assert rec.ops() >= {"aten.mkldnn_rnn_layer.default", "aten.mkldnn_rnn_layer_backward.default"}
    layer0, layer1 = lstm_layer(15, 4, 6), lstm_layer(15, 2 * 6, 6)
    assert layer0 == Cost(15 * 240, 2 * 3600 + 15 * 6 * 21)
    assert fwd == layer0 + layer0 + layer1 + layer1
    # backward: 2x the MACs; 24 pointwise per unit; bias grads 2 * 4H adds per row
    bwd = rec.cost(aten.mkldnn_rnn_layer_backward)

    def back(layer: Cost) -> Cost:
        return Cost(2 * layer.macs, 4 * layer.macs + 15 * 6 * 24 + 15 * 2 * 4 * 6)

    assert bwd == back(layer0) + back(layer0) + back(layer1) + back(layer1)


@pytest.mark.parametrize(
    "make",
    [
        lambda: nn.LSTM(4, 6, 2, bidirectional=True),
        lambda: nn.LSTM(4, 6, proj_size=3),
        lambda: nn.LSTM(4, 6, bias=False),
        lambda: nn.GRU(4, 6, 2, bidirectional=True),
        lambda: nn.GRU(4, 6, bias=False),
        lambda: nn.RNN(4, 6, 2),
        lambda: nn.RNN(4, 6, nonlinearity="relu"),
    ],
    ids=["lstm-2l-bi", "lstm-proj", "lstm-nobias", "gru-2l-bi", "gru-nobias", "rnn", "relu"],
)
def test_rnn_formula_equals_decomposed_cells(make: Callable[[], nn.RNNBase]) -> None:
    """The fused-kernel formula (priced on _cudnn_rnn's arguments) equals the sum over
    the ops PyTorch's own cell decomposition runs (CPU GRU/RNN, packed/projected LSTM)."""
    mod = make()
    x = randn(5, 3, 4)
    dirs = 2 if mod.bidirectional else 1
    mode = {"LSTM": 2, "GRU": 3}.get(type(mod).__name__, 1)
    if isinstance(mod, nn.RNN) and mod.nonlinearity == "relu":
        mode = 0
    weights = mod._flat_weights
    stride = len(weights) // (mod.num_layers * dirs)
    hx = torch.zeros(mod.num_layers * dirs, 3, mod.proj_size or 6)
    fused = price(
        aten._cudnn_rnn.default,
        *(x, weights, stride, None, hx, hx, mode, 6, mod.proj_size, mod.num_layers),
        *(False, 0.0, False, mod.bidirectional, [], None),
    )
    packed = nn.utils.rnn.pack_padded_sequence(x, [5, 5, 5])
    with warnings.catch_warnings(), recording() as rec, torch.no_grad():
        warnings.simplefilter("ignore")  # "LSTM with projections is not supported with oneDNN"
        mod(packed)
    assert "aten._cudnn_rnn.default" not in rec.ops()
    assert rec.cost() == fused


def test_packed_sequence_counts_only_valid_steps() -> None:
    lstm = nn.LSTM(4, 6)
    x = randn(5, 3, 4)
    packed = nn.utils.rnn.pack_padded_sequence(x, [5, 3, 2])  # 10 valid steps, not 15
    with recording() as rec, torch.no_grad():
        lstm(packed)  # decomposed on CPU: per-step addmm/mm on the valid rows only
    assert rec.cost() == lstm_layer(5 + 3 + 2, 4, 6)
    assert lstm_layer(10, 4, 6) == Cost(10 * 4 * 6 * (4 + 6), 2 * 2400 + 10 * 6 * 21)


def test_rnn_formulas_by_hand() -> None:
    m = "meta"
    # LSTM with proj_size P=3: gates 4H*(I + P) + the projection H*P, per row
    w = [randn(24, 4, device=m), randn(24, 3, device=m), randn(24, device=m)]
    w += [randn(24, device=m), randn(3, 6, device=m)]
    hx, cx = randn(1, 3, 3, device=m), randn(1, 3, 6, device=m)
    x = randn(5, 3, 4, device=m)
    args: tuple[Any, ...] = (2, 6, 3, 1, False, 0.0, False, False, [], None)
    macs = 15 * (24 * (4 + 3) + 6 * 3)
    assert run(aten._cudnn_rnn.default, x, w, 5, None, hx, cx, *args) == Cost(
        macs, 2 * macs + 15 * 6 * (13 + 8)
    )
    # PackedSequence: rows = sum(batch_sizes) = 3 + 3 + 2 + 1 + 1 = 10
    w4 = w[:2] + w[2:4]
    w4[1] = randn(24, 6, device=m)
    h6 = randn(1, 3, 6, device=m)
    packed_args: tuple[Any, ...] = (2, 6, 0, 1, False, 0.0, False, False, [3, 3, 2, 1, 1], None)
    xp = randn(10, 4, device=m)
    assert run(aten._cudnn_rnn.default, xp, w4, 4, None, h6, h6, *packed_args) == Cost(
        10 * 24 * 10, 2 * 2400 + 10 * 6 * 21
    )
    # GRU (mode 3): 3H*(I + H) MACs; 10 pointwise + 6 bias adds per unit
    wg = [randn(18, 4, device=m), randn(18, 6, device=m), randn(18, device=m), randn(18, device=m)]
    gru_args: tuple[Any, ...] = (3, 6, 0, 1, False, 0.0, False, False, [], None)
    assert run(aten._cudnn_rnn.default, x, wg, 4, None, h6, None, *gru_args) == Cost(
        15 * 18 * 10, 2 * 2700 + 15 * 6 * (10 + 6)
    )
    # training with inter-layer dropout: one multiply per element of layer 0's output
    w2 = [*w4, randn(24, 6, device=m), randn(24, 6, device=m), w4[2], w4[3]]
    h2 = randn(2, 3, 6, device=m)
    drop_args: tuple[Any, ...] = (2, 6, 0, 2, False, 0.5, True, False, [], None)
    layer1 = lstm_layer(15, 6, 6)
    got = price(aten._cudnn_rnn.default, x, w2, 4, None, h2, h2, *drop_args)
    assert got == lstm_layer(15, 4, 6) + layer1 + Cost(0, 15 * 6)
    # the fused cell kernels: pointwise part only (the gate matmuls are separate mms)
    ig, c = randn(3, 24, device=m), randn(3, 6, device=m)
    cell = price(aten._thnn_fused_lstm_cell.default, ig, ig, c, randn(24), randn(24))
    assert cell == Cost(0, 3 * 6 * (13 + 8))
    gru_cell = price(aten._thnn_fused_gru_cell.default, randn(3, 18), randn(3, 18), c)
    assert gru_cell == Cost(0, 3 * 6 * 10)


# --- normalization ---------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_norms(device: str) -> None:
    def r(*shape: int) -> Tensor:
        return randn(*shape, device=device)

    x, c = r(2, 3, 4, 4), 3
    n = x.numel()  # 96
    w, b, rm, rv = r(c), r(c), r(c), r(c).abs()
    bn = aten.native_batch_norm.default
    # training: stats 4 + normalize 2 + affine 2 per element, 4 per channel, running
    # update 7 per channel
    assert run(bn, x, w, b, rm, rv, True, 0.1, 1e-5) == Cost(0, 8 * n + 4 * c + 7 * c)
    # eval: fused scale/shift, 2 per element + 5 per channel
    assert run(bn, x, w, b, rm, rv, False, 0.1, 1e-5) == Cost(0, 2 * n + 5 * c)
    bwd = aten.native_batch_norm_backward.default
    sm, si = r(c), r(c)
    assert run(bwd, x, x, w, rm, rv, sm, si, True, 1e-5, [True] * 3) == Cost(0, 9 * n + 3 * c)
    assert run(bwd, x, x, w, rm, rv, sm, si, False, 1e-5, [True] * 3) == Cost(0, 6 * n + 3 * c)
    # weight/bias grads only: xhat 2 + sum(g * xhat) 2 + sum(g) 1
    only_wb = [False, True, True]
    assert run(bwd, x, x, w, rm, rv, sm, si, True, 1e-5, only_wb) == Cost(0, 5 * n)

    y = r(2, 3, 8)  # layer norm over the last 8: 48 elements, 6 rows
    ln = aten.native_layer_norm.default
    assert run(ln, y, [8], r(8), r(8), 1e-5) == Cost(0, 8 * 48 + 4 * 6)
    assert run(ln, y, [8], None, None, 1e-5) == Cost(0, 6 * 48 + 4 * 6)
    _, mean, rstd = ln(y, [8], r(8), r(8), 1e-5)
    ln_bwd = aten.native_layer_norm_backward.default
    # xhat 2 + grad_input 8 + grad_weight 2 + grad_bias 1 per element, + 2 per row
    got = run(ln_bwd, y, y, [8], mean, rstd, r(8), r(8), [True, True, True])
    assert got == Cost(0, 13 * 48 + 2 * 6)

    g = r(2, 4, 3)  # 2 groups: 2 * 2 = 4 normalized groups of 6
    gn = aten.native_group_norm.default
    assert run(gn, g, r(4), r(4), 2, 4, 3, 2, 1e-5) == Cost(0, 8 * 24 + 4 * 4)
    _, gmean, grstd = gn(g, r(4), r(4), 2, 4, 3, 2, 1e-5)
    gn_bwd = aten.native_group_norm_backward.default
    got = run(gn_bwd, g, g, gmean, grstd, r(4), 2, 4, 3, 2, [True, True, True])
    assert got == Cost(0, 13 * 24 + 2 * 4)

    # RMS norm: square, add, x * rstd, * weight per element; divide, + eps, rsqrt per row
    rms = aten._fused_rms_norm.default
    assert run(rms, y, [8], r(8), 1e-5) == Cost(0, 4 * 48 + 3 * 6)
    _, rrstd = rms(y, [8], r(8), 1e-5)
    rms_bwd = aten._fused_rms_norm_backward.default
    got = price(rms_bwd, y, y, [8], rrstd, r(8), [True, True])  # no CPU kernel
    assert got == Cost(0, (1 + 6 + 2) * 48 + 6)


def test_instance_norm_goes_through_batch_norm() -> None:
    norm = nn.InstanceNorm2d(3, affine=True)
    with recording() as rec:
        norm(randn(2, 3, 4, 4))
    # batch norm in training mode on the (1, N*C, H, W) view: 96 elements, 6 channels,
    # no running stats
    assert "aten.native_batch_norm.default" in rec.ops()
    assert rec.cost() == Cost(0, 8 * 96 + 4 * 6)


# --- softmax, activations, elementwise -------------------------------------------------


def test_softmax_family() -> None:
    x = randn(2, 3, 5)  # 30 elements, 6 rows along dim -1
    assert run(aten._softmax.default, x, -1, False) == Cost(0, 5 * 30)
    assert run(aten._log_softmax.default, x, -1, False) == Cost(0, 5 * 30 + 6)
    assert run(aten._safe_softmax.default, x, -1) == Cost(0, 5 * 30)
    y = torch.softmax(x, -1)
    back = aten._softmax_backward_data.default
    assert run(back, x, y, -1, torch.float32) == Cost(0, 4 * 30)
    log_back = aten._log_softmax_backward_data.default
    assert run(log_back, x, y, -1, torch.float32) == Cost(0, 4 * 30)


ACTIVATIONS: list[tuple[str, Callable[[Tensor], Tensor], str, int, str, int]] = [
    # name, fn, forward op, flops/elem, backward op, flops/elem
    ("relu", F.relu, "aten.relu.default", 1, "aten.threshold_backward.default", 1),
    ("relu6", F.relu6, "aten.hardtanh.default", 2, "aten.hardtanh_backward.default", 2),
    ("gelu", F.gelu, "aten.gelu.default", 5, "aten.gelu_backward.default", 11),
    (
        "gelu-tanh",
        lambda t: F.gelu(t, approximate="tanh"),
        "aten.gelu.default",
        9,
        "aten.gelu_backward.default",
        18,
    ),
    ("silu", F.silu, "aten.silu.default", 2, "aten.silu_backward.default", 6),
    ("sigmoid", torch.sigmoid, "aten.sigmoid.default", 1, "aten.sigmoid_backward.default", 3),
    ("tanh", torch.tanh, "aten.tanh.default", 1, "aten.tanh_backward.default", 3),
    ("hardswish", F.hardswish, "aten.hardswish.default", 5, "aten.hardswish_backward.default", 6),
    ("leaky", F.leaky_relu, "aten.leaky_relu.default", 2, "aten.leaky_relu_backward.default", 2),
    ("elu", F.elu, "aten.elu.default", 4, "aten.elu_backward.default", 3),
    ("mish", F.mish, "aten.mish.default", 5, "aten.mish_backward.default", 11),
    ("softplus", F.softplus, "aten.softplus.default", 3, "aten.softplus_backward.default", 4),
]


@pytest.mark.parametrize(
    ("fn", "fwd_op", "fwd", "bwd_op", "bwd"),
    [a[1:] for a in ACTIVATIONS],
    ids=[a[0] for a in ACTIVATIONS],
)
def test_activations(
    fn: Callable[[Tensor], Tensor], fwd_op: str, fwd: int, bwd_op: str, bwd: int
) -> None:
    x = randn(2, 3, 4, grad=True)  # 24 elements
    with recording() as rec:
        y = fn(x)
        backward(y)
    costs = {str(f): c for f, c in rec.calls}
    assert costs[fwd_op] == Cost(0, fwd * 24)
    assert costs[bwd_op] == Cost(0, bwd * 24)


def test_elementwise_broadcasting_in_place_and_out() -> None:
    a, b = randn(2, 1, 4), randn(3, 1)
    with recording() as rec:
        a + b  # broadcast to (2, 3, 4): one add per output element
    assert rec.cost() == Cost(0, 2 * 3 * 4)
    x = randn(2, 3, 4)
    with recording() as rec:
        x.add_(randn(4))  # in place: the same count on the (2, 3, 4) result
        x.mul_(2.0)
    assert rec.ops() >= {"aten.add_.Tensor", "aten.mul_.Tensor"}
    assert rec.cost(aten.add_) == Cost(0, 24) and rec.cost(aten.mul_) == Cost(0, 24)
    out = torch.empty(2, 3, 4)
    with recording() as rec:
        torch.add(a, b, alpha=2, out=out)  # alpha scaling not counted
    assert rec.ops() == {"aten.add.out"} and rec.cost() == Cost(0, 24)
    with recording() as rec:
        torch.where(x > 0, x, 0.0)  # gt: 24 comparisons; where: a select, 0
        x.masked_fill(x > 0, 1.0)  # another 24 comparisons; masked_fill: 0
    assert rec.cost(aten.where, aten.masked_fill) == Cost()
    assert rec.cost() == Cost(0, 24 + 24)
    cases: list[tuple[Callable[[], Tensor], int]] = [
        (lambda: x.clamp(-1, 1), 2),  # two bounds, two comparisons
        (lambda: x.clamp(min=0), 1),
        (lambda: torch.addcmul(x, x, x, value=0.5), 2),  # mul, add
        (lambda: torch.addcdiv(x, x, x, value=0.5), 2),  # div, add
        (lambda: torch.lerp(x, x, 0.3), 3),  # sub, mul, add
        (lambda: x.exp(), 1),
        (lambda: x.abs().sqrt(), 2),
        (lambda: x**3, 1),
        (lambda: torch.maximum(x, x), 1),
        (lambda: torch.max(x, x), 1),  # max.other is elementwise, not a reduction
    ]
    for fn, per in cases:
        with recording() as rec:
            fn()
        assert rec.cost() == Cost(0, per * 24)


def test_dropout() -> None:
    x = randn(4, 5)
    # nn.Dropout on CPU: bernoulli_ (RNG, 0) + div_ of the mask by 1-p + mul: 2 per element
    with recording() as rec:
        F.dropout(x, 0.5, training=True)
    assert rec.cost() == Cost(0, 2 * 20)
    # the fused op counts the mask multiply only (the scale folded into the mask)
    assert run(aten.native_dropout.default, x, 0.5, True) == Cost(0, 20)
    assert run(aten.native_dropout.default, x, 0.5, False) == Cost()
    mask = torch.ones(4, 5, dtype=torch.bool)
    assert run(aten.native_dropout_backward.default, x, mask, 2.0) == Cost(0, 20)


# --- reductions, scans, pooling, interpolation, losses, embedding ----------------------


def test_reductions_and_scans() -> None:
    x = randn(2, 3, 4)  # 24 elements; reducing dim -1 gives 6 outputs
    cases: list[tuple[Callable[[], Any], int]] = [
        (lambda: x.sum(-1), 24),  # one add per input element
        (lambda: x.sum(), 24),
        (lambda: x.mean(-1), 24 + 6),  # + one divide per output
        (lambda: x.var(-1), 4 * 24 + 2 * 6),
        (lambda: x.std(-1), 4 * 24 + 3 * 6),
        (lambda: x.amax(-1), 24),
        (lambda: x.max(-1), 24),
        (lambda: x.argmax(-1), 24),
        (lambda: torch.linalg.vector_norm(x), 2 * 24 + 1),  # square, add; one sqrt
        (lambda: torch.linalg.vector_norm(x, 1), 2 * 24),  # abs, add
        (lambda: x.logsumexp(-1), 4 * 24 + 2 * 6),
        (lambda: x.cumsum(-1), 24),
        (lambda: x.cumprod(-1), 24),
        (lambda: x.sort(-1), 24 * 2),  # ceil(log2 4) = 2 comparisons per element
        (lambda: x.topk(2, -1), 24),
    ]
    for fn, flops in cases:
        with recording() as rec:
            fn()
        assert rec.cost() == Cost(0, flops)


def test_accumulating_indexing_ops() -> None:
    x, idx = randn(5, 3), torch.tensor([0, 2, 2, 4])
    src = randn(4, 3)
    assert run(aten.index_add.default, x, 0, idx, src) == Cost(0, 12)
    index = torch.zeros(4, 3, dtype=torch.long)
    assert run(aten.scatter_add.default, x, 0, index, src) == Cost(0, 12)
    assert run(aten.index_put.default, x, [idx], src, True) == Cost(0, 12)
    assert run(aten.index_put.default, x, [idx], src, False) == Cost()
    # put: flat indices into x's 15 elements, one add per element of source (4)
    flat, source = torch.tensor([0, 7, 7, 14]), randn(4)
    assert run(aten.put.default, x, flat, source, True) == Cost(0, 4)
    assert run(aten.put.default, x, flat, source, False) == Cost()


@pytest.mark.parametrize("device", DEVICES)
def test_pooling(device: str) -> None:
    x = randn(2, 3, 8, 8, device=device, grad=True)
    with recording() as rec:
        y = F.max_pool2d(x, 2)  # (2, 3, 4, 4): 96 outputs x 4 comparisons
        backward(y)  # each gradient routed to its argmax: 1 add
    assert rec.cost(aten.max_pool2d_with_indices) == Cost(0, 96 * 4)
    assert rec.cost(aten.max_pool2d_with_indices_backward) == Cost(0, 96)
    with recording() as rec:
        # 3x3 windows, stride 2, padding 1: out 4x4; 9 adds + 1 divide per output
        y = F.avg_pool2d(x, 3, stride=2, padding=1)
        backward(y)
    assert rec.cost(aten.avg_pool2d) == Cost(0, 96 * (9 + 1))
    assert rec.cost(aten.avg_pool2d_backward) == Cost(0, 96 * (9 + 1))
    with recording() as rec:
        F.max_pool1d(randn(2, 3, 8, device=device), 2)  # as 2-d with a (1, 2) kernel
    assert rec.cost() == Cost(0, 2 * 3 * 4 * 2)
    with recording() as rec:
        F.max_pool3d(randn(1, 2, 4, 4, 4, device=device), 2)
    assert rec.cost() == Cost(0, 2 * 8 * 8)
    # adaptive 8x8 -> 3x5: windows along H are [0,3) [2,6) [5,8): 3+4+3 = 10; along W
    # [0,2) [1,4) [3,5) [4,7) [6,8): 2+3+2+3+2 = 12
    windows = 2 * 3 * 10 * 12
    with recording() as rec:
        y = F.adaptive_avg_pool2d(x, (3, 5))
        backward(y)
    assert rec.cost(aten._adaptive_avg_pool2d) == Cost(0, windows + 2 * 3 * 15)
    assert rec.cost(aten._adaptive_avg_pool2d_backward) == Cost(0, windows + 2 * 3 * 15)
    with recording() as rec:
        y = F.adaptive_max_pool2d(x, (3, 5))
        backward(y)
    assert rec.cost(aten.adaptive_max_pool2d) == Cost(0, windows)
    assert rec.cost(aten.adaptive_max_pool2d_backward) == Cost(0, 2 * 3 * 15)


@pytest.mark.parametrize("device", DEVICES)
def test_interpolation(device: str) -> None:
    x = randn(2, 3, 4, 4, device=device, grad=True)
    out = 2 * 3 * 8 * 8  # scale 2
    for mode, taps, op, back in (
        ("bilinear", 4, aten.upsample_bilinear2d, aten.upsample_bilinear2d_backward),
        ("bicubic", 16, aten.upsample_bicubic2d, aten.upsample_bicubic2d_backward),
    ):
        with recording() as rec:
            y = F.interpolate(x, scale_factor=2, mode=mode)
            backward(y)
        assert rec.cost(op) == Cost(0, (2 * taps - 1) * out)  # weighted sum of taps
        assert rec.cost(back) == Cost(0, 2 * taps * out)
    with recording() as rec:
        y = F.interpolate(x, scale_factor=2, mode="nearest")  # a gather: 0
        backward(y)  # gradients summed: 1 add each
    assert rec.cost(aten.upsample_nearest2d) == Cost()
    assert rec.cost(aten.upsample_nearest2d_backward) == Cost(0, out)
    with recording() as rec:
        F.interpolate(randn(2, 3, 8, device=device), scale_factor=2, mode="linear")
    assert rec.cost() == Cost(0, 3 * 2 * 3 * 16)


def test_losses() -> None:
    x, y = randn(2, 3, 8, grad=True), randn(2, 3, 8)  # 48 elements
    with recording() as rec:
        backward(F.mse_loss(x, y))
    # (x - y)^2: 2, summed: 1 per element, mean: 1 divide; backward 2 * (x - y) * g: 3
    assert rec.cost(aten.mse_loss) == Cost(0, 2 * 48 + 48 + 1)
    assert rec.cost(aten.mse_loss_backward) == Cost(0, 3 * 48)
    with recording() as rec:
        backward(F.smooth_l1_loss(x, y, reduction="sum"))
    assert rec.cost(aten.smooth_l1_loss) == Cost(0, 5 * 48 + 48)
    assert rec.cost(aten.smooth_l1_loss_backward) == Cost(0, 4 * 48)
    logits, target = randn(4, 5, grad=True), torch.tensor([0, 1, 2, 3])
    with recording() as rec:
        backward(F.cross_entropy(logits, target))
    assert rec.cost(aten._log_softmax) == Cost(0, 5 * 20 + 4)  # + one log per row
    assert rec.cost(aten.nll_loss_forward) == Cost(0, 4 + 1)  # 4 picks summed, 1 divide
    assert rec.cost(aten.nll_loss_backward) == Cost(0, 4)
    assert rec.cost(aten._log_softmax_backward_data) == Cost(0, 4 * 20)
    p, t = torch.rand(4, 5, requires_grad=True), torch.rand(4, 5)
    with recording() as rec:
        backward(F.binary_cross_entropy(p, t))
    assert rec.cost(aten.binary_cross_entropy) == Cost(0, 8 * 20 + 20 + 1)
    assert rec.cost(aten.binary_cross_entropy_backward) == Cost(0, 5 * 20)
    with recording() as rec:  # composite losses decompose into covered ops
        backward(F.l1_loss(x, y))
        backward(F.kl_div(F.log_softmax(logits, -1), torch.rand(4, 5), reduction="batchmean"))
        backward(F.binary_cross_entropy_with_logits(logits, t))


def test_embedding() -> None:
    emb = nn.Embedding(10, 3)
    idx = torch.tensor([[1, 2, 2, 5], [0, 9, 9, 9]])
    with recording() as rec:
        out = emb(idx)  # a gather: 0
        assert rec.cost() == Cost()
        backward(out)
    # the backward index-adds the 2*4*3 = 24 gradient elements into the weight rows
    assert rec.cost(aten.embedding_dense_backward) == Cost(0, 24)
    bag = aten._embedding_bag.default
    offsets = torch.tensor([0, 3])
    flat = idx.flatten()
    # mean mode (1): 8 looked-up rows x 3 adds + 2 bags x 3 divides
    assert run(bag, emb.weight, flat, offsets, False, 1) == Cost(0, 8 * 3 + 2 * 3)


# --- whole models ----------------------------------------------------------------------


def forward_backward(model: nn.Module, *args: Any, **kwargs: Any) -> set[str]:
    """Run forward and backward; return the ops without a formula (must be none)."""
    rec = Recorder()
    with rec:
        out = model(*args, **kwargs)
        loss = getattr(out, "loss", None)
        if loss is None:
            tensor = out if isinstance(out, Tensor) else out[0]
            loss = tensor.float().sum()
        backward(loss)
    assert rec.cost().flops > 0
    return rec.unsupported()


@pytest.mark.parametrize("name", examples.names())
@pytest.mark.parametrize("device", DEVICES)
def test_example_models_have_no_unsupported_ops(name: str, device: str) -> None:
    ex = examples.get(name)
    model, x = ex.build().to(device), ex.example_input().to(device)
    assert forward_backward(model, x) == set()
    model.eval()
    with Recorder() as rec, torch.no_grad():
        model(x)
    assert rec.unsupported() == set()


def hf_models() -> list[tuple[str, Callable[[], Any]]]:
    transformers = pytest.importorskip("transformers")
    small = {"vocab_size": 96, "max_position_embeddings": 32}

    def gpt2() -> Any:
        cfg = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=16, vocab_size=96)
        return transformers.GPT2LMHeadModel(cfg)

    def bert() -> Any:
        cfg = transformers.BertConfig(
            num_hidden_layers=2,
            num_attention_heads=2,
            hidden_size=16,
            intermediate_size=32,
            **small,
        )
        return transformers.BertForMaskedLM(cfg)

    def llama() -> Any:
        cfg = transformers.LlamaConfig(
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            hidden_size=16,
            intermediate_size=32,
            **small,
        )
        return transformers.LlamaForCausalLM(cfg)

    return [("gpt2", gpt2), ("bert", bert), ("llama", llama)]


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_transformers_models_have_no_unsupported_ops(attn: str) -> None:
    ids = torch.randint(0, 96, (2, 10))
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[1, 7:] = 0
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        for _name, build in hf_models():
            model = build()
            model.config._attn_implementation = attn
            model.train()
            assert forward_backward(model, input_ids=ids, labels=ids) == set()
            model.eval()
            with Recorder() as rec, torch.no_grad():
                model(input_ids=ids, attention_mask=mask)
            assert rec.unsupported() == set()


def test_docs_elementwise_table_matches_the_code() -> None:
    """docs/flops.md publishes the per-element counts; it must say what the code does."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "flops.md").read_text()
    section = text.split("## Elementwise ops and activations", 1)[1].split("\n## ", 1)[0]
    published: dict[str, int] = {}
    for line in section.splitlines():
        row = re.match(r"^\| (\d+) \| (.*) \|$", line)
        if row:
            for name in re.findall(r"`([\w_]+)`", row.group(2)):
                published[name] = int(row.group(1))
    assert published == ELEMENTWISE_FLOPS


def test_matmul_on_nested_tensors_sums_each_components_own_product() -> None:
    """Nested (H, L_i, D) @ (H, D, L_i) and then (H, L_i, L_i) @ (H, L_i, D): each
    component contracts over its own K (D, then its own length L_i)."""
    h, d = 2, 4
    q = torch.nested.nested_tensor([randn(h, 3, d), randn(h, 5, d)])
    kt = torch.nested.nested_tensor([randn(h, d, 3), randn(h, d, 5)])
    with recording() as rec:
        scores = torch.matmul(q, kt)
    qk = h * 3 * 3 * d + h * 5 * 5 * d  # 72 + 200 = 272
    assert rec.cost() == Cost(qk, 2 * qk)
    v = torch.nested.nested_tensor([randn(h, 3, d), randn(h, 5, d)])
    with recording() as rec:
        torch.matmul(scores, v)
    pv = h * 3 * d * 3 + h * 5 * d * 5  # out elements * each sequence's own length: 272
    assert rec.cost() == Cost(pv, 2 * pv)


def test_a_grad_scalers_ops_have_formulas() -> None:
    """``GradScaler``: unscaling multiplies each gradient element by the inverse scale and
    checks it finite (2 FLOPs: a 64 + 8 element list, 144); the scale update is scalar
    work (0). A training step with a scaler is no longer partial."""
    grads = [randn(8, 8), randn(8)]
    found, inv = torch.zeros(1), torch.ones(1)
    unscale = aten._amp_foreach_non_finite_check_and_unscale_.default
    assert op_cost(unscale, (grads, found, inv), {}, None) == Cost(0, 2 * (64 + 8))
    update = aten._amp_update_scale_.default
    args = (torch.ones(1), torch.zeros(1, dtype=torch.int32), found, 2.0, 0.5, 2000)
    assert op_cost(update, args, {}, None) == Cost(0, 0)
    model = nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    import layerscope as ls

    with ls.Profiler(model) as p:
        scaler.scale(model(randn(4, 8)).sum()).backward()
        scaler.step(opt)
        scaler.update()
    assert p.profile.partial_metrics == [] and not p.profile.unsupported_ops
