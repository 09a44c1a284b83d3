"""The interface of a parallelism strategy (``docs/architecture.md``, "Planning
strategies"): one object per ``sharding=`` value (``planning.strategies``) that owns
what the strategy changes in a plan, so the phases (``build``, ``timeline``,
``timemodel``, ``states``, ``comm``) hold no branch per strategy:

- ``states``: the model states one GPU holds at rest;
- ``prepare``: the replay's events (what it sets in ``timeline.Setup``: units to
  gather, buckets, gradient partitions, final gradients) and the step's collectives;
- ``comm_time``: the collectives' time and the part not hidden under compute (its
  overlap rule, from ``timemodel``'s arithmetic);
- ``grad_size``, ``notes``, ``check`` and ``autocast`` (whether mixed precision runs as
  autocast: float32 weights and 16-bit copies).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from math import prod
from typing import TYPE_CHECKING, Any

from layerscope.planning.collectives import Link, consecutive, strided
from layerscope.planning.states import OPTIMIZER_STATES, STEP_BYTES, ModelStates

if TYPE_CHECKING:
    from layerscope.planning.facts import Param
    from layerscope.planning.options import Options
    from layerscope.planning.timeline import Setup
    from layerscope.profile import Profile


@dataclass
class Step:
    """What a strategy reads of the plan being made, and the replay's set-up it fills."""

    prof: Profile
    opts: Options
    params: Sequence[Param]
    setup: Setup
    #: bytes per element of the gradients reduced and kept (``Strategy.grad_size``)
    grad_size: int
    #: the frozen parameters (``requires_grad=False``): no gradient, no optimizer state
    frozen: Sequence[Param] = ()


@dataclass
class Prepared:
    """What ``Strategy.prepare`` gives: the FSDP2 units (the document's ``fsdp_units``),
    the per-module table's unit rows, and the collectives in ``profile.comm``'s form."""

    comm: dict[str, Any]
    units: list[str] = field(default_factory=list)
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class Times:
    """Roofline seconds of each node's forward and backward (by ``id(node)``) and the
    checkpointed modules (their forward runs again in the backward)."""

    forward: Mapping[int, float]
    backward: Mapping[int, float]
    checkpointed: Sequence[str]


class Strategy(ABC):
    """One parallelism strategy; module doc."""

    #: the ``sharding=`` value that names it
    name: str
    #: mixed precision runs as autocast (float32 weights and states, 16-bit copies)
    autocast: bool = False
    #: the optimizer step updates this rank's partition of parameters it holds whole
    #: (ZeRO-1/2), not all it holds
    updates_partition: bool = False
    #: the gradients at rest are this rank's shard or partition, reduce-scattered to it
    #: (FSDP2, ZeRO-2), not whole
    shards_grads: bool = False

    def check(self, world_size: int) -> None:
        """Refuse a world size the strategy cannot run on (``InvalidInputError``); any
        world size by default."""
        return None

    def notes(self, opts: Options) -> list[str]:
        """What the plan's figures assume for this strategy."""
        return []

    def grad_size(self, opts: Options) -> int:
        """Bytes per element of the gradients reduced and kept: the compute dtype's."""
        return opts.compute_dtype.itemsize

    @abstractmethod
    def states(
        self,
        shapes: Sequence[Sequence[int]],
        *,
        world_size: int,
        precision: str,
        optimizer: str,
        rank: int,
        frozen: Sequence[Sequence[int]] = (),
    ) -> ModelStates:
        """What GPU ``rank`` holds at rest for trainable parameters of ``shapes`` and
        frozen ones (``requires_grad=False``) of ``frozen``: these have no gradient and
        no optimizer state."""

    @abstractmethod
    def prepare(self, step: Step) -> Prepared:
        """Set the replay's events in ``step.setup``; the step's collectives."""

    @abstractmethod
    def comm_time(self, step: Step, times: Times) -> tuple[float, float]:
        """(the collectives' seconds per micro-batch, the part not hidden by compute)."""


# ---- shared arithmetic -------------------------------------------------------------------
def optimizer_bytes(shapes: Sequence[Sequence[int]], optimizer: str) -> tuple[int, int]:
    """(states per element, the ``step`` bytes) of the optimizer over ``shapes``: Adam
    and AdamW keep a 4-byte ``step`` per parameter tensor."""
    step = STEP_BYTES * len(shapes) if optimizer in ("adam", "adamw") else 0
    return OPTIMIZER_STATES[optimizer], step


def weight_size(precision: str) -> int:
    """Bytes of the weights' own dtype."""
    return 4 if precision == "fp32" else 2


def replicated_states(
    shapes: Sequence[Sequence[int]],
    precision: str,
    optimizer: str,
    size: int,
    frozen: Sequence[Sequence[int]] = (),
) -> ModelStates:
    """Every GPU holds everything, ``size`` bytes per element (parameters, gradients,
    states; the ``frozen`` parameters' elements have parameters only)."""
    states, step = optimizer_bytes(shapes, optimizer)
    elements = sum(prod(s) for s in shapes)
    held = (elements + sum(prod(s) for s in frozen)) * size
    return ModelStates(held, elements * size, states * elements * size + step, 0)


def master_states(
    shapes: Sequence[Sequence[int]],
    precision: str,
    optimizer: str,
    part: int,
    grads: int,
    frozen: Sequence[Sequence[int]] = (),
) -> ModelStates:
    """Weights and gradients in their dtype; under mixed precision a float32 master copy
    of ``part`` elements with float32 states (``part``: the elements whose states this
    GPU keeps; ``grads``: whose gradients). The ``frozen`` parameters: weights only, in
    the weights' dtype, on every GPU."""
    states, step = optimizer_bytes(shapes, optimizer)
    elements = sum(prod(s) for s in shapes) + sum(prod(s) for s in frozen)
    low = weight_size(precision)
    mixed = precision.endswith("-mixed")
    master = 4 * part if mixed else 0
    state_size = 4 if mixed else low
    return ModelStates(elements * low, grads * low, states * part * state_size + step, master)


def link(opts: Options, group: int, stride: int = 1) -> Link:
    """Where a data-parallel collective over ``group`` GPUs sits on the plan's cluster
    (``Options.network``): consecutive ranks, or ranks ``stride`` apart (an HSDP
    replicate group, over shard groups of ``stride`` ranks), the distances times the
    tensor-parallel group's size (its ranks sit inside the data-parallel ones)."""
    stride *= opts.tp
    if stride > 1:
        return strided(opts.network, group, stride)
    return consecutive(opts.network, group)


__all__ = [
    "Prepared",
    "Step",
    "Strategy",
    "Times",
    "link",
    "master_states",
    "optimizer_bytes",
    "replicated_states",
    "weight_size",
]
