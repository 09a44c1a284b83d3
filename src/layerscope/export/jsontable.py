"""Checks of tabular JSON data, in the check language of ``export.jsoncheck``: a row of
fixed length whose items each have their own check (``Row``), an object of parallel
arrays (``Columns``) and a number bounded so that an exporter can scale it (``Range``).
``export.jsonspec`` uses them for the memory timeline and the timing trace."""

from __future__ import annotations

from typing import Any

from layerscope.export.jsoncheck import Check, Finite, Obj, Where, fail

__all__ = ["Columns", "Range", "Row"]


class Range(Finite):
    """A finite number from ``low`` to ``high``: one an exporter can scale and subtract
    without leaving a float's range (a time in seconds, say)."""

    def __init__(self, low: float, high: float, description: str = "") -> None:
        super().__init__(description)
        self.low = low
        self.high = high
        self.expected = f"a number from {_short(low)} to {_short(high)}"

    def check(self, value: Any, where: Where) -> Any:
        x = super().check(value, where)  # refusals name self.expected
        if not self.low <= x <= self.high:
            fail(where, self.expected, value)
        return x

    def schema(self) -> dict[str, Any]:
        return {"type": "number", "minimum": self.low, "maximum": self.high}


def _short(x: float) -> str:
    """``1e9`` for 1e9, ``0`` for 0.0: a bound as a message writes it."""
    return f"{x:g}".replace("e+0", "e").replace("e+", "e")


class Row(Check):
    """An array of exactly one value per check of ``items``, each checked by its own (a
    row of a table, as in ``[path index, n, start, end]``)."""

    def __init__(self, items: tuple[Check, ...], description: str = "") -> None:
        super().__init__(description)
        self.items = items
        self.expected = f"an array of {len(items)} items"

    def check(self, value: Any, where: Where) -> Any:
        if not isinstance(value, list | tuple) or len(value) != len(self.items):
            fail(where, self.expected, value)
        pairs = enumerate(zip(self.items, value, strict=True))
        return [c.check(v, (where, i)) for i, (c, v) in pairs]

    def schema(self) -> dict[str, Any]:
        n = len(self.items)
        return {
            "type": "array",
            "prefixItems": [c.described() for c in self.items],
            "minItems": n,
            "maxItems": n,
        }


class Columns(Obj):
    """An object of parallel arrays: the keys ``columns`` are required, and each must be
    as long as the first (a JSON Schema cannot say so: checked here only)."""

    def __init__(
        self, props: dict[str, Check], columns: tuple[str, ...], description: str = ""
    ) -> None:
        super().__init__(props, required=columns, description=description)
        self.columns = columns

    def check(self, value: Any, where: Where) -> Any:
        out = super().check(value, where)
        first = self.columns[0]
        n = len(out[first])
        for key in self.columns[1:]:
            if len(out[key]) != n:
                fail((where, key), f"an array of {n} items (one per item of {first!r})", out[key])
        return out
