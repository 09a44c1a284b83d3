"""The FLOPs observer: prices each aten op with the formula registry, per module and phase.

Forward work goes to ``macs``/``flops``, backward work to ``backward_macs``/
``backward_flops`` of the module the dispatch mode names. Of the backward work, what is
forward work run again (activation checkpointing's recomputation: ops of a module whose
forward the backward pass runs, or any op under non-reentrant checkpointing's
recomputation hooks) also goes to ``recompute_flops``. An op with no formula (and not
on the zero-cost list) is recorded in ``unsupported`` with its count per phase and the
modules it ran in, never silently counted as 0; so is an op whose built-in formula failed
(with the error), so that a bug of layerscope's cannot stop the user's run. A formula of
the user's own (``flop_formulas=`` or ``register_flop_formula``) that fails raises
``FlopFormulaError`` out of the session instead: the user can fix it, and a silently
partial count would hide it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from torch._ops import OpOverload

import layerscope.metricspec as ms
from layerscope.collect.observer import Observer
from layerscope.metrics.flops import (
    Cost,
    FlopFormulaError,
    Formula,
    evaluate,
    is_builtin_formula,
    resolve,
)
from layerscope.profile import Node, Profile
from layerscope.torchapi import in_recomputation

if TYPE_CHECKING:
    from layerscope.collect.scopes import ScopeTracker

FORWARD_KEYS = (ms.MACS, ms.FLOPS)
BACKWARD_KEYS = (ms.BACKWARD_MACS, ms.BACKWARD_FLOPS, ms.RECOMPUTE_FLOPS)


class FlopCounter(Observer):
    """Accumulates op costs into the self metrics of the nodes it is handed."""

    def __init__(self, overrides: Mapping[Any, Formula] | None = None) -> None:
        self.formulas = overrides
        self.unsupported: dict[str, dict[str, Any]] = {}
        self.saw_backward = False
        # id(func) -> (func, its formula, ZERO for zero-cost ops, None when unsupported);
        # resolved once. Keyed by id: OpOverload hashes in Python, on every op.
        self._resolved: dict[int, tuple[OpOverload, Formula | Cost | None]] = {}
        self._tracker: ScopeTracker | None = None

    def install(self, tracker: ScopeTracker) -> None:
        self._tracker = tracker

    def uninstall(self) -> None:
        self._tracker = None

    def _recomputing(self) -> bool:
        """Whether the backward op seen now is forward work run again: the running
        module's forward was started by the backward pass, or non-reentrant
        checkpointing's recomputation runs (also outside any module)."""
        tracker = self._tracker
        return (tracker is not None and tracker.current_in_backward) or in_recomputation()

    def on_op(
        self,
        func: OpOverload,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        out: Any,
        node: Node,
        backward: bool,
    ) -> None:
        if backward:
            self.saw_backward = True
        entry = self._resolved.get(id(func))
        if entry is None:
            entry = self._resolved[id(func)] = (func, resolve(func, self.formulas))
        priced = entry[1]
        if priced is None:
            self._unsupported(func, node, backward)
            return
        if isinstance(priced, Cost):  # zero-cost op
            return
        try:
            cost = evaluate(func, priced, args, kwargs, out)
        except FlopFormulaError as e:
            if not is_builtin_formula(priced):
                raise  # the user's own formula: theirs to fix
            # a broken built-in formula must not stop the user's run
            self._unsupported(func, node, backward).setdefault("error", str(e))
            return
        m = node.self_metrics
        if backward:
            m[ms.BACKWARD_MACS] = m.get(ms.BACKWARD_MACS, 0) + cost.macs
            m[ms.BACKWARD_FLOPS] = m.get(ms.BACKWARD_FLOPS, 0) + cost.flops
            if self._recomputing():
                m[ms.RECOMPUTE_FLOPS] = m.get(ms.RECOMPUTE_FLOPS, 0) + cost.flops
        else:
            m[ms.MACS] = m.get(ms.MACS, 0) + cost.macs
            m[ms.FLOPS] = m.get(ms.FLOPS, 0) + cost.flops

    def _unsupported(self, func: OpOverload, node: Node, backward: bool) -> dict[str, Any]:
        entry = self.unsupported.setdefault(
            str(func), {"count": 0, "forward": 0, "backward": 0, "modules": {}}
        )
        entry["count"] += 1
        entry["backward" if backward else "forward"] += 1
        where = node.path or "<root>"
        entry["modules"][where] = entry["modules"].get(where, 0) + 1
        return entry

    def finish(self, profile: Profile) -> None:
        """Give every node the measured keys (0 where no op ran), so totals roll up, and
        hand the unsupported ops to the profile."""
        keys = FORWARD_KEYS + (BACKWARD_KEYS if self.saw_backward else ())
        for node in profile.root.walk():
            for key in keys:
                node.self_metrics.setdefault(key, 0)
        profile.unsupported_ops = self.unsupported
