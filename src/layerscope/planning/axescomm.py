"""The collectives each parallelism axis adds to a plan's step beyond the data-parallel
strategy's, and their seconds per micro-batch on the critical path: tensor
parallelism's (the analysis's own, DTensor's), expert parallelism's all-to-alls
(``planning.expertparallel``) and context parallelism's key and value collectives
(``planning.contextparallel``)."""

from __future__ import annotations

from typing import Any

from layerscope.analysis.merge import add_comm
from layerscope.planning.checkpointing import CheckpointChoice
from layerscope.planning.collectives import Link, consecutive, strided
from layerscope.planning.options import Options
from layerscope.planning.strategy import Step
from layerscope.planning.tensorparallel import comm_seconds
from layerscope.profile import Profile
from layerscope.render.units import seconds


def step_comm(strategy: dict[str, Any], prof: Profile, opts: Options) -> dict[str, Any]:
    """The step's collectives: the strategy's, tensor parallelism's (the analysis's own,
    DTensor's), expert parallelism's all-to-alls and context parallelism's key and value
    collectives."""
    if opts.tp == 1 and opts.ep == 1 and opts.cp == 1:
        return strategy
    comm: dict[str, Any] = {}
    for part in (strategy, prof.comm, _a2a(prof, opts), _kv(prof, opts)):
        add_comm(comm, part)
    return comm


def _kv(prof: Profile, opts: Options) -> dict[str, Any]:
    """Context parallelism's key and value collectives per micro-batch (none without)."""
    if opts.cp == 1:
        return {}
    from layerscope.planning.contextparallel import kv_comm

    return kv_comm(prof, opts.cp)


def _a2a(prof: Profile, opts: Options) -> dict[str, Any]:
    """Expert parallelism's all-to-alls per micro-batch (none without)."""
    if opts.ep == 1:
        return {}
    from layerscope.planning.expertparallel import a2a_comm

    return a2a_comm(prof, list(prof.model.get("experts", ())), opts.ep)


def _exposed(
    comm: Any, link: Link, what: str, size: int, choice: CheckpointChoice, notes: list[str]
) -> float:
    """Seconds per micro-batch of ``comm``'s collectives on ``link`` (and again in the
    checkpointed modules' recompute), all on the critical path; said in ``notes``."""
    once, again = comm_seconds(comm, link, choice.paths)
    where = "inside a node" if link.nodes == 1 else f"across {link.nodes} nodes"
    notes.append(
        f"{what}: {seconds(once + again)} per micro-batch over {size} GPUs {where} "
        f"({seconds(again)} of it the recompute's), all exposed"
    )
    return once + again


def tp_seconds(work: Step, choice: CheckpointChoice, notes: list[str]) -> float:
    """Tensor parallelism's collectives (the analysis's own, DTensor's) on the group's
    consecutive ranks (``_exposed``); 0 without tensor parallelism."""
    opts = work.opts
    if opts.tp == 1:
        return 0.0
    link = consecutive(opts.network, opts.tp)
    return _exposed(work.prof.comm, link, "tensor-parallel collectives", opts.tp, choice, notes)


def ep_seconds(work: Step, choice: CheckpointChoice, notes: list[str]) -> float:
    """Expert parallelism's all-to-alls on the expert-parallel group's link (its ranks
    ``tp`` apart in ``dp_shard``: ``_exposed``), after the rule's note; 0 without expert
    parallelism."""
    opts = work.opts
    if opts.ep == 1:
        return 0.0
    from layerscope.planning.expertparallel import ep_notes

    dp_shard = opts.mesh.dp_shard if opts.mesh else opts.ep
    notes.extend(ep_notes(opts.ep, dp_shard, len(work.prof.model.get("experts", ()))))
    link = strided(opts.network, opts.ep, opts.tp)
    a2a = _a2a(work.prof, opts)
    return _exposed(a2a, link, "expert-parallel all-to-alls", opts.ep, choice, notes)


def cp_seconds(work: Step, choice: CheckpointChoice, notes: list[str]) -> float:
    """Context parallelism's key and value collectives on the context-parallel group's
    link (its ranks ``tp`` apart: ``_exposed``), after the rule's note; 0 without
    context parallelism."""
    opts = work.opts
    if opts.cp == 1:
        return 0.0
    from layerscope.planning.contextparallel import cp_notes

    notes.extend(cp_notes(opts.cp, work.prof.model.get("cp")))
    link = strided(opts.network, opts.cp, opts.tp)
    kv = _kv(work.prof, opts)
    return _exposed(kv, link, "context-parallel collectives", opts.cp, choice, notes)


__all__ = ["cp_seconds", "ep_seconds", "step_comm", "tp_seconds"]
