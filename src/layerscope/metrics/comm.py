"""The communication observer: bytes each torch.distributed op moves, per module and phase.

Collectives and point-to-point ops reach the dispatcher as ops of the ``c10d``,
``_c10d_functional`` and ``_c10d_functional_autograd`` namespaces (``allreduce_`` from
``dist.all_reduce`` and DDP's gradient buckets, ``all_gather_into_tensor`` from functional
collectives, ...). Each call adds the bytes of the tensors it is handed as input to
``comm_bytes`` (forward) or ``backward_comm_bytes`` of the module the dispatch mode names:
the tensor of an all-reduce, this rank's shard of an all-gather, the whole input of a
reduce-scatter, the buffer of a broadcast or a receive (on every rank), the list a
scatter's source hands out. Barriers, ``wait_tensor`` and other ops that carry no data
add 0. Their FLOPs are 0 (``metrics.flops.zero``).

Beside them, ``comm_wire_bytes`` and ``backward_comm_wire_bytes``: the bytes this rank
moves over the network for the same ops with ring algorithms (``metrics.commkinds``), and
``Profile.comm``: both conventions and the call count per module, phase and kind
(all-gather, reduce-scatter, all-reduce, ...).

FSDP2's all-gathers and reduce-scatters are charged to the unit whose parameters they
gather or whose gradients they reduce (``metrics.fsdpunits``).

Collectives that run below the dispatch mode are not seen: those a tensor subclass issues
inside its own ``__torch_dispatch__`` (DTensor redistributions, unless the session
observes DTensors' local work: ``dtensor="local"``, ``collect.dtensors``) and those of a
backend called directly from C++ without the dispatcher.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from torch._ops import OpOverload

import layerscope.metricspec as ms
from layerscope.collect.observer import Observer
from layerscope.metrics.commkinds import KINDS, comm_calls, nbytes
from layerscope.metrics.flops.zero import COLLECTIVE_NAMESPACES
from layerscope.metrics.fsdpunits import UnitCharges
from layerscope.profile import Node, Profile

if TYPE_CHECKING:
    from layerscope.collect.scopes import ScopeTracker

__all__ = [
    "BACKWARD_KEY",
    "BACKWARD_WIRE_KEY",
    "FORWARD_KEY",
    "FORWARD_WIRE_KEY",
    "CommObserver",
    "comm_observers",
    "comm_table",
    "distributed_info",
    "payload_bytes",
]

FORWARD_KEY = ms.COMM_BYTES
BACKWARD_KEY = ms.BACKWARD_COMM_BYTES
FORWARD_WIRE_KEY = ms.COMM_WIRE_BYTES
BACKWARD_WIRE_KEY = ms.BACKWARD_COMM_WIRE_BYTES

#: Argument names that hold an op's payload, the first present in its schema wins.
_PAYLOAD_ARGS = (
    "input_tensors",
    "input_tensor",
    "input_list",
    "inputs",
    "input",
    "tensors",
    "tensor",
)
#: Ops of the collective namespaces that carry no data (or only a dummy tensor).
_NO_PAYLOAD = frozenset(
    (
        "c10d::barrier",
        "c10d::monitored_barrier_",
        "c10d::check_for_nan",
        "_c10d_functional::wait_tensor",
        "_c10d_functional::_wrap_tensor_autograd",
    )
)
#: Not an op of torch.distributed (the cached answer for every other op).
_NOT_COMM = -1
#: An op of torch.distributed that carries no data.
_NO_DATA = -2


def _payload_index(func: OpOverload) -> int:
    """Where ``func``'s payload is among its arguments; ``_NOT_COMM`` or ``_NO_DATA``."""
    if getattr(func, "namespace", None) not in COLLECTIVE_NAMESPACES:
        return _NOT_COMM
    schema = func._schema
    if schema.name in _NO_PAYLOAD:
        return _NO_DATA
    names = [a.name for a in schema.arguments]
    for name in _PAYLOAD_ARGS:
        if name in names:
            return names.index(name)
    return _NO_DATA


_nbytes = nbytes


def payload_bytes(func: OpOverload, args: Sequence[Any], kwargs: dict[str, Any]) -> int | None:
    """Bytes one call of ``func`` hands to torch.distributed (see the module docstring);
    ``None`` when ``func`` is not a collective or point-to-point op."""
    index = _payload_index(func)
    if index == _NOT_COMM:
        return None
    if index == _NO_DATA:
        return 0
    if index < len(args):
        return _nbytes(args[index])
    return _nbytes(kwargs.get(func._schema.arguments[index].name))


class CommObserver(Observer):
    """Adds the bytes of every collective and point-to-point op to ``comm_bytes`` and
    ``comm_wire_bytes`` (forward) or their ``backward_`` forms of the module running it,
    and per kind to ``Profile.comm``; at the end records the rank, world size and backend
    in ``Profile.dist`` when a process group is up. Charges FSDP2's communication to its
    units while installed (``metrics.fsdpunits``)."""

    def __init__(self) -> None:
        self.saw_backward = False
        # id(func) -> (func, payload index or _NOT_COMM/_NO_DATA); resolved once per op.
        self._resolved: dict[int, tuple[OpOverload, int]] = {}
        # (id(node), backward, kind) -> [node, backward, kind, calls, payload, wire bytes]
        self._kinds: dict[tuple[int, bool, str], list[Any]] = {}
        self._units = UnitCharges()

    def install(self, tracker: ScopeTracker) -> None:
        self.saw_backward = False
        self._kinds = {}
        self._units.install(tracker)

    def uninstall(self) -> None:
        self._units.uninstall()

    def on_op(
        self,
        func: OpOverload,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        out: Any,
        node: Node,
        backward: bool,
    ) -> None:
        if backward:
            self.saw_backward = True
        entry = self._resolved.get(id(func))
        if entry is None:
            entry = self._resolved[id(func)] = (func, _payload_index(func))
        index = entry[1]
        if index < 0:  # most ops: not communication; barriers: no data
            return
        if index < len(args):
            payload = _nbytes(args[index])
        else:
            payload = _nbytes(kwargs.get(func._schema.arguments[index].name))
        m = node.self_metrics
        key = BACKWARD_KEY if backward else FORWARD_KEY
        m[key] = m.get(key, 0) + payload
        wire_key = BACKWARD_WIRE_KEY if backward else FORWARD_WIRE_KEY
        for call in comm_calls(func, args, kwargs, payload):
            m[wire_key] = m.get(wire_key, 0) + call.wire
            row = self._kinds.get((id(node), backward, call.kind))
            if row is None:
                row = self._kinds[(id(node), backward, call.kind)] = [
                    node,
                    backward,
                    call.kind,
                    0,
                    0,
                    0,
                ]
            row[3] += 1
            row[4] += call.payload
            row[5] += call.wire

    def finish(self, profile: Profile) -> None:
        """Give every node the keys (0 where nothing was sent), so totals roll up; write
        ``Profile.comm``; record where the profile was made (``Profile.dist``)."""
        keys = [FORWARD_KEY, FORWARD_WIRE_KEY]
        if self.saw_backward:
            keys += [BACKWARD_KEY, BACKWARD_WIRE_KEY]
        for node in profile.root.walk():
            for key in keys:
                node.self_metrics.setdefault(key, 0)
        profile.comm = comm_table(self._kinds.values())
        info = distributed_info()
        if info:
            profile.dist = info


def comm_table(rows: Any) -> dict[str, dict[str, dict[str, dict[str, int | float]]]]:
    """``Profile.comm`` from ``[node, backward, kind, calls, payload, wire]`` rows: module
    path -> phase (``forward``, ``backward``) -> kind -> ``{"calls", "bytes",
    "wire_bytes"}``, phases and kinds in that order (``KINDS``)."""
    order = {k: i for i, k in enumerate(KINDS)}
    table: dict[str, dict[str, dict[str, dict[str, int | float]]]] = {}
    for node, backward, kind, calls, payload, wire in sorted(
        rows, key=lambda r: (r[1], order.get(r[2], len(order)))
    ):
        phases = table.setdefault(node.path, {})
        kinds = phases.setdefault("backward" if backward else "forward", {})
        kinds[kind] = {"calls": calls, "bytes": payload, "wire_bytes": wire}
    return table


def distributed_info(group: Any = None) -> dict[str, Any]:
    """``{"rank", "world_size", "backend"}`` of the default process group (global rank and
    size), or ``{}`` when torch.distributed is not initialised."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return {}
    return {
        "rank": dist.get_rank(),
        "world_size": dist.get_world_size(),
        "backend": str(dist.get_backend(group)),
    }


def comm_observers(given: Sequence[Observer] = ()) -> list[Observer]:
    """``[CommObserver()]`` when a torch.distributed process group is initialised and
    ``given`` (the user's observers) holds none already; else ``[]``. A session adds what
    this returns to its observers."""
    if any(isinstance(o, CommObserver) for o in given):
        return []
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return [CommObserver()]
    return []
