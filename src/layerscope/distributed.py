"""Profiles of torch.distributed runs: every rank's profile gathered on one rank.

Each rank profiles its own work as usual; ``gather`` (``Profile.gather``) is a collective
that brings them all to rank ``dst``. A profile travels as its JSON text (the C encoder,
then the reader's checks on arrival, so a rank's profile is checked like a loaded file),
through ``torch.distributed.gather_object``, or ``all_gather_object`` on a backend that
has no gather. A rank whose profile cannot be serialised still takes part in the
collective (it sends the error), so no rank is left waiting: ``dst`` then raises naming
it, and so does that rank.

Before anything is sent, the ranks meet through the process group's store (any backend):
each sets a key of this gather and waits at most ``timeout`` seconds for the others'. A
rank that never calls ``gather`` (it exited, failed, or runs other code) is then named by
every rank that did, instead of leaving them in the collective until the process
group's own timeout (gloo's default is 30 minutes).

What ``dst`` gets: a Profile whose tree and sections are ``dst``'s own (not a merge: the
ranks may run different work, and a merged tree would hide it) and whose ``ranks`` lists
every rank's profile in group rank order, ``ranks[i].dist`` saying which rank made it.
The top level and its own entry in ``ranks`` share ``dst``'s nodes with the profile
``gather`` was called on. ``analysis.ranks`` compares the ranks module by module.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from typing import Any

from layerscope.errors import ExportError, InvalidInputError, LayerscopeError
from layerscope.export.json import profile_from_dict
from layerscope.export.jsoncheck import NONFINITE
from layerscope.gcpause import gc_paused
from layerscope.metrics.comm import distributed_info
from layerscope.profile import Profile
from layerscope.torchapi import private
from layerscope.validate import check_number

__all__ = ["gather"]

#: What a rank sends: ("profile", JSON text), ("error", message), or ("self", "") from
#: ``dst``, whose own profile stays where it is.
_Payload = tuple[str, str]

#: How long ``gather`` waits for every rank to arrive, in seconds, by default.
DEFAULT_TIMEOUT_S = 300.0

#: The gathers this process has begun, per group (its global ranks): the round of each
#: meeting's keys, the same on every rank since they all call ``gather`` in turn.
_rounds: dict[tuple[int, ...], int] = {}


def gather(
    profile: Profile, dst: int = 0, group: Any = None, timeout: float = DEFAULT_TIMEOUT_S
) -> Profile | None:
    """Every rank's profile on global rank ``dst``: see the module docstring. Call it on
    every rank of ``group`` (default: the whole world); ranks outside ``group`` get
    ``None`` at once, as torch's collectives do. ``timeout``: the seconds each rank waits
    for the others to call it."""
    dist = _initialised()
    if isinstance(dst, bool) or not isinstance(dst, int):
        raise InvalidInputError(f"dst must be a global rank (an int), got {dst!r}")
    timeout = check_number("timeout", timeout, 0.001, 1e9)
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
    _meet(members, me, timeout)
    try:
        received = _collect(dist, payload, dst, group, len(members), me == dst)
    except RuntimeError as e:  # e.g. gloo's "Connection closed by peer"
        raise LayerscopeError(
            f"rank {me}: the profiles' transfer failed after every rank had called "
            f"Profile.gather (a rank may have exited during it): {e}"
        ) from e
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


def _meet(members: list[int], me: int, timeout: float) -> None:
    """Wait until every rank of ``members`` has reached this gather, at most ``timeout``
    seconds: a ``LayerscopeError`` naming the ranks that did not arrive."""
    store = private("distributed.distributed_c10d._get_default_store")()
    round_ = _rounds.get(tuple(members), 0)
    _rounds[tuple(members)] = round_ + 1
    base = "layerscope/gather/" + ",".join(map(str, members))
    keys = {rank: f"{base}/{round_}/{rank}" for rank in members}
    missing: list[int] = []
    try:
        store.set(keys[me], "1")
        try:
            store.wait(list(keys.values()), timedelta(seconds=timeout))
        except RuntimeError:  # a timeout: who is missing?
            missing = [r for r, key in keys.items() if not store.check([key])]
        if round_ and not missing:  # all are past the previous round's wait
            store.delete_key(f"{base}/{round_ - 1}/{me}")
    except RuntimeError as e:
        raise LayerscopeError(
            f"rank {me}: cannot meet the other ranks at Profile.gather through the process "
            f"group's store (the rank that holds it may have exited): {e}"
        ) from e
    if missing:
        names = ("rank " if len(missing) == 1 else "ranks ") + ", ".join(map(str, missing))
        raise LayerscopeError(
            f"rank {me}: {names} did not call Profile.gather within {timeout:g} s: every "
            "rank of the group must call it at the same point (a rank that exited, failed "
            "or runs other code never arrives)"
        )


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
