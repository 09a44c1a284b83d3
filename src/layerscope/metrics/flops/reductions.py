"""Reductions, scans, softmax, sorting, distances and indexing ops that accumulate.

Convention: reducing n values costs n flops (an accumulator that starts at 0 or -inf),
so a reduction costs one flop per *input* element; ``mean`` adds one divide per output.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from layerscope.metrics.flops._common import first_tensor
from layerscope.metrics.flops.registry import (
    Cost,
    aten_ops,
    aten_overloads,
    register_flop_formula,
)

#: softmax along a dim: max, subtract, exp, sum, divide: 5 flops per element.
SOFTMAX = 5
#: softmax backward: y * (g - sum(g * y)): mul, sum, sub, mul.
SOFTMAX_BACKWARD = 4
#: log_softmax: max, subtract, exp, sum, subtract per element (+ one log per row).
LOG_SOFTMAX = 5
#: log_softmax backward: g - exp(y) * sum(g): sum, exp, mul, sub.
LOG_SOFTMAX_BACKWARD = 4


def _in(x: Tensor) -> int:
    return x.numel()


@register_flop_formula(
    *aten_ops(
        "sum",
        "nansum",
        "prod",
        "amax",
        "amin",
        "max",
        "min",
        "aminmax",
        "argmax",
        "argmin",
        "all",
        "any",
        "_is_all_true",
        "_is_any_true",
        "count_nonzero",
        "kthvalue",
        "median",
        "nanmedian",
        "mode",
        "topk",
        "unique_consecutive",
        "bincount",
        "histc",
        "cumsum",
        "cumsum_",
        "cumprod",
        "cumprod_",
        "cummax",
        "cummin",
        "_cummax_helper",
        "_cummin_helper",
    )
)
def reduce_flop(x: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """One flop per input element (scans: one per element too)."""
    return Cost(0, x.numel())


# max(a, b) / min(a, b) are elementwise, not reductions.
@register_flop_formula(*aten_overloads("max", ("other", "out")))
@register_flop_formula(*aten_overloads("min", ("other", "out")))
def binary_max_flop(a: Tensor, b: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """One comparison per output element."""
    return Cost(0, first_tensor(out).numel())


@register_flop_formula(*aten_ops("mean", "nanmean"))
def mean_flop(x: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """Sum (one per input element) + one divide per output element."""
    return Cost(0, x.numel() + first_tensor(out).numel())


@register_flop_formula(*aten_ops("var", "var_mean"))
def var_flop(x: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """mean (n adds + 1 div) then sum((x - mean)^2) (sub, mul, add) + 1 div:
    4 per input element + 2 per output element."""
    return Cost(0, 4 * x.numel() + 2 * first_tensor(out).numel())


@register_flop_formula(*aten_ops("std", "std_mean"))
def std_flop(x: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """``var`` + one sqrt per output element."""
    return Cost(0, 4 * x.numel() + 3 * first_tensor(out).numel())


def _norm_cost(x: Tensor, p: Any, out: Any) -> Cost:
    n = x.numel()
    if p is None or p == 2:
        return Cost(0, 2 * n + first_tensor(out).numel())  # square, add; sqrt per output
    if p in (1, 0) or p == float("inf") or p == float("-inf"):
        return Cost(0, 2 * n)  # abs/ne, then add/max
    return Cost(0, 3 * n + first_tensor(out).numel())  # abs, pow, add; root per output


@register_flop_formula(*aten_ops("linalg_vector_norm", "norm", "native_norm"))
def norm_flop(x: Tensor, p: Any = 2, *_: Any, out: Any = None, **kwargs: Any) -> Cost:
    """p=2: 2/elem + a sqrt per output; p=1, 0, +-inf: 2/elem; other p: 3/elem + 1/out."""
    p = kwargs.get("ord", kwargs.get("p", p))
    return _norm_cost(x, p, out)


@register_flop_formula(*aten_ops("logsumexp"))
def logsumexp_flop(x: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """max, sub, exp, add per element + log and add-back-max per output."""
    return Cost(0, 4 * x.numel() + 2 * first_tensor(out).numel())


@register_flop_formula(*aten_ops("logcumsumexp", "_logcumsumexp"))
def logcumsumexp_flop(x: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """One logaddexp (4 flops) per element."""
    return Cost(0, 4 * x.numel())


def _log2_ceil(n: int) -> int:
    return (n - 1).bit_length() if n > 1 else 0


@register_flop_formula(*aten_ops("sort", "msort", "_unique2", "unique_dim"))
def sort_flop(x: Tensor, dim: Any = -1, *_: Any, out: Any = None, **kwargs: Any) -> Cost:
    """A comparison sort: ceil(log2 n) comparisons per element along the sorted dim."""
    dim = kwargs.get("dim", dim)
    n = x.numel() if not isinstance(dim, int) or x.dim() == 0 else x.shape[dim]
    return Cost(0, x.numel() * _log2_ceil(n))


@register_flop_formula(*aten_ops("searchsorted"))
def searchsorted_flop(seq: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """Binary search: ceil(log2 n) comparisons per output element."""
    n = seq.shape[-1] if seq.dim() else 1
    return Cost(0, first_tensor(out).numel() * _log2_ceil(n))


@register_flop_formula(*aten_ops("bucketize"))
def bucketize_flop(x: Any, boundaries: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """Binary search: ceil(log2 len(boundaries)) comparisons per output element."""
    return Cost(0, first_tensor(out).numel() * _log2_ceil(boundaries.numel()))


# --- softmax ---------------------------------------------------------------------


@register_flop_formula(*aten_ops("_softmax", "_safe_softmax", "_masked_softmax", "softmax"))
def softmax_flop(x: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """5 flops per element: max, subtract, exp, sum, divide."""
    return Cost(0, SOFTMAX * x.numel())


@register_flop_formula(*aten_ops("_log_softmax", "log_softmax"))
def log_softmax_flop(x: Tensor, dim: int, *_: Any, out: Any = None, **__: Any) -> Cost:
    """5 flops per element (max, subtract, exp, sum, subtract) + one log per row."""
    n = x.numel()
    size = x.shape[dim] if x.dim() else 1
    return Cost(0, LOG_SOFTMAX * n + (n // size if size else 0))


@register_flop_formula(*aten_ops("_softmax_backward_data", "_masked_softmax_backward"))
def softmax_backward_flop(grad: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """4 flops per element: y * (g - sum(g * y))."""
    return Cost(0, SOFTMAX_BACKWARD * grad.numel())


@register_flop_formula(*aten_ops("_log_softmax_backward_data"))
def log_softmax_backward_flop(grad: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """4 flops per element: g - exp(y) * sum(g)."""
    return Cost(0, LOG_SOFTMAX_BACKWARD * grad.numel())


# --- indexing ops that accumulate ------------------------------------------------------


@register_flop_formula(
    *aten_ops("scatter_add", "scatter_add_", "scatter_reduce", "scatter_reduce_")
)
@register_flop_formula(*aten_overloads("scatter", ("reduce", "value_reduce", "reduce_out")))
@register_flop_formula(*aten_overloads("scatter", ("value_reduce_out",)))
@register_flop_formula(*aten_overloads("scatter_", ("reduce", "value_reduce")))
def scatter_reduce_flop(
    x: Tensor, dim: int, index: Tensor, *_: Any, out: Any = None, **__: Any
) -> Cost:
    """One accumulate per scattered element (``index.numel()``)."""
    return Cost(0, index.numel())


@register_flop_formula(*aten_ops("index_add", "index_add_", "index_reduce", "index_reduce_"))
def index_add_flop(
    x: Tensor, dim: int, index: Tensor, source: Tensor, *_: Any, out: Any = None, **__: Any
) -> Cost:
    """One accumulate per element of ``source``."""
    return Cost(0, source.numel())


@register_flop_formula(
    *aten_ops(
        "index_put",
        "index_put_",
        "_index_put_impl",
        "_index_put_impl_",
        "_unsafe_index_put",
        "put",
        "put_",
    )
)
def index_put_flop(
    x: Tensor,
    indices: Any,
    values: Tensor,
    accumulate: bool = False,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """``accumulate=True``: one add per element of ``values`` (``put``: ``source``, in the
    same place); otherwise a copy (0)."""
    return Cost(0, values.numel() if accumulate else 0)


@register_flop_formula(*aten_ops("embedding_dense_backward", "embedding_backward"))
def embedding_backward_flop(
    grad: Tensor,
    indices: Tensor,
    num_weights: int,
    padding_idx: int,
    scale_grad_by_freq: bool,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """An index-add of the gradient rows: one add per element of ``grad`` (+ one divide
    per element with ``scale_grad_by_freq``)."""
    n = grad.numel()
    return Cost(0, 2 * n if scale_grad_by_freq else n)


def _bag_cost(rows_times_dim: int, n_out: int, mode: int, weighted: bool) -> int:
    flops = rows_times_dim  # sum / max over the bag members
    if mode == 1:
        flops += n_out  # mean: one divide per output element
    if weighted:
        flops += rows_times_dim  # per-sample weight multiply
    return flops


@register_flop_formula(*aten_ops("_embedding_bag", "_embedding_bag_forward_only", "embedding_bag"))
def embedding_bag_flop(
    weight: Tensor,
    indices: Tensor,
    offsets: Tensor,
    scale_grad_by_freq: bool = False,
    mode: int = 0,
    sparse: bool = False,
    per_sample_weights: Tensor | None = None,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """One add (sum, mean) or compare (max) per looked-up element; mean adds a divide per
    output element; per-sample weights add a multiply per looked-up element."""
    dim = weight.shape[1] if weight.dim() > 1 else 1
    flops = _bag_cost(
        indices.numel() * dim, first_tensor(out).numel(), mode, per_sample_weights is not None
    )
    return Cost(0, flops)


@register_flop_formula(*aten_ops("_embedding_bag_backward", "_embedding_bag_sparse_backward"))
def embedding_bag_backward_flop(
    grad: Tensor,
    indices: Tensor,
    offsets: Tensor,
    offset2bag: Tensor,
    bag_size: Tensor,
    maximum_indices: Tensor,
    num_weights: int,
    scale_grad_by_freq: bool,
    mode: int,
    *rest: Any,
    out: Any = None,
    **kwargs: Any,
) -> Cost:
    """Index-add of the bag gradients: one add per looked-up element (max: per grad
    element), + a divide per looked-up element for mean, + a multiply with weights."""
    return _embedding_bag_backward(grad, indices, mode, rest, kwargs, weights_pos=1)


@register_flop_formula(*aten_ops("_embedding_bag_dense_backward"))
def embedding_bag_dense_backward_flop(
    grad: Tensor,
    indices: Tensor,
    offset2bag: Tensor,
    bag_size: Tensor,
    maximum_indices: Tensor,
    num_weights: int,
    scale_grad_by_freq: bool,
    mode: int,
    *rest: Any,
    out: Any = None,
    **kwargs: Any,
) -> Cost:
    """As ``_embedding_bag_backward``."""
    return _embedding_bag_backward(grad, indices, mode, rest, kwargs, weights_pos=0)


def _embedding_bag_backward(
    grad: Tensor, indices: Tensor, mode: int, rest: Any, kwargs: Any, weights_pos: int
) -> Cost:
    weights = rest[weights_pos] if len(rest) > weights_pos else kwargs.get("per_sample_weights")
    dim = grad.shape[-1] if grad.dim() else 1
    looked_up = indices.numel() * dim
    if mode == 2:
        return Cost(0, grad.numel())
    flops = looked_up * (2 if mode == 1 else 1) + (looked_up if weights is not None else 0)
    return Cost(0, flops)


@register_flop_formula(*aten_ops("_embedding_bag_per_sample_weights_backward"))
def embedding_bag_weights_backward_flop(
    grad: Tensor, weight: Tensor, indices: Tensor, *_: Any, out: Any = None, **__: Any
) -> Cost:
    """A length-D dot product (mul, add) per looked-up index."""
    dim = weight.shape[1] if weight.dim() > 1 else 1
    return Cost(0, 2 * indices.numel() * dim)


@register_flop_formula(
    *aten_ops(
        "unfold_backward",
        "col2im",
        "reflection_pad1d_backward",
        "reflection_pad2d_backward",
        "reflection_pad3d_backward",
        "replication_pad1d_backward",
        "replication_pad2d_backward",
        "replication_pad3d_backward",
    )
)
def overlap_add_flop(grad: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """Gradients of overlapping/duplicated reads are summed: one add per element of the
    incoming gradient."""
    return Cost(0, grad.numel())


# --- distances ----------------------------------------------------------------------


def _pair_cost(pairs: int, m: int, p: Any) -> int:
    per_pair = 3 * m  # subtract, abs/square/pow, accumulate per coordinate
    root = 0 if p in (0, 1) or p == float("inf") else 1
    return pairs * (per_pair + root)


@register_flop_formula(*aten_ops("_cdist_forward"))
def cdist_flop(x1: Tensor, x2: Tensor, p: float = 2.0, *_: Any, out: Any = None, **__: Any) -> Cost:
    """Per pair: 3 flops per coordinate (sub, abs/power, add) + a root (p not in 0, 1, inf);
    the matmul-based Euclidean path is counted the same way."""
    return Cost(0, _pair_cost(first_tensor(out).numel(), x1.shape[-1], p))


@register_flop_formula(*aten_ops("_euclidean_dist"))
def euclidean_dist_flop(x1: Tensor, x2: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """As ``_cdist_forward`` with p=2."""
    return Cost(0, _pair_cost(first_tensor(out).numel(), x1.shape[-1], 2))


@register_flop_formula(*aten_ops("_pdist_forward"))
def pdist_flop(x: Tensor, p: float = 2.0, *_: Any, out: Any = None, **__: Any) -> Cost:
    """As ``_cdist_forward`` over the N*(N-1)/2 pairs."""
    return Cost(0, _pair_cost(first_tensor(out).numel(), x.shape[-1], p))


@register_flop_formula(*aten_ops("_cdist_backward"))
def cdist_backward_flop(
    grad: Tensor, x1: Tensor, x2: Tensor, *_: Any, out: Any = None, **__: Any
) -> Cost:
    """4 flops per pair and coordinate: difference, derivative factor, *grad, accumulate."""
    return Cost(0, 4 * grad.numel() * x1.shape[-1])


@register_flop_formula(*aten_ops("_pdist_backward"))
def pdist_backward_flop(grad: Tensor, x: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """4 flops per pair and coordinate."""
    return Cost(0, 4 * grad.numel() * x.shape[-1])


@register_flop_formula(*aten_ops("_aminmax", "_unique", "unique_dim_consecutive", "equal"))
def reduce_more_flop(x: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """One flop per input element."""
    return Cost(0, x.numel())


@register_flop_formula(*aten_ops("trace"))
def trace_flop(x: Tensor, *_: Any, out: Any = None, **__: Any) -> Cost:
    """One add per diagonal element."""
    return Cost(0, min(x.shape) if x.dim() else 1)


@register_flop_formula(*aten_ops("dist"))
def dist_flop(a: Tensor, b: Tensor, p: Any = 2, *_: Any, out: Any = None, **__: Any) -> Cost:
    """The p-norm of the broadcast difference: sub + the ``linalg_vector_norm`` count."""
    n = max(a.numel(), b.numel())
    return Cost(0, n) + _norm_cost_n(n, p)


def _norm_cost_n(n: int, p: Any) -> Cost:
    if p is None or p == 2:
        return Cost(0, 2 * n + 1)
    if p in (1, 0) or p == float("inf") or p == float("-inf"):
        return Cost(0, 2 * n)
    return Cost(0, 3 * n + 1)


@register_flop_formula(*aten_ops("isin"))
def isin_flop(elements: Any, test: Any, *_: Any, out: Any = None, **__: Any) -> Cost:
    """Binary search of each element among the test elements."""
    m = test.numel() if isinstance(test, Tensor) else 1
    return Cost(0, first_tensor(out).numel() * max(_log2_ceil(m), 1))


@register_flop_formula(*aten_ops("embedding_renorm_", "embedding_renorm"))
def embedding_renorm_flop(
    weight: Tensor, indices: Tensor, *_: Any, out: Any = None, **__: Any
) -> Cost:
    """Norm (2 per element) and rescale (1) of each looked-up row."""
    dim = weight.shape[1] if weight.dim() > 1 else 1
    return Cost(0, 3 * indices.numel() * dim)


@register_flop_formula(*aten_ops("_unsafe_masked_index_put_accumulate"))
def masked_index_put_accumulate_flop(
    x: Tensor, mask: Tensor, indices: Any, values: Tensor, *_: Any, out: Any = None, **__: Any
) -> Cost:
    """One add per element of ``values``."""
    return Cost(0, values.numel())
