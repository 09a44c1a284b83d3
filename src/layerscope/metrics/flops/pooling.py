"""Pooling and interpolation, forward and backward.

Conventions: a pooling window of k elements costs k flops per output element for max
(k comparisons against a running max that starts at -inf) and k + 1 for average (k adds
+ 1 divide), windows hanging over the padding included. Backward: max pooling routes each
gradient to its argmax (one add per gradient element), average pooling spreads it back
over its window (the same k + 1). Interpolation: each output element is a weighted sum of
t input taps, 2t - 1 flops (t = 2 linear, 4 bilinear, 8 trilinear, 16 bicubic); its
backward scatters each gradient to the t taps, 2t flops. Nearest-neighbour forward is a
gather (zero-cost); its backward sums gradients, one add per gradient element.
"""

from __future__ import annotations

from math import prod
from typing import Any

from torch import Tensor

from layerscope.metrics.flops._common import first_tensor
from layerscope.metrics.flops.registry import Cost, Formula, aten_ops, register_flop_formula


def _kernel_elems(kernel_size: Any, ndim: int) -> int:
    ks: list[int] = [kernel_size] if isinstance(kernel_size, int) else list(kernel_size)
    if len(ks) == 1:
        return int(ks[0] ** ndim)
    return prod(ks)


def _pool_formula(ndim: int, extra: int, kernel_pos: int = 1) -> Formula:
    """Output elements * (k + extra), k read from the argument at ``kernel_pos``."""

    def formula(*args: Any, out: Any = None, **kwargs: Any) -> Cost:
        kernel = args[kernel_pos] if len(args) > kernel_pos else kwargs["kernel_size"]
        k = _kernel_elems(kernel, ndim)
        return Cost(0, first_tensor(out).numel() * (k + extra))

    formula.__doc__ = f"{ndim}-d pooling: (k + {extra}) flops per output element."
    return formula


def _grad_pool_formula(ndim: int, extra: int, kernel_pos: int = 2) -> Formula:
    """grad_output elements * (k + extra), k read from the argument at ``kernel_pos``."""

    def formula(grad: Tensor, *args: Any, out: Any = None, **kwargs: Any) -> Cost:
        pos = kernel_pos - 1
        kernel = args[pos] if len(args) > pos else kwargs["kernel_size"]
        k = _kernel_elems(kernel, ndim)
        return Cost(0, grad.numel() * (k + extra))

    formula.__doc__ = f"{ndim}-d average-pool backward: (k + {extra}) per gradient element."
    return formula


for _d in (1, 2, 3):
    register_flop_formula(
        *aten_ops(f"max_pool{_d}d", f"max_pool{_d}d_with_indices", f"mkldnn_max_pool{_d}d")
    )(_pool_formula(_d, 0))
    register_flop_formula(*aten_ops(f"avg_pool{_d}d"))(_pool_formula(_d, 1))
    register_flop_formula(*aten_ops(f"avg_pool{_d}d_backward"))(_grad_pool_formula(_d, 1))
    register_flop_formula(*aten_ops(f"fractional_max_pool{_d}d"))(_pool_formula(_d, 0))


@register_flop_formula(
    *aten_ops(
        "max_pool2d_with_indices_backward",
        "max_pool3d_with_indices_backward",
        "max_pool2d_backward",
        "mkldnn_max_pool2d_backward",
        "mkldnn_max_pool3d_backward",
        "fractional_max_pool2d_backward",
        "fractional_max_pool3d_backward",
        "adaptive_max_pool2d_backward",
        "adaptive_max_pool3d_backward",
        "max_unpool2d_backward",
        "upsample_nearest1d_backward",
        "upsample_nearest2d_backward",
        "upsample_nearest3d_backward",
        "_upsample_nearest_exact1d_backward",
        "_upsample_nearest_exact2d_backward",
        "_upsample_nearest_exact3d_backward",
    )
)
def route_grad_flop(grad: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """Each gradient element is added into the input position it came from: 1 add each."""
    return Cost(0, grad.numel())


def _window_total(in_size: int, out_size: int) -> int:
    """Sum of the adaptive window lengths along one dim: window j spans
    [floor(j*I/O), ceil((j+1)*I/O))."""
    total = 0
    for j in range(out_size):
        start = (j * in_size) // out_size
        end = -((-(j + 1) * in_size) // out_size)
        total += end - start
    return total


def _adaptive_windows(x: Tensor, out_spatial: Any) -> int:
    """Total window elements over all outputs of an adaptive pool of ``x``."""
    nd = len(out_spatial)
    in_spatial = x.shape[x.dim() - nd :]
    lead = prod(x.shape[: x.dim() - nd])
    total = lead
    for i, o in zip(in_spatial, out_spatial, strict=True):
        total *= _window_total(i, o)
    return total


def _adaptive_formula(nd: int, divide: bool) -> Formula:
    """Adaptive pooling over the last ``nd`` dims: the sum of the window sizes (adds or
    comparisons) + one divide per output element for average pooling."""

    def formula(x: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
        y = first_tensor(out)
        windows = _adaptive_windows(x, y.shape[y.dim() - nd :])
        return Cost(0, windows + (y.numel() if divide else 0))

    formula.__doc__ = _adaptive_formula.__doc__
    return formula


def _adaptive_backward_formula(nd: int) -> Formula:
    """Adaptive average-pool backward: as the forward (each gradient element is divided
    once and added to every element of its window)."""

    def formula(grad: Tensor, x: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
        windows = _adaptive_windows(x, grad.shape[grad.dim() - nd :])
        return Cost(0, windows + grad.numel())

    formula.__doc__ = _adaptive_backward_formula.__doc__
    return formula


for _d in (2, 3):
    register_flop_formula(
        *aten_ops(
            f"_adaptive_avg_pool{_d}d", f"adaptive_avg_pool{_d}d", f"mkldnn_adaptive_avg_pool{_d}d"
        )
    )(_adaptive_formula(_d, divide=True))
    register_flop_formula(*aten_ops(f"adaptive_max_pool{_d}d"))(_adaptive_formula(_d, divide=False))
    register_flop_formula(
        *aten_ops(
            f"_adaptive_avg_pool{_d}d_backward",
            f"adaptive_avg_pool{_d}d_backward",
            f"mkldnn_adaptive_avg_pool{_d}d_backward",
        )
    )(_adaptive_backward_formula(_d))


# --- interpolation -------------------------------------------------------------------

#: taps per output element of each interpolation kernel.
INTERP_TAPS: dict[str, int] = {
    "upsample_linear1d": 2,
    "upsample_bilinear2d": 4,
    "_upsample_bilinear2d_aa": 4,
    "upsample_trilinear3d": 8,
    "upsample_bicubic2d": 16,
    "_upsample_bicubic2d_aa": 16,
    "_upsample_lanczos2d_aa": 36,
}


def _interp_formula(taps: int) -> Formula:
    def formula(*_: Any, out: Any = None, **__: Any) -> Cost:
        return Cost(0, (2 * taps - 1) * first_tensor(out).numel())

    formula.__doc__ = f"{taps} taps: {2 * taps - 1} flops per output element."
    return formula


def _interp_backward_formula(taps: int) -> Formula:
    def formula(grad: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
        return Cost(0, 2 * taps * grad.numel())

    formula.__doc__ = f"{taps} taps: {2 * taps} flops per gradient element."
    return formula


for _name, _taps in INTERP_TAPS.items():
    register_flop_formula(*aten_ops(_name))(_interp_formula(_taps))
    register_flop_formula(*aten_ops(_name + "_backward"))(_interp_backward_formula(_taps))


register_flop_formula(*aten_ops("adaptive_avg_pool1d"))(_adaptive_formula(1, divide=True))
register_flop_formula(*aten_ops("adaptive_max_pool1d"))(_adaptive_formula(1, divide=False))


# --- grid sampling (F.grid_sample) -----------------------------------------------------

#: taps per output element by ``interpolation_mode`` (0 bilinear, 1 nearest, 2 bicubic).
GRID_TAPS_2D = {0: 4, 1: 1, 2: 16}
GRID_TAPS_3D = {0: 8, 1: 1}


def _grid_taps(grid: Tensor, mode: int) -> tuple[int, int]:
    nd = grid.shape[-1]
    table = GRID_TAPS_3D if nd == 3 else GRID_TAPS_2D
    return table.get(mode, 2**nd), nd


@register_flop_formula(
    *aten_ops("grid_sampler_2d", "grid_sampler_3d", "_grid_sampler_2d_cpu_fallback")
)
def grid_sampler_flop(
    x: Tensor, grid: Tensor, mode: int = 0, *_: Any, out: Any = None, **__: Any
) -> Cost:
    """Unnormalize each grid coordinate (mul, add) + a weighted sum of the taps per output
    element (2t - 1; nearest: a gather, 0)."""
    taps, _nd = _grid_taps(grid, mode)
    per_out = 2 * taps - 1 if taps > 1 else 0
    return Cost(0, 2 * grid.numel() + per_out * first_tensor(out).numel())


@register_flop_formula(
    *aten_ops(
        "grid_sampler_2d_backward",
        "grid_sampler_3d_backward",
        "_grid_sampler_2d_cpu_fallback_backward",
    )
)
def grid_sampler_backward_flop(
    grad: Tensor,
    x: Tensor,
    grid: Tensor,
    mode: int = 0,
    padding_mode: int = 0,
    align_corners: bool = False,
    output_mask: Any = (True, True),
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """grad_input: each gradient scattered to t taps (2t); grad_grid: a weight derivative
    per tap and coordinate (2 * t * d per gradient element) + the coordinate scaling."""
    taps, nd = _grid_taps(grid, mode)
    flops = 2 * grid.numel()
    if output_mask[0]:
        flops += 2 * taps * grad.numel()
    if output_mask[1] and taps > 1:
        flops += 2 * taps * nd * grad.numel()
    return Cost(0, flops)
