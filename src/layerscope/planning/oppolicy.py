"""``checkpoint="op"``: torchtitan's per-op selective activation checkpointing
(``selective_ac_option="op"``; torchtitan/distributed/activation_checkpoint.py, its
``_custom_policy`` under ``create_selective_checkpoint_contexts``). Every repeated block
is checkpointed with a policy that, in the block's forward, saves the outputs of every
attention kernel (the SDPA ops) and of ``aten.max`` and of every other ``aten.mm``
(the 1st, 3rd, ...: its count of mm calls in the block is odd), and recomputes the rest
in the backward.

The plan's rule, from the analysis's op records (``memory["storages"]["ops"]``, made
when a plan asks for them: ``metrics.memory.records.record_ops``): a block is
checkpointed as with ``"blocks"`` (at its exit, what only it saved is dropped; before
its backward its forward runs again, holding its forward peak), except that the saved
ops' outputs stay from its forward to its backward (and its recompute, which does not
make them again, holds its forward peak less them): they are taken off what the block
drops (the drop can turn into an addition: an output the analysis freed, such as the
MLP's down projection's before the residual add, is kept), but for a storage the
analysis holds past the block's exit anyway (the table's ``op_rows`` tie each call to
its outputs' rows): one saved outside the block, or the block's output that the next
checkpointed block keeps as its input, costs nothing more. Its recompute is the block's
forward less the saved ops' FLOPs, in time its forward's time scaled by that share.

``checkpoint=policy`` (a function as torch's ``create_selective_checkpoint_contexts``
takes): the same in every repeated block, with the calls that policy saves, as the
analysis recorded them by calling it on each forward op (``record_ops(policy)``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from layerscope.errors import InvalidInputError
from layerscope.metrics.memory.records import RECORDED_OPS
from layerscope.planning.timeline import inside
from layerscope.profile import Profile

MM = "aten.mm.default"
#: the ops whose every output the policy saves (all recorded ops but ``mm``)
ALWAYS_SAVED = RECORDED_OPS - {MM}


@dataclass(frozen=True)
class OpPolicy:
    """Per checkpointed block: the bytes its saved ops' outputs hold from its exit to its
    backward that the analysis did not hold there already (``kept``), all their bytes
    (``saved``: its recompute does not make them again) and their FLOPs."""

    kept: Mapping[str, int]
    saved: Mapping[str, int]
    saved_flops: Mapping[str, int]


def _held_past(row: list[Any], block: str, paths: list[str], blocks: set[str]) -> bool:
    """Whether the analysis holds this storage past ``block``'s exit anyway: saved by a
    module outside it, or an input another checkpointed block keeps (its output, read by
    the next block)."""
    _, savers, inputs, _, _ = row
    return any(not inside(paths[i], block) for i in savers) or any(
        paths[i] in blocks and paths[i] != block for i in inputs
    )


def op_policy(prof: Profile, blocks: list[str]) -> OpPolicy:
    """The policy's figures for ``blocks`` (module doc); ``InvalidInputError`` when the
    analysis has no op records."""
    table = prof.memory.get("storages") or {}
    ops = table.get("ops")
    if ops is None:
        raise InvalidInputError(
            "checkpoint='op' needs the analysis's op records (memory['storages']['ops']), "
            "which this profile lacks: pass the model, whose analysis records them"
        )
    paths, rows = table["paths"], table["rows"]
    op_rows = table.get("op_rows") or [[] for _ in ops]  # absent in older documents
    given = bool(table.get("policy"))  # every call recorded is one the policy saves
    kept, saved = dict.fromkeys(blocks, 0), dict.fromkeys(blocks, 0)
    flops, counts = dict.fromkeys(blocks, 0), dict.fromkeys(blocks, 0)
    for (index, op, nbytes, op_flops), made in zip(ops, op_rows, strict=True):
        block = next((b for b in blocks if inside(paths[index], b)), None)
        if block is None:
            continue
        if op == MM:
            counts[block] += 1
        if given or op in ALWAYS_SAVED or (op == MM and counts[block] % 2 == 1):
            held = sum(rows[r][0] for r in made if _held_past(rows[r], block, paths, set(blocks)))
            kept[block] += max(0, int(nbytes) - held)
            saved[block] += int(nbytes)
            flops[block] += int(op_flops)
    return OpPolicy(kept, saved, flops)


__all__ = ["ALWAYS_SAVED", "MM", "OpPolicy", "op_policy"]
