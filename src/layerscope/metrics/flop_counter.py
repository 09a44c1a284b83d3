"""The FLOPs observer: prices each aten op with the formula registry, per module and phase.

Forward work goes to ``macs``/``flops``, backward work to ``backward_macs``/
``backward_flops`` of the module the dispatch mode names. An op with no formula (and not
on the zero-cost list) is recorded in ``unsupported`` with its count per phase and the
modules it ran in, never silently counted as 0; so is an op whose formula raised (with the
error), so that a broken formula cannot stop the user's run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch._ops import OpOverload

from layerscope.metrics.flops import ZERO, Cost, Formula, is_zero_cost, lookup
from layerscope.profile import Node

FORWARD_KEYS = ("macs", "flops")
BACKWARD_KEYS = ("backward_macs", "backward_flops")


class FlopCounter:
    """Accumulates op costs into the self metrics of the nodes it is handed."""

    def __init__(self, overrides: Mapping[Any, Formula] | None = None) -> None:
        self.overrides = overrides
        self.unsupported: dict[str, dict[str, Any]] = {}
        self.saw_backward = False
        # func -> its formula, ZERO for zero-cost ops, None when unsupported; resolved once.
        self._resolved: dict[OpOverload, Formula | Cost | None] = {}

    def _resolve(self, func: OpOverload) -> Formula | Cost | None:
        formula = lookup(func, self.overrides)
        resolved: Formula | Cost | None = formula
        if formula is None and is_zero_cost(func):
            resolved = ZERO
        self._resolved[func] = resolved
        return resolved

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
        resolved = self._resolved[func] if func in self._resolved else self._resolve(func)
        if resolved is None:
            self._unsupported(func, node, backward)
            return
        if resolved is ZERO:
            return
        if "out" in kwargs:  # the out= tensor of an .out overload is the returned value
            kwargs = {k: v for k, v in kwargs.items() if k != "out"}
        try:
            cost: Cost = resolved(*args, out=out, **kwargs)  # type: ignore[operator]
        except Exception as e:  # a broken formula must not stop the user's run
            error = f"the FLOP formula for {func} failed: {e!r}"
            self._unsupported(func, node, backward).setdefault("error", error)
            return
        m = node.self_metrics
        if backward:
            m["backward_macs"] = m.get("backward_macs", 0) + cost.macs
            m["backward_flops"] = m.get("backward_flops", 0) + cost.flops
        else:
            m["macs"] = m.get("macs", 0) + cost.macs
            m["flops"] = m.get("flops", 0) + cost.flops

    def _unsupported(self, func: OpOverload, node: Node, backward: bool) -> dict[str, Any]:
        entry = self.unsupported.setdefault(
            str(func), {"count": 0, "forward": 0, "backward": 0, "modules": {}}
        )
        entry["count"] += 1
        entry["backward" if backward else "forward"] += 1
        where = node.path or "<root>"
        entry["modules"][where] = entry["modules"].get(where, 0) + 1
        return entry

    def finish(self, root: Node) -> None:
        """Give every node the measured keys (0 where no op ran), so totals roll up."""
        keys = FORWARD_KEYS + (BACKWARD_KEYS if self.saw_backward else ())
        for node in root.walk():
            for key in keys:
                node.self_metrics.setdefault(key, 0)
