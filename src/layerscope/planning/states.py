"""The model states one GPU holds at rest in a training step: parameters, gradients,
optimizer states and master weights, by sharding strategy, precision and optimizer.

Strategies (``world_size`` n GPUs):

- ``"none"``: one GPU holds everything;
- ``"ddp"``: every GPU holds everything (DDP's gradient buckets, the gradients' size
  again, are not model states: ``docs/distributed.md``);
- ``"fsdp"`` (FSDP2): each tensor is split along dim 0 with ``torch.chunk`` into n
  chunks; rank r holds chunk r (none when there are fewer chunks), stored padded to the
  first chunk's size. Parameters at rest are the padded shards; gradients and
  optimizer states are those of the unpadded local shard (``to_local()``);
- ``"zero1"``, ``"zero2"``: parameters (and for ``zero1`` gradients) replicated;
  optimizer states (and for ``zero2`` gradients), and master weights where they exist,
  split evenly over the n GPUs as one flat buffer (ceil(elements / n) per GPU). A
  formula only: no run here checks it.

Precision: ``"fp32"`` and ``"bf16"`` keep parameters, gradients and states in that dtype
(torch.optim creates states like the parameter). ``"bf16-mixed"``/``"fp16-mixed"``: under
FSDP2 (``MixedPrecisionPolicy``) the float32 shards are the master weights, gradients
are reduced and kept in float32; under DDP, autocast: float32 parameters, gradients and
states; on one GPU (``"none"``) and under ZeRO, 16-bit weights and gradients with a
float32 master copy whose optimizer states are float32 (``training_footprint``'s
master-weights model). Adam and AdamW keep two states per element and a 4-byte ``step``
per parameter tensor; momentum SGD one; plain SGD none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod

from layerscope.errors import InvalidInputError
from layerscope.metrics.memory.training import OPTIMIZER_STATES, STEP_BYTES

SHARDINGS = ("none", "ddp", "fsdp", "zero1", "zero2")
PRECISIONS = ("fp32", "bf16", "bf16-mixed", "fp16-mixed")


@dataclass(frozen=True)
class ModelStates:
    """Bytes one GPU holds at rest, by part."""

    param_bytes: int
    grad_bytes: int
    optimizer_state_bytes: int
    master_weight_bytes: int

    @property
    def total(self) -> int:
        return (
            self.param_bytes
            + self.grad_bytes
            + self.optimizer_state_bytes
            + self.master_weight_bytes
        )


def fsdp_shard(shape: Sequence[int], world_size: int, rank: int) -> tuple[int, int]:
    """(elements rank ``rank`` holds, elements of its padded shard) of one tensor under
    FSDP2: ``torch.chunk`` along dim 0 (a 0-dim tensor as one row), every shard padded to
    the first chunk's size."""
    rows = shape[0] if shape else 1
    rest = prod(shape[1:]) if shape else 1
    chunk = -(-rows // world_size)
    mine = max(0, min(chunk, rows - rank * chunk))
    return mine * rest, chunk * rest


def _check(world_size: int, rank: int, sharding: str, precision: str, optimizer: str) -> None:
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise InvalidInputError(f"world_size must be a positive int, got {world_size!r}")
    if not 0 <= rank < world_size:
        raise InvalidInputError(f"rank must be in [0, {world_size}), got {rank!r}")
    for name, value, known in (
        ("sharding", sharding, SHARDINGS),
        ("precision", precision, PRECISIONS),
        ("optimizer", optimizer, tuple(OPTIMIZER_STATES)),
    ):
        if value not in known:
            raise InvalidInputError(f"unknown {name} {value!r}; known: {', '.join(known)}")
    if sharding == "none" and world_size != 1:
        raise InvalidInputError("sharding='none' is one GPU: world_size must be 1")


def model_states(
    shapes: Sequence[Sequence[int]],
    *,
    world_size: int,
    sharding: str,
    precision: str,
    optimizer: str = "adamw",
    rank: int = 0,
) -> ModelStates:
    """What GPU ``rank`` holds at rest for trainable parameters of ``shapes`` (each
    tensor once; tied weights are one tensor); module doc. Rank 0 holds the largest
    FSDP2 shards."""
    _check(world_size, rank, sharding, precision, optimizer)
    states = OPTIMIZER_STATES[optimizer]
    step = STEP_BYTES * len(shapes) if optimizer in ("adam", "adamw") else 0
    mixed = precision.endswith("-mixed")
    low = 4 if precision == "fp32" else 2  # bytes of the weights' own dtype
    elements = sum(prod(s) for s in shapes)
    if sharding == "fsdp":
        local = padded = 0
        for shape in shapes:
            mine, pad = fsdp_shard(shape, world_size, rank)
            local, padded = local + mine, padded + pad
        size = 4 if mixed else low  # mixed: the float32 shards are the master weights
        return ModelStates(padded * size, local * size, states * local * size + step, 0)
    if sharding == "ddp" or (sharding == "none" and not mixed):
        size = 4 if mixed else low  # DDP's mixed precision is autocast: float32 states
        return ModelStates(elements * size, elements * size, states * elements * size + step, 0)
    # one GPU with master weights, or ZeRO: the master copy and states are float32 when
    # mixed, and split over the GPUs under ZeRO
    part = elements if sharding == "none" else -(-elements // world_size)
    grads = part if sharding == "zero2" else elements
    master = 4 * part if mixed else 0
    state_size = 4 if mixed else low
    return ModelStates(elements * low, grads * low, states * part * state_size + step, master)


__all__ = ["PRECISIONS", "SHARDINGS", "ModelStates", "fsdp_shard", "model_states"]
