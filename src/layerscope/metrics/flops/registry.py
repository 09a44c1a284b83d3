"""The formula registry: ``Cost``, registration, lookup and ``op_cost``.

A formula is a pure function of shapes and arguments: it is called as
``formula(*args, out=out, **kwargs)`` with exactly what the aten op received and
returned, reads only ``.shape``, ``.dtype`` and ``.numel()`` of tensors (real, ``meta`` or
fake) and returns a ``Cost``. Formulas are keyed by ``OpOverload`` or by
``OpOverloadPacket``; an overload's own formula wins over its packet's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

import torch
from torch._ops import OpOverload, OpOverloadPacket

from layerscope.errors import LayerscopeError

__all__ = [
    "FLOP_REGISTRY",
    "ZERO",
    "ZERO_COST_OPS",
    "Cost",
    "FlopFormulaError",
    "Formula",
    "OpKey",
    "aten_ops",
    "evaluate",
    "is_zero_cost",
    "lookup",
    "op_cost",
    "register_flop_formula",
    "register_zero_cost",
    "resolve",
]


@dataclass(frozen=True, slots=True)
class Cost:
    """Work done by one op call.

    ``macs``: multiply-accumulates of contraction ops only (mm, bmm, conv, attention
    matmuls, RNN gate matmuls). ``flops``: every floating-point operation, 2 per MAC
    plus all other arithmetic (bias adds, softmax, norms, activations, elementwise).
    """

    macs: int = 0
    flops: int = 0

    def __add__(self, other: Cost) -> Cost:
        if not isinstance(other, Cost):
            return NotImplemented
        return Cost(self.macs + other.macs, self.flops + other.flops)


#: The cost of an op that does no arithmetic.
ZERO = Cost()

Formula: TypeAlias = Callable[..., Cost]
OpKey: TypeAlias = OpOverload | OpOverloadPacket


class FlopFormulaError(LayerscopeError):
    """A FLOP formula raised on the arguments of the op it was registered for."""


#: Built-in and user-registered formulas, keyed by overload or packet.
FLOP_REGISTRY: dict[OpKey, Formula] = {}

#: Ops (overloads or packets) that do no arithmetic: views, copies, creation, indexing.
ZERO_COST_OPS: set[OpKey] = set()


def _check_op(op: object) -> OpKey:
    if not isinstance(op, (OpOverload, OpOverloadPacket)):
        raise TypeError(
            "expected an aten op such as torch.ops.aten.mm or torch.ops.aten.mm.default, "
            f"got {op!r} of type {type(op).__name__}"
        )
    return op


def register_flop_formula(
    *ops: OpKey, registry: dict[OpKey, Formula] | None = None, replace: bool = False
) -> Callable[[Formula], Formula]:
    """Decorator registering ``formula`` for each op (a packet covers all its overloads).

    ``registry`` defaults to the global ``FLOP_REGISTRY``. Registering an op twice raises
    ``ValueError`` unless ``replace=True``; for a one-off change prefer the per-call
    ``overrides`` of ``lookup``/``op_cost``.
    """
    table = FLOP_REGISTRY if registry is None else registry
    checked = [_check_op(op) for op in ops]

    def decorate(formula: Formula) -> Formula:
        for op in checked:
            if not replace and op in table:
                raise ValueError(f"a FLOP formula is already registered for {op}")
            table[op] = formula
        return formula

    return decorate


def register_zero_cost(*ops: OpKey) -> None:
    """Mark ops as doing no arithmetic (counted as 0 and never reported unsupported)."""
    for op in ops:
        ZERO_COST_OPS.add(_check_op(op))


def lookup(func: OpOverload, overrides: Mapping[OpKey, Formula] | None = None) -> Formula | None:
    """The formula for ``func``: ``overrides`` first, then the registry; the overload
    before its packet at each level. ``None`` when there is none."""
    packet = getattr(func, "overloadpacket", None)
    if overrides:
        formula = overrides.get(func)
        if formula is None and packet is not None:
            formula = overrides.get(packet)
        if formula is not None:
            return formula
    formula = FLOP_REGISTRY.get(func)
    if formula is None and packet is not None:
        formula = FLOP_REGISTRY.get(packet)
    return formula


def is_zero_cost(func: OpOverload) -> bool:
    """True for ops that do no arithmetic (views, copies, creation, indexing, ...)."""
    if func in ZERO_COST_OPS:
        return True
    packet = getattr(func, "overloadpacket", None)
    return packet is not None and packet in ZERO_COST_OPS


def resolve(
    func: OpOverload, overrides: Mapping[OpKey, Formula] | None = None
) -> Formula | Cost | None:
    """What prices ``func``: its formula, ``ZERO`` for a zero-cost op, ``None`` for neither.

    Depends only on ``func`` and ``overrides``, so callers may cache it per op.
    """
    formula = lookup(func, overrides)
    if formula is None:
        return ZERO if is_zero_cost(func) else None
    return formula


def evaluate(
    func: OpOverload, formula: Formula, args: tuple[Any, ...], kwargs: Mapping[str, Any], out: Any
) -> Cost:
    """Call ``formula`` for one call of ``func``; ``FlopFormulaError`` if it raises.

    The ``out=`` tensor of an ``.out`` overload is the op's return value, so it is dropped
    from ``kwargs`` before the formula is called.
    """
    if "out" in kwargs:
        kwargs = {k: v for k, v in kwargs.items() if k != "out"}
    try:
        return formula(*args, out=out, **kwargs)
    except Exception as e:
        raise FlopFormulaError(f"the FLOP formula for {func} failed: {e!r}") from e


def op_cost(
    func: OpOverload,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    out: Any,
    overrides: Mapping[OpKey, Formula] | None = None,
) -> Cost | None:
    """The cost of one call of ``func``; ``None`` when it has no formula and is not
    zero-cost (the caller reports it as unsupported)."""
    priced = resolve(func, overrides)
    if priced is None or isinstance(priced, Cost):
        return priced
    return evaluate(func, priced, args, kwargs, out)


def aten_ops(*names: str) -> list[OpOverloadPacket]:
    """The ``torch.ops.aten`` packets of these names that exist in this torch build."""
    found: list[OpOverloadPacket] = []
    for name in names:
        try:
            found.append(getattr(torch.ops.aten, name))
        except (AttributeError, RuntimeError):
            continue
    return found


def aten_overloads(name: str, overloads: Iterable[str]) -> list[OpOverload]:
    """The overloads of ``torch.ops.aten.<name>`` that exist in this torch build."""
    found: list[OpOverload] = []
    for packet in aten_ops(name):
        for overload in overloads:
            try:
                found.append(getattr(packet, overload))
            except (AttributeError, RuntimeError):
                continue
    return found
