"""Pipeline parallelism in plans (``mesh={"pp": S}``): the model cut into ``S`` stages,
each analysed on its own, and each stage's step composed from its one-microbatch plan by
the schedule (``docs/plan.md``, "Pipeline parallelism").

**Stages.** The model's pieces in forward order: an ``nn.Sequential``'s children, or a
transformers model's ``_pp_plan`` (``embed_tokens``, the decoder ``layers``, ``norm``,
``lm_head``). The repeated blocks (the longest run of children of one class; the decoder
layers) are split evenly, the extra ones to the middle stages; the pieces before them run
on the first stage, those after on the last; then balanced by each piece's predicted time
(``balanced``, ``pipelineplan.balanced_split``). ``pp_split=[paths]`` names the piece each
later stage starts at instead (torchtitan's ``pipeline_parallel_split_points``).

**Each stage analysed.** The analysis's meta copy is shown as the stage only: the other
blocks are taken out of their container (their paths stay the model's), a transformers
stage after the first has no embeddings and takes the previous stage's hidden states as
``inputs_embeds``, and one before the last has its ``norm`` and ``lm_head`` replaced by
identities. A stage's input is the previous stage's output as the analysis recorded it,
a leaf that requires its gradient (a received activation); the stages before the last are
differentiated from their output (as a received gradient drives their backward), the last
by the loss.

**The schedule.** For each microbatch, stage ``s`` runs its forward (``F``) and later its
backward (``B``), in torch.distributed.pipelining's orders: ``gpipe`` every forward, then
every backward; ``1f1b`` ``min(M, S - s)`` forwards, then one backward and one forward
alternately, then the rest of the backwards; ``interleaved_1f1b`` over ``V`` stages a
rank (rank ``r`` holds stages ``r, r + S, ...`` of ``S x V``), in
``ScheduleInterleaved1F1B``'s order; ``zero_bubble`` splits each backward into its
input half (``I``) and weight half (``W``), in ``ScheduleInterleavedZeroBubble``'s
order; ``zbv`` likewise over two stages a rank in a V (rank ``r``: stages ``r`` and ``2 S
- 1 - r``), in ``ScheduleZBVZeroBubble``'s (the orders: ``planning.pipelineorder``). A
rank's memory over the step is
its stages' one-microbatch timelines repeated in that order, each point raised by what
the schedule holds then (of every stage of the rank):

- the microbatches forwarded and not yet backwarded, each the bytes one forward leaves
  for its backward (``held``: its saved tensors and its output);
- what a finished microbatch keeps to the end of the step: the last stage's output
  (the schedule merges the outputs; not with ``return_outputs=False``), and under
  ``gpipe`` and ``interleaved_1f1b`` the tensors sent (the output sent on, the input's
  gradient sent back: torch waits on their sends at the step's end); under ``1f1b`` the
  latest input gradient sent back (its send is waited on at the next backward);
- gradients, from the first backward on: a later backward adds into them, so its own new
  gradients are a temporary (held until they are added) above the whole gradients;
- the receive buffers (``M`` of the input's size on every stage but the first, ``M`` of
  the output's gradient on every stage but the last) and the whole batch on the first
  stage, at rest all step;
- under zero bubble, from a microbatch's input half to its weight half: its held bytes
  (the graph is retained) and the gradients of the outputs of the modules that hold
  parameters (``StageStep.wait_bytes``, less the one received) and the input's gradient
  sent; on the last stage with the outputs returned, a finished microbatch's output
  keeps its graph: the held bytes less the inputs of those modules;
- under FSDP2, torch's rule for a pipeline: the stage's units are gathered at the first
  forward and not resharded until the last backward, and the gradients are accumulated
  unsharded in the reduce dtype and reduce-scattered in the last backward.

**Time** (``planning.pipelineplan``). A stage's time per microbatch is its plan's compute
and recompute, its tensor-parallel collectives and its point-to-point sends (the output
on, the input's gradient back, over the pipeline axis's link), split into forward and
backward (and zero bubble's halves) as its predicted kernels are. The pipeline's step is
the schedule run on those times (``simulate``; on equal stages ``(S - 1) / (V M + S -
1)`` of it idle under the 1F1B-like schedules), plus the data-parallel collectives not
hidden and the optimizer step, once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from layerscope.errors import InvalidInputError
from layerscope.planning.collectives import collective_time, strided
from layerscope.planning.pipelinecut import (
    Layout,
    balanced,
    cut,
    layout,
    local_bytes,
    received,
    spec_bytes,
    stage_call,
    stage_view,
)
from layerscope.planning.pipelineorder import (
    MULTI_CHUNK,
    SCHEDULES,
    ZERO_BUBBLE,
    Action,
    actions,
    in_flight,
    rank_of,
    simulate,
    stage_of,
)
from layerscope.planning.timeline import PARTS


@dataclass
class StageStep:
    """What composing one stage's step needs from its one-microbatch plan."""

    #: the one-microbatch timeline: (phase, event, path, parts) per point
    points: list[tuple[str, str, str, dict[str, int]]]
    #: bytes of the stage's input (a received activation; the first stage: the batch's
    #: microbatch) and of its output (sent on; its gradient received)
    input_bytes: int
    output_bytes: int
    #: FSDP2: the units gathered whole, and the unsharded gradients, bytes
    unsharded: int = 0
    unsharded_grads: int = 0
    #: zero bubble: the gradients of the outputs of the modules that hold parameters
    #: (kept from a backward's input half to its weight half), and their inputs (what the
    #: weight half frees of what the forward saved), bytes
    wait_bytes: int = 0
    weight_inputs: int = 0


def held_bytes(points: Sequence[tuple[str, str, str, dict[str, int]]]) -> int:
    """Bytes one microbatch's forward leaves for its backward: the activations at the
    backward's first moment less those at the forward's."""
    fwd = next(p for p in points if p[0] == "forward")
    bwd = next(p for p in points if p[0] == "backward")
    return bwd[3]["activation_bytes"] - fwd[3]["activation_bytes"]


#: The parts of a chunk's memory held all step (its model states, inputs, buffers).
_AT_REST = ("param_bytes", "optimizer_state_bytes", "master_weight_bytes", "other_bytes")


class _Chunk:
    """One chunk of a rank as the schedule runs it: its one-microbatch timeline, what a
    microbatch holds of it, and how many of its forwards and backwards have run."""

    def __init__(
        self, step: StageStep, first: bool, last: bool, schedule: str, m: int, keep: bool
    ) -> None:
        self.fwd = [p for p in step.points if p[0] == "forward"]
        self.bwd = [p for p in step.points if p[0] == "backward"]
        self.opt = [p for p in step.points if p[0] == "optimizer"]
        if not self.fwd or not self.bwd:
            raise InvalidInputError("mesh pp: a stage's analysis has no forward or no backward")
        self.step, self.m, self.fsdp = step, m, step.unsharded > 0
        self.held = held_bytes(step.points)
        # zero bubble: what a microbatch holds between its input and weight halves
        # (none on the first stage, whose input half is empty: torch runs its whole
        # backward as the weight half): the input's gradient sent, and the output
        # gradients of the modules that hold parameters but the one received (the last
        # such module's output gradient is the stage's, through a residual add or not)
        zero_bubble = schedule in ZERO_BUBBLE and not first
        received = 0 if last else step.output_bytes
        self.wait = max(0, step.wait_bytes - received) + step.input_bytes if zero_bubble else 0
        # the gradients a backward adds into: one backward's, or FSDP2's unsharded ones
        self.after = self.bwd[-1][3]["grad_bytes"]
        self.whole = step.unsharded_grads if self.fsdp else self.after
        # what a finished microbatch keeps to the step's end: the merged output, and
        # under GPipe and interleaved 1F1B the tensors sent (torch waits on their sends
        # at the step's end)
        self.kept = step.output_bytes if last and keep else 0
        if last and keep and schedule in ZERO_BUBBLE:
            # the output kept holds the graph: what the forward saved and the weight
            # half did not free (the inputs of the modules that hold parameters, but the
            # stage's own input, a receive buffer)
            freed = max(0, step.weight_inputs - step.input_bytes)
            self.kept = max(self.kept, self.held - freed)
        if schedule != "1f1b":
            self.kept += (0 if first else step.input_bytes) + (0 if last else step.output_bytes)
        # 1F1B waits on a backward's send of the input's gradient at the next backward
        self.pending = step.input_bytes if schedule == "1f1b" and not first else 0
        # the receive buffers and, on the first stage, the batch's other microbatches
        self.buffers = (m - 1) * step.input_bytes + (0 if last else m * step.output_bytes)
        self.rest = {k: self.fwd[0][3][k] for k in _AT_REST}
        # forwards, input halves (zero bubble) and whole backwards (or weight halves) run
        self.forwarded = self.inputs = self.backwarded = 0
        #: a step after the first of a gradient accumulation: the gradients at rest
        #: (FSDP2: their shards) held from its start (``again``)
        self.accumulated = 0

    def again(self) -> None:
        """The next step of a gradient accumulation: no microbatch run yet, the step's
        gradients held (a whole backward's, or FSDP2's reduce-scattered shards)."""
        self.forwarded = self.inputs = self.backwarded = 0
        self.accumulated = self.after

    def _grads(self) -> int:
        """The gradients held before this step's microbatches make theirs: unsharded,
        a later accumulation step's whole ones (added into); FSDP2, its shards."""
        if self.fsdp:
            return self.accumulated
        return self.whole if (self.backwarded or self.accumulated) else 0

    def level(self) -> dict[str, int]:
        """What the chunk holds between its own forwards and backwards, by part."""
        out = dict.fromkeys(PARTS, 0)
        for k, v in self.rest.items():
            out[k] += v
        out["other_bytes"] += self.buffers
        out["activation_bytes"] += self.lift()
        done = self.backwarded == self.m  # FSDP2: reduce-scattered and resharded
        if self.fsdp:
            out["grad_bytes"] += self.accumulated + (
                (self.after if done else self.whole) if self.backwarded else 0
            )
        else:
            out["grad_bytes"] += self._grads()
        if self.fsdp and self.forwarded and not done:
            out["unsharded_param_bytes"] += self.step.unsharded
        return out

    def _gathered(self, now: dict[str, int]) -> None:
        """FSDP2 under a pipeline: the units stay gathered (no gather, no buffers)."""
        now["unsharded_param_bytes"] = max(now["unsharded_param_bytes"], self.step.unsharded)
        now["comm_buffer_bytes"] = 0

    def lift(self) -> int:
        """Activation bytes of the microbatches in flight and of the finished ones."""
        return (
            (self.forwarded - self.backwarded) * self.held
            + (self.inputs - self.backwarded) * self.wait
            + self.backwarded * self.kept
            + (self.pending if self.backwarded else 0)
        )

    def forward(self, others: Mapping[str, int]) -> list[tuple[str, str, str, dict[str, int]]]:
        out = []
        for phase, event, path, parts in self.fwd:
            now = {k: parts[k] + others[k] for k in PARTS}
            now["other_bytes"] += self.buffers
            now["activation_bytes"] += self.lift()
            now["grad_bytes"] += self._grads() + (
                self.whole if self.fsdp and self.backwarded else 0
            )
            if self.fsdp and self.forwarded:  # gathered at the first forward, kept
                self._gathered(now)
            out.append((phase, event, path, now))
        self.forwarded += 1
        return out

    def input_half(self, others: Mapping[str, int]) -> list[tuple[str, str, str, dict[str, int]]]:
        """Zero bubble's input half of a backward (``torch.autograd.grad`` of the input,
        the graph retained): the backward's points with what the forward saved kept
        whole, the gradients of the outputs of the modules that hold parameters growing
        to ``wait`` and no parameter's gradient made; none on the first stage."""
        out = []
        if self.wait:
            lift, start, n = (
                self.lift() - self.held,
                self.bwd[0][3]["activation_bytes"],
                len(self.bwd),
            )
            for i, (phase, event, path, parts) in enumerate(self.bwd):
                now = {k: parts[k] + others[k] for k in PARTS}
                now["other_bytes"] += self.buffers
                now["activation_bytes"] = (
                    others["activation_bytes"] + lift + max(parts["activation_bytes"], start)
                    + self.wait * (i + 1) // n
                )  # fmt: skip
                now["grad_bytes"] = (
                    others["grad_bytes"]
                    + self._grads()
                    + (self.whole if self.fsdp and self.backwarded else 0)
                )
                if self.fsdp:  # kept gathered; no gradient yet
                    self._gathered(now)
                out.append((phase, event, path, now))
        self.inputs += 1
        return out

    def backward(self, others: Mapping[str, int]) -> list[tuple[str, str, str, dict[str, int]]]:
        """A whole backward, or zero bubble's weight half (its input half's kept
        gradients fading as it runs)."""
        final = self.backwarded == self.m - 1
        lift = self.lift() - self.held - self.wait  # this microbatch's own, in its points
        fading = self.wait if self.inputs > self.backwarded else 0
        n = len(self.bwd)
        out = []
        previous = own_base = 0
        last_path: str | None = None
        for i, (phase, event, path, parts) in enumerate(self.bwd):
            now = {k: parts[k] + others[k] for k in PARTS}
            now["other_bytes"] += self.buffers
            now["activation_bytes"] += lift + fading * (n - 1 - i) // n
            g = parts["grad_bytes"]
            if path != last_path:  # the gradients counted before this module's backward
                own_base, last_path = previous, path
            previous = g
            own = max(0, g - own_base)  # this module's new gradients
            if self.fsdp and final:  # reduce-scattered as in one microbatch's backward
                now["grad_bytes"] = (
                    others["grad_bytes"] + self.accumulated
                    + (self.whole if self.backwarded else 0) + g
                )  # fmt: skip
            elif self.fsdp:  # kept gathered; the gradients accumulated unsharded
                self._gathered(now)  # no gather, no reduce-scatter
                mine = (
                    self.whole + own if self.backwarded else self.whole * (i + 1) // len(self.bwd)
                )
                now["grad_bytes"] = others["grad_bytes"] + self.accumulated + mine
            elif self.backwarded or self.accumulated:  # added in: the module's new ones a
                now["grad_bytes"] = others["grad_bytes"] + self.whole + own  # temporary
            out.append((phase, event, path, now))
        self.backwarded += 1
        return out


def compose(
    steps: Sequence[StageStep],
    schedule: str,
    stages: int,
    rank: int,
    microbatches: int,
    return_outputs: bool = True,
    accumulated: bool = False,
) -> list[tuple[str, str, str, dict[str, int]]]:
    """Rank ``rank``'s timeline over the pipeline's step (module doc): a point per point
    of each forward and backward the schedule runs on each of its chunks (``steps``: one
    per chunk, the stages ``stage_of`` its chunks), then the optimizer step of them
    all. ``accumulated`` (gradient accumulation): the schedule runs twice, the second
    time as every later step runs, beside the gradients the first left."""
    virtual = len(steps)
    count = stages * virtual
    at = [stage_of(schedule, stages, rank, v) for v in range(virtual)]
    chunks = [
        _Chunk(step, at[v] == 0, at[v] == count - 1, schedule, microbatches, return_outputs)
        for v, step in enumerate(steps)
    ]
    out: list[tuple[str, str, str, dict[str, int]]] = []
    for later in (False, True) if accumulated else (False,):
        for chunk in chunks if later else ():
            chunk.again()
        for kind, v, _ in actions(schedule, stages, rank, microbatches, virtual):
            others = dict.fromkeys(PARTS, 0)
            for u, chunk in enumerate(chunks):
                if u != v:
                    for k, n in chunk.level().items():
                        others[k] += n
            run = {"F": chunks[v].forward, "I": chunks[v].input_half}.get(kind, chunks[v].backward)
            out += run(others)
    step = dict.fromkeys(PARTS, 0)
    for chunk in chunks:  # the optimizer step of every chunk at once
        for k in PARTS:
            step[k] += sum(p[3][k] for p in chunk.opt)
        step["other_bytes"] += chunk.buffers
    out.append(("optimizer", "step", "", step))
    return out


# ---- time ------------------------------------------------------------------------------


def p2p_seconds(nbytes: int, cluster: Any, stages: int, stride: int) -> float:
    """Seconds of one send of ``nbytes`` between neighbouring stages (the pipeline axis's
    link: ranks ``stride`` apart)."""
    if not nbytes:
        return 0.0
    return collective_time("send", nbytes, strided(cluster, stages, stride))


def notes(
    schedule: str,
    stages: int,
    virtual: int,
    micro: int,
    chosen: int,
    why: str,
    fsdp: bool,
    idle: float,
) -> list[str]:
    """What a pipeline's plan assumes, beside its figures (``idle``: the bubble's share
    of the step)."""
    chunks = f", {virtual} stages a rank" if virtual > 1 else ""
    out = [
        f"pipeline: {stages} ranks{chunks}, {schedule}, {micro} microbatches of the input "
        f"given; this plan is rank {chosen}'s ({why}), every rank's in plan.pipeline",
        f"bubble: {idle:.0%} of the step, the busiest rank's idle time as the schedule runs "
        f"on each stage's predicted forward and backward ((S - 1) / (V M + S - 1) = "
        f"{bubble(stages, micro, virtual):.0%} for 1F1B-like schedules on equal stages); "
        "the point-to-point sends are not hidden under compute",
    ]
    if schedule == "zbv":
        out.append(
            f"ZB-V: rank r runs stages r and {2 * stages - 1} - r (a V): the first and the last "
            f"on rank 0, stages {stages - 1} and {stages} on rank {stages - 1}, which pass "
            "their activations and gradients without a send"
        )
    if schedule in ZERO_BUBBLE:
        out.append(
            "zero bubble: each backward split as torch.distributed.pipelining splits it, "
            "the input's gradient first (the graph kept, with the gradients of the outputs "
            "of the modules that hold parameters), the weights' later; a weight half "
            "priced as those modules' forward (all of the first stage's backward)"
        )
    if fsdp:
        out.append(
            "FSDP2 under a pipeline, as torch.distributed.pipelining runs it: a stage's units "
            "are gathered at its first forward and kept to its last backward "
            "(reshard_after_forward=False, torchtitan's default with pp), its gradients "
            "accumulated unsharded in the reduce dtype and reduce-scattered in the last "
            "backward (counted there on top of the accumulated ones: an upper bound)"
        )
    return out


def bubble(stages: int, microbatches: int, virtual: int = 1) -> float:
    """The share of a balanced pipeline's step its ranks idle: ``(S - 1) / (V M + S -
    1)`` (``V`` stages a rank, each ``1 / V`` of its work)."""
    return (stages - 1) / (virtual * microbatches + stages - 1)


__all__ = [
    "MULTI_CHUNK",
    "SCHEDULES",
    "ZERO_BUBBLE",
    "Action",
    "Layout",
    "StageStep",
    "actions",
    "balanced",
    "bubble",
    "compose",
    "cut",
    "held_bytes",
    "in_flight",
    "layout",
    "local_bytes",
    "notes",
    "p2p_seconds",
    "rank_of",
    "received",
    "simulate",
    "spec_bytes",
    "stage_call",
    "stage_of",
    "stage_view",
]
