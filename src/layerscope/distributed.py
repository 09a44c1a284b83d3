"""Profiles of torch.distributed runs: every rank's profile gathered on one rank.

Each rank profiles its own work as usual; ``gather`` (``Profile.gather``) is a collective
that brings them all to rank ``dst``. A profile travels as its JSON text (the C encoder,
then the reader's checks on arrival, so a rank's profile is checked like a loaded file),
through ``torch.distributed.gather_object``, or ``all_gather_object`` on a backend that
has no gather. A rank whose profile cannot be serialised still takes part in the
collective (it sends the error), so no rank is left waiting: ``dst`` then raises naming
it, and so does that rank.

What ``dst`` gets: a Profile whose tree and sections are ``dst``'s own (not a merge: the
ranks may run different work, and a merged tree would hide it) and whose ``ranks`` lists
every rank's profile in group rank order, ``ranks[i].dist`` saying which rank made it.
The top level and its own entry in ``ranks`` share ``dst``'s nodes with the profile
``gather`` was called on. ``analysis.ranks`` compares the ranks module by module.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from layerscope.errors import ExportError, InvalidInputError, LayerscopeError
from layerscope.export.json import profile_from_dict
from layerscope.export.jsoncheck import NONFINITE
from layerscope.gcpause import gc_paused
from layerscope.metrics.comm import distributed_info
from layerscope.profile import Profile

__all__ = ["gather"]

#: What a rank sends: ("profile", JSON text), ("error", message), or ("self", "") from
#: ``dst``, whose own profile stays where it is.
_Payload = tuple[str, str]


def gather(profile: Profile, dst: int = 0, group: Any = None) -> Profile | None:
    """Every rank's profile on global rank ``dst``: see the module docstring. Call it on
    every rank of ``group`` (default: the whole world); ranks outside ``group`` get
    ``None`` at once, as torch's collectives do."""
    dist = _initialised()
    if isinstance(dst, bool) or not isinstance(dst, int):
        raise InvalidInputError(f"dst must be a global rank (an int), got {dst!r}")
    if group is None:
        group = dist.group.WORLD
    members = dist.get_process_group_ranks(group)
    if dst not in members:
        raise InvalidInputError(
            f"dst={dst} is not a rank of the process group (its global ranks: {members})"
        )
    me = dist.get_rank()
    if me not in members:
        return None
    info = distributed_info()
    own = dataclasses.replace(profile, dist=dict(profile.dist) or info, ranks=[])
    payload: _Payload
    if me == dst:
        payload = ("self", "")
    else:
        try:
            payload = ("profile", own.to_json(indent=None))
        except ExportError as e:
            payload = ("error", str(e))
    received = _collect(dist, payload, dst, group, len(members), me == dst)
    if received is None:
        if payload[0] == "error":
            raise LayerscopeError(f"rank {me}: cannot send its profile: {payload[1]}")
        return None
    ranks: list[Profile] = []
    failed: list[str] = []
    with gc_paused():  # many small containers, no cycles: collections cost the most
        for rank, item in zip(members, received, strict=True):
            kind, text = _payload(item, rank)
            if kind == "self":
                ranks.append(own)
            elif kind == "error":
                failed.append(f"rank {rank}: {text}")
            else:
                data = json.loads(text, parse_constant=NONFINITE.__getitem__)
                ranks.append(profile_from_dict(data, source=f"the profile of rank {rank}"))
                del data
    if failed:
        raise LayerscopeError("cannot gather the profiles: " + "; ".join(failed))
    return dataclasses.replace(own, ranks=ranks)


def _initialised() -> Any:
    """``torch.distributed``, once it is known to have a process group."""
    import torch.distributed as dist

    if not dist.is_available():
        raise InvalidInputError(
            "Profile.gather needs torch.distributed, which this torch build lacks"
        )
    if not dist.is_initialized():
        raise InvalidInputError(
            "Profile.gather needs an initialised process group: call "
            "torch.distributed.init_process_group(...) on every rank first (or keep "
            "each rank's profile: prof.save(f'rank{rank}.json'))"
        )
    return dist


def _collect(
    dist: Any, payload: _Payload, dst: int, group: Any, size: int, is_dst: bool
) -> list[Any] | None:
    """Every rank's payload on ``dst`` (None elsewhere): ``gather_object``, or
    ``all_gather_object`` when the backend has no gather."""
    out: list[Any] | None = [None] * size if is_dst else None
    try:
        dist.gather_object(payload, out, dst=dst, group=group)
        return out
    except (RuntimeError, NotImplementedError) as e:
        if not _unsupported(e):
            raise
    everything: list[Any] = [None] * size
    dist.all_gather_object(everything, payload, group=group)
    return everything if is_dst else None


def _unsupported(error: BaseException) -> bool:
    """Whether ``error`` says the backend does not implement the collective (raised the
    same way on every rank, so all of them fall back together)."""
    if isinstance(error, NotImplementedError):
        return True
    text = str(error).lower()
    return any(s in text for s in ("not supported", "unsupported", "not implemented"))


def _payload(item: Any, rank: int) -> _Payload:
    if (
        isinstance(item, tuple)
        and len(item) == 2
        and item[0] in ("self", "error", "profile")
        and isinstance(item[1], str)
    ):
        return item
    raise LayerscopeError(
        f"rank {rank} sent {type(item).__name__}, not a profile: is every rank calling "
        "Profile.gather (and no other gather_object) at this point?"
    )
