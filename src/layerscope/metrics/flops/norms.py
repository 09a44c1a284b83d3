"""Batch, layer, group and RMS normalization, forward and backward.

Conventions (per element of the input unless said otherwise):

- statistics (mean and biased variance): 4 (mean: add; variance: sub, square, add),
  plus 4 per normalized group (two divides by n, + eps, rsqrt);
- normalize ``(x - mean) * rstd``: 2; affine: 1 for the weight multiply, 1 for the bias add;
- batch norm in eval mode folds everything into one scale and shift per channel:
  ``x * scale + shift`` is 2 per element, plus 5 per channel to build scale and shift
  (add eps, rsqrt, mul weight; mul mean, sub from bias);
- training batch norm with running stats adds 7 per channel for the running update
  (two lerps of 3 ops and the unbiased-variance factor).
"""

from __future__ import annotations

from math import prod
from typing import Any

from torch import Tensor

from layerscope.metrics.flops.registry import (
    Cost,
    aten_ops,
    aten_overloads,
    register_flop_formula,
)

STATS = 4
STATS_PER_GROUP = 4
NORMALIZE = 2
EVAL_BN = 2
EVAL_BN_PER_CHANNEL = 5
RUNNING_UPDATE_PER_CHANNEL = 7


def _channels(x: Tensor) -> int:
    return x.shape[1] if x.dim() > 1 else 1


def train_norm_flops(n: int, groups: int, weight: Any, bias: Any) -> int:
    per_elem = STATS + NORMALIZE + (weight is not None) + (bias is not None)
    return per_elem * n + STATS_PER_GROUP * groups


def _batch_norm(
    x: Tensor, weight: Any, bias: Any, running_mean: Any, training: bool, update: bool
) -> Cost:
    n = x.numel()
    c = _channels(x)
    if not training:
        return Cost(0, EVAL_BN * n + EVAL_BN_PER_CHANNEL * c)
    flops = train_norm_flops(n, c, weight, bias)
    if update and running_mean is not None:
        flops += RUNNING_UPDATE_PER_CHANNEL * c
    return Cost(0, flops)


@register_flop_formula(
    *aten_ops(
        "native_batch_norm",
        "_native_batch_norm_legit",
        "_native_batch_norm_legit_functional",
        "cudnn_batch_norm",
        "miopen_batch_norm",
        "_batch_norm_impl_index",
    )
)
def batch_norm_flop(
    x: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    training: bool,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """Training: stats + normalize + affine (+ running update); eval: fused scale/shift."""
    return _batch_norm(x, weight, bias, running_mean, training, update=True)


@register_flop_formula(*aten_overloads("_native_batch_norm_legit", ("no_stats", "no_stats_out")))
def batch_norm_no_stats_flop(
    x: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    training: bool,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """Batch statistics without running stats."""
    return _batch_norm(x, weight, bias, None, training, update=False)


@register_flop_formula(*aten_ops("_native_batch_norm_legit_no_training"))
def batch_norm_no_training_flop(
    x: Tensor, weight: Tensor | None, bias: Tensor | None, *_: Any, out: Any = None, **__: Any
) -> Cost:
    """Eval-mode batch norm: fused scale/shift."""
    return _batch_norm(x, weight, bias, None, training=False, update=False)


@register_flop_formula(*aten_ops("_batch_norm_with_update", "_batch_norm_with_update_functional"))
def batch_norm_with_update_flop(
    x: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    running_mean: Tensor | None,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """Training batch norm that updates the running stats."""
    return _batch_norm(x, weight, bias, running_mean, training=True, update=True)


@register_flop_formula(*aten_ops("_batch_norm_no_update"))
def batch_norm_no_update_flop(
    x: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    running_mean: Tensor | None,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """Eval mode when running stats exist, else batch statistics (no update)."""
    return _batch_norm(x, weight, bias, None, training=running_mean is None, update=False)


def _batch_norm_backward(x: Tensor, train: bool, mask: Any) -> Cost:
    """Per element: xhat recompute 2, sum(g) 1, sum(g * xhat) 2, grad_input 4 (training:
    g - mean_g - xhat * mean_gx, times w * rstd) or 1 (eval: g * w * rstd); the sums are
    shared by grad_input, grad_weight and grad_bias. 3 per channel for grad_input."""
    gi, gw, gb = bool(mask[0]), bool(mask[1]), bool(mask[2])
    sums_for_gi = gi and train
    per = 0
    if sums_for_gi or gw:
        per += 2 + 2  # xhat, sum(g * xhat)
    if sums_for_gi or gb:
        per += 1  # sum(g)
    if gi:
        per += 4 if train else 1
    return Cost(0, per * x.numel() + (3 * _channels(x) if gi else 0))


@register_flop_formula(*aten_ops("native_batch_norm_backward"))
def batch_norm_backward_flop(
    grad_out: Tensor,
    x: Tensor,
    weight: Any,
    running_mean: Any,
    running_var: Any,
    save_mean: Any,
    save_invstd: Any,
    train: bool,
    eps: float,
    output_mask: Any,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """Training, all three grads: 9 per element + 3 per channel; eval: 6 + 3."""
    return _batch_norm_backward(x, train, output_mask)


@register_flop_formula(*aten_ops("batch_norm_backward"))
def batch_norm_backward_update_flop(
    grad_out: Tensor,
    x: Tensor,
    weight: Any,
    running_mean: Any,
    running_var: Any,
    save_mean: Any,
    save_var: Any,
    update: bool,
    eps: float,
    output_mask: Any,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """As ``native_batch_norm_backward``; training when ``update`` or no running stats."""
    return _batch_norm_backward(x, bool(update) or running_mean is None, output_mask)


@register_flop_formula(*aten_ops("cudnn_batch_norm_backward", "miopen_batch_norm_backward"))
def cudnn_batch_norm_backward_flop(
    x: Tensor, grad_out: Tensor, *_: Any, out: Any = None, **__: Any
) -> Cost:
    """Training backward computing all three grads."""
    return _batch_norm_backward(x, True, (True, True, True))


@register_flop_formula(*aten_ops("_batch_norm_impl_index_backward"))
def batch_norm_impl_index_backward_flop(
    impl_index: int,
    x: Tensor,
    grad_out: Tensor,
    weight: Any,
    running_mean: Any,
    running_var: Any,
    save_mean: Any,
    save_var: Any,
    train: bool,
    eps: float,
    output_mask: Any,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """As ``native_batch_norm_backward``."""
    return _batch_norm_backward(x, train, output_mask)


@register_flop_formula(*aten_ops("native_layer_norm"))
def layer_norm_flop(
    x: Tensor,
    normalized_shape: Any,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """stats 4 + normalize 2 + weight 1 + bias 1 per element, + 4 per normalized row."""
    n = x.numel()
    size = prod(normalized_shape)
    return Cost(0, train_norm_flops(n, n // size if size else 0, weight, bias))


@register_flop_formula(*aten_ops("native_group_norm"))
def group_norm_flop(
    x: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    n_batch: int,
    channels: int,
    hxw: int,
    group: int,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """As layer norm with N * groups normalized groups."""
    return Cost(0, train_norm_flops(x.numel(), n_batch * group, weight, bias))


def _row_norm_backward(n: int, groups: int, has_weight: bool, mask: Any) -> Cost:
    """Layer/group norm backward per element: xhat 2; grad_input: g*w 1, sum(gw) 1,
    sum(gw * xhat) 2, rstd * (gw - mean - xhat * mean2) 4 (+2 per group); grad_weight:
    sum(g * xhat) 2; grad_bias: sum(g) 1."""
    gi, gw, gb = bool(mask[0]), bool(mask[1]), bool(mask[2])
    per = 2 if (gi or gw) else 0
    if gi:
        per += (1 if has_weight else 0) + 1 + 2 + 4
    if gw:
        per += 2
    if gb:
        per += 1
    return Cost(0, per * n + (2 * groups if gi else 0))


@register_flop_formula(*aten_ops("native_layer_norm_backward"))
def layer_norm_backward_flop(
    grad_out: Tensor,
    x: Tensor,
    normalized_shape: Any,
    mean: Any,
    rstd: Any,
    weight: Tensor | None,
    bias: Tensor | None,
    output_mask: Any,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """All three grads with a weight: 13 per element + 2 per row."""
    n = x.numel()
    size = prod(normalized_shape)
    return _row_norm_backward(n, n // size if size else 0, weight is not None, output_mask)


@register_flop_formula(*aten_ops("native_group_norm_backward"))
def group_norm_backward_flop(
    grad_out: Tensor,
    x: Tensor,
    mean: Any,
    rstd: Any,
    weight: Tensor | None,
    n_batch: int,
    channels: int,
    hxw: int,
    group: int,
    output_mask: Any,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """As layer norm backward with N * groups groups."""
    return _row_norm_backward(x.numel(), n_batch * group, weight is not None, output_mask)


@register_flop_formula(*aten_ops("_fused_rms_norm"))
def rms_norm_flop(
    x: Tensor,
    normalized_shape: Any,
    weight: Tensor | None = None,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """Square, add, x * rstd (+ weight) per element; divide, + eps, rsqrt per row."""
    n = x.numel()
    size = prod(normalized_shape)
    per = 3 + (weight is not None)
    return Cost(0, per * n + 3 * (n // size if size else 0))


@register_flop_formula(*aten_ops("_fused_rms_norm_backward"))
def rms_norm_backward_flop(
    grad_out: Tensor,
    x: Tensor,
    normalized_shape: Any,
    rstd: Any,
    weight: Tensor | None,
    output_mask: Any,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """xhat 1; grad_input: g*w 1, sum(gw * xhat) 2, rstd * (gw - xhat * mean) 3 (+1 per
    row); grad_weight: sum(g * xhat) 2."""
    n = x.numel()
    size = prod(normalized_shape)
    gi, gw = bool(output_mask[0]), bool(output_mask[1])
    per = 1 if (gi or gw) else 0
    if gi:
        per += (weight is not None) + 2 + 3
    if gw:
        per += 2
    return Cost(0, per * n + ((n // size if size else 0) if gi else 0))


# --- SyncBatchNorm building blocks (CUDA) -----------------------------------------------


@register_flop_formula(*aten_ops("batch_norm_stats"))
def batch_norm_stats_flop(x: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """Per-channel mean and invstd: 4 per element + 4 per channel."""
    return Cost(0, STATS * x.numel() + STATS_PER_GROUP * _channels(x))


@register_flop_formula(*aten_ops("batch_norm_update_stats"))
def batch_norm_update_stats_flop(
    x: Tensor, running_mean: Any, *_: Any, out: Any = None, **__: Any
) -> Cost:
    """Stats + the running update."""
    c = _channels(x)
    update = RUNNING_UPDATE_PER_CHANNEL * c if running_mean is not None else 0
    return Cost(0, STATS * x.numel() + STATS_PER_GROUP * c + update)


@register_flop_formula(*aten_ops("batch_norm_gather_stats", "batch_norm_gather_stats_with_counts"))
def batch_norm_gather_stats_flop(
    x: Tensor, mean: Tensor, invstd: Tensor, running_mean: Any, *_: Any, out: Any = None, **__: Any
) -> Cost:
    """Merging per-rank (mean, invstd) pairs: 6 per (rank, channel) + the running update."""
    c = mean.shape[-1] if mean.dim() else 1
    update = RUNNING_UPDATE_PER_CHANNEL * c if running_mean is not None else 0
    return Cost(0, 6 * mean.numel() + update)


@register_flop_formula(*aten_ops("batch_norm_elemt"))
def batch_norm_elemt_flop(x: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """Normalize with given stats, as a fused scale/shift: 2 per element + 5 per channel."""
    return Cost(0, EVAL_BN * x.numel() + EVAL_BN_PER_CHANNEL * _channels(x))


@register_flop_formula(*aten_ops("batch_norm_backward_reduce"))
def batch_norm_backward_reduce_flop(
    grad_out: Tensor, x: Tensor, *_: Any, out: Any = None, **__: Any
) -> Cost:
    """sum(g) 1 + sum(g * (x - mean)) 3 per element."""
    return Cost(0, 4 * x.numel())


@register_flop_formula(*aten_ops("batch_norm_backward_elemt"))
def batch_norm_backward_elemt_flop(
    grad_out: Tensor, x: Tensor, *_: Any, out: Any = None, **__: Any
) -> Cost:
    """(g - mean_dy - (x - mean) * k) * invstd * w: 5 per element."""
    return Cost(0, 5 * x.numel())


@register_flop_formula(*aten_ops("_weight_norm_interface"))
def weight_norm_flop(v: Tensor, g: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """w = g * v / ||v||: square, add, multiply per element + sqrt, divide per slice."""
    return Cost(0, 3 * v.numel() + 2 * g.numel())


@register_flop_formula(*aten_ops("_weight_norm_interface_backward"))
def weight_norm_backward_flop(
    grad_w: Tensor, v: Tensor, g: Tensor, *_: Any, out: Any = None, **__: Any
) -> Cost:
    """grad_v and grad_g: sum(grad * v) 2, grad_v = (g*grad - v*k)/norm 3 per element."""
    return Cost(0, 5 * v.numel() + 3 * g.numel())


@register_flop_formula(*aten_ops("renorm", "renorm_"))
def renorm_flop(x: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """Slice norms (2 per element) + a rescale multiply per element."""
    return Cost(0, 3 * x.numel())
