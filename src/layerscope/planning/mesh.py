"""A device mesh as torchtitan states it (``ls.plan(mesh=...)``, ``layerscope plan
--mesh dp_shard=32,tp=8``): a size per parallelism axis, their product the world size,
and where each axis's groups sit on the cluster.

The ranks are laid out as torchtitan's ``ParallelDims`` builds its mesh, outermost to
innermost ``pp``, ``dp_replicate``, ``dp_shard``, ``cp``, ``tp``: an axis's group is the
ranks ``r, r + s, r + 2s, ...`` for its stride ``s`` (the product of the sizes inside it),
so tensor parallelism, innermost, takes consecutive ranks, which practice keeps inside a
node. With ``G`` GPUs per node, a group of ``n`` ranks at stride ``s`` holds ``max(1,
G // s)`` of them per node when ``s < G`` and one per node otherwise, and spans
``ceil(n / per_node)`` nodes: one node means its collectives run on the node's link,
more mean they cross the network.

Every axis is planned: data parallelism (``dp_shard``: FSDP2; ``dp_replicate``: DDP, or
HSDP with both), tensor parallelism (``tp``: ``planning.tensorparallel``), pipeline
parallelism (``pp``: ``planning.pipeline``), context parallelism (``cp``:
``planning.contextparallel``) and expert parallelism (``ep``, within ``dp_shard``:
``planning.expertparallel``) (docs/plan.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from layerscope.errors import InvalidInputError
from layerscope.validate import check_int, refuse, refuse_keys

#: The axes, outermost to innermost (torchtitan's ``ParallelDims`` order); ``ep`` is
#: carved out of the data-parallel and context ranks there and has no place of its own.
ORDER = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
#: What each axis is, in words.
AXES = {
    "dp_replicate": "data parallel, replicated (DDP; HSDP's replicas)",
    "dp_shard": "data parallel, sharded (FSDP2)",
    "tp": "tensor parallel",
    "pp": "pipeline parallel",
    "cp": "context parallel",
    "ep": "expert parallel",
}
#: The axes a plan models today.
PLANNED = ("dp_replicate", "dp_shard", "tp", "pp", "cp", "ep")


@dataclass(frozen=True)
class Mesh:
    """A size per axis (1: not used)."""

    dp_replicate: int = 1
    dp_shard: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1

    @property
    def world_size(self) -> int:
        """GPUs in the run: the product of the axes the ranks are laid out on."""
        return math.prod(getattr(self, axis) for axis in ORDER)

    def stride(self, axis: str) -> int:
        """The rank distance between neighbours of ``axis``'s groups."""
        return math.prod(getattr(self, a) for a in ORDER[ORDER.index(axis) + 1 :])

    def placement(self, gpus_per_node: int) -> dict[str, tuple[int, int]]:
        """For each axis used (size > 1) other than ``ep``: (ranks of one group per node,
        nodes one group spans)."""
        out: dict[str, tuple[int, int]] = {}
        for axis in ORDER:
            size = getattr(self, axis)
            if size == 1:
                continue
            stride = self.stride(axis)
            per_node = min(size, max(1, gpus_per_node // stride))
            out[axis] = (per_node, math.ceil(size / per_node))
        return out

    def placement_words(self, gpus_per_node: int) -> str:
        """The placement in a sentence, for the plan's notes."""
        said = []
        for axis, (per_node, nodes) in self.placement(gpus_per_node).items():
            where = "inside a node" if nodes == 1 else (
                f"across {nodes} nodes, {per_node} per node"
            )  # fmt: skip
            said.append(f"{axis} {getattr(self, axis)} {where}")
        return "; ".join(said) or "one GPU"

    def words(self) -> str:
        """The axes in use as ``--mesh`` spells them (``dp_shard=8,pp=4``)."""
        used = [
            f"{f.name}={getattr(self, f.name)}" for f in fields(self) if getattr(self, f.name) > 1
        ]
        return ",".join(used) or "dp_shard=1"

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    def strategy(self) -> dict[str, Any]:
        """The plan options of the mesh: ``world_size`` (every GPU), the data-parallel
        axes' ``sharding`` and ``hsdp``; ``InvalidInputError`` naming an axis that is not
        planned yet."""
        unplanned = [a for a in AXES if a not in PLANNED and getattr(self, a) > 1]
        if unplanned:
            named = ", ".join(f"{a}={getattr(self, a)} ({AXES[a]})" for a in unplanned)
            raise InvalidInputError(
                f"mesh {named}: not planned yet; a plan models data parallelism over "
                "dp_replicate and dp_shard, tensor parallelism over tp, pipeline "
                "parallelism over pp and expert parallelism over ep (docs/plan.md)"
            )
        if self.ep > 1 and self.tp > 1:
            raise InvalidInputError(
                f"mesh ep={self.ep} with tp={self.tp}: expert parallelism beside tensor "
                "parallelism (torchtitan's etp, the experts split both ways) is not planned "
                "yet: plan ep without tp"
            )
        if self.ep > 1 and self.dp_shard % self.ep:
            raise InvalidInputError(
                f"mesh ep={self.ep}: expert parallelism borrows its ranks from dp_shard "
                f"(torchtitan's), so ep must divide dp_shard ({self.dp_shard}): e.g. "
                f"dp_shard={self.ep * max(1, self.dp_shard // self.ep)}"
            )
        # FSDP2 shards over dp_shard x cp (torchtitan's dp_shard_cp): context parallelism
        # with no dp_shard still shards the model states over its ranks
        replicate, shard, world = self.dp_replicate, self.dp_shard * self.cp, self.world_size
        if replicate > 1 and shard > 1:
            return {"world_size": world, "sharding": "fsdp", "hsdp": (replicate, shard)}
        if replicate > 1:
            return {"world_size": world, "sharding": "ddp"}
        if shard > 1:
            return {"world_size": world, "sharding": "fsdp"}
        return {"world_size": world, "sharding": "none"}


def check_mesh(value: Any) -> Mesh:
    """A ``Mesh``, or a mapping of axis sizes (``{"dp_shard": 32, "tp": 8}``), checked."""
    if isinstance(value, Mesh):
        return value
    if not isinstance(value, Mapping) or not value:
        refuse("mesh", value, f"axis sizes, e.g. {{'dp_shard': 8}}; axes: {', '.join(AXES)}")
    unknown = sorted(set(value) - set(AXES), key=str)
    if unknown:
        refuse_keys("mesh", unknown, list(AXES), noun="axis")
    sizes = {f.name: check_int(f"mesh {f.name}", value.get(f.name, 1), 1) for f in fields(Mesh)}
    return Mesh(**sizes)


def parse_mesh(text: str) -> Mesh:
    """``dp_shard=32,tp=8``: the CLI's ``--mesh``."""
    sizes: dict[str, int] = {}
    for piece in text.split(","):
        axis, eq, size = piece.strip().partition("=")
        if not eq or not size.strip().isdecimal():
            refuse("--mesh", text, "AXIS=N pairs joined by commas, e.g. dp_shard=32,tp=8")
        sizes[axis.strip()] = int(size)
    return check_mesh(sizes)


__all__ = ["AXES", "ORDER", "PLANNED", "Mesh", "check_mesh", "parse_mesh"]
