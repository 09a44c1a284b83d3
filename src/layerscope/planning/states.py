"""The model states one GPU holds at rest in a training step: parameters, gradients,
optimizer states and master weights, by part (``ModelStates``). Each strategy has its
own rule (``planning.strategies``; ``model_states`` there answers for any of them);
here are the pieces they share: FSDP2's shard of a tensor and the precisions.

Precision: ``"fp32"`` and ``"bf16"`` keep parameters, gradients and states in that dtype
(torch.optim creates states like the parameter); ``"bf16-mixed"``/``"fp16-mixed"`` as
the strategy runs them (FSDP2's ``MixedPrecisionPolicy``, DDP's autocast, master
weights on one GPU and under ZeRO). Adam and AdamW keep two states per element and a
4-byte ``step`` per parameter tensor; momentum SGD one; plain SGD none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod

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


#: Full-size state tensors per trainable parameter, as torch.optim keeps them (one place
#: for every training-memory figure: plans, ``training_footprint``, ``max_batch_size``).
OPTIMIZER_STATES: dict[str, int] = {"sgd": 0, "sgd_momentum": 1, "adam": 2, "adamw": 2}
#: torch.optim.Adam/AdamW keep a float32 ``step`` scalar tensor per parameter tensor.
STEP_BYTES = 4


def optimizer_state_bytes(
    optimizer: str, elements: int, tensors: int, size: int, *, amsgrad: bool = False
) -> int:
    """Bytes of an optimizer's state over ``elements`` in ``tensors`` parameter tensors,
    ``size`` bytes per element: its full-size tensors (``OPTIMIZER_STATES``, one more with
    Adam's ``amsgrad``) and Adam's 4-byte ``step`` per tensor."""
    full = OPTIMIZER_STATES[optimizer] + (1 if amsgrad else 0)
    step = STEP_BYTES * tensors if optimizer in ("adam", "adamw") else 0
    return full * elements * size + step


#: ``reduce_dtype``'s values (FSDP2's ``MixedPrecisionPolicy.reduce_dtype``), bytes each
REDUCE_DTYPES = {"fp32": 4, "bf16": 2, "fp16": 2}

__all__ = [
    "PRECISIONS",
    "REDUCE_DTYPES",
    "ModelStates",
    "fsdp_shard",
]
