"""The step time of a plan: a lower bound, by parts (``docs/plan.md``, "The time model").

- **compute**: the roofline time (``analysis.roofline``) of the whole model's forward
  and backward on the target, for the compute dtype;
- **recompute**: the roofline time of each checkpointed module's forward;
- **collectives**: ring wire bytes (``metrics.commkinds.wire_bytes``: (n - 1) / n of
  the buffer for all-gather and reduce-scatter, 2 (n - 1) / n for all-reduce) over the
  interconnect's per-direction bandwidth; when ``world_size`` exceeds the node size, the
  ring crosses nodes and runs at the inter-node bandwidth (its slowest link);
- **overlap**: FSDP2 gathers unit i + 1 while unit i computes its forward, and in the
  backward prefetches the next unit's gather and reduce-scatters the previous unit's
  gradients while a unit computes; what does not fit under that compute is exposed, and
  so is the first gather and the last reduce-scatter. DDP's bucket all-reduces run under
  the backward: exposed is the larger of the last bucket's time and the all-reduces'
  time beyond the backward's;
- **optimizer**: the bytes the step reads and writes (parameters, gradients, states)
  over the memory bandwidth.

With ``grad_accum`` micro-batches, compute, recompute and collectives run per
micro-batch (FSDP2 and DDP reduce every micro-batch unless told not to) and the
optimizer once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from layerscope.metrics.commkinds import wire_bytes


@dataclass(frozen=True)
class UnitWork:
    """An FSDP2 unit in forward order: its own compute (seconds, nested units excluded)
    and its collectives' payloads (bytes)."""

    path: str
    forward: float
    backward: float
    gather: int  # the all-gather's payload: one padded shard
    scatter: int  # the reduce-scatter's payload: world_size padded shards
    regather: bool  # gathered again before its backward
    reduce: int = 0  # HSDP: the all-reduce of its gradient shard over the replicas


def link_time(kind: str, payload: int, world: int, bandwidth: float) -> float:
    """Seconds one collective takes on a ring at ``bandwidth`` bytes/s per direction."""
    if world < 2 or not payload:
        return 0.0
    return wire_bytes(kind, payload, world) / bandwidth


def fsdp_exposed(
    units: Sequence[UnitWork],
    world: int,
    bandwidth: float,
    replicas: tuple[int, float] = (1, 0.0),
) -> tuple[float, float]:
    """(all collectives' time, the part not hidden under compute) of one micro-batch;
    ``world`` GPUs shard each unit, ``replicas`` (HSDP: how many, at what bandwidth)
    all-reduce its gradient shard after the reduce-scatter."""
    if not units:
        return 0.0, 0.0
    gathers = [link_time("all_gather", u.gather, world, bandwidth) for u in units]
    scatters = [
        link_time("reduce_scatter", u.scatter, world, bandwidth)
        + link_time("all_reduce", u.reduce, replicas[0], replicas[1])
        for u in units
    ]
    total = sum(gathers) + sum(scatters)
    total += sum(g for g, u in zip(gathers, units, strict=True) if u.regather)
    # forward: the first gather is exposed; unit i + 1's gather runs under unit i
    exposed = gathers[0]
    for i in range(len(units) - 1):
        exposed += max(0.0, gathers[i + 1] - units[i].forward)
    # backward, in reverse: a unit's compute hides the next unit's gather (prefetch)
    # and the previous unit's reduce-scatter
    order = list(reversed(range(len(units))))
    first = order[0]
    exposed += gathers[first] if units[first].regather else 0.0
    for j, i in enumerate(order):
        hidden = 0.0
        if j + 1 < len(order) and units[order[j + 1]].regather:
            hidden += gathers[order[j + 1]]
        if j > 0:
            hidden += scatters[order[j - 1]]
        exposed += max(0.0, hidden - units[i].backward)
    exposed += scatters[order[-1]]
    return total, exposed


def ddp_exposed(
    buckets: Sequence[int], world: int, bandwidth: float, backward: float
) -> tuple[float, float]:
    """(the bucket all-reduces' time, the part not hidden under the backward)."""
    times = [link_time("all_reduce", b, world, bandwidth) for b in buckets]
    total = sum(times)
    if not times:
        return 0.0, 0.0
    return total, max(times[-1], total - backward)


__all__ = ["UnitWork", "ddp_exposed", "fsdp_exposed", "link_time"]
