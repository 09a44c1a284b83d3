"""``profile_fx``: the analysis pass, then a timing pass node by node through ``torch.fx``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from layerscope.collect.common import unwrap_model
from layerscope.collect.timing import time_profile
from layerscope.collect.timing.fx import trace
from layerscope.profile import Profile
from layerscope.session.run import profile as analyse


def profile_fx(
    model: nn.Module,
    *args: Any,
    kwargs: dict[str, Any] | None = None,
    warmup: int = 3,
    repeats: int = 10,
    ops: bool = True,
    backward: bool = False,
    clock: Callable[[], int] | None = None,
    progress: bool | Callable[[int, int], None] | None = None,
) -> Profile:
    """Profile ``model(*args, **kwargs)`` and time it node by node through ``torch.fx``.

    The analysis pass of ``ls.profile`` gives the tree and the other metrics; the timing
    pass runs the fx trace. Functional nodes appear as op rows (``ops=True``). Raises
    ``UntraceableModelError`` (an ``InvalidInputError``) when the model cannot be traced.
    """
    unwrapped, _ = unwrap_model(model)
    trace(unwrapped)  # fail fast, before the analysis pass
    prof = analyse(model, args=args, kwargs=kwargs)
    time_profile(
        prof,
        model,
        args,
        kwargs,
        warmup=warmup,
        repeats=repeats,
        timer="fx",
        ops=ops,
        backward=backward,
        clock=clock,
        progress=progress,
    )
    return prof
