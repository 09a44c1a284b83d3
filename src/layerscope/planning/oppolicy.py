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
MLP's down projection's before the residual add, is kept). Its recompute is the block's
forward less the saved ops' FLOPs, in time its forward's time scaled by that share.

``checkpoint=policy`` (a function as torch's ``create_selective_checkpoint_contexts``
takes): the same in every repeated block, with the calls that policy saves, as the
analysis recorded them by calling it on each forward op (``record_ops(policy)``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from layerscope.errors import InvalidInputError
from layerscope.metrics.memory.records import RECORDED_OPS
from layerscope.planning.timeline import inside
from layerscope.profile import Profile

MM = "aten.mm.default"
#: the ops whose every output the policy saves (all recorded ops but ``mm``)
ALWAYS_SAVED = RECORDED_OPS - {MM}


@dataclass(frozen=True)
class OpPolicy:
    """Per checkpointed block: the bytes its saved ops' outputs hold and their FLOPs."""

    kept: Mapping[str, int]
    saved_flops: Mapping[str, int]


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
    paths = table["paths"]
    given = bool(table.get("policy"))  # every call recorded is one the policy saves
    kept, flops = dict.fromkeys(blocks, 0), dict.fromkeys(blocks, 0)
    counts = dict.fromkeys(blocks, 0)
    for index, op, nbytes, op_flops in ops:
        block = next((b for b in blocks if inside(paths[index], b)), None)
        if block is None:
            continue
        if op == MM:
            counts[block] += 1
        if given or op in ALWAYS_SAVED or (op == MM and counts[block] % 2 == 1):
            kept[block] += int(nbytes)
            flops[block] += int(op_flops)
    return OpPolicy(kept, flops)


__all__ = ["ALWAYS_SAVED", "MM", "OpPolicy", "op_policy"]
