"""Loss functions that reach the dispatcher as single aten ops.

Convention: a fixed count per input element from the loss's formula, plus one add per
element when it is reduced (``reduction`` sum or mean) and one divide for the mean.
``cross_entropy`` is ``_log_softmax`` + ``nll_loss_forward``; ``l1_loss``, ``kl_div`` and
the other composite losses decompose into elementwise ops and reductions.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from layerscope.metrics.flops.registry import Cost, Formula, aten_ops, register_flop_formula

NONE, MEAN, SUM = 0, 1, 2


def _reduce(n: int, reduction: int) -> int:
    if reduction == NONE:
        return 0
    return n + (1 if reduction == MEAN else 0)


def _pointwise_loss(per_elem: int, reduction_pos: int) -> Formula:
    """``per_elem`` flops per input element + the reduction (argument at
    ``reduction_pos``, default mean)."""

    def formula(x: Tensor, *args: Any, out: Any = None, **kwargs: Any) -> Cost:
        pos = reduction_pos - 1
        reduction = args[pos] if len(args) > pos else kwargs.get("reduction", MEAN)
        n = x.numel()
        return Cost(0, per_elem * n + _reduce(n, reduction))

    formula.__doc__ = f"{per_elem} flops per element + the reduction."
    return formula


def _pointwise_loss_backward(per_elem: int) -> Formula:
    """``per_elem`` flops per element of the loss input (argument 1)."""

    def formula(grad: Tensor, x: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
        return Cost(0, per_elem * x.numel())

    formula.__doc__ = f"{per_elem} flops per input element."
    return formula


# (x - y)^2: sub, mul
register_flop_formula(*aten_ops("mse_loss"))(_pointwise_loss(2, 2))
# 2 * (x - y) * grad (/ n folded): sub, mul, mul
register_flop_formula(*aten_ops("mse_loss_backward"))(_pointwise_loss_backward(3))
# d = x - y; |d| < beta ? 0.5 * d^2 / beta : |d| - 0.5 * beta: sub, abs, compare, mul, mul
register_flop_formula(*aten_ops("smooth_l1_loss", "huber_loss"))(_pointwise_loss(5, 2))
# sub, compare, d / beta (or sign), * grad
register_flop_formula(*aten_ops("smooth_l1_loss_backward", "huber_loss_backward"))(
    _pointwise_loss_backward(4)
)
# log(1 + exp(-y * x)): mul, neg, exp, add, log
register_flop_formula(*aten_ops("soft_margin_loss"))(_pointwise_loss(5, 2))
# -y * sigmoid(-y * x) * grad: mul, neg, sigmoid, mul, mul
register_flop_formula(*aten_ops("soft_margin_loss_backward"))(_pointwise_loss_backward(5))


@register_flop_formula(*aten_ops("binary_cross_entropy"))
def bce_flop(
    x: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    reduction: int = MEAN,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """-(y log x + (1 - y) log(1 - x)): log, log, sub, sub, mul, mul, add, neg = 8
    (+1 with a weight) per element + the reduction."""
    n = x.numel()
    return Cost(0, (8 + (weight is not None)) * n + _reduce(n, reduction))


@register_flop_formula(*aten_ops("binary_cross_entropy_backward"))
def bce_backward_flop(
    grad: Tensor,
    x: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """grad * (x - y) / (x * (1 - x)): sub, sub, mul, div, mul = 5 (+1 weight)."""
    return Cost(0, (5 + (weight is not None)) * x.numel())


@register_flop_formula(*aten_ops("binary_cross_entropy_with_logits"))
def bce_logits_flop(
    x: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    pos_weight: Tensor | None = None,
    reduction: int = MEAN,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """max(x, 0) - x*y + log1p(exp(-|x|)): max, mul, sub, abs, neg, exp, log1p, add = 8;
    +1 with a weight; +4 with pos_weight ((p - 1) * y + 1 scaling the log term)."""
    n = x.numel()
    per = 8 + (weight is not None) + 4 * (pos_weight is not None)
    return Cost(0, per * n + _reduce(n, reduction))


@register_flop_formula(
    *aten_ops("nll_loss_forward", "nll_loss2d_forward", "nll_loss", "nll_loss2d")
)
def nll_loss_flop(
    x: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    reduction: int = MEAN,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """One negate-and-accumulate per target element (N, or N*d1*...); a class weight adds
    a multiply and a total-weight add per target; mean divides once."""
    n = target.numel()
    flops = n + (2 * n if weight is not None else 0) + (1 if reduction == MEAN else 0)
    return Cost(0, flops)


@register_flop_formula(*aten_ops("nll_loss_backward", "nll_loss2d_backward"))
def nll_loss_backward_flop(
    grad: Tensor,
    x: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """Writes -grad (/ total weight, folded) at each target: 1 per target element (+1
    with a class weight); the zero fill of grad_input is free."""
    n = target.numel()
    return Cost(0, n + (n if weight is not None else 0))


@register_flop_formula(*aten_ops("multi_margin_loss"))
def multi_margin_loss_flop(
    x: Tensor, target: Tensor, p: Any = 1, *_: Any, out: Any = None, **kwargs: Any
) -> Cost:
    """margin - x[y] + x[i], max(0, .), (^2 when p=2), accumulate: 4 or 5 per element."""
    n = x.numel()
    return Cost(0, (5 if p == 2 else 4) * n)


@register_flop_formula(*aten_ops("multi_margin_loss_backward"))
def multi_margin_loss_backward_flop(
    grad: Tensor, x: Tensor, *_: Any, out: Any = None, **__: Any
) -> Cost:
    """compare, scale, accumulate into grad[y]: 3 per element."""
    return Cost(0, 3 * x.numel())


#: flops per CTC lattice cell (log-sum-exp over <= 3 predecessors + the emission add).
CTC_CELL = 10


def _ctc_lattice(
    log_probs: Tensor, targets: Tensor, input_lengths: Any, target_lengths: Any
) -> int:
    """Sum over the batch of T_n * (2 * L_n + 1). Lengths given as int lists are used
    exactly; lengths given as tensors (values, never read) give the bound
    T * N * (2 * max_target_len + 1)."""
    if isinstance(input_lengths, (list, tuple)) and isinstance(target_lengths, (list, tuple)):
        return sum(t * (2 * s + 1) for t, s in zip(input_lengths, target_lengths, strict=False))
    t = log_probs.shape[0]
    n = log_probs.shape[1] if log_probs.dim() == 3 else 1
    s = targets.shape[-1] if targets.dim() == 2 else (targets.numel() // n if n else 0)
    return t * n * (2 * s + 1)


@register_flop_formula(*aten_ops("_ctc_loss"))
def ctc_loss_flop(
    log_probs: Tensor,
    targets: Tensor,
    input_lengths: Any,
    target_lengths: Any,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """The alpha recursion: 10 flops per lattice cell."""
    return Cost(0, CTC_CELL * _ctc_lattice(log_probs, targets, input_lengths, target_lengths))


@register_flop_formula(*aten_ops("_ctc_loss_backward"))
def ctc_loss_backward_flop(
    grad: Tensor,
    log_probs: Tensor,
    targets: Tensor,
    input_lengths: Any,
    target_lengths: Any,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """The beta recursion (10 per cell) + combining alpha and beta into the gradient
    (4 per cell) + 3 per log-prob element (exp, sub, mul by grad)."""
    lattice = _ctc_lattice(log_probs, targets, input_lengths, target_lengths)
    return Cost(0, (CTC_CELL + 4) * lattice + 3 * log_probs.numel())


@register_flop_formula(*aten_ops("multilabel_margin_loss_forward", "multilabel_margin_loss"))
def multilabel_margin_loss_flop(x: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """max(0, 1 - (x[j] - x[i])) summed over (target j, class i) pairs: 4 flops per pair.
    Which classes are targets is in the target's values, so every (j, i) pair of the
    C classes is counted: an upper bound, N * C * C pairs."""
    c = x.shape[-1] if x.dim() else 1
    return Cost(0, 4 * x.numel() * c)


@register_flop_formula(*aten_ops("multilabel_margin_loss_backward"))
def multilabel_margin_loss_backward_flop(
    grad: Tensor, x: Tensor, *_: Any, out: Any = None, **__: Any
) -> Cost:
    """A compare and two gradient updates per (target, class) pair: 3 * N * C * C (bound)."""
    c = x.shape[-1] if x.dim() else 1
    return Cost(0, 3 * x.numel() * c)
