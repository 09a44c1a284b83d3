"""The collectives one GPU runs in a training step, by arithmetic: what FSDP2 gathers and
reduce-scatters per unit, and what DDP all-reduces per bucket, in ``profile.comm``'s
form and conventions (payload bytes the op is handed, and ring wire bytes:
``metrics.commkinds.wire_bytes``).

FSDP2 (``fsdp_collectives``): a unit all-gathers its parameters' padded shards (in the
parameter dtype: bf16 under mixed precision) before its forward and, when resharded
after it, again before its backward; its backward reduce-scatters the padded gradients
of all ranks (in the reduce dtype: float32 under mixed precision, else the parameters').
FSDP2 does not reshard the root after its forward by default. A unit without parameters
of its own runs none.

DDP (``ddp_collectives``): one all-reduce per gradient bucket. Buckets follow DDP's
assignment: gradients in reverse order of the parameters, by dtype, the first bucket
closed at 1 MiB and the others at ``bucket_cap_mb`` (25), a tensor larger than the cap
alone in its bucket.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from math import prod
from typing import Any

from layerscope.metrics.commkinds import wire_bytes
from layerscope.planning.states import fsdp_shard

#: DDP's first bucket cap (``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``)
FIRST_BUCKET_BYTES = 1024 * 1024

Comm = dict[str, dict[str, dict[str, dict[str, Any]]]]


def _row(kind: str, payload: int, world: int, calls: int = 1) -> dict[str, Any]:
    return {"calls": calls, "bytes": payload, "wire_bytes": wire_bytes(kind, payload, world)}


def fsdp_collectives(
    units: Mapping[str, Sequence[Sequence[int]]],
    *,
    world_size: int,
    param_bytes: int = 4,
    reduce_bytes: int = 4,
    reshard_after_forward: bool = True,
    root: str = "",
) -> Comm:
    """Per unit path (its own parameters' shapes), by phase and kind; module doc.
    ``param_bytes``/``reduce_bytes``: bytes per element gathered and reduced."""
    out: Comm = {}
    for path, shapes in units.items():
        padded = sum(fsdp_shard(shape, world_size, 0)[1] for shape in shapes)
        if not padded:
            continue
        gather = _row("all_gather", padded * param_bytes, world_size)
        scatter = _row("reduce_scatter", world_size * padded * reduce_bytes, world_size)
        backward: dict[str, dict[str, Any]] = {"reduce_scatter": scatter}
        if reshard_after_forward and path != root:
            backward = {"all_gather": dict(gather), **backward}
        out[path] = {"forward": {"all_gather": gather}, "backward": backward}
    return out


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


__all__ = ["FIRST_BUCKET_BYTES", "ddp_buckets", "ddp_collectives", "fsdp_collectives"]
