"""The numerics observer: where NaN/Inf first appear, and activation statistics per module.

``NumericsObserver`` checks every module's floating outputs after each forward call and,
when a backward runs, the gradients w.r.t. its outputs and inputs (tensor hooks, not
module backward hooks, so in-place ops after a module keep working). It names the first
non-finite module call and the *origin*: the first call that turned finite values into
non-finite ones. With ``stats=True`` it also keeps min/max/mean/std/abs-max, the fraction
of zeros and fp16/bf16 range flags of each module's outputs, over all its calls.

Every reduction runs on the tensor's device, hidden from the session's dispatch mode (so
it never shows up as the model's FLOPs) and outside autograd; each result row is written
into a device buffer and read back with one host transfer per device in ``finish``. Only
``nonfinite="raise"`` reads a finiteness flag per module call, to stop where it happens.
The report format is documented in ``docs/numerics.md``.

Modules: ``errors`` (modes, NonFiniteError/NonFiniteWarning), ``values``
(device reductions, row store, host reads), ``stats`` (combining statistics across calls),
``records`` (calls, gradient events, memo entries), ``report`` (raise-mode checks and the
end-of-session walk) and ``observer`` (``NumericsObserver``).
"""

from __future__ import annotations

from layerscope.metrics.numerics.errors import (
    NonFiniteError,
    NonFiniteMode,
    NonFiniteWarning,
    Where,
)
from layerscope.metrics.numerics.observer import NumericsObserver
from layerscope.metrics.numerics.stats import BF16_MAX, BF16_TINY, FP16_MAX, FP16_TINY

__all__ = [
    "BF16_MAX",
    "BF16_TINY",
    "FP16_MAX",
    "FP16_TINY",
    "NonFiniteError",
    "NonFiniteMode",
    "NonFiniteWarning",
    "NumericsObserver",
    "Where",
]
