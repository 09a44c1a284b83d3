"""FLOP and MAC formulas for aten ops, keyed by op, forward and backward.

>>> import torch
>>> from layerscope.metrics.flops import Cost, op_cost
>>> a, b = torch.empty(2, 3, device="meta"), torch.empty(3, 4, device="meta")
>>> op_cost(torch.ops.aten.mm.default, (a, b), {}, torch.mm(a, b))
Cost(macs=24, flops=48)

Families live in small modules (``contraction``, ``attention``, ``rnn``, ``norms``,
``pointwise``, ``reductions``, ``pooling``, ``losses``, ``spectral``, ``optim``) and the
no-arithmetic ops in ``zero``; importing this package registers them all. The conventions are in
``docs/flops.md``.
"""

from __future__ import annotations

from layerscope.metrics.flops import (  # noqa: F401  (import registers the formulas)
    attention,
    contraction,
    losses,
    norms,
    optim,
    pointwise,
    pooling,
    reductions,
    rnn,
    spectral,
    zero,
)
from layerscope.metrics.flops.registry import (
    FLOP_REGISTRY,
    ZERO,
    ZERO_COST_OPS,
    Cost,
    FlopFormulaError,
    Formula,
    evaluate,
    formula_name,
    is_builtin_formula,
    is_zero_cost,
    lookup,
    mark_builtin_formulas,
    op_cost,
    op_key_problem,
    register_flop_formula,
    register_zero_cost,
    resolve,
)

__all__ = [
    "FLOP_REGISTRY",
    "ZERO",
    "ZERO_COST_OPS",
    "Cost",
    "FlopFormulaError",
    "Formula",
    "evaluate",
    "formula_name",
    "is_builtin_formula",
    "is_zero_cost",
    "lookup",
    "op_cost",
    "op_key_problem",
    "register_flop_formula",
    "register_zero_cost",
    "resolve",
]

mark_builtin_formulas()
