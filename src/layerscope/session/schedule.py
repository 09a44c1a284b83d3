"""``schedule``: which steps of a user's loop a ``Profiler`` measures.

A cycle is ``wait`` steps (nothing installed), ``warmup`` steps (nothing installed
either: the model's own warm-up, such as allocator growth and lazy init, passes
unmeasured), then ``active`` measured steps. Cycles repeat ``repeat`` times (0: forever).
After the last cycle nothing is measured again.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from layerscope.validate import check_int


class Action(str, Enum):
    """What a Profiler does in one step of the user's loop."""

    WAIT = "wait"
    WARMUP = "warmup"
    #: Measured with the analysis instrumentation (FLOPs, memory, shapes).
    ANALYSE = "analyse"
    #: Measured with the cheap forward timers only (``timing=`` given).
    TIME = "time"
    #: Every cycle has run: nothing is measured any more.
    DONE = "done"


#: The actions that install nothing.
IDLE = frozenset({Action.WAIT, Action.WARMUP, Action.DONE})


@dataclass(frozen=True)
class Schedule:
    """Steps per cycle: ``wait`` + ``warmup`` idle, then ``active`` measured; ``repeat``
    cycles (0: cycles forever). Validated on creation (``InvalidInputError``)."""

    wait: int = 0
    warmup: int = 0
    active: int = 1
    repeat: int = 0

    def __post_init__(self) -> None:
        for name, low in (("wait", 0), ("warmup", 0), ("active", 1), ("repeat", 0)):
            object.__setattr__(self, name, check_int(name, getattr(self, name), low))

    @property
    def cycle(self) -> int:
        """Steps per cycle."""
        return self.wait + self.warmup + self.active

    def locate(self, step: int) -> tuple[int, int]:
        """(cycle number, position in the cycle) of step ``step`` (0-based)."""
        return divmod(step, self.cycle)

    def action(self, step: int, timing: bool = False) -> Action:
        """What step ``step`` (0-based, counted from ``Profiler.start``) does.

        With ``timing`` the first active step of a cycle is analysed and the others are
        timed; without, every active step is analysed.
        """
        cycle, pos = self.locate(step)
        if self.repeat and cycle >= self.repeat:
            return Action.DONE
        if pos < self.wait:
            return Action.WAIT
        if pos < self.wait + self.warmup:
            return Action.WARMUP
        if timing and pos > self.wait + self.warmup:
            return Action.TIME
        return Action.ANALYSE

    def last_of_cycle(self, step: int) -> bool:
        """Whether step ``step`` is the last (active) step of its cycle."""
        return self.locate(step)[1] == self.cycle - 1


def schedule(*, wait: int = 0, warmup: int = 0, active: int = 1, repeat: int = 0) -> Schedule:
    """A ``Schedule`` for ``Profiler(model, schedule=...)``: per cycle ``wait`` and then
    ``warmup`` steps with nothing installed, then ``active`` measured steps; ``repeat``
    cycles, 0 for as many as the loop runs. ``Profiler.step()`` ends each step."""
    return Schedule(wait=wait, warmup=warmup, active=active, repeat=repeat)


__all__ = ["IDLE", "Action", "Schedule", "schedule"]
