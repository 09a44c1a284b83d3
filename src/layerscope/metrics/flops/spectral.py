"""Fast Fourier transforms.

Convention: the classic radix-2 count, 5 * n * log2(n) real flops for a complex
transform of length n (per transformed element: 5 * log2(n)); real-input and
real-output transforms do half of that work; a multi-dimensional transform is the sum
over its dims; normalization (``normalization`` != 0) adds one multiply per output
element.
"""

from __future__ import annotations

from math import log2
from typing import Any

from torch import Tensor

from layerscope.metrics.flops._common import first_tensor
from layerscope.metrics.flops.registry import Cost, aten_ops, register_flop_formula


def _fft(elements: int, lengths: list[int], factor: float) -> int:
    return round(factor * elements * sum(log2(n) for n in lengths if n > 1))


@register_flop_formula(*aten_ops("_fft_c2c"))
def fft_c2c_flop(
    x: Tensor, dim: Any, normalization: int = 0, *_: Any, out: Any = None, **__: Any
) -> Cost:
    """Complex to complex: 5 * log2(n) per element and transformed dim."""
    flops = _fft(x.numel(), [x.shape[d] for d in dim], 5.0)
    return Cost(0, flops + (x.numel() if normalization else 0))


@register_flop_formula(*aten_ops("_fft_r2c"))
def fft_r2c_flop(
    x: Tensor, dim: Any, normalization: int = 0, *_: Any, out: Any = None, **__: Any
) -> Cost:
    """Real to complex: 2.5 * log2(n) per real input element and transformed dim."""
    flops = _fft(x.numel(), [x.shape[d] for d in dim], 2.5)
    return Cost(0, flops + (first_tensor(out).numel() if normalization else 0))


@register_flop_formula(*aten_ops("_fft_c2r"))
def fft_c2r_flop(
    x: Tensor, dim: Any, normalization: int = 0, *_: Any, out: Any = None, **__: Any
) -> Cost:
    """Complex to real: 2.5 * log2(n) per real output element and transformed dim."""
    y = first_tensor(out)
    flops = _fft(y.numel(), [y.shape[d] for d in dim], 2.5)
    return Cost(0, flops + (y.numel() if normalization else 0))
