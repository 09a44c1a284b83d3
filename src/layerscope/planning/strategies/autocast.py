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
from layerscope.planning.timeline import Events, Replay, inside
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
        low = step.opts.compute_dtype.itemsize
        made, saved = _weight_copies(step.prof, step.params, low)
        casts: dict[str, int] = {}
        for p in step.params:
            casts[p.module] = max(casts.get(p.module, 0), p.nbytes)
        step.setup.events.append(AutocastEvents(4 / low, made, saved, casts))


class AutocastEvents(Events):
    """Autocast in the replay: float32 gradients (``grad_scale`` times the analysed
    16-bit ones); a 16-bit copy of each weight made in its module's forward, dropped
    when the forward ends unless saved for its backward (``saved_copies``), then when its
    module's backward is done; each module's largest 16-bit gradient alive beside the
    float32 one while it is cast, as its module's backward ends (``cast_grads``)."""

    def __init__(
        self,
        grad_scale: float,
        weight_copies: dict[str, int],
        saved_copies: dict[str, int],
        cast_grads: dict[str, int],
    ) -> None:
        self.grad_scale = grad_scale
        self.weight_copies, self.saved_copies = weight_copies, saved_copies
        self.cast_grads = cast_grads
        self.copies: dict[str, int] = {}

    def _hold(self, replay: Replay, copies: dict[str, int]) -> None:
        """Hold ``copies`` (one buffer of their sum: the replay sums its buffers at each
        point)."""
        self.copies = copies
        replay.free("copies")
        replay.alloc("copies", "activation_bytes", sum(copies.values()))

    def start(self, replay: Replay) -> None:
        replay.grad_scale = self.grad_scale
        self.casts = {m: g for m, g in self.cast_grads.items() if m in replay.first_bwd}

    def enter(self, replay: Replay, path: str) -> None:
        if path in self.weight_copies and path not in self.copies:
            self._hold(replay, {**self.copies, path: self.weight_copies[path]})

    def exit(self, replay: Replay, path: str) -> None:
        if path == "":  # autocast exits: unsaved copies go
            self._hold(replay, {m: b for m, b in self.saved_copies.items() if m in self.copies})

    def backward(self, replay: Replay, k: int, event: str, path: str) -> None:
        first_bwd = replay.first_bwd
        done = [  # the copies live until their module's backward is done
            m for m in self.copies if m in first_bwd and first_bwd[m] < k and not inside(path, m)
        ]
        if done:
            self._hold(replay, {m: b for m, b in self.copies.items() if m not in done})
        for m in [m for m in self.casts if first_bwd[m] < k and not inside(path, m)]:
            replay.emit("grad_cast", m, grads=self.casts.pop(m))

    def end(self, replay: Replay, path: str) -> None:
        self._hold(replay, {})


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

__all__ = ["AUTOCAST", "Autocast", "AutocastEvents"]
