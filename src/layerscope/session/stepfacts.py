"""Which step of a loop an analysis measured: whether the optimizer's states existed when
it began (an optimizer's first ``step()`` creates them) and whether
``DistributedDataParallel`` rebuilt its gradient buckets in it (once, in the forward of
its second iteration). Both change the memory figures of that step and no later one.

``profile.model["loop"]`` gets ``optimizer_states`` and ``ddp_rebuilt_buckets``; a notice
names a step where the states were created or the buckets rebuilt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn
from torch.optim import Optimizer

from layerscope.collect.common import is_compiled
from layerscope.metrics.memory.baseline import OptimizerWatch, state_tensors

#: What to analyse instead, in the notices below.
_LATER = "for steady-state memory figures analyse a later step, e.g. ls.schedule(wait=2)"

STATES_CREATED = (
    "the optimizer's states were created in an analysed step (its first step()): the "
    "memory figures of that step lack them at its start and include their allocation; " + _LATER
)
BUCKETS_REBUILT = (
    "DistributedDataParallel rebuilt its gradient buckets in an analysed step (once, in "
    "the forward of its second iteration): the memory figures include the new buckets' "
    "allocation; " + _LATER
)


def find_ddp(model: Any) -> nn.parallel.DistributedDataParallel | None:
    """The ``DistributedDataParallel`` wrapper among ``model``'s wrappers (compile), if any."""
    while True:
        if is_compiled(model):
            model = model._orig_mod
        elif isinstance(model, nn.parallel.DistributedDataParallel):
            return model
        else:
            return None


def ddp_rebuilt(ddp: nn.parallel.DistributedDataParallel | None) -> bool | None:
    """Whether DDP has rebuilt its buckets (its private ``_has_rebuilt_buckets``, which its
    forward sets when the reducer rebuilds them); None without DDP or the attribute."""
    flag = getattr(ddp, "_has_rebuilt_buckets", None) if ddp is not None else None
    return flag if isinstance(flag, bool) else None


def has_states(optimizer: Optimizer, params: set[int]) -> bool:
    return any(True for _ in state_tensors(optimizer, params))


@dataclass(frozen=True, slots=True)
class Step:
    """The facts of one analysed step."""

    #: Whether the known optimizers had states for the model's parameters when the step
    #: began (an optimizer first seen in the step: at its ``step()``); None: none known.
    optimizer_states: bool | None
    #: Whether an optimizer that had none when the step began has some at its end.
    states_created: bool
    #: Whether DDP rebuilt its buckets in the step; None: no DDP wrapper.
    ddp_rebuilt_buckets: bool | None


class StepFacts:
    """Watches one analysed step at a time (``begin``/``end``)."""

    def __init__(self, model: Any, watch: OptimizerWatch) -> None:
        #: the DDP wrapper among ``model``'s wrappers, if any
        self.ddp = find_ddp(model)
        self._watch = watch
        self._params: set[int] = set()
        self._before: dict[int, tuple[Optimizer, bool]] = {}
        self._ddp_before: bool | None = None

    def begin(self, module: nn.Module) -> None:
        self._params = {id(p) for p in module.parameters()}
        self._before = {}
        for o in self._watch.optimizers():
            self._seen(o)
        self._watch.listen(self._seen)
        self._ddp_before = ddp_rebuilt(self.ddp)

    def _seen(self, optimizer: Optimizer) -> None:
        if id(optimizer) not in self._before:
            self._before[id(optimizer)] = (optimizer, has_states(optimizer, self._params))

    def end(self) -> Step:
        self._watch.unlisten(self._seen)
        before = list(self._before.values())
        self._before = {}
        after = ddp_rebuilt(self.ddp)
        return Step(
            optimizer_states=any(had for _, had in before) if before else None,
            states_created=any(not had and has_states(o, self._params) for o, had in before),
            ddp_rebuilt_buckets=None if after is None else bool(after and not self._ddp_before),
        )


def loop_facts(steps: list[Step]) -> tuple[dict[str, Any], list[str]]:
    """The ``loop`` keys of a cycle's analysed steps, and its notices: ``optimizer_states``
    true when every step began with states (None: no optimizer known in any), and
    ``ddp_rebuilt_buckets`` when DDP rebuilt them in one of them (None: no DDP)."""
    states = [s.optimizer_states for s in steps if s.optimizer_states is not None]
    rebuilt = [s.ddp_rebuilt_buckets for s in steps if s.ddp_rebuilt_buckets is not None]
    keys = {
        "optimizer_states": all(states) if states else None,
        "ddp_rebuilt_buckets": any(rebuilt) if rebuilt else None,
    }
    notices = []
    if any(s.states_created for s in steps):
        notices.append(STATES_CREATED)
    if keys["ddp_rebuilt_buckets"]:
        notices.append(BUCKETS_REBUILT)
    return keys, notices
