"""One steady-state training step on one GPU, replayed from one analysis: the memory
timeline of a plan (``docs/plan.md``, "The memory timeline").

The analysis (``memory=True, backward=True``, one GPU's micro-batch, in the compute
dtype) gives the bytes live at each module boundary of the forward and backward
(``profile.memory["timeline"]``: activations, temporaries and the gradients as they
appear). The replay keeps those bytes and changes what the plan changes:

- the model states at rest (the strategy's: ``planning.strategies``), the buffers held
  all step, the input (a 16-bit copy of a float input under mixed precision, freed
  after the first module's backward); gradients are None when the step starts (as
  ``zero_grad()`` leaves them) and appear in the backward;
- the strategy's own moments (``Events``, set by its ``prepare``): FSDP2's gathers,
  reshards and reduce-scatters per unit, autocast's weight copies and gradient casts,
  ZeRO-2's gradient partition (``planning.strategies``' modules describe them);
- checkpointed modules: what their subtree saved is dropped at their exit and
  recomputed before their backward (the recompute holds the module's forward peak);
- the optimizer step: gradients, states and the temporaries of torch's ``foreach``
  implementation (one tensor the size of the local states, for Adam and AdamW).

Each point of the timeline is the bytes by part at one moment; the replay's own
moments (a gather, a reduce-scatter, a recompute) carry the activation bytes of the
module boundary they happen at.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from layerscope.planning.fields import PARTS as _NAMED

#: The parts of a GPU's memory at one moment (``Plan.memory``'s keys).
PARTS = tuple(key for key, _ in _NAMED)


class Events:
    """A strategy's own moments in the replay: each hook runs at its moment of the walk
    with the ``Replay`` (to allocate and free buffers, emit points, count gradients as
    reduced); the defaults do nothing."""

    #: the events reduce the analysed gradients (``Replay.grads_reduced``): FSDP2's and
    #: ZeRO-2's; otherwise each stays as made
    reduces_grads: bool = False

    def start(self, replay: Replay) -> None:
        """Before the walk (the backward's first moments are known)."""

    def enter(self, replay: Replay, path: str) -> None:
        """A module's forward starts, before its point."""

    def exit(self, replay: Replay, path: str) -> None:
        """A module's forward ends, before its point."""

    def exited(self, replay: Replay, path: str) -> None:
        """A module's forward ended, after its point."""

    def backward(self, replay: Replay, k: int, event: str, path: str) -> None:
        """A moment of the backward (``event`` ``"end"`` included), before its point and
        any recompute."""

    def before_point(self, replay: Replay, k: int, path: str) -> None:
        """A moment of the backward other than its end, just before its point."""

    def end(self, replay: Replay, path: str) -> None:
        """The backward's end, before its point."""


@dataclass
class Setup:
    """What the replay needs, in bytes (``planning.build`` starts it; the strategy adds
    its ``events`` and ``final_grads``: ``planning.strategy``)."""

    #: the parts held all step long (model states at rest, buckets, the input, buffers)
    rest: dict[str, int]
    #: gradient bytes of each module's own trainable parameters, as analysed
    grads: dict[str, int] = field(default_factory=dict)
    #: of a module's ``grads``, the bytes its backward makes only after one of its
    #: children's backward (child, bytes): the weights it used before calling the child
    #: (a transformers experts module's up projection, before ``act_fn``:
    #: ``expertparallel.late_grads``); the rest at its first backward moment
    grads_after: dict[str, tuple[str, int]] = field(default_factory=dict)
    #: a 16-bit copy of the float input, held all step (mixed precision, float input)
    cast_input: int = 0
    #: the module whose backward frees ``cast_input`` (the first to run)
    first_module: str = ""
    #: checkpointed modules: bytes dropped from what they saved, and their forward peak
    drops: dict[str, int] = field(default_factory=dict)
    recompute_peak: dict[str, int] = field(default_factory=dict)
    #: of a checkpointed module's output, what the analysis still holds at its recompute
    #: but the checkpointed run has freed (the recompute makes it again)
    regenerated: dict[str, int] = field(default_factory=dict)
    #: a checkpointed module's inputs that nothing in the analysis saved (freed there in
    #: the forward), which the checkpoint keeps from its exit to the end of its backward
    held_inputs: dict[str, int] = field(default_factory=dict)
    #: the gradients after the backward, at rest (what the optimizer reads)
    final_grads: int = 0
    optimizer_temp: int = 0
    #: the strategy's (and its precision rule's) own moments
    events: list[Events] = field(default_factory=list)


@dataclass
class Point:
    phase: str  # "forward", "backward", "optimizer"
    event: str  # an analysis event ("enter", "exit", "peak", "backward", "end") or the
    # replay's ("gather", "prefetch", "reduce_scatter", "recompute", "step")
    path: str
    parts: dict[str, int]
    #: in a micro-batch after the first (gradient accumulation)
    later: bool = False

    @property
    def total(self) -> int:
        return sum(self.parts.values())


def inside(path: str, unit: str) -> bool:
    """Whether module ``path`` is ``unit`` or inside it (the root holds every module)."""
    return unit == "" or path == unit or path.startswith(unit + ".")


def enclosing(path: str) -> list[str]:
    """Every module ``path`` is inside, innermost first: itself, its parents, the root."""
    out = []
    while path:
        out.append(path)
        path = path.rpartition(".")[0]
    out.append("")
    return out


def _first_backward(events: Sequence[str], paths: Sequence[str], start: int) -> dict[str, int]:
    first: dict[str, int] = {}
    for k in range(start, len(events)):
        if events[k] in ("backward", "peak"):
            first.setdefault(paths[k], k)
    return first


def grad_moments(
    setup: Setup, events: Sequence[str], paths: Sequence[str], first: Mapping[str, int]
) -> list[tuple[int, int]]:
    """Each module's analysed gradient bytes by the moment its backward makes them,
    sorted (each counted from the next moment on): at the module's first backward moment
    (``first``), as autograd's ``AccumulateGrad`` runs after the module's own ops; the
    part ``Setup.grads_after`` names at the module's first moment after its child's
    backward started (at the first one if there is none)."""
    out: list[tuple[int, int]] = []
    for m, g in setup.grads.items():
        if m not in first:
            continue
        child, late = setup.grads_after.get(m, ("", 0))
        k = None
        if late and child in first:
            later = range(first[child] + 1, len(events))
            k = next((j for j in later if paths[j] == m and events[j] in ("backward", "peak")),
                     None)  # fmt: skip
        if k is None:
            out.append((first[m], g))
            continue
        out += [(first[m], g - late), (k, late)]
    return sorted(out)


class Replay:
    """The walk over the analysed events, forward then backward, and the points it
    emits; ``Events`` act on it through ``alloc``, ``free``, ``emit``."""

    def __init__(
        self,
        setup: Setup,
        events: Sequence[str],
        paths: Sequence[str],
        accumulating: bool = False,
    ) -> None:
        self.s = setup
        #: a micro-batch after the first of a step with gradient accumulation: the
        #: gradients at rest (``final_grads``) held from its start, each new gradient
        #: added into them (``just_made``)
        self.accumulating = accumulating
        self.points: list[Point] = []
        self.buffers: dict[str, tuple[str, int]] = {}  # name -> (part, bytes)
        self.buffered: dict[str, int] = {}  # part -> bytes of its buffers, kept as they come
        self.activations = 0  # the analysis's live bytes at the current moment
        self.grads_seen = 0  # analysed gradient bytes allocated so far
        self.grads_reduced = 0  # of those, the ones reduced and freed (FSDP2, ZeRO-2)
        #: the plan's gradient bytes per analysed gradient byte (2 under DDP autocast)
        self.grad_scale = 1.0
        self.pending_drops: dict[str, int] = {}
        self.pending_total = 0  # their sum
        self.phase = "forward"
        self.cast = setup.cast_input
        self.start = next((k for k, e in enumerate(events) if e == "backward"), len(events))
        #: each module's first moment in the backward
        self.first_bwd = _first_backward(events, paths, self.start)
        self.recomputed: set[str] = set()
        self.exited: set[str] = set()
        #: each module with held inputs: its backward's last moment (its subtree's)
        self.last_bwd: dict[str, int] = {}
        if setup.held_inputs:
            for k in range(self.start, len(events)):
                for m in enclosing(paths[k]):
                    if m in setup.held_inputs:
                        self.last_bwd[m] = k
        self.held_inputs: dict[str, int] = {}
        self.held_total = 0  # their sum
        # gradients by the moment their module's backward makes them, summed as they come
        starts = grad_moments(setup, events, paths, self.first_bwd)
        self._starts = [first for first, _ in starts]
        self._prefix = [0, *itertools.accumulate(g for _, g in starts)]
        #: gradient bytes by the moment their module's backward makes them
        self._made_at: dict[int, int] = {}
        for first, g in starts:
            self._made_at[first] = self._made_at.get(first, 0) + g
        for hooks in setup.events:
            hooks.start(self)
        #: whether the analysed gradients stay as made (no strategy's events reduce them)
        self.keeps_grads = not any(h.reduces_grads for h in setup.events)
        if accumulating:
            self.alloc("accumulated", "grad_bytes", setup.final_grads)

    def just_made(self, k: int) -> int:
        """Analysed gradient bytes made at moment ``k - 1`` (``grad_moments``): not yet
        reduced or added into the accumulated ones."""
        return self._made_at.get(k - 1, 0)

    # ---- buffers and points ------------------------------------------------------
    def alloc(self, name: str, part: str, nbytes: int) -> None:
        if nbytes:
            self.free(name)
            self.buffers[name] = (part, nbytes)
            self.buffered[part] = self.buffered.get(part, 0) + nbytes

    def free(self, name: str) -> None:
        old = self.buffers.pop(name, None)
        if old is not None:
            self.buffered[old[0]] -= old[1]

    def emit(self, event: str, path: str, recompute: int = 0, grads: int = 0) -> None:
        s = self.s
        parts = dict.fromkeys(PARTS, 0)
        for key, value in s.rest.items():
            parts[key] += value
        for part, nbytes in self.buffered.items():
            parts[part] += nbytes
        held = self.grads_seen - self.grads_reduced
        parts["grad_bytes"] += round(held * self.grad_scale) + grads
        parts["activation_bytes"] += (
            self.activations - self.grads_seen - self.pending_total + self.held_total + self.cast
        )
        parts["recompute_bytes"] += recompute
        self.points.append(Point(self.phase, event, path, parts, self.accumulating))

    def counted(self, k: int) -> int:
        """Analysed gradient bytes allocated before moment ``k``."""
        return self._prefix[bisect.bisect_left(self._starts, k)]

    # ---- the walk ------------------------------------------------------------------
    def forward(self, event: str, path: str) -> None:
        s = self.s
        for hooks in s.events:
            if event == "enter":
                hooks.enter(self, path)
            elif event == "exit":
                hooks.exit(self, path)
        self.emit(event, path)
        if event != "exit":
            return
        for hooks in s.events:
            hooks.exited(self, path)
        if path in s.drops and path not in self.exited:
            self.pending_drops[path] = s.drops[path]
            self.pending_total += s.drops[path]
        if s.held_inputs.get(path) and path not in self.exited:
            self.held_inputs[path] = s.held_inputs[path]
            self.held_total += s.held_inputs[path]
        self.exited.add(path)

    def backward(self, k: int, event: str, path: str, nbytes: int) -> None:
        s, first_bwd = self.s, self.first_bwd
        self.grads_seen = self.counted(k)
        if self.accumulating and self.keeps_grads:  # added into the accumulated gradients
            self.grads_reduced = self.grads_seen - self.just_made(k)
        first = first_bwd.get(s.first_module)
        if self.cast and first is not None and k > first and not inside(path, s.first_module):
            self.cast = 0
        for hooks in s.events:
            hooks.backward(self, k, event, path)
        if event == "end":
            for hooks in s.events:
                hooks.end(self, path)
            self.emit("end", path)
            return
        # innermost first: the order the forward exited them in, so dropped in
        for m in enclosing(path):
            if m in self.pending_drops and m not in self.recomputed:
                self.pending_total -= self.pending_drops[m]
                drop = self.pending_drops.pop(m) + s.regenerated.get(m, 0)
                self.activations = nbytes - drop
                self.emit("recompute", m, recompute=s.recompute_peak.get(m, 0))
                self.activations = nbytes
                self.recomputed.add(m)
        for hooks in s.events:
            hooks.before_point(self, k, path)
        self.emit(event, path)
        for m in enclosing(path):
            if m in self.held_inputs and self.last_bwd.get(m) == k:
                self.held_total -= self.held_inputs.pop(m)

    def optimizer(self) -> None:
        """The optimizer step: gradients at rest, states, the step's temporaries."""
        self.phase = "optimizer"
        self.activations = self.grads_seen = self.grads_reduced = self.cast = 0
        for name in list(self.buffers):
            self.free(name)
        self.alloc("final", "grad_bytes", self.s.final_grads)
        self.pending_drops.clear()
        self.pending_total = 0
        self.held_inputs.clear()
        self.held_total = 0
        self.alloc("step", "other_bytes", self.s.optimizer_temp)
        self.emit("step", "")


def replay(
    setup: Setup, timeline: Mapping[str, Sequence[Any]], accumulated: bool = False
) -> list[Point]:
    """The plan's timeline: a point per analysed module boundary and per moment of the
    strategy (module doc). ``accumulated`` (gradient accumulation): the first
    micro-batch, then one after it (as every later one runs: beside the gradients
    accumulated so far), then the optimizer step."""
    events: list[str] = list(timeline["event"])
    paths: list[str] = list(timeline["path"])
    points: list[Point] = []
    for later in (False, True) if accumulated else (False,):
        step = Replay(setup, events, paths, accumulating=later)
        step.points = points
        for k, (event, path, nbytes) in enumerate(
            zip(events, paths, timeline["bytes"], strict=True)
        ):
            step.activations = int(nbytes)
            if k < step.start:
                step.forward(event, path)
                continue
            step.phase = "backward"
            step.backward(k, event, path, int(nbytes))
            if event == "end":
                break
    step.optimizer()
    return points


__all__ = ["PARTS", "Events", "Point", "Replay", "Setup", "grad_moments", "inside", "replay"]
