"""The formula registry: ``Cost``, registration, lookup and ``op_cost``.

A formula is a pure function of shapes and arguments: it is called as
``formula(*args, out=out, **kwargs)`` with exactly what the aten op received and
returned, reads only ``.shape``, ``.dtype`` and ``.numel()`` of tensors (real, ``meta`` or
fake) and returns a ``Cost``. Formulas are keyed by ``OpOverload`` or by
``OpOverloadPacket``; an overload's own formula wins over its packet's.

``evaluate`` checks what a formula returns; a failure is a ``FlopFormulaError``. The
formulas layerscope ships are remembered (``is_builtin_formula``), so that a session can
report a failing built-in formula as an unsupported op but stop on a user's own.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

import torch
from torch._ops import OpOverload, OpOverloadPacket

from layerscope.errors import FlopFormulaError, InvalidInputError
from layerscope.validate import check_bool, check_callable, shown

__all__ = [
    "FLOP_REGISTRY",
    "ZERO",
    "ZERO_COST_NAMES",
    "ZERO_COST_NAMESPACES",
    "ZERO_COST_OPS",
    "Cost",
    "FlopFormulaError",
    "Formula",
    "OpKey",
    "aten_ops",
    "evaluate",
    "formula_name",
    "is_builtin_formula",
    "is_zero_cost",
    "lookup",
    "mark_builtin_formulas",
    "op_cost",
    "op_key_problem",
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
#: The most MACs or FLOPs one op call may count: a signed 64-bit count, as torch counts a
#: tensor's elements (far past any real op). Views and files show counts as floats, which
#: a count such as 10**400 would overflow.
MAX_COUNT = 2**63 - 1

Formula: TypeAlias = Callable[..., Cost]
OpKey: TypeAlias = OpOverload | OpOverloadPacket


#: Built-in and user-registered formulas, keyed by overload or packet.
FLOP_REGISTRY: dict[OpKey, Formula] = {}

#: Ops (overloads or packets) that do no arithmetic: views, copies, creation, indexing.
ZERO_COST_OPS: set[OpKey] = set()
#: Qualified names (``"fsdp::chunk_cat"``) of ops that do no arithmetic, for ops that a
#: library defines in Python when it is imported: they exist only then.
ZERO_COST_NAMES: set[str] = set()
#: Namespaces (``"_c10d_functional"``) whose every op does no arithmetic, also those
#: registered after layerscope's import (torch.distributed defines some lazily).
ZERO_COST_NAMESPACES: set[str] = set()


#: id -> formula of every formula layerscope registers itself (the formula is kept, so
#: its id stays its own).
_BUILTIN: dict[int, Formula] = {}


def mark_builtin_formulas() -> None:
    """Remember every formula registered so far as one of layerscope's own (called once
    the formula modules are imported)."""
    _BUILTIN.update((id(f), f) for f in FLOP_REGISTRY.values())


def is_builtin_formula(formula: object) -> bool:
    """Whether ``formula`` is one that layerscope ships (not a user's)."""
    return _BUILTIN.get(id(formula)) is formula


def formula_name(formula: object) -> str:
    """How a message names a formula: its ``__qualname__`` (a partial's function's)."""
    target = getattr(formula, "func", formula)  # functools.partial
    name = getattr(target, "__qualname__", None)
    return name if isinstance(name, str) else type(formula).__qualname__


def _suggest_op(text: str) -> str:
    """``torch.ops...`` spelling of an op written as a string: "aten::mm", "aten.mm.default"
    (as ``unsupported_ops`` lists it) or a bare "mm"."""
    text = text.strip()
    if "::" in text:
        namespace, _, rest = text.partition("::")
    elif "." in text:
        namespace, _, rest = text.partition(".")
    else:
        namespace, rest = "aten", text
    parts = [p for p in (namespace, *rest.split(".")) if p]
    if not parts or not all(p.isidentifier() for p in parts):
        return "torch.ops.aten.mm"
    return "torch.ops." + ".".join(parts)


def op_key_problem(key: object) -> str:
    """Why ``key`` is not an op a formula can be keyed by, and what to pass instead."""
    if isinstance(key, str):
        op = _suggest_op(key)
        if op.count(".") > 3:  # torch.ops.<namespace>.<name>.<overload>
            packet = op.rsplit(".", 1)[0]
            which = f"{op} (this overload) or {packet} (all its overloads)"
        else:
            which = f"{op} (all its overloads) or one overload, such as {op}.default"
        return f"{key!r} is a string, not an op; pass the op itself: {which}"
    if callable(key):
        module = getattr(key, "__module__", None)
        name = getattr(key, "__name__", None) or type(key).__name__
        shown = f"{module}.{name}" if module else name
        return (
            f"{shown} is a Python callable, not an op; pass the aten op it runs, such as "
            "torch.ops.aten.mm (all overloads) or torch.ops.aten.mm.default (one), as "
            "unsupported_ops names them"
        )
    return (
        f"{key!r} ({type(key).__name__}) is not an op; pass a torch._ops.OpOverloadPacket "
        "such as torch.ops.aten.mm or an OpOverload such as torch.ops.aten.mm.default "
        "(custom ops too: torch.ops.mylib.op)"
    )


def _check_op(op: object, caller: str) -> OpKey:
    """``op`` if a formula can be keyed by it; else ``InvalidInputError`` naming ``caller``."""
    if not isinstance(op, (OpOverload, OpOverloadPacket)):
        raise InvalidInputError(f"{caller}: {op_key_problem(op)}")
    return op


def register_flop_formula(
    *ops: OpKey, registry: dict[OpKey, Formula] | None = None, replace: bool = False
) -> Callable[[Formula], Formula]:
    """Decorator registering ``formula`` for each op (a packet covers all its overloads).

    ``registry`` defaults to the global ``FLOP_REGISTRY``. Registering an op twice raises
    ``InvalidInputError`` (a ``ValueError``) unless ``replace=True``; for a one-off change
    prefer the per-call ``overrides`` of ``lookup``/``op_cost``. A string or a Python
    function instead of an op is refused the same way, as ``flop_formulas=`` refuses it.
    """
    table = FLOP_REGISTRY if registry is None else registry
    checked = [_check_op(op, "register_flop_formula") for op in ops]
    replace = check_bool("replace", replace)

    def decorate(formula: Formula) -> Formula:
        check_callable(
            "the formula",
            formula,
            "a callable formula(*args, out=..., **kwargs) -> Cost",
            none=False,
        )
        for op in checked:
            if not replace and op in table:
                raise InvalidInputError(f"a FLOP formula is already registered for {op}")
            table[op] = formula
        return formula

    return decorate


def register_zero_cost(*ops: OpKey) -> None:
    """Mark ops as doing no arithmetic (counted as 0 and never reported unsupported)."""
    for op in ops:
        ZERO_COST_OPS.add(_check_op(op, "register_zero_cost"))


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
    if packet is not None and packet in ZERO_COST_OPS:
        return True
    schema = getattr(func, "_schema", None)
    if schema is None:
        return False
    return schema.name in ZERO_COST_NAMES or schema.name.partition("::")[0] in ZERO_COST_NAMESPACES


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
    """Call ``formula`` for one call of ``func``; ``FlopFormulaError`` if it raises or
    returns anything but a ``Cost`` of integer ``macs`` and ``flops`` in ``0..MAX_COUNT``.

    The ``out=`` tensor of an ``.out`` overload is the op's return value, so it is dropped
    from ``kwargs`` before the formula is called.
    """
    if "out" in kwargs:
        kwargs = {k: v for k, v in kwargs.items() if k != "out"}
    try:
        cost = formula(*args, out=out, **kwargs)
    except Exception as e:
        name = formula_name(formula)
        raise FlopFormulaError(
            f"the FLOP formula {name} for {func} raised {type(e).__name__}: {e}",
            op=str(func),
            formula=name,
        ) from e
    if (
        type(cost) is Cost
        and type(cost.macs) is int
        and type(cost.flops) is int
        and 0 <= cost.macs <= MAX_COUNT
        and 0 <= cost.flops <= MAX_COUNT
    ):
        return cost
    return _checked_cost(func, formula, cost)


def _checked_cost(func: OpOverload, formula: Formula, cost: object) -> Cost:
    """A formula's return value that is not plainly right: a Cost of other integers
    (numpy's, symbolic sizes) made plain, anything else a ``FlopFormulaError``."""
    if isinstance(cost, Cost):
        counts: list[Any] = []
        for v in (cost.macs, cost.flops):
            if isinstance(v, torch.SymInt):
                counts.append(v)  # a symbolic size: its sign cannot be read here
            elif (
                isinstance(v, numbers.Integral) and not isinstance(v, bool) and 0 <= v <= MAX_COUNT
            ):
                counts.append(int(v))
            else:
                break
        else:
            return Cost(counts[0], counts[1])
    name = formula_name(formula)
    raise FlopFormulaError(
        f"the FLOP formula {name} for {func} returned {shown(cost)} ({type(cost).__name__}); "
        "a formula must return a Cost with non-negative int macs and flops of at most "
        "2**63 - 1",
        op=str(func),
        formula=name,
    )


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
