"""Number formatting for views: exact counts, SI magnitudes, binary byte sizes, shapes."""

from __future__ import annotations

import math
from collections.abc import Callable

from layerscope.profile import Signature, TensorSpec

_SI = ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K"))
_BIN = ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"))
_TIME = ((60.0, "min"), (1.0, "s"), (1e-3, "ms"), (1e-6, "µs"))
#: Every unit these formatters write after a number and a space (``1.5 M``, ``0 B``):
#: wrapped text keeps each one on the line of its number.
UNITS: tuple[str, ...] = (
    *(u for _, u in _SI),
    *(u for _, u in _BIN),
    "B",
    *(u for _, u in _TIME),
    "ns",
    "inputs/s",
)


def count(n: float) -> str:
    """Exact integer with thousands separators: ``1,234,567``."""
    return f"{int(n):,}" if float(n).is_integer() else f"{n:,.2f}"


def plural(n: float, word: str, words: str | None = None) -> str:
    """A count and its noun, which agree: ``1 call``, ``2 calls``, ``1,024 buffer values``
    (``words``: the plural when it is not the noun and ``s``)."""
    return f"{count(n)} {word if n == 1 else (words or word + 's')}"


def _reaches(n: float, scale: float, spec: str, smallest: float) -> bool:
    """Whether ``n`` prints as at least 1 of the unit ``scale``: at least it, or rounded up
    to it from a unit that would print it as 1000 or more (``999,999`` is ``1 M`` in 3
    significant digits, not ``1e+03 K``); below the ``smallest`` unit, values print
    exactly, so only reaching it counts."""
    if abs(n) >= scale:
        return True
    return scale > smallest and float(format(abs(n) / scale, spec)) >= 1


def si(n: float) -> str:
    """Magnitude with an SI suffix and 3 significant digits: ``1.23 G``."""
    for scale, suffix in _SI:
        if _reaches(n, scale, ".3g", _SI[-1][0]):
            return f"{n / scale:.3g} {suffix}"
    return f"{n:g}"


def nbytes(n: float) -> str:
    """Bytes in binary units: ``512 B``, ``4.50 KiB``, ``1.23 GiB``."""
    for scale, suffix in _BIN:
        if _reaches(n, scale, ".2f", _BIN[-1][0]):
            return f"{n / scale:.2f} {suffix}"
    return f"{int(n)} B"


def seconds(t: float) -> str:
    """Seconds in the largest unit that keeps the value at least 1: ``1.23 ms``, ``2.5 min``."""
    for scale, suffix in _TIME:
        if _reaches(t, scale, ".3g", 0.0):  # below µs: ns in 3 significant digits
            return f"{t / scale:.3g} {suffix}"
    return f"{t / 1e-9:.3g} ns"


def magnitude(x: float) -> str:
    """A value of any size in 3 significant digits: ``0.00123``, ``6.55e+04``."""
    return f"{x:.3g}"


def shape(spec: TensorSpec) -> str:
    """``[2, 3, 32, 32]``, with the dtype appended when it is not floating point."""
    text = "[" + ", ".join(str(d) for d in spec.shape) + "]"
    if not spec.dtype.startswith(("float", "bfloat", "complex")):
        text += f" {spec.dtype}"
    return text


def signature(sig: Signature, limit: int = 3) -> str:
    """The tensor shapes of one call's inputs or outputs, at most ``limit`` of them."""
    tensors = [s for s in sig if isinstance(s, TensorSpec)]
    if not tensors:
        return "-"
    parts = [shape(s) for s in tensors[:limit]]
    if len(tensors) > limit:
        parts.append(f"+{len(tensors) - limit}")
    return " ".join(parts)


def pct(p: float) -> str:
    """A percentage: ``12.3%``, ``100%``, ``0.042%``, ``0.000076%`` (2 significant digits
    below 0.1, never as an exponent)."""
    if p == 0:
        return "0%"
    if abs(p - 100.0) < 0.05:
        return "100%"
    if abs(p) >= 0.1:
        return f"{p:.1f}%"
    # 2 significant digits, never an exponent: 0.000076%, not 7.6e-05%
    digits = max(0, 1 - math.floor(math.log10(abs(p))))
    return f"{p:.{digits}f}".rstrip("0").rstrip(".") + "%"


def rate(per_second: float) -> str:
    """Operations per second with an SI prefix: ``1.23 G`` (the header says ``FLOP/s``)."""
    return si(per_second)


def raw(value: float) -> str:
    """A value in base units, unformatted: ``1234567``, ``0.000123``."""
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int) or (float(value).is_integer() and abs(value) < 2**63):
        return str(int(value))
    return repr(float(value))


#: The formatter for each kind of column (``analysis.catalog.Column.kind``).
BY_KIND: dict[str, Callable[[float], str]] = {
    "count": count,
    "si": si,
    "bytes": nbytes,
    "seconds": seconds,
    "rate": rate,
    "pct": pct,
    "number": magnitude,
}


def inputs_per_second(n: float) -> str:
    """Throughput: ``812.5 inputs/s``, ``12.3 K inputs/s``, ``1.5 M inputs/s``."""
    for scale, suffix in ((1e6, "M "), (1e3, "K ")):
        if _reaches(n, scale, ".3g", 1e3):
            return f"{n / scale:.3g} {suffix}inputs/s"
    return f"{n:,.1f} inputs/s"
