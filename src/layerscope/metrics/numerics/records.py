"""What the observer records while the model runs: module calls, gradient-hook firings and
tensor memo entries, and how a call or gradient becomes a first_nonfinite/origin event.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from layerscope.metrics.numerics.errors import Where
from layerscope.profile import Node


@dataclass(eq=False, slots=True)
class _Call:
    """One forward call of a module: the rows of its inputs and outputs."""

    node: Node
    index: int
    in_rows: list[int] = field(default_factory=list)
    out_rows: list[int] = field(default_factory=list)
    shapes: list[list[int]] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    seq: int = -1
    skipped: bool = False


#: A module call that a gradient hook reports to, and in which role.
_Role = tuple[_Call, Where]


@dataclass(eq=False, slots=True)
class _GradEvent:
    """One firing of a gradient hook: the gradient's row and the calls it belongs to."""

    seq: int
    row: int
    shape: list[int]
    dtype: str
    roles: tuple[_Role, ...]


@dataclass(eq=False, slots=True)
class _Entry:
    """What is known about one tensor value (object and version) during a forward."""

    ref: weakref.ref[Tensor]
    version: int
    row: int | None = None  # None: empty tensor, nothing to read
    full: bool = False  # the row has statistics, not just NaN/Inf counts
    roles: list[_Role] | None = None  # set once a gradient hook is registered on it


def _ordered_roles(roles: Sequence[_Role]) -> list[_Role]:
    """The order in which one gradient reaches the calls it belongs to.

    It leaves the backward of the modules it is an input of first (innermost, i.e. last
    entered, first), then enters the modules it is an output of (outermost first).
    """
    ins = [r for r in reversed(roles) if r[1] == "grad_input"]
    outs = [r for r in reversed(roles) if r[1] == "grad_output"]
    return ins + outs


def _event(
    call: _Call,
    where: Where,
    shapes: list[list[int]],
    dtypes: list[str],
    nan: int,
    inf: int,
) -> dict[str, Any]:
    """A first_nonfinite/origin entry of ``profile.numerics`` (plain JSON values)."""
    node = call.node
    return {
        "path": node.path,
        "node_id": node.node_id,
        "type": node.type,
        "call": call.index,
        "where": where,
        "shapes": [list(s) for s in shapes],
        "dtypes": list(dtypes),
        "nan": nan,
        "inf": inf,
    }
