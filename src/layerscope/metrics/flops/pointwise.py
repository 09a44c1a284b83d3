"""Elementwise ops: arithmetic, math functions, activations and their backwards.

Convention: an elementwise op costs a fixed number of flops per element of its output
(broadcasting is therefore counted on the broadcast shape, in-place and ``out=`` forms
alike). Every arithmetic operation, comparison and elementary function (``exp``,
``log``, ``tanh``, ``sigmoid``, ``erf``, ``sqrt``, ``pow``, ...) counts 1, whatever the
dtype; composite activations count the operations of their textbook formula. Scalar
hyper-parameter multiplies (``alpha`` of ``add``, ``value`` of ``addcmul``) are not
counted. Pure selection (``where``, ``masked_fill``) does no arithmetic and is in the
zero-cost list.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from layerscope.metrics.flops._common import first_tensor, per_input_element, per_output_element
from layerscope.metrics.flops.registry import Cost, aten_ops, register_flop_formula

RELU = 1
#: 0.5 * x * (1 + erf(x / sqrt(2))): div, erf, add, mul, mul.
GELU = 5
#: 0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715*x^3))): x*x, *x, *c, +x, *k, tanh, +1, *x, *0.5.
GELU_TANH = 9
#: d/dx of GELU (erf form) times grad: cdf (div, erf, add, mul) + pdf (x*x, *-0.5, exp,
#: *1/sqrt(2pi)) + x*pdf, cdf + x*pdf, *grad.
GELU_BACKWARD = 11
#: d/dx of the tanh GELU times grad: inner (5) + tanh + (1 - t^2) (2) + du/dx (3) +
#: combination 0.5*(1+t) + 0.5*x*(1-t^2)*du (6) + *grad.
GELU_TANH_BACKWARD = 18

#: flops per output element of each elementwise aten op (in-place ``op_`` forms and
#: ``.out`` overloads included). Ops whose count depends on arguments (``clamp``,
#: ``gelu``, ``native_dropout``) have their own formulas below.
ELEMENTWISE_FLOPS: dict[str, int] = {
    # arithmetic, comparison, logic: one operation per element
    **dict.fromkeys(
        (
            "add",
            "sub",
            "rsub",
            "mul",
            "div",
            "true_divide",
            "floor_divide",
            "remainder",
            "fmod",
            "neg",
            "abs",
            "reciprocal",
            "sign",
            "sgn",
            "signbit",
            "floor",
            "ceil",
            "round",
            "trunc",
            "frac",
            "maximum",
            "minimum",
            "fmax",
            "fmin",
            "clamp_min",
            "clamp_max",
            "copysign",
            "nextafter",
            "heaviside",
            "gcd",
            "lcm",
            "eq",
            "ne",
            "lt",
            "le",
            "gt",
            "ge",
            "isnan",
            "isinf",
            "isposinf",
            "isneginf",
            "logical_not",
            "logical_and",
            "logical_or",
            "logical_xor",
            "bitwise_not",
            "bitwise_and",
            "bitwise_or",
            "bitwise_xor",
            "bitwise_left_shift",
            "bitwise_right_shift",
            "__and__",
            "__or__",
            "__xor__",
            "__lshift__",
            "__rshift__",
            "__iand__",
            "__ior__",
            "__ixor__",
            "__ilshift__",
            "__irshift__",
            "nan_to_num",
            "deg2rad",
            "rad2deg",
            "conj_physical",
            "_conj_physical",
            "isfinite",
            "angle",
            "frexp",
        ),
        1,
    ),
    # elementary functions: one evaluation per element
    **dict.fromkeys(
        (
            "exp",
            "exp2",
            "expm1",
            "log",
            "log2",
            "log10",
            "log1p",
            "sqrt",
            "rsqrt",
            "pow",
            "float_power",
            "sin",
            "cos",
            "tan",
            "asin",
            "acos",
            "atan",
            "atan2",
            "arctan2",
            "sinh",
            "cosh",
            "tanh",
            "asinh",
            "acosh",
            "atanh",
            "hypot",
            "sigmoid",
            "erf",
            "erfc",
            "erfinv",
            "lgamma",
            "digamma",
            "polygamma",
            "mvlgamma",
            "igamma",
            "igammac",
            "i0",
            "special_i0e",
            "special_i1",
            "special_i1e",
            "special_ndtri",
            "special_ndtr",
            "special_log_ndtr",
            "special_erfcx",
            "special_entr",
            "special_zeta",
            "special_bessel_j0",
            "special_bessel_j1",
            "special_bessel_y0",
            "special_bessel_y1",
            "special_modified_bessel_i0",
            "special_modified_bessel_i1",
            "special_modified_bessel_k0",
            "special_modified_bessel_k1",
            "special_scaled_modified_bessel_k0",
            "special_scaled_modified_bessel_k1",
            "special_spherical_bessel_j0",
            "special_airy_ai",
        ),
        1,
    ),
    # two-operation formulas
    "xlogy": 2,  # log, mul
    "special_xlog1py": 2,  # log1p, mul
    "ldexp": 2,  # exp2, mul
    "sinc": 2,  # sin(pi x) / (pi x): sin, div (the pi multiply folded)
    "addcmul": 2,  # self + value * t1 * t2: mul, add
    "addcdiv": 2,  # self + value * t1 / t2: div, add
    "lerp": 3,  # start + weight * (end - start): sub, mul, add
    "_add_relu": 2,  # add, max
    "polar": 4,  # abs * cos(angle), abs * sin(angle)
    "dequantize": 2,  # (q - zero_point) * scale
    "logaddexp": 4,  # log(exp(a) + exp(b)): exp, exp, add, log
    "logaddexp2": 4,
    "logit": 3,  # log(x / (1 - x)): sub, div, log
    "logit_backward": 3,  # grad / (x * (1 - x)): sub, mul, div
    # activations (forward)
    "relu": RELU,  # max(x, 0)
    "threshold": 1,  # x > t ? x : value
    "hardtanh": 2,  # min(max(x, lo), hi)
    "leaky_relu": 2,  # compare, mul
    "_prelu_kernel": 2,  # compare, mul
    "rrelu_with_noise": 2,  # compare, mul by the sampled slope
    "elu": 4,  # x > 0 ? x : alpha * (exp(x) - 1): compare, exp, sub, mul
    "celu": 4,
    "silu": 2,  # x * sigmoid(x)
    "hardsigmoid": 4,  # min(max(x + 3, 0), 6) / 6: add, max, min, div
    "hardswish": 5,  # x * hardsigmoid(x)
    "softplus": 3,  # log(1 + exp(x)): exp, add, log
    "mish": 5,  # x * tanh(softplus(x)): exp, add, log, tanh, mul
    "log_sigmoid_forward": 5,  # -log(1 + exp(-x)): neg, exp, add, log, neg
    "hardshrink": 2,  # |x| > l ? x : 0: abs, compare
    "softshrink": 3,  # compare, compare, sub/add
    "glu": 2,  # a * sigmoid(b), per output element
    # activation backwards (per element of the gradient they return)
    "threshold_backward": 1,  # x > t ? grad : 0
    "hardtanh_backward": 2,  # two compares
    "leaky_relu_backward": 2,  # compare, mul
    "rrelu_with_noise_backward": 2,  # compare, mul
    "elu_backward": 3,  # compare, add alpha (or exp), mul grad
    "sigmoid_backward": 3,  # grad * y * (1 - y)
    "tanh_backward": 3,  # grad * (1 - y * y)
    "silu_backward": 6,  # grad * s * (1 + x * (1 - s)): sigmoid, sub, mul, add, mul, mul
    "hardsigmoid_backward": 3,  # two compares, grad / 6
    "hardswish_backward": 6,  # two compares, grad * (2x + 3) / 6: mul, add, div, mul
    "softplus_backward": 4,  # grad * exp(x) / (1 + exp(x)): exp, add, div, mul
    "mish_backward": 11,  # softplus (3), tanh, sigmoid, 1 - t^2 (2), x*s, *, +, *grad
    "log_sigmoid_backward": 3,  # grad * (1 - sigmoid(x)): sigmoid, sub, mul
    "hardshrink_backward": 2,  # abs, compare
    "softshrink_backward": 2,  # two compares
    "_masked_scale": 1,  # x * (mask * scale), the scale folded into the mask
    "_fused_dropout": 1,
    "native_dropout_backward": 1,  # grad * (mask * scale)
}

#: Ops whose formula is per element of the first argument rather than of the output.
PER_GRAD_OUTPUT_ELEMENT: dict[str, int] = {
    "glu_backward": 6,  # per grad_output element: sigmoid, g*s, and g*a*s*(1-s) (4)
    "_prelu_kernel_backward": 4,  # grad_input (compare, mul) + grad_weight (compare, mul)
}


def _register_table() -> None:
    by_count: dict[int, list[str]] = {}
    for name, flops in ELEMENTWISE_FLOPS.items():
        by_count.setdefault(flops, []).extend((name, name + "_"))
    for flops, names in by_count.items():
        register_flop_formula(*aten_ops(*names))(per_output_element(flops))
    for name, flops in PER_GRAD_OUTPUT_ELEMENT.items():
        register_flop_formula(*aten_ops(name))(per_input_element(flops))


_register_table()


@register_flop_formula(*aten_ops("clamp", "clamp_"))
def clamp_flop(
    x: Tensor, lo: Any = None, hi: Any = None, *_: Any, out: Any = None, **kwargs: Any
) -> Cost:
    """One comparison per bound given, per output element."""
    lo = kwargs.get("min", lo)
    hi = kwargs.get("max", hi)
    bounds = (lo is not None) + (hi is not None)
    return Cost(0, bounds * first_tensor(out).numel())


@register_flop_formula(*aten_ops("gelu", "gelu_"))
def gelu_flop(x: Tensor, *_: Any, out: Any = None, approximate: str = "none", **__: Any) -> Cost:
    """5 flops/elem (erf form) or 9 (``approximate='tanh'``)."""
    per = GELU_TANH if approximate == "tanh" else GELU
    return Cost(0, per * first_tensor(out).numel())


@register_flop_formula(*aten_ops("gelu_backward"))
def gelu_backward_flop(
    grad: Tensor, x: Tensor, *_: Any, out: Any = None, approximate: str = "none", **__: Any
) -> Cost:
    """11 flops/elem (erf form) or 18 (``approximate='tanh'``)."""
    per = GELU_TANH_BACKWARD if approximate == "tanh" else GELU_BACKWARD
    return Cost(0, per * first_tensor(out).numel())


@register_flop_formula(*aten_ops("native_dropout"))
def native_dropout_flop(
    x: Tensor, p: float, train: bool | None = None, *_: Any, out: Any = None, **__: Any
) -> Cost:
    """Training: one mask multiply per element (the 1/(1-p) scale folded into the mask);
    ``train=False``: an identity copy, 0."""
    if train is False:
        return Cost()
    return Cost(0, x.numel())
