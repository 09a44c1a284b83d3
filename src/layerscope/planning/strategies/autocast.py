"""Autocast's precision rule (mixed precision under DDP or on one GPU with float32
weights): float32 parameters, gradients and states; in the step, a 16-bit copy of each
weight of a module that runs a matmul or convolution (kept for its backward where the
analysis saw it saved), and each 16-bit gradient cast to float32 as its module's
backward ends."""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

from layerscope.planning.facts import Param
from layerscope.planning.strategy import Step, weight_size
from layerscope.profile import Profile


class Autocast:
    """The rule; ``AUTOCAST`` is the one instance."""

    def state_size(self, precision: str) -> int:
        """Bytes per element of the weights, gradients and states at rest."""
        return 4 if precision.endswith("-mixed") else weight_size(precision)

    def prepare(self, step: Step) -> None:
        """The replay's casts and copies. An analysis under autocast's rules has them
        already; a profile that ran every op in 16 bits gets them added here."""
        if not step.opts.mixed or step.prof.model.get("autocast"):
            return
        setup, low = step.setup, step.opts.compute_dtype.itemsize
        setup.grad_scale = 4 / low
        setup.weight_copies, setup.saved_copies = _weight_copies(step.prof, step.params, low)
        for p in step.params:
            setup.cast_grads[p.module] = max(setup.cast_grads.get(p.module, 0), p.nbytes)


def _weight_copies(
    prof: Profile, params: Sequence[Param], low: int
) -> tuple[dict[str, int], dict[str, int]]:
    """Autocast's 16-bit copies, per module running a matmul or convolution (own MACs):
    each of its parameters cast once per forward; and of those, the ones its backward
    needs (the parameters the analysis saw saved for backward: storage records)."""
    made: dict[str, int] = {}
    for p in params:
        if prof.node(p.module).self_metrics.get("macs", 0):
            made[p.module] = made.get(p.module, 0) + prod(p.shape) * low
    table = prof.memory["storages"]
    saved: dict[str, int] = {}
    for nbytes, savers, _inputs, _outputs, param in table["rows"]:
        for i in savers[:1] if param else ():
            module = table["paths"][i]
            if module in made:
                saved[module] = saved.get(module, 0) + int(nbytes)
    return made, saved


AUTOCAST = Autocast()

__all__ = ["AUTOCAST", "Autocast"]
