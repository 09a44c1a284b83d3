"""Observing one rank's work inside DTensor ops (``local_shards``).

A session's dispatch mode sees an op on DTensors before DTensor splits it: the logical
shapes, and none of the collectives DTensor issues to redistribute (``docs/distributed.md``).
A session made with ``dtensor="local"`` runs inside ``local_shards`` with
``collect.dispatch.LocalSessionMode``, which declines such an op (its
``__torch_dispatch__`` returns ``NotImplemented``), so torch hands it to DTensor's own
``__torch_dispatch__`` with the mode still active: the mode then sees what this rank
runs, the ops on the local shards and the functional collectives
(``_c10d_functional.all_reduce``, ...), each once.

DTensor works out an op's output shape by running it on fake tensors first (its sharding
propagation, cached per op and shapes); those ops are not this rank's work, so the mode
runs them without observing them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["local_shards", "state"]


class _State(threading.local):
    #: the DTensor class while ``local_shards`` is active in this thread, else None
    dtensor: type | None = None
    #: depth of DTensor's sharding propagation running in this thread
    quiet: int = 0


#: this thread's state, read by ``LocalSessionMode`` on every op
state = _State()


def _quietly(run: Callable[..., Any]) -> Callable[..., Any]:
    def propagate(*args: Any, **kwargs: Any) -> Any:
        state.quiet += 1
        try:
            return run(*args, **kwargs)
        finally:
            state.quiet -= 1

    return propagate


@contextmanager
def local_shards() -> Iterator[None]:
    """Inside (in this thread), DTensor is known to ``LocalSessionMode`` and its sharding
    propagation runs unobserved (module doc)."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._sharding_prop import ShardingPropagator

    name = "_propagate_tensor_meta_non_cached"
    own = ShardingPropagator.__dict__[name]
    before = state.dtensor
    setattr(ShardingPropagator, name, _quietly(own))
    state.dtensor = DTensor
    try:
        yield
    finally:
        state.dtensor = before
        setattr(ShardingPropagator, name, own)
