"""Optimizer steps: ``_foreach_*`` elementwise ops and the fused optimizers.

A ``_foreach_<op>`` costs what ``<op>`` costs on each tensor of its list (the
elementwise table of ``pointwise``). Fused optimizers, per parameter element:

- Adam/AdamW: first moment 3 (mul, mul, add), second moment 4 (square, mul, mul, add),
  denominator sqrt(v) / sqrt(bias correction) + eps 3, update p -= step * m / denom 3:
  13; + 2 for Adam's L2 weight decay (g += wd * p), + 1 for AdamW's decoupled decay,
  + 1 for AMSGrad's running max, + 1 for unscaling by ``grad_scale``;
- SGD: p -= lr * g 2; + 2 for weight decay; + 3 for momentum (buf = m * buf + (1 - d) *
  g, except on the first step); + 2 for Nesterov;
- Adagrad: sum += g * g 2, std = sqrt(sum) + eps 2, p -= lr * g / std 3: 7; + 2 for
  weight decay.

A ``GradScaler``'s unscale (``_amp_foreach_non_finite_check_and_unscale_``): each
gradient element multiplied by the inverse scale and checked finite, 2; its scale
update (``_amp_update_scale_``) is scalar work.

Per-tensor scalar work (bias corrections, step counters) is not counted.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from layerscope.metrics.flops.pointwise import ELEMENTWISE_FLOPS
from layerscope.metrics.flops.registry import Cost, Formula, aten_ops, register_flop_formula


def _list_numel(args: tuple[Any, ...]) -> int:
    for arg in args:
        if isinstance(arg, (list, tuple)) and arg and isinstance(arg[0], Tensor):
            return sum(t.numel() for t in arg)
    return 0


def _foreach_formula(flops: int) -> Formula:
    def formula(*args: Any, out: Any = None, **__: Any) -> Cost:
        return Cost(0, flops * _list_numel(args))

    formula.__doc__ = f"{flops} flop(s) per element of each tensor in the list."
    return formula


def _register_foreach() -> None:
    by_count: dict[int, list[str]] = {}
    table = {**ELEMENTWISE_FLOPS, "clamp_min": 1, "clamp_max": 1, "max": 1}
    for name, flops in table.items():
        by_count.setdefault(flops, []).extend((f"_foreach_{name}", f"_foreach_{name}_"))
    for flops, names in by_count.items():
        register_flop_formula(*aten_ops(*names))(_foreach_formula(flops))


_register_foreach()


@register_flop_formula(*aten_ops("_foreach_norm"))
def foreach_norm_flop(tensors: Any, *_: Any, out: Any = None, **__: Any) -> Cost:
    """Square and add per element + one sqrt per tensor (p = 2)."""
    return Cost(0, 2 * _list_numel((tensors,)) + len(tensors))


@register_flop_formula(*aten_ops("_amp_foreach_non_finite_check_and_unscale_"))
def amp_unscale_flop(grads: Any, *_: Any, out: Any = None, **__: Any) -> Cost:
    """A multiply by the inverse scale and a finiteness check per gradient element."""
    return Cost(0, 2 * _list_numel((grads,)))


@register_flop_formula(*aten_ops("_amp_update_scale_", "_amp_update_scale"))
def amp_update_scale_flop(*_: Any, out: Any = None, **__: Any) -> Cost:
    """The scale's update: a handful of scalar ops, not counted (as other scalar work)."""
    return Cost(0, 0)


@register_flop_formula(*aten_ops("_fused_adam_", "_fused_adam", "_fused_adamw_", "_fused_adamw"))
def fused_adam_flop(
    params: Any,
    *_: Any,
    out: Any = None,
    weight_decay: float = 0.0,
    amsgrad: bool = False,
    grad_scale: Any = None,
    **__: Any,
) -> Cost:
    """13 per parameter element (+ weight decay, AMSGrad, grad unscaling)."""
    per = 13 + (2 if weight_decay else 0) + int(bool(amsgrad)) + int(grad_scale is not None)
    return Cost(0, per * _list_numel((params,)))


@register_flop_formula(*aten_ops("_fused_sgd_", "_fused_sgd"))
def fused_sgd_flop(
    params: Any,
    *_: Any,
    out: Any = None,
    weight_decay: float = 0.0,
    momentum: float = 0.0,
    nesterov: bool = False,
    is_first_step: bool = False,
    grad_scale: Any = None,
    **__: Any,
) -> Cost:
    """2 per parameter element (+ weight decay 2, momentum 3, Nesterov 2, unscaling 1)."""
    per = 2 + (2 if weight_decay else 0) + int(grad_scale is not None)
    if momentum:
        per += (0 if is_first_step else 3) + (2 if nesterov else 0)
    return Cost(0, per * _list_numel((params,)))


@register_flop_formula(*aten_ops("_fused_adagrad_", "_fused_adagrad"))
def fused_adagrad_flop(
    params: Any,
    *_: Any,
    out: Any = None,
    weight_decay: float = 0.0,
    grad_scale: Any = None,
    **__: Any,
) -> Cost:
    """7 per parameter element (+ weight decay 2, unscaling 1)."""
    per = 7 + (2 if weight_decay else 0) + int(grad_scale is not None)
    return Cost(0, per * _list_numel((params,)))
