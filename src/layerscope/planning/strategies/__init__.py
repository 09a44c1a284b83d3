"""The parallelism strategies a plan models, one object per ``sharding=`` value
(``planning.strategy`` has their interface): adding one is a module here, a line in
``STRATEGIES``, and its field rows where it adds figures."""

from __future__ import annotations

from collections.abc import Sequence

from layerscope.errors import InvalidInputError
from layerscope.planning.states import OPTIMIZER_STATES, PRECISIONS, ModelStates
from layerscope.planning.strategies.fsdp import FSDP2
from layerscope.planning.strategies.replicated import DDP, Single
from layerscope.planning.strategies.zero import ZeRO
from layerscope.planning.strategy import Strategy

#: every strategy by its ``sharding=`` name, in the order options list them
STRATEGIES: dict[str, Strategy] = {s.name: s for s in (Single(), DDP(), FSDP2(), ZeRO(1), ZeRO(2))}
#: the ``sharding=`` values
SHARDINGS = tuple(STRATEGIES)


def _check(world_size: int, rank: int, sharding: str, precision: str, optimizer: str) -> None:
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise InvalidInputError(f"world_size must be a positive int, got {world_size!r}")
    if not 0 <= rank < world_size:
        raise InvalidInputError(f"rank must be in [0, {world_size}), got {rank!r}")
    for name, value, known in (
        ("sharding", sharding, tuple(STRATEGIES)),
        ("precision", precision, PRECISIONS),
        ("optimizer", optimizer, tuple(OPTIMIZER_STATES)),
    ):
        if value not in known:
            raise InvalidInputError(f"unknown {name} {value!r}; known: {', '.join(known)}")
    STRATEGIES[sharding].check(world_size)


def model_states(
    shapes: Sequence[Sequence[int]],
    *,
    world_size: int,
    sharding: str,
    precision: str,
    optimizer: str = "adamw",
    rank: int = 0,
    frozen: Sequence[Sequence[int]] = (),
) -> ModelStates:
    """What GPU ``rank`` holds at rest for trainable parameters of ``shapes`` and frozen
    ones of ``frozen`` (each tensor once; tied weights are one tensor): the strategy's
    own rule (its module here). Rank 0 holds the largest FSDP2 shards."""
    _check(world_size, rank, sharding, precision, optimizer)
    return STRATEGIES[sharding].states(
        shapes, world_size=world_size, precision=precision, optimizer=optimizer, rank=rank,
        frozen=frozen,
    )  # fmt: skip


__all__ = ["SHARDINGS", "STRATEGIES", "model_states"]
