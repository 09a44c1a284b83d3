"""One steady-state training step on one GPU, replayed from one analysis: the memory
timeline of a plan (``docs/plan.md``, "The memory timeline").

The analysis (``memory=True, backward=True``, one GPU's micro-batch, in the compute
dtype) gives the bytes live at each module boundary of the forward and backward
(``profile.memory["timeline"]``: activations, temporaries and the gradients as they
appear). The replay keeps those bytes and changes what a strategy changes:

- the model states at rest (``planning.states``): sharded or replicated parameters,
  optimizer states, master weights; gradients are None when the step starts (as
  ``zero_grad()`` leaves them) and appear in the backward;
- FSDP2, per unit: before its forward, the all-gather's output (``world_size`` padded
  shards in the parameter dtype; under mixed precision also an input buffer of one
  shard, freed after the all-gather) and the unsharded parameters (as large: FSDP2
  keeps them padded); the output is freed when the next unit's all-gather is done (the
  last at the end of the forward). After the forward the unsharded parameters are freed
  (resharded), except the root's or with ``reshard_after_forward=False``. Before the
  backward they are gathered again, and the next unit's all-gather is issued at once
  (prefetch). After a unit's backward: its unsharded parameters are freed, the previous
  unit's reduce-scatter input is freed, its own is allocated (``world_size`` padded
  shards in the reduce dtype), its unsharded gradients are freed and its sharded
  gradient (one padded shard, reduce dtype) stays;
- DDP: the gradient buckets (the gradients' size, from DDP's construction on) and, under
  autocast, float32 gradients and a 16-bit copy of each weight of a module that runs a
  matmul or convolution, kept for its backward;
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


@dataclass(frozen=True)
class Unit:
    """An FSDP2 unit: its path and its parameters' padded shard (elements per rank)."""

    path: str
    padded: int


@dataclass
class Setup:
    """What the replay needs, in bytes (``planning.build`` starts it, the strategy sets its
    events: ``planning.strategy``)."""

    world_size: int
    #: the parts held all step long (model states at rest, buckets, the input, buffers)
    rest: dict[str, int]
    #: bytes per element: unsharded parameters, reduce-scatter, sharded gradients
    param_size: int = 4
    reduce_size: int = 4
    #: FSDP2 mixed precision: the all-gather input is a cast copy of the shard
    cast_gather: bool = False
    reshard_after_forward: bool = True
    units: list[Unit] = field(default_factory=list)
    #: gradient bytes of each module's own trainable parameters, as analysed
    grads: dict[str, int] = field(default_factory=dict)
    #: the plan's gradient bytes per analysed gradient byte (2 under DDP autocast)
    grad_scale: float = 1.0
    #: a 16-bit copy of the float input, held all step (mixed precision, float input)
    cast_input: int = 0
    #: autocast's weight copies, per module: made in its forward, dropped when the
    #: forward ends unless saved for its backward (``saved_copies``)
    weight_copies: dict[str, int] = field(default_factory=dict)
    saved_copies: dict[str, int] = field(default_factory=dict)
    #: autocast: each module's largest 16-bit gradient, alive while it is cast to float32
    #: when the module's backward ends
    cast_grads: dict[str, int] = field(default_factory=dict)
    #: the module whose backward frees ``cast_input`` (the first to run)
    first_module: str = ""
    #: checkpointed modules: bytes dropped from what they saved, and their forward peak
    drops: dict[str, int] = field(default_factory=dict)
    recompute_peak: dict[str, int] = field(default_factory=dict)
    #: of a checkpointed module's output, what the analysis still holds at its recompute
    #: but the checkpointed run has freed (the recompute makes it again)
    regenerated: dict[str, int] = field(default_factory=dict)
    #: ZeRO-2: the gradient partition each GPU keeps (allocated in the backward), and
    #: a module's gradients reduced (freed) once its backward is done
    grad_partition: int = 0
    reduce_per_module: bool = False
    #: the gradients after the backward, at rest (what the optimizer reads)
    final_grads: int = 0
    optimizer_temp: int = 0


@dataclass
class Point:
    phase: str  # "forward", "backward", "optimizer"
    event: str  # an analysis event ("enter", "exit", "peak", "backward", "end") or the
    # replay's ("gather", "prefetch", "reduce_scatter", "recompute", "step")
    path: str
    parts: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.parts.values())


def _inside(path: str, unit: str) -> bool:
    return unit == "" or path == unit or path.startswith(unit + ".")


class _Replay:
    def __init__(self, setup: Setup) -> None:
        self.s = setup
        self.points: list[Point] = []
        self.buffers: dict[str, tuple[str, int]] = {}  # name -> (part, bytes)
        self.activations = 0  # the analysis's live bytes at the current moment
        self.grads_seen = 0  # analysed gradient bytes allocated so far
        self.grads_reduced = 0  # of those, the ones FSDP has reduce-scattered and freed
        self.pending_drops: dict[str, int] = {}
        self.copies: dict[str, int] = {}
        self.phase = "forward"
        self.cast = setup.cast_input

    # ---- buffers -----------------------------------------------------------------
    def alloc(self, name: str, part: str, nbytes: int) -> None:
        if nbytes:
            self.buffers[name] = (part, nbytes)

    def free(self, name: str) -> None:
        self.buffers.pop(name, None)

    def emit(self, event: str, path: str, recompute: int = 0, grads: int = 0) -> None:
        s = self.s
        parts = dict.fromkeys(PARTS, 0)
        for key, value in s.rest.items():
            parts[key] += value
        for part, nbytes in self.buffers.values():
            parts[part] += nbytes
        held = self.grads_seen - self.grads_reduced
        parts["grad_bytes"] += round(held * s.grad_scale) + grads
        parts["activation_bytes"] += (
            self.activations
            - self.grads_seen
            - sum(self.pending_drops.values())
            + self.cast
            + sum(self.copies.values())
        )
        parts["recompute_bytes"] += recompute
        self.points.append(Point(self.phase, event, path, parts))

    # ---- FSDP2 ---------------------------------------------------------------------
    def gather(self, unit: Unit, event: str) -> None:
        n, s = self.s.world_size, self.s
        out = n * unit.padded * s.param_size
        if s.cast_gather:
            self.alloc("gather_in", "comm_buffer_bytes", unit.padded * s.param_size)
        self.alloc(f"gather:{unit.path}", "comm_buffer_bytes", out)
        if s.cast_gather:
            self.emit(event, unit.path)
            self.free("gather_in")

    def unshard(self, unit: Unit) -> None:
        n = self.s.world_size
        self.alloc(
            f"unsharded:{unit.path}", "unsharded_param_bytes", n * unit.padded * self.s.param_size
        )

    def pre_forward(self, unit: Unit, previous: Unit | None) -> None:
        if f"unsharded:{unit.path}" in self.buffers:
            return
        self.gather(unit, "gather")
        self.unshard(unit)
        self.emit("gather", unit.path)
        if previous is not None:
            self.free(f"gather:{previous.path}")

    def pre_backward(self, unit: Unit, after: Unit | None) -> None:
        if f"unsharded:{unit.path}" not in self.buffers:
            if f"gather:{unit.path}" not in self.buffers:
                self.gather(unit, "gather")
            self.unshard(unit)
            self.emit("gather", unit.path)
            self.free(f"gather:{unit.path}")
        if after is not None and f"unsharded:{after.path}" not in self.buffers:
            self.gather(after, "prefetch")
            self.emit("prefetch", after.path)

    def post_backward(self, unit: Unit, grads: int, previous: Unit | None) -> None:
        n, s = self.s.world_size, self.s
        self.free(f"unsharded:{unit.path}")
        if previous is not None:
            self.free(f"scatter:{previous.path}")
        self.alloc(f"scatter:{unit.path}", "comm_buffer_bytes", n * unit.padded * s.reduce_size)
        self.emit("reduce_scatter", unit.path)
        self.grads_reduced += grads
        self.alloc(f"grad:{unit.path}", "grad_bytes", unit.padded * s.reduce_size)
        self.emit("reduce_scatter", unit.path)


def _first_backward(events: Sequence[str], paths: Sequence[str], start: int) -> dict[str, int]:
    first: dict[str, int] = {}
    for k in range(start, len(events)):
        if events[k] in ("backward", "peak"):
            first.setdefault(paths[k], k)
    return first


class _Step(_Replay):
    """The replay's walk over the analysed events, forward then backward."""

    def __init__(self, setup: Setup, events: Sequence[str], paths: Sequence[str]) -> None:
        super().__init__(setup)
        self.units = [u for u in setup.units if u.padded]
        self.by_path = {u.path: u for u in self.units}
        self.start = next((k for k, e in enumerate(events) if e == "backward"), len(events))
        self.first_bwd = _first_backward(events, paths, self.start)
        self.unit_grads = {u.path: 0 for u in self.units}
        for module, g in setup.grads.items():
            owner = _owner(module, self.units)
            if owner is not None:
                self.unit_grads[owner.path] += g
        self.gathered: list[Unit] = []  # forward order of first gathering
        self.last_gather: Unit | None = None
        self.open_units: list[Unit] = []  # in the backward, outermost first
        self.done: set[str] = set()
        self.last_scatter: Unit | None = None
        self.recomputed: set[str] = set()
        self.casts = {m: g for m, g in setup.cast_grads.items() if m in self.first_bwd}
        self.exited: set[str] = set()
        # gradients by the moment their module's backward starts, summed as they come
        starts = sorted(
            (first, setup.grads[m]) for m, first in self.first_bwd.items() if m in setup.grads
        )
        self._starts = [first for first, _ in starts]
        self._prefix = [0, *itertools.accumulate(g for _, g in starts)]

    def counted(self, k: int) -> int:
        """Analysed gradient bytes allocated before moment ``k``."""
        return self._prefix[bisect.bisect_left(self._starts, k)]

    def forward(self, event: str, path: str) -> None:
        s, unit = self.s, self.by_path.get(path)
        if event == "enter":
            if path in s.weight_copies and path not in self.copies:
                self.copies[path] = s.weight_copies[path]
            if unit is not None:
                if f"unsharded:{path}" not in self.buffers:
                    self.gathered.append(unit)
                self.pre_forward(unit, self.last_gather)
                self.last_gather = unit
        if event == "exit" and path == "":  # autocast exits: unsaved copies go
            self.copies = {m: b for m, b in s.saved_copies.items() if m in self.copies}
        self.emit(event, path)
        if event != "exit":
            return
        if unit is not None and path != "" and s.reshard_after_forward:
            self.free(f"unsharded:{path}")
        if path == "" and self.last_gather is not None:
            self.free(f"gather:{self.last_gather.path}")
            self.last_gather = None
        if path in s.drops and path not in self.exited:
            self.pending_drops[path] = s.drops[path]
        self.exited.add(path)

    def backward(self, k: int, event: str, path: str, nbytes: int) -> None:
        s, first_bwd = self.s, self.first_bwd
        self.grads_seen = self.counted(k)
        first = first_bwd.get(s.first_module)
        if self.cast and first is not None and k > first and not _inside(path, s.first_module):
            self.cast = 0
        for m in list(self.copies):  # autocast's copies live until their module's backward
            if m in first_bwd and first_bwd[m] < k and not _inside(path, m):
                del self.copies[m]
        for m in [m for m in self.casts if first_bwd[m] < k and not _inside(path, m)]:
            self.emit("grad_cast", m, grads=self.casts.pop(m))
        if event == "end":
            self.end(path)
            return
        self.units_at(path)
        if s.grad_partition and "partition" not in self.buffers:
            self.alloc("partition", "grad_bytes", s.grad_partition)
        for m in list(self.pending_drops):
            if _inside(path, m) and m not in self.recomputed:
                drop = self.pending_drops.pop(m) + s.regenerated.get(m, 0)
                self.activations = nbytes - drop
                self.emit("recompute", m, recompute=s.recompute_peak.get(m, 0))
                self.activations = nbytes
                self.recomputed.add(m)
        if s.reduce_per_module:  # a module's gradients are reduced once it is done
            just = sum(g for m, g in s.grads.items() if first_bwd.get(m) == k - 1)
            self.grads_reduced = self.counted(k) - just
        self.emit(event, path)

    def units_at(self, path: str) -> None:
        """FSDP2's post-backward of the units the backward has left, and pre-backward of
        those it enters."""
        inside = [u for u in self.units if _inside(path, u.path)] if path != "<outside>" else []
        for unit in reversed(list(self.open_units)):
            if unit not in inside:
                self.post_backward(unit, self.unit_grads[unit.path], self.last_scatter)
                self.last_scatter = unit
                self.open_units.remove(unit)
                self.done.add(unit.path)
        for unit in inside:
            if unit not in self.open_units and unit.path not in self.done:
                self.open_units.append(unit)
                after = _next_to_gather(self.gathered, unit, self.done, self.open_units)
                self.pre_backward(unit, after)

    def end(self, path: str) -> None:
        for unit in reversed(self.open_units):
            self.post_backward(unit, self.unit_grads[unit.path], self.last_scatter)
            self.last_scatter = unit
        self.open_units = []
        if self.last_scatter is not None:
            self.free(f"scatter:{self.last_scatter.path}")
        self.free("partition")
        self.copies.clear()
        self.emit("end", path)

    def optimizer(self) -> None:
        """The optimizer step: gradients at rest, states, the step's temporaries."""
        self.phase = "optimizer"
        self.activations = self.grads_seen = self.grads_reduced = self.cast = 0
        self.buffers = {"final": ("grad_bytes", self.s.final_grads)}
        self.copies.clear()
        self.pending_drops.clear()
        self.alloc("step", "other_bytes", self.s.optimizer_temp)
        self.emit("step", "")


def replay(setup: Setup, timeline: Mapping[str, Sequence[Any]]) -> list[Point]:
    """The plan's timeline: a point per analysed module boundary and per event of the
    strategy (module doc)."""
    events: list[str] = list(timeline["event"])
    paths: list[str] = list(timeline["path"])
    step = _Step(setup, events, paths)
    for k, (event, path, nbytes) in enumerate(zip(events, paths, timeline["bytes"], strict=True)):
        step.activations = int(nbytes)
        if k < step.start:
            step.forward(event, path)
            continue
        step.phase = "backward"
        step.backward(k, event, path, int(nbytes))
        if event == "end":
            break
    step.optimizer()
    return step.points


def _owner(module: str, units: Sequence[Unit]) -> Unit | None:
    """The innermost unit holding a module's parameters."""
    best: Unit | None = None
    for unit in units:
        if _inside(module, unit.path) and (best is None or len(unit.path) >= len(best.path)):
            best = unit
    return best


def _next_to_gather(
    gathered: Sequence[Unit], unit: Unit, done: set[str], open_units: Sequence[Unit]
) -> Unit | None:
    """FSDP2's backward prefetch: the unit gathered just before ``unit`` in the forward."""
    if unit not in gathered:
        return None
    i = gathered.index(unit)
    for other in reversed(gathered[:i]):
        if other.path not in done and other not in open_units:
            return other
    return None


__all__ = ["PARTS", "Point", "Setup", "Unit", "replay"]
