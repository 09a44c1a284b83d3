"""What the user sees of a non-finite finding: the modes, the error and the warning, both
worded by ``profile.describe_nonfinite`` (which the console uses too).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any, Literal

from layerscope.errors import LayerscopeError
from layerscope.profile import describe_nonfinite

NonFiniteMode = Literal["record", "warn", "raise"]
#: Where a non-finite value was seen: a forward output, or a gradient w.r.t. one.
Where = Literal["output", "grad_output", "grad_input"]

_PACKAGE_DIR = str(Path(__file__).resolve().parents[2])


class NonFiniteError(LayerscopeError, FloatingPointError):
    """``nonfinite="raise"``: a module call produced (or first received) NaN/Inf values.

    Raised from the forward hook of the module (``where == "output"``) or from the
    gradient hook (``"grad_output"``/``"grad_input"``); ``origin`` is True when the module
    turned finite values into non-finite ones.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str,
        call: int,
        where: Where,
        shapes: list[list[int]],
        nan: int,
        inf: int,
        origin: bool,
    ) -> None:
        super().__init__(message)
        self.path = path
        self.call = call
        self.where = where
        self.shapes = shapes
        self.nan = nan
        self.inf = inf
        self.origin = origin
        #: the origin as ``profile.numerics["origin"]`` holds it (None: not found)
        self.origin_event: dict[str, Any] | None = None


class NonFiniteWarning(UserWarning):
    """``nonfinite="warn"``: the session saw NaN/Inf values (emitted once, at its end)."""


def _warn(event: dict[str, Any], origin: bool) -> None:
    """Emit the one ``NonFiniteWarning``, attributed to the first frame outside layerscope."""
    level, frame = 1, sys._getframe(0)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    warnings.warn(
        NonFiniteWarning("layerscope: " + describe_nonfinite(event, origin)), stacklevel=level
    )
