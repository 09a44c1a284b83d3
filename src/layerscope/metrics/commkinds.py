"""What each torch.distributed op is (its kind) and the bytes it puts on the wire per rank.

Two conventions for the bytes of a collective (docs/distributed.md):

- **payload** (``comm_bytes``): the bytes of the tensors the op is handed as input on this
  rank: the tensor of an all-reduce, this rank's shard of an all-gather, the whole input
  of a reduce-scatter, the buffer of a broadcast or a receive, the list a scatter's source
  hands out;
- **wire** (``comm_wire_bytes``): the bytes this rank moves over the network with a ring
  (the larger of what it sends and what it receives), ``n`` the size of the op's group,
  ``b`` the payload: all-reduce ``2(n-1)/n·b``; all-gather ``(n-1)·b`` (``(n-1)/n`` of
  the gathered ``n·b``); reduce-scatter and all-to-all ``(n-1)/n·b``; broadcast and
  reduce ``b``; gather ``(n-1)·b`` on the root, ``b`` elsewhere; scatter ``(n-1)/n·b`` on
  the source, the received chunk elsewhere; send, receive ``b``. With ``n == 1`` nothing
  crosses the wire (point-to-point ops excepted).

A value is an ``int`` when the division is exact, else a ``float``.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from torch._ops import OpOverload

__all__ = [
    "KINDS",
    "CommCall",
    "comm_calls",
    "op_kind",
    "wire_bytes",
]

#: Every kind, in the order views and files list them.
KINDS = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "broadcast",
    "reduce",
    "gather",
    "scatter",
    "send",
    "recv",
    "other",
)

#: Op name (without its namespace) -> kind, for the c10d, _c10d_functional and
#: _c10d_functional_autograd namespaces.
_KIND_OF: dict[str, str] = {
    **dict.fromkeys(
        (
            "allreduce_",
            "allreduce_coalesced_",
            "all_reduce",
            "all_reduce_",
            "all_reduce_coalesced",
            "all_reduce_coalesced_",
        ),
        "all_reduce",
    ),
    **dict.fromkeys(
        (
            "allgather_",
            "_allgather_base_",
            "allgather_coalesced_",
            "allgather_into_tensor_coalesced_",
            "all_gather_into_tensor",
            "all_gather_into_tensor_out",
            "all_gather_into_tensor_coalesced",
        ),
        "all_gather",
    ),
    **dict.fromkeys(
        (
            "reduce_scatter_",
            "_reduce_scatter_base_",
            "reduce_scatter_tensor_coalesced_",
            "reduce_scatter_tensor",
            "reduce_scatter_tensor_out",
            "reduce_scatter_tensor_coalesced",
        ),
        "reduce_scatter",
    ),
    **dict.fromkeys(("alltoall_", "alltoall_base_", "all_to_all_single"), "all_to_all"),
    **dict.fromkeys(("broadcast_", "broadcast"), "broadcast"),
    "reduce_": "reduce",
    "gather_": "gather",
    "scatter_": "scatter",
    **dict.fromkeys(("send", "isend"), "send"),
    **dict.fromkeys(("recv_", "recv_any_source_", "irecv"), "recv"),
}


def op_kind(func: OpOverload) -> str:
    """The kind of a collective or point-to-point op (``KINDS``; ``"other"`` for one this
    table does not name)."""
    return _KIND_OF.get(func._schema.name.partition("::")[2], "other")


def _exact(value: Fraction) -> int | float:
    return int(value) if value.denominator == 1 else float(value)


def wire_bytes(
    kind: str, payload: int, world: int, *, root: bool = False, received: int = 0
) -> int | float:
    """Bytes one rank moves over the network for one op of ``kind`` with ``payload``
    bytes in a group of ``world`` ranks (module docstring). ``root``: this rank is the
    root of a gather or the source of a scatter; ``received``: what a scatter's other
    ranks receive (their payload is empty)."""
    n = world
    if kind in ("send", "recv", "other"):
        return payload
    if n <= 1:
        return 0
    if kind == "all_reduce":
        return _exact(Fraction(2 * (n - 1) * payload, n))
    if kind == "all_gather":
        return (n - 1) * payload
    if kind in ("reduce_scatter", "all_to_all"):
        return _exact(Fraction((n - 1) * payload, n))
    if kind in ("broadcast", "reduce"):
        return payload
    if kind == "gather":
        return (n - 1) * payload if root else payload
    if kind == "scatter":
        return _exact(Fraction((n - 1) * payload, n)) if root else received
    raise ValueError(f"unknown kind of collective {kind!r}; known: {', '.join(KINDS)}")


class CommCall:
    """One kind's share of one op call: its payload and wire bytes."""

    __slots__ = ("kind", "payload", "wire")

    def __init__(self, kind: str, payload: int, wire: int | float) -> None:
        self.kind = kind
        self.payload = payload
        self.wire = wire


def nbytes(value: Any) -> int:
    """Bytes of every tensor in ``value`` (a tensor or nested lists of them)."""
    from torch import Tensor

    if isinstance(value, Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, list | tuple):
        return sum(nbytes(v) for v in value)
    return 0


def _arg(func: OpOverload, args: Sequence[Any], kwargs: dict[str, Any], name: str) -> Any:
    """The value of argument ``name`` of one call of ``func`` (None when absent)."""
    for i, a in enumerate(func._schema.arguments):
        if a.name == name:
            if i < len(args):
                return args[i]
            return kwargs.get(name, a.default_value if a.has_default_value() else None)
    return None


def _group(func: OpOverload, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[int, int]:
    """(size, this rank's rank) of the op's group: from its ``process_group`` (c10d ops),
    its ``group_size`` or ``group_name`` (functional ops); the default group's, else
    (1, 0), when the op names none that can be asked."""
    pg = _arg(func, args, kwargs, "process_group")
    size = _arg(func, args, kwargs, "group_size")
    if pg is not None and not hasattr(pg, "size"):  # c10d ops get a boxed ScriptObject
        try:
            from torch.distributed import ProcessGroup

            pg = ProcessGroup.unbox(pg)
        except Exception:
            pg = None
    if pg is None:
        name = _arg(func, args, kwargs, "group_name")
        if name is not None:
            try:
                import torch.distributed.distributed_c10d as c10d

                pg = c10d._resolve_process_group(name)  # type: ignore[attr-defined]
            except Exception:
                pg = None
    try:
        if pg is not None:
            return int(size if isinstance(size, int) else pg.size()), int(pg.rank())
        import torch.distributed as dist

        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        if isinstance(size, int):
            return size, rank
        if dist.is_available() and dist.is_initialized():
            return dist.get_world_size(), rank
    except Exception:
        pass
    return (size if isinstance(size, int) else 1), 0


def comm_calls(
    func: OpOverload, args: Sequence[Any], kwargs: dict[str, Any], payload: int
) -> list[CommCall]:
    """The kinds one call of a collective or point-to-point op with ``payload`` bytes
    (``comm_bytes``'s convention) moves, with their wire bytes: one entry, or one per
    send and receive of a batch of point-to-point ops."""
    name = func._schema.name.partition("::")[2]
    if name == "batch_p2p_ops":
        ops = _arg(func, args, kwargs, "op_list") or []
        tensors = _arg(func, args, kwargs, "tensors") or []
        out: list[CommCall] = []
        for op, t in zip(ops, tensors, strict=False):
            kind = "recv" if "recv" in str(op) else "send"
            size = nbytes(t)
            out.append(CommCall(kind, size, size))
        return out
    kind = _KIND_OF.get(name, "other")
    if kind in ("send", "recv", "other"):
        return [CommCall(kind, payload, payload)]
    world, rank = _group(func, args, kwargs)
    root = False
    received = 0
    if kind in ("gather", "scatter"):
        root = _arg(func, args, kwargs, "root_rank") == rank
        if kind == "scatter" and not root:
            received = nbytes(_arg(func, args, kwargs, "output_tensors"))
    return [CommCall(kind, payload, wire_bytes(kind, payload, world, root=root, received=received))]
