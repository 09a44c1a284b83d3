"""Activation statistics of one module over all its calls: an exact combination of the
per-tensor rows, and the fp16/bf16 range limits its report is checked against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from layerscope.metrics.numerics.values import _MAX, _MEAN, _MIN, _MIN_ABS, _VAR, _ZEROS

#: Largest finite float16 (a larger magnitude overflows to inf or saturates).
FP16_MAX = 65504.0
#: Largest finite bfloat16, (2 - 2**-7) * 2**127.
BF16_MAX = 3.3895313892515355e38
#: Smallest positive float16 (subnormal); a smaller nonzero magnitude is not representable.
FP16_TINY = 2.0**-24
#: Smallest positive bfloat16 (subnormal), 2**-126 * 2**-7.
BF16_TINY = 2.0**-133


@dataclass(slots=True)
class _Stats:
    """Exact running combination of per-tensor statistics (Chan et al.'s parallel update)."""

    n: int = 0
    mean: float = 0.0
    m2: float = 0.0
    lo: float = math.inf
    hi: float = -math.inf
    zeros: int = 0
    min_abs: float = math.inf

    def add(self, n: int, row: list[float]) -> None:
        total = self.n + n
        delta = row[_MEAN] - self.mean
        self.mean += delta * n / total
        self.m2 += row[_VAR] * n + delta * delta * self.n * n / total
        self.n = total
        self.lo = min(self.lo, row[_MIN])
        self.hi = max(self.hi, row[_MAX])
        self.zeros += int(row[_ZEROS])
        self.min_abs = min(self.min_abs, row[_MIN_ABS])

    def report(self, underflow: bool) -> dict[str, Any]:
        """The statistics. Without ``underflow`` the smallest nonzero magnitude was not
        measured: it and the underflow flags are ``None``. With no element covered the
        statistics are ``None`` and the measured flags ``False``."""
        empty = self.n == 0
        absmax = None if empty else max(abs(self.lo), abs(self.hi))
        min_abs = self.min_abs if math.isfinite(self.min_abs) else None
        return {
            "min": None if empty else self.lo,
            "max": None if empty else self.hi,
            "mean": None if empty else self.mean,
            "std": None if empty else math.sqrt(max(self.m2, 0.0) / self.n),
            "absmax": absmax,
            "min_abs_nonzero": min_abs if underflow else None,
            "zero_fraction": None if empty else self.zeros / self.n,
            "fp16_overflow": absmax is not None and absmax > FP16_MAX,
            "bf16_overflow": absmax is not None and absmax > BF16_MAX,
            "fp16_underflow": min_abs is not None and min_abs < FP16_TINY if underflow else None,
            "bf16_underflow": min_abs is not None and min_abs < BF16_TINY if underflow else None,
        }
