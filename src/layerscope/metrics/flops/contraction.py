"""Matrix products and convolutions: the ops whose work is counted in ``macs``.

Convention: ``macs`` = multiply-accumulates of the contraction; ``flops`` = 2 * macs
plus one add per output element for a bias (``addmm``'s ``self``, a conv bias) and the
activation of fused epilogues. ``alpha``/``beta`` scaling is not counted; a ``beta`` of
0 drops the bias add because the kernel ignores ``self`` then.
"""

from __future__ import annotations

from math import prod
from typing import Any

from torch import Tensor

from layerscope.metrics.flops._common import first_tensor, nested_sizes
from layerscope.metrics.flops.pointwise import GELU_TANH, RELU
from layerscope.metrics.flops.registry import Cost, Formula, aten_ops, register_flop_formula


def _mac_cost(macs: int, extra_flops: int = 0) -> Cost:
    return Cost(macs, 2 * macs + extra_flops)


def _contracted(out: Tensor, a: Tensor) -> int:
    """MACs of a matmul with ``out``'s elements and ``a``'s last dim as K. Nested tensors
    sum over their components, each with its own K (attention's P @ V on a nested
    tensor contracts over each sequence's own length)."""
    if not a.is_nested:
        return out.numel() * a.shape[-1]
    outs = nested_sizes(out) if out.is_nested else [list(out.shape)]
    return sum(prod(o) * s[-1] for o, s in zip(outs, nested_sizes(a), strict=True))


# --- matrix products ---------------------------------------------------------------


@register_flop_formula(*aten_ops("mm", "_int_mm"))
def mm_flop(a: Tensor, b: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """(M, K) @ (K, N): M*K*N MACs."""
    m, k = a.shape
    return _mac_cost(m * k * b.shape[1])


@register_flop_formula(*aten_ops("addmm", "addmm_"))
def addmm_flop(
    bias: Tensor, a: Tensor, b: Tensor, *_: Any, out: Any = None, beta: Any = 1, **__: Any
) -> Cost:
    """bias + (M, K) @ (K, N): M*K*N MACs + M*N bias adds."""
    m, k = a.shape
    n = b.shape[1]
    return _mac_cost(m * k * n, m * n if beta != 0 else 0)


@register_flop_formula(*aten_ops("_addmm_activation"))
def addmm_activation_flop(
    bias: Tensor,
    a: Tensor,
    b: Tensor,
    *_: Any,
    out: Any = None,
    beta: Any = 1,
    use_gelu: bool = False,
    **__: Any,
) -> Cost:
    """addmm + a ReLU (1/elem) or tanh-approximate GELU epilogue per output element."""
    m, k = a.shape
    n = b.shape[1]
    act = GELU_TANH if use_gelu else RELU
    return _mac_cost(m * k * n, (m * n if beta != 0 else 0) + act * m * n)


@register_flop_formula(*aten_ops("bmm"))
def bmm_flop(a: Tensor, b: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """(B, M, K) @ (B, K, N): B*M*K*N MACs."""
    bs, m, k = a.shape
    return _mac_cost(bs * m * k * b.shape[2])


@register_flop_formula(*aten_ops("baddbmm", "baddbmm_"))
def baddbmm_flop(
    bias: Tensor, a: Tensor, b: Tensor, *_: Any, out: Any = None, beta: Any = 1, **__: Any
) -> Cost:
    """bias + bmm: B*M*K*N MACs + B*M*N bias adds."""
    bs, m, k = a.shape
    n = b.shape[2]
    return _mac_cost(bs * m * k * n, bs * m * n if beta != 0 else 0)


@register_flop_formula(*aten_ops("addbmm", "addbmm_"))
def addbmm_flop(
    bias: Tensor, a: Tensor, b: Tensor, *_: Any, out: Any = None, beta: Any = 1, **__: Any
) -> Cost:
    """bias + sum_b a[b] @ b[b]: B*M*K*N MACs (the batch sum is accumulation) + M*N adds."""
    bs, m, k = a.shape
    n = b.shape[2]
    return _mac_cost(bs * m * k * n, m * n if beta != 0 else 0)


@register_flop_formula(*aten_ops("mv"))
def mv_flop(a: Tensor, v: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """(M, K) @ (K,): M*K MACs."""
    return _mac_cost(a.numel())


@register_flop_formula(*aten_ops("addmv", "addmv_"))
def addmv_flop(
    bias: Tensor, a: Tensor, v: Tensor, *_: Any, out: Any = None, beta: Any = 1, **__: Any
) -> Cost:
    """bias + (M, K) @ (K,): M*K MACs + M adds."""
    return _mac_cost(a.numel(), a.shape[0] if beta != 0 else 0)


@register_flop_formula(*aten_ops("dot", "vdot"))
def dot_flop(a: Tensor, b: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """(K,) . (K,): K MACs."""
    return _mac_cost(a.numel())


@register_flop_formula(*aten_ops("addr", "addr_"))
def addr_flop(bias: Tensor, v1: Tensor, v2: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """bias + outer(v1, v2): M*N MACs, each product accumulated into ``bias``."""
    return _mac_cost(v1.numel() * v2.numel())


@register_flop_formula(*aten_ops("matmul", "linear"))
def matmul_flop(
    a: Tensor, b: Tensor, bias: Tensor | None = None, *_: Any, out: Any = None, **__: Any
) -> Cost:
    """Any broadcast matmul / linear: output elements * K MACs (+ a bias add per output);
    nested tensors: summed over their components."""
    o = first_tensor(out)
    return _mac_cost(_contracted(o, a), o.numel() if bias is not None else 0)


def _scaled_mm_formula(bias_index: int | None) -> Formula:
    """Quantized (M, K) @ (K, N): M*K*N MACs + one dequant-scale multiply per output
    (+ a bias add per output when the bias argument at ``bias_index`` is a tensor)."""

    def formula(a: Tensor, b: Tensor, *args: Any, out: Any = None, **kwargs: Any) -> Cost:
        n_out = first_tensor(out).numel()
        bias = kwargs.get("bias")
        if bias_index is not None and len(args) > bias_index - 2:
            bias = args[bias_index - 2]
        return _mac_cost(n_out * a.shape[-1], n_out + (n_out if bias is not None else 0))

    formula.__doc__ = _scaled_mm_formula.__doc__
    return formula


register_flop_formula(*aten_ops("_weight_int8pack_mm"))(_scaled_mm_formula(None))
register_flop_formula(*aten_ops("_scaled_mm"))(_scaled_mm_formula(4))
register_flop_formula(*aten_ops("_scaled_mm_v2"))(_scaled_mm_formula(8))


@register_flop_formula(
    *aten_ops(
        "_weight_int4pack_mm",
        "_weight_int4pack_mm_for_cpu",
        "_weight_int4pack_mm_with_scales_and_zeros",
        "_cslt_sparse_mm",
        "fbgemm_linear_fp16_weight",
        "fbgemm_linear_fp16_weight_fp32_activation",
    )
)
def packed_weight_mm_flop(a: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """Activation (M, K) times a packed weight: output elements * K MACs (dequantization
    of the packed weight is not counted)."""
    return _mac_cost(first_tensor(out).numel() * a.shape[-1])


def _grouped_mm_macs(a: Tensor, b: Tensor, out: Any) -> int:
    if a.dim() == 2 and b.dim() == 2:  # groups split K: (M, K_total) @ (K_total, N)
        return a.shape[0] * a.shape[1] * b.shape[1]
    return first_tensor(out).numel() * a.shape[-1]


@register_flop_formula(*aten_ops("_grouped_mm"))
def grouped_mm_flop(
    a: Tensor,
    b: Tensor,
    offs: Tensor | None = None,
    bias: Tensor | None = None,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """Grouped GEMM: the sum over groups of M_g*K_g*N_g MACs (+ a bias add per output)."""
    n_out = first_tensor(out).numel()
    return _mac_cost(_grouped_mm_macs(a, b, out), n_out if bias is not None else 0)


@register_flop_formula(*aten_ops("_scaled_grouped_mm", "_scaled_grouped_mm_v2"))
def scaled_grouped_mm_flop(a: Tensor, b: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """Grouped quantized GEMM: as ``_grouped_mm`` + one scale multiply per output."""
    return _mac_cost(_grouped_mm_macs(a, b, out), first_tensor(out).numel())


# --- convolutions --------------------------------------------------------------------


def conv_macs(x: Tensor, w: Tensor, y: Tensor, transposed: bool) -> int:
    """MACs of a (grouped, strided, dilated, padded) convolution.

    Each output element of a convolution sums ``(C_in/groups) * prod(kernel)`` products,
    which is ``prod(w.shape[1:])``; a transposed convolution is the mirror image, each
    *input* element being multiplied by ``(C_out/groups) * prod(kernel)`` weights.
    Products with zero padding are counted.
    """
    per = prod(w.shape[1:])
    return (x.numel() if transposed else y.numel()) * per


def _conv_formula(bias_index: int | None, transposed: bool | None, epilogue: int = 0) -> Formula:
    """A forward-convolution formula. ``bias_index``: position of the bias argument
    (None: no bias); ``transposed``: fixed, or None to read it from argument 6."""

    def formula(x: Tensor, w: Tensor, *args: Any, out: Any = None, **kwargs: Any) -> Cost:
        y = first_tensor(out)
        is_t = bool(args[4]) if transposed is None else transposed
        bias = None
        if bias_index is not None:
            pos = bias_index - 2
            bias = args[pos] if len(args) > pos else kwargs.get("bias")
        macs = conv_macs(x, w, y, is_t)
        extra = (y.numel() if bias is not None else 0) + epilogue * y.numel()
        return _mac_cost(macs, extra)

    formula.__doc__ = (
        "N*C_out*prod(out_spatial)*(C_in/groups)*prod(kernel) MACs (transposed: "
        "N*C_in*prod(in_spatial)*(C_out/groups)*prod(kernel)) + a bias add per output."
    )
    return formula


register_flop_formula(*aten_ops("convolution", "_convolution", "convolution_overrideable"))(
    _conv_formula(2, None)
)
register_flop_formula(
    *aten_ops(
        "mkldnn_convolution",
        "miopen_convolution",
        "miopen_depthwise_convolution",
        "_nnpack_spatial_convolution",
        "_convolution_mode",
        "_mps_convolution",
    )
)(_conv_formula(2, False))
register_flop_formula(*aten_ops("miopen_convolution_transpose", "_mps_convolution_transpose"))(
    _conv_formula(2, True)
)
register_flop_formula(*aten_ops("cudnn_convolution"))(_conv_formula(None, False))
register_flop_formula(*aten_ops("cudnn_convolution_transpose"))(_conv_formula(None, True))
register_flop_formula(
    *aten_ops(
        "_slow_conv2d_forward",
        "slow_conv3d_forward",
        "slow_conv3d",
        "slow_conv_dilated2d",
        "slow_conv_dilated3d",
        "thnn_conv2d",
        "_conv_depthwise2d",
        "conv_depthwise3d",
    )
)(_conv_formula(3, False))
register_flop_formula(*aten_ops("slow_conv_transpose2d", "slow_conv_transpose3d"))(
    _conv_formula(3, True)
)
register_flop_formula(*aten_ops("cudnn_convolution_relu", "miopen_convolution_relu"))(
    _conv_formula(2, False, epilogue=RELU)
)
# conv + z (residual add) + ReLU: the add and the ReLU are 1 flop per output each.
register_flop_formula(*aten_ops("cudnn_convolution_add_relu", "miopen_convolution_add_relu"))(
    _conv_formula(4, False, epilogue=1 + RELU)
)


@register_flop_formula(*aten_ops("conv_tbc"))
def conv_tbc_flop(x: Tensor, w: Tensor, bias: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """Time-batch-channel conv, weight (k, C_in, C_out): out elements * k * C_in MACs + bias."""
    y = first_tensor(out)
    return _mac_cost(y.numel() * w.shape[0] * w.shape[1], y.numel())


def _conv_backward_cost(
    grad_out: Tensor, x: Tensor, w: Tensor, transposed: bool, mask: Any
) -> Cost:
    """grad_input and grad_weight each cost the forward's MACs (each forward product has
    exactly one partner product in each of them, groups included); grad_bias sums
    ``grad_out``: one add per element."""
    fwd = conv_macs(x, w, grad_out, transposed)
    macs = fwd * (int(bool(mask[0])) + int(bool(mask[1])))
    return _mac_cost(macs, grad_out.numel() if mask[2] else 0)


@register_flop_formula(*aten_ops("convolution_backward"))
def convolution_backward_flop(
    grad_out: Tensor,
    x: Tensor,
    w: Tensor,
    bias_sizes: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    transposed: bool,
    output_padding: Any,
    groups: int,
    output_mask: Any,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """(mask[0] + mask[1]) * forward MACs + grad_out.numel() adds for grad_bias."""
    return _conv_backward_cost(grad_out, x, w, transposed, output_mask)


@register_flop_formula(*aten_ops("convolution_backward_overrideable"))
def convolution_backward_overrideable_flop(
    grad_out: Tensor,
    x: Tensor,
    w: Tensor,
    stride: Any,
    padding: Any,
    dilation: Any,
    transposed: bool,
    output_padding: Any,
    groups: int,
    output_mask: Any,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """As ``convolution_backward`` (this schema has no ``bias_sizes``)."""
    return _conv_backward_cost(grad_out, x, w, transposed, output_mask)


@register_flop_formula(*aten_ops("_slow_conv2d_backward"))
def slow_conv2d_backward_flop(
    grad_out: Tensor,
    x: Tensor,
    w: Tensor,
    kernel_size: Any,
    stride: Any,
    padding: Any,
    output_mask: Any = (True, True, True),
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """As ``convolution_backward`` (the ``grad_input`` overload computes all three)."""
    return _conv_backward_cost(grad_out, x, w, False, output_mask)


@register_flop_formula(*aten_ops("conv_tbc_backward"))
def conv_tbc_backward_flop(
    grad_out: Tensor, x: Tensor, w: Tensor, *_: Any, out: Any = None, **__: Any
) -> Cost:
    """grad_input + grad_weight at the forward's MACs each + grad_bias adds."""
    macs = grad_out.numel() * w.shape[0] * w.shape[1]
    return _mac_cost(2 * macs, grad_out.numel())


@register_flop_formula(*aten_ops("_convolution_double_backward"))
def convolution_double_backward_flop(
    ggi: Tensor | None,
    ggw: Tensor | None,
    ggb: Tensor | None,
    grad_out: Tensor,
    w: Tensor,
    x: Tensor,
    stride: Any,
    padding: Any,
    dilation: Any,
    transposed: bool,
    output_padding: Any,
    groups: int,
    output_mask: Any,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """Double backward: ggO = conv(ggI, w) + conv(x, ggW) + ggb, gI from (gO, ggW), gW from
    (ggI, gO); each convolution term costs the forward's MACs."""
    fwd = conv_macs(x, w, grad_out, transposed)
    n = grad_out.numel()
    terms = 0
    extra = 0
    if output_mask[0]:
        gg_terms = (ggi is not None) + (ggw is not None)
        terms += gg_terms
        extra += n * max(gg_terms - 1, 0) + (n if ggb is not None else 0)
    if output_mask[1] and ggw is not None:
        terms += 1
    if output_mask[2] and ggi is not None:
        terms += 1
    return _mac_cost(fwd * terms, extra)


# --- linear layers reaching the dispatcher whole, and their backwards --------------------

register_flop_formula(*aten_ops("mkldnn_linear"))(matmul_flop)


def _linear_backward_cost(x: Tensor, grad_out: Tensor, w: Tensor, mask: Any) -> Cost:
    """grad_input and grad_weight: grad_out elements * K MACs each; grad_bias: one add per
    grad_out element."""
    macs = grad_out.numel() * w.shape[-1]
    n = int(bool(mask[0])) + int(bool(mask[1]))
    return _mac_cost(n * macs, grad_out.numel() if mask[2] else 0)


@register_flop_formula(*aten_ops("linear_backward", "mkldnn_linear_backward"))
def linear_backward_flop(
    x: Tensor, grad_out: Tensor, w: Tensor, output_mask: Any, *_: Any, out: Any = None, **__: Any
) -> Cost:
    """(mask[0] + mask[1]) * out elements * K MACs + grad_bias adds."""
    return _linear_backward_cost(x, grad_out, w, output_mask)


@register_flop_formula(*aten_ops("mkldnn_linear_backward_input"))
def linear_backward_input_flop(
    input_size: Any, grad_out: Tensor, w: Tensor, *_: Any, out: Any = None, **__: Any
) -> Cost:
    """grad_input only."""
    return _linear_backward_cost(grad_out, grad_out, w, (True, False, False))


@register_flop_formula(*aten_ops("mkldnn_linear_backward_weights"))
def linear_backward_weights_flop(
    grad_out: Tensor, x: Tensor, w: Tensor, bias_defined: bool, *_: Any, out: Any = None, **__: Any
) -> Cost:
    """grad_weight (+ grad_bias)."""
    return _linear_backward_cost(x, grad_out, w, (False, True, bias_defined))


@register_flop_formula(*aten_ops("matmul_backward"))
def matmul_backward_flop(
    grad: Tensor, a: Tensor, b: Tensor, mask: Any, *_: Any, out: Any = None, **__: Any
) -> Cost:
    """Each requested gradient costs the forward's grad elements * K MACs."""
    macs = _contracted(grad, a)
    return _mac_cost(macs * (int(bool(mask[0])) + int(bool(mask[1]))))


@register_flop_formula(*aten_ops("_mixed_dtypes_linear"))
def mixed_dtypes_linear_flop(
    x: Tensor,
    w: Tensor,
    scale: Tensor,
    *_: Any,
    out: Any = None,
    bias: Tensor | None = None,
    activation: str | None = None,
    **__: Any,
) -> Cost:
    """Linear with a dequant scale: out elements * K MACs + scale, bias and activation
    (1 each) per output element."""
    n_out = first_tensor(out).numel()
    extra = n_out * (1 + (bias is not None) + (activation is not None))
    return _mac_cost(n_out * x.shape[-1], extra)


@register_flop_formula(*aten_ops("_dyn_quant_matmul_4bit"))
def dyn_quant_matmul_flop(x: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """out elements * in_features MACs (weight dequantization not counted)."""
    return _mac_cost(first_tensor(out).numel() * x.shape[-1])


@register_flop_formula(*aten_ops("_compute_linear_combination"))
def linear_combination_flop(
    x: Tensor, coefficients: Tensor, *_: Any, out: Any = None, **__: Any
) -> Cost:
    """out[m] = sum_n coefficients[m, n] * x[n]: out elements * N MACs."""
    return _mac_cost(first_tensor(out).numel() * x.shape[0])


@register_flop_formula(*aten_ops("affine_grid_generator"))
def affine_grid_flop(theta: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """Base grid (homogeneous coordinates) times theta^T: grid elements * (d + 1) MACs."""
    return _mac_cost(first_tensor(out).numel() * theta.shape[-1])


def _expanded_shape(t: Tensor, expand: Any, ndim: int) -> list[int]:
    sizes = iter(t.shape)
    return [1 if d in expand else next(sizes) for d in range(ndim)]


@register_flop_formula(*aten_ops("_trilinear"))
def trilinear_flop(
    i1: Tensor,
    i2: Tensor,
    i3: Tensor,
    expand1: Any,
    expand2: Any,
    expand3: Any,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """``nn.Bilinear``: one MAC per term of the trilinear sum, i.e. per element of the
    broadcast shape of the three expanded operands (N * O * I1 * I2 for a bilinear layer)."""
    ndim = i1.dim() + len(expand1)
    shapes = [_expanded_shape(t, e, ndim) for t, e in ((i1, expand1), (i2, expand2), (i3, expand3))]
    return _mac_cost(prod(max(s[d] for s in shapes) for d in range(ndim)))
