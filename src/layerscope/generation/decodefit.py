"""One decode step's cost as a function of the cache length ``L``: ``a + b·L``.

A decode step feeds one token per row. Its weight work does not depend on ``L``; its
attention reads ``L + 1`` keys and values per layer, and a dynamic cache's ``torch.cat``
copies them: FLOPs and bytes are affine in ``L``. The roofline time is a sum of
``max(F / peak, B / bandwidth)`` per module, affine as long as no module changes its
bound between the cache lengths analysed. So three lengths are analysed (the first
decode step's, the middle one's, the last one's), the line is drawn through the two
ends, and the middle is checked against it within ``TOLERANCE``. Where the check holds,
the line's value at the mean cache length is the mean over the decode steps; where it
does not, the mean of the broken line through the three points is used instead.

On a paged cache (``block``), a step at cache length ``L`` reads ``L + 1`` tokens rounded
up to whole blocks: its cost is a staircase in ``L``, affine in that rounded length. The
line is drawn in the rounded length, and the mean is taken over every step's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

#: Relative distance of the middle point from the line that passes the check.
TOLERANCE = 0.01
#: The quantities fitted, in the order of ``Point``'s fields.
QUANTITIES = ("time", "flops", "macs", "bytes")


@dataclass(frozen=True)
class Point:
    """One decode step analysed: its cache length before the step, its roofline time
    (seconds), FLOPs, MACs and bytes moved."""

    length: int
    time: float
    flops: float
    macs: float
    bytes: float
    #: keys of a point this version does not know (a newer layerscope's), as read:
    #: written back after the known ones (not hashed: a point is hashed by its figures)
    extra: dict[str, Any] = field(default_factory=dict, kw_only=True, hash=False)

    def value(self, quantity: str) -> float:
        return float(getattr(self, quantity))

    def to_dict(self) -> dict[str, Any]:
        """The point as an estimate's document writes it: its length and quantities,
        then ``extra``'s keys."""
        data: dict[str, Any] = {"length": self.length, **{q: self.value(q) for q in QUANTITIES}}
        data.update((k, v) for k, v in self.extra.items() if k not in data)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Point:
        """A point from ``to_dict``'s form; the keys it does not know, in order, in
        ``extra``."""
        extra = {k: v for k, v in data.items() if k not in POINT_KEYS}
        return cls(data["length"], *(data[q] for q in QUANTITIES), extra=extra)


#: The keys of a point's object in the document.
POINT_KEYS = ("length", *QUANTITIES)


def decode_lengths(prompt: int, new_tokens: int) -> list[int]:
    """The cache lengths analysed: the first decode step's (``prompt``), the middle one's
    (``prompt + new_tokens // 2``) and the last one's (``prompt + new_tokens - 1``),
    each once."""
    ends = (prompt, prompt + new_tokens // 2, prompt + new_tokens - 1)
    return sorted(set(ends))


@dataclass
class AffineFit:
    """The decode step's cost at one batch, fitted as ``a + b·L`` from the two ends."""

    batch: int
    #: the decode steps' cache lengths: first and last (the mean over them is used)
    first: int
    last: int
    points: list[Point] = field(default_factory=list)
    tolerance: float = TOLERANCE
    #: a paged cache's block in tokens (0: no blocks): the line is in ``reads(L)``
    block: int = 0
    #: keys of a fit's object this version does not know (a newer layerscope's), as read:
    #: written back after the known ones
    extra: dict[str, Any] = field(default_factory=dict, kw_only=True)

    @property
    def mean_length(self) -> float:
        """The mean cache length over the decode steps ``first .. last``."""
        return (self.first + self.last) / 2

    def reads(self, length: float) -> float:
        """The line's abscissa for a step at cache length ``length``: ``length`` itself,
        or on a paged cache the tokens it reads, ``length + 1`` rounded up to whole
        blocks."""
        if not self.block:
            return length
        return -(-(int(length) + 1) // self.block) * self.block

    def line(self, quantity: str) -> tuple[float, float]:
        """``(a, b)`` of the line through the two end points (``b = 0`` with one point),
        in ``reads(L)``."""
        lo, hi = self.points[0], self.points[-1]
        x0, x1 = self.reads(lo.length), self.reads(hi.length)
        if x1 == x0:
            return lo.value(quantity), 0.0
        slope = (hi.value(quantity) - lo.value(quantity)) / (x1 - x0)
        return lo.value(quantity) - slope * x0, slope

    def at(self, quantity: str, length: float) -> float:
        """The line's value at cache length ``length``."""
        a, b = self.line(quantity)
        return a + b * self.reads(length)

    def errors(self) -> dict[str, float]:
        """Relative distance of each middle point from the line, per quantity (empty when
        only the two ends were analysed)."""
        out: dict[str, float] = {}
        for quantity in QUANTITIES:
            worst = 0.0
            for p in self.points[1:-1]:
                measured = p.value(quantity)
                off = abs(self.at(quantity, p.length) - measured)
                worst = max(worst, off / measured if measured else (0.0 if not off else 1.0))
            if len(self.points) > 2:
                out[quantity] = worst
        return out

    @property
    def held(self) -> bool | None:
        """Whether every middle point is within the tolerance of the line (None: no
        middle point to check)."""
        errors = self.errors()
        if not errors:
            return None
        return all(e <= self.tolerance for e in errors.values())

    def mean(self, quantity: str) -> float:
        """The mean of ``quantity`` over the decode steps: the line's value at the mean
        cache length when the check held (or could not be made), else the mean of the
        broken line through the points."""
        if self.block:
            return self._step_mean(quantity)
        if self.held is not False:
            return self.at(quantity, self.mean_length)
        return _broken_line_mean(self.points, quantity)

    def _step_mean(self, quantity: str) -> float:
        """A paged cache's mean over the steps: the line (or, where the check missed, the
        broken line through the points) at every step's rounded length."""
        xs = [self.reads(p.length) for p in self.points]
        ys = [p.value(quantity) for p in self.points]
        steps = range(self.first, self.last + 1)
        if self.held is not False:
            return sum(self.at(quantity, n) for n in steps) / len(steps)
        return sum(_interpolate(xs, ys, self.reads(n)) for n in steps) / len(steps)

    def to_dict(self) -> dict[str, Any]:
        """The fit as an estimate's document writes it (``FIT_KEYS``: what it was fitted
        from, and the figures derived from that), then ``extra``'s keys."""
        data: dict[str, Any] = {
            "batch": self.batch,
            "first_length": self.first,
            "last_length": self.last,
            "mean_length": self.mean_length,
            "points": [p.to_dict() for p in self.points],
            "lines": {q: dict(zip(("a", "b"), self.line(q), strict=True)) for q in QUANTITIES},
            "errors": self.errors(),
            "tolerance": self.tolerance,
            "held": self.held,
            **({"block_size": self.block} if self.block else {}),
        }
        data.update((k, v) for k, v in self.extra.items() if k not in FIT_KEYS)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AffineFit:
        """A fit from ``to_dict``'s form: the points and the tolerance (the lines, errors
        and check follow from them); the keys it does not know, in order, in ``extra``."""
        return cls(
            data["batch"],
            data["first_length"],
            data["last_length"],
            [Point.from_dict(p) for p in data["points"]],
            data["tolerance"],
            data.get("block_size", 0),
            extra={k: v for k, v in data.items() if k not in FIT_KEYS},
        )


#: The keys ``AffineFit.to_dict`` writes: what a fit is made from, and what it derives
#: (``DERIVED``: written, not read; a document's must be what its points give).
FIT_KEYS = (
    "batch", "first_length", "last_length", "mean_length", "points", "lines", "errors",
    "tolerance", "held", "block_size",
)  # fmt: skip
DERIVED = ("mean_length", "lines", "errors", "held")


def _interpolate(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """The piecewise-linear curve through ``(xs, ys)`` (``xs`` ascending) at ``x``."""
    for (x0, y0), (x1, y1) in pairwise(zip(xs, ys, strict=True)):
        if x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return ys[-1]


def _broken_line_mean(points: Sequence[Point], quantity: str) -> float:
    """The mean over ``L`` of the piecewise-linear curve through ``points``."""
    span = points[-1].length - points[0].length
    area = sum(
        (a.value(quantity) + b.value(quantity)) / 2 * (b.length - a.length)
        for a, b in pairwise(points)
    )
    return area / span


__all__ = [
    "DERIVED", "FIT_KEYS", "POINT_KEYS", "QUANTITIES", "TOLERANCE", "AffineFit", "Point",
    "decode_lengths",
]  # fmt: skip
