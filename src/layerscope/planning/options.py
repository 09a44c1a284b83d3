"""``ls.plan``'s options, checked at the boundary, and their defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from layerscope.errors import InvalidInputError
from layerscope.hardware import DeviceSpec, device_spec
from layerscope.metrics.memory.training import OPTIMIZER_STATES
from layerscope.planning.states import PRECISIONS, SHARDINGS
from layerscope.validate import check_bool, check_choice, check_int, check_number, refuse

#: Default bytes kept aside from the budget for what the timeline leaves out: the CUDA
#: context, cuBLAS/cuDNN workspaces, the caching allocator's fragmentation.
RESERVE_BYTES = 2 * 2**30
#: Default inter-node bandwidth per GPU, bytes/s per direction (400 Gb/s: one NIC per GPU).
INTER_NODE_BANDWIDTH = 400e9 / 8
OUT_OF_SCOPE = "tensor, pipeline and context parallelism are not modelled"

_COMPUTE = {"fp32": torch.float32, "bf16": torch.bfloat16, "bf16-mixed": torch.bfloat16,
            "fp16-mixed": torch.float16}  # fmt: skip


@dataclass(frozen=True)
class Options:
    """``ls.plan``'s options, checked."""

    target: DeviceSpec
    world_size: int
    sharding: str
    precision: str
    optimizer: str
    grad_accum: int
    budget: int | None
    reserve_bytes: int
    rank: int
    reshard_after_forward: bool
    units: tuple[str, ...] | None
    inter_node_bandwidth: float
    bucket_cap_mb: float
    #: HSDP: (replicate, shard) group sizes, their product the world size; None: plain
    hsdp: tuple[int, int] | None = None

    @property
    def shard_size(self) -> int:
        """GPUs a tensor is sharded over (FSDP2: all of them; HSDP: one shard group)."""
        return self.hsdp[1] if self.hsdp else self.world_size

    @property
    def replicas(self) -> int:
        """Copies of each shard (HSDP's replicate groups; 1 otherwise)."""
        return self.hsdp[0] if self.hsdp else 1

    @property
    def mixed(self) -> bool:
        return self.precision.endswith("-mixed")

    @property
    def autocast(self) -> bool:
        """Mixed precision as autocast runs it: DDP (or one GPU) with float32 weights."""
        return self.mixed and self.sharding == "ddp"

    @property
    def compute_dtype(self) -> torch.dtype:
        return _COMPUTE[self.precision]


def check_options(
    target: Any,
    world_size: Any,
    sharding: Any,
    precision: Any,
    optimizer: Any,
    grad_accum: Any,
    budget: Any,
    extra: Mapping[str, Any],
) -> Options:
    known = {"reserve_bytes", "rank", "reshard_after_forward", "units",
             "inter_node_bandwidth", "bucket_cap_mb", "hsdp"}  # fmt: skip
    unknown = sorted(set(extra) - known)
    if unknown:
        raise InvalidInputError(
            f"unknown option {unknown[0]!r} for ls.plan; known: {', '.join(sorted(known))}"
        )
    spec = device_spec(target)
    if spec.kind != "gpu":
        raise InvalidInputError(f"target must be a GPU spec, got {spec.name!r} ({spec.kind})")
    world = check_int("world_size", world_size, 1)
    check_choice("sharding", sharding, list(SHARDINGS))
    check_choice("precision", precision, list(PRECISIONS))
    check_choice("optimizer", optimizer, list(OPTIMIZER_STATES))
    if sharding == "none" and world != 1:
        raise InvalidInputError("sharding='none' is one GPU: world_size must be 1")
    units = extra.get("units")
    if units is not None:
        if isinstance(units, str) or not all(isinstance(u, str) for u in units):
            refuse("units", units, "a list of module paths")
        units = tuple(units)
    hsdp = _hsdp(extra.get("hsdp"), sharding, world)
    if budget is None:
        budget = spec.memory_bytes
    elif budget is not None:
        budget = check_int("budget", budget, 0)
    return Options(
        target=spec,
        world_size=world,
        sharding=sharding,
        precision=precision,
        optimizer=optimizer,
        grad_accum=check_int("grad_accum", grad_accum, 1),
        budget=budget,
        reserve_bytes=check_int("reserve_bytes", extra.get("reserve_bytes", RESERVE_BYTES), 0),
        rank=check_int("rank", extra.get("rank", 0), 0, (hsdp[1] if hsdp else world) - 1),
        reshard_after_forward=check_bool(
            "reshard_after_forward", extra.get("reshard_after_forward", True)
        ),
        units=units,
        inter_node_bandwidth=check_number(
            "inter_node_bandwidth",
            extra.get("inter_node_bandwidth", INTER_NODE_BANDWIDTH),
            positive=True,
        ),
        bucket_cap_mb=check_number("bucket_cap_mb", extra.get("bucket_cap_mb", 25), positive=True),
        hsdp=hsdp,
    )


def _hsdp(value: Any, sharding: str, world: int) -> tuple[int, int] | None:
    """``hsdp=(replicate, shard)``: FSDP2 over a 2-D mesh, sharded within each group of
    ``shard`` GPUs and replicated over ``replicate`` such groups."""
    if value is None:
        return None
    if sharding != "fsdp":
        raise InvalidInputError(
            f"hsdp is FSDP2 on a 2-D mesh: it needs sharding='fsdp', got {sharding!r}"
        )
    if not isinstance(value, tuple | list) or len(value) != 2:
        refuse("hsdp", value, "(replicate, shard): two positive ints")
    replicate, shard = (check_int("hsdp", v, 1) for v in value)
    if replicate * shard != world:
        raise InvalidInputError(
            f"hsdp={replicate, shard}: replicate x shard = {replicate * shard}, but "
            f"world_size is {world}"
        )
    return replicate, shard


__all__ = ["INTER_NODE_BANDWIDTH", "OUT_OF_SCOPE", "RESERVE_BYTES", "Options", "check_options"]
