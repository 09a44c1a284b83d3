"""``Amount``: a finite number >= 0, for the figures a run cannot make negative (seconds,
rates, bytes, FLOPs) in the documents besides the profile (a plan's, a generation's, an
estimate's, a serving plan's, a sweep's). A negative one is an edited or damaged
document, refused as ``Int(0)`` refuses a negative count:
``$.prefill_time: expected a finite number >= 0, got the number -2.0``."""

from __future__ import annotations

from typing import Any

from layerscope.export.jsoncheck import Finite, Where, fail

__all__ = ["AMOUNT", "Amount"]


class Amount(Finite):
    """A finite number >= 0 (``Finite``'s values, the negative ones refused)."""

    expected = "a finite number >= 0"

    def check(self, value: Any, where: Where) -> Any:
        number = super().check(value, where)
        if number < 0:
            fail(where, self.expected, value)
        return number

    def schema(self) -> dict[str, Any]:
        return {"$ref": "#/$defs/finite", "minimum": 0}


#: The check of an amount with no description of its own.
AMOUNT = Amount()
