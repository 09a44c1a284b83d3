"""Strategies that replicate the parameters: one GPU (``"none"``) and DDP
(``"ddp"``); ZeRO (``planning.strategies.zero``) builds on them. Gradients are
all-reduced in DDP's buckets under the backward (``comm.ddp_collectives``), and the
all-reduces not hidden by the backward are exposed (``timemodel.ddp_exposed``)."""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import TYPE_CHECKING, Any

from layerscope.errors import InvalidInputError
from layerscope.metrics.commkinds import wire_bytes
from layerscope.planning.collectives import Link
from layerscope.planning.states import ModelStates
from layerscope.planning.strategies.autocast import AUTOCAST
from layerscope.planning.strategy import (
    Prepared,
    Step,
    Strategy,
    Times,
    link,
    master_states,
    replicated_states,
    weight_size,
)
from layerscope.planning.timemodel import link_time

if TYPE_CHECKING:
    from layerscope.planning.options import Options


#: DDP's first bucket cap (``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``)
FIRST_BUCKET_BYTES = 1024 * 1024


def ddp_buckets(
    params: Sequence[tuple[Sequence[int], int]], bucket_cap_mb: float = 25
) -> list[int]:
    """Bytes of each bucket for parameters given as (shape, bytes per element) in model
    order; module doc."""
    cap = int(bucket_cap_mb * 1024 * 1024)
    open_buckets: dict[int, int] = {}  # element size -> bytes in its open bucket
    closed: list[int] = []
    limits: dict[int, int] = {}
    for shape, size in reversed(params):
        nbytes = prod(shape) * size
        limit = limits.get(size, FIRST_BUCKET_BYTES)
        total = open_buckets.get(size, 0) + nbytes
        open_buckets[size] = total
        if total >= limit:
            closed.append(total)
            open_buckets[size] = 0
            limits[size] = cap
    closed.extend(b for b in open_buckets.values() if b)
    return closed


def ddp_collectives(
    params: Sequence[tuple[Sequence[int], int]], *, world_size: int, bucket_cap_mb: float = 25
) -> dict[str, dict[str, Any]]:
    """DDP's all-reduces in one backward, summed by kind: ``{"all_reduce": row}``."""
    buckets = ddp_buckets(params, bucket_cap_mb)
    payload = sum(buckets)
    wire = sum(wire_bytes("all_reduce", b, world_size) for b in buckets)
    return {"all_reduce": {"calls": len(buckets), "bytes": payload, "wire_bytes": wire}}


class Replicated(Strategy):
    """The bucket all-reduces over every GPU (none on one GPU); every gradient kept."""

    def buckets(self, step: Step) -> list[int]:
        return ddp_buckets([(p.shape, step.grad_size) for p in step.params],
                           step.opts.bucket_cap_mb)  # fmt: skip

    def prepare(self, step: Step) -> Prepared:
        n = step.opts.dp_size
        comm = {}
        if n > 1:
            per_param = [(p.shape, step.grad_size) for p in step.params]
            reduce = ddp_collectives(per_param, world_size=n, bucket_cap_mb=step.opts.bucket_cap_mb)
            comm = {"": {"backward": reduce}}
        step.setup.final_grads = sum(prod(p.shape) for p in step.params) * step.grad_size
        return Prepared(comm)

    def comm_time(self, step: Step, times: Times) -> tuple[float, float]:
        n = step.opts.dp_size
        if n < 2:
            return 0.0, 0.0
        backward = times.backward[id(step.prof.root)]
        return ddp_exposed(self.buckets(step), link(step.opts, n), backward)


class Single(Replicated):
    """One GPU: everything on it; under mixed precision, 16-bit weights and gradients
    with a float32 master copy whose optimizer states are float32."""

    name = "none"

    def check(self, world_size: int) -> None:
        if world_size != 1:
            raise InvalidInputError("sharding='none' is one GPU: world_size must be 1")

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
        if precision.endswith("-mixed"):
            elements = sum(prod(s) for s in shapes)
            return master_states(shapes, precision, optimizer, elements, elements, frozen)
        return replicated_states(shapes, precision, optimizer, weight_size(precision), frozen)


class DDP(Replicated):
    """DDP: every GPU holds everything, and the gradient buckets (the gradients' size
    again, from DDP's construction on); mixed precision is autocast."""

    name = "ddp"
    autocast = True

    def grad_size(self, opts: Options) -> int:
        return 4 if opts.mixed else opts.compute_dtype.itemsize

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
        size = AUTOCAST.state_size(precision)
        return replicated_states(shapes, precision, optimizer, size, frozen)

    def prepare(self, step: Step) -> Prepared:
        step.setup.rest["comm_buffer_bytes"] = sum(self.buckets(step))
        prepared = super().prepare(step)
        AUTOCAST.prepare(step)
        return prepared


def ddp_exposed(buckets: Sequence[int], group: Link, backward: float) -> tuple[float, float]:
    """(the bucket all-reduces' time over ``group``, the part not hidden under the
    backward)."""
    times = [link_time("all_reduce", b, group) for b in buckets]
    total = sum(times)
    if not times:
        return 0.0, 0.0
    return total, max(times[-1], total - backward)


__all__ = [
    "DDP",
    "FIRST_BUCKET_BYTES",
    "Replicated",
    "Single",
    "ddp_buckets",
    "ddp_collectives",
    "ddp_exposed",
]
