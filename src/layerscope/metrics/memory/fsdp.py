"""FSDP2's unsharded parameters and the buffers of collectives in the simulated allocator.

Buffers of collectives (the kind ``comm_buffer``): the storages an all-gather writes and
those a reduce-scatter reads, when born in the session (``CommBuffers``): FSDP2's flat
all-gather output (the unit's shards of every rank, padded) and its reduce-scatter input
(the unit's unsharded gradients, padded, copied in by ``fsdp.chunk_cat``). What a
reduce-scatter writes is the sharded gradient, and what an all-gather reads is the
rank's shard or a view of the output: neither is a buffer of their own. Parameter
storages never are.

FSDP2 (``fully_shard``) keeps each parameter's unsharded form on storages of its own (an
``FSDPParam``'s ``all_gather_outputs``; the unsharded parameter is a view of them). It
gives them memory before it copies the all-gathered data in and takes it back when it
reshards, with ``storage.resize_``, which does not go through the dispatcher: no op shows
it. So, for the session, three methods of every ``FSDPParam`` of the profiled model are
wrapped (an instance attribute each, removed at the end): ``alloc_all_gather_outputs``
and ``init_unsharded_param`` (after them the storages are full size: the latter also
covers a group of one rank, whose ``unshard`` gives the memory itself) and
``free_unsharded_param`` (after it they are empty). After each, the storages' bytes are
told to the allocator (``StorageTable.resized``), with the kind ``unsharded_params``, as
parameter storages (a saved ``W.t()`` of an unsharded weight is not an activation).

Each gather is charged to the FSDP unit whose group gathered it (``fsdpunits.fsdp_units``):
``units()`` gives, per unit, how many times it was unsharded and the bytes its unsharded
parameters take. A torch whose ``FSDPParam`` has none of these methods is left alone.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch._ops import OpOverload

from layerscope.metrics.commkinds import op_kind
from layerscope.metrics.flops.zero import COLLECTIVE_NAMESPACES
from layerscope.metrics.fsdpunits import InstancePatches, fsdp_units
from layerscope.metrics.memory.storages import (
    COMM_BUFFER,
    UNSHARDED_PARAMS,
    StorageTable,
    storage_of,
)
from layerscope.profile import Node

if TYPE_CHECKING:
    from layerscope.collect.scopes import ScopeTracker

#: FSDPParam methods after which its unsharded storages are full size (True) or empty.
_METHODS = (
    ("alloc_all_gather_outputs", True),
    ("init_unsharded_param", True),
    ("free_unsharded_param", False),
)


def _unsharded_storages(fsdp_param: Any) -> Iterator[torch.UntypedStorage]:
    for t in itertools.chain(
        getattr(fsdp_param, "all_gather_outputs", ()) or (),
        getattr(fsdp_param, "_unsharded_inner_tensors", ()) or (),
    ):
        if isinstance(t, torch.Tensor):
            s = storage_of(t)
            if s is not None:
                yield s


class UnshardedParams:
    """Tells ``table`` about FSDP2's storage resizes (module docstring). ``resized(node)``
    is called after each, with the unit's node."""

    def __init__(self, table: StorageTable, resized: Callable[[Node], None]) -> None:
        self.table = table
        self._resized = resized
        self._patches = InstancePatches()
        # id(unit node) -> (node, {id(FSDPParam): [unshards, bytes unsharded]})
        self._units: dict[int, tuple[Node, dict[int, list[int]]]] = {}

    def install(self, tracker: ScopeTracker) -> None:
        for group, unit in fsdp_units(tracker):
            for fsdp_param in getattr(group, "fsdp_params", ()) or ():
                for name, full in _METHODS:
                    if callable(getattr(fsdp_param, name, None)):
                        self._wrap(fsdp_param, name, full, unit)

    def _wrap(self, fsdp_param: Any, name: str, full: bool, unit: Node) -> None:
        original: Callable[..., Any] = getattr(fsdp_param, name)

        def resizing(*args: Any, **kwargs: Any) -> Any:
            try:
                return original(*args, **kwargs)
            finally:
                self._sync(fsdp_param, unit, full and name == "init_unsharded_param")

        self._patches.set(fsdp_param, name, resizing)

    def _sync(self, fsdp_param: Any, unit: Node, gathered: bool) -> None:
        table = self.table
        total = 0
        for s in _unsharded_storages(fsdp_param):
            before = table.get(s)
            counted = before.nbytes if before is not None and before.born else 0
            ref = table.resized(s, param=True)
            table.give_kind(ref, UNSHARDED_PARAMS)
            total += ref.nbytes
            if ref.nbytes != counted:
                self._resized(unit)
        if gathered:
            params = self._units.setdefault(id(unit), (unit, {}))[1]
            entry = params.setdefault(id(fsdp_param), [0, 0])
            entry[0] += 1
            entry[1] = max(entry[1], total)

    def units(self) -> dict[str, dict[str, int]]:
        """Per unit path: ``unshards`` (times its parameters were unsharded) and
        ``unsharded_param_bytes`` (what its unsharded parameters take)."""
        return {
            node.path: {
                "unshards": max(e[0] for e in params.values()),
                "unsharded_param_bytes": sum(e[1] for e in params.values()),
            }
            for node, params in self._units.values()
        }

    def report(self) -> dict[str, Any]:
        """``profile.memory["by_kind"]``: the simulated bytes of the kinds of storage
        (``storages.KINDS``) and the units' unsharded parameters."""
        table = self.table
        return {
            "comm_buffer_bytes": table.comm_buffer_total,
            "comm_buffer_peak_bytes": table.kind_high[COMM_BUFFER],
            "unsharded_params_peak_bytes": table.kind_high[UNSHARDED_PARAMS],
            "fsdp_units": self.units(),
        }

    def uninstall(self) -> None:
        self._patches.undo()


#: (indexes of the arguments that are buffers, whether the returned tensors are)
_Buffers = tuple[tuple[int, ...], bool]
_NONE: _Buffers = ((), False)


def _buffers_of(func: OpOverload) -> _Buffers:
    """Which tensors of a call of ``func`` are buffers of a collective (module docstring)."""
    if getattr(func, "namespace", None) not in COLLECTIVE_NAMESPACES:
        return _NONE
    kind = op_kind(func)
    if kind not in ("all_gather", "reduce_scatter"):
        return _NONE
    # c10d's ops mark no argument as written: their names say which is which
    names = [a.name for a in func._schema.arguments]
    if kind == "all_gather":
        written = tuple(i for i, n in enumerate(names) if n.startswith("out"))
        return written, not written
    return tuple(i for i, n in enumerate(names) if n.startswith("input")), False


class CommBuffers:
    """Gives the buffers of collectives the kind ``comm_buffer`` (module docstring)."""

    def __init__(self, table: StorageTable) -> None:
        self.table = table
        self._cache: dict[OpOverload, _Buffers] = {}

    def on_op(self, func: OpOverload, args: tuple[Any, ...], out: Any) -> None:
        which = self._cache.get(func)
        if which is None:
            which = self._cache[func] = _buffers_of(func)
        if which is _NONE:
            return
        indexes, returned = which
        for i in indexes:
            if i < len(args):
                self._give(args[i])
        if returned:
            self._give(out)

    def _give(self, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            s = storage_of(value)
            ref = self.table.get(s) if s is not None else None
            if ref is not None and not ref.param:
                self.table.give_kind(ref, COMM_BUFFER)
        elif isinstance(value, list | tuple):
            for v in value:
                self._give(v)
