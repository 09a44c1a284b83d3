"""``compile=True``'s memory: what AOTAutograd's partitioner saves for the backward
instead of what eager autograd saves (``metrics.memory.remat``'s rule, over the op graph
the analysis recorded: ``memory["storages"]["compiled"]``).

Per repeated block that is not checkpointed, the bytes eager autograd saved there less
those the rule saves there are dropped at its forward's exit and made again before its
backward, as a checkpointed module's are (``planning.timeline``): the compiled forward
frees what it does not save once its last forward use is over, and the compiled
backward recomputes it where it is needed. A block's forward peak and its backward are
eager's; the recomputation's time is not charged (fused pointwise work in the
backward's kernels). Outside the blocks memory is eager's, as when each block is
compiled on its own (torchtitan's way); a model without repeated blocks is one unit,
the root. What the loss saves, after the model's exit, is eager's either way.
"""

from __future__ import annotations

from layerscope.analysis.whatif import OUTSIDE
from layerscope.planning import timeline as tl
from layerscope.planning.checkpointing import CheckpointChoice, repeated_blocks
from layerscope.profile import Profile

#: The note of a compiled plan whose profile has no op graph.
NO_GRAPH = (
    "compiled: memory as in eager (the profile has no op graph of its forward, which the "
    "partitioner's rule reads: pass the model)"
)
#: The note of a compiled plan whose every repeated block is checkpointed.
ALL_CHECKPOINTED = (
    "compiled memory: as in eager (every repeated block is checkpointed, and a "
    "checkpointed block keeps its inputs whether compiled or not)"
)
#: The note of a compiled plan's memory rule.
RULE = (
    "compiled memory: the partitioner's min-cut (tensors recomputable by pointwise ops, "
    "views, reductions and casts made again in the backward; matmul and attention outputs "
    "and what they read kept): in {where}, {saved:,} B saved for the backward where eager "
    "saves {eager:,} B"
)


def compiled_memory(
    prof: Profile, choice: CheckpointChoice, setup: tl.Setup
) -> tuple[str, dict[str, int]]:
    """Add the compiled run's drops to ``setup`` (module doc); the plan's note and, per
    block, the bytes eager saves there that the compiled run does not keep."""
    table = prof.memory.get("storages") or {}
    compiled = table.get("compiled")
    if compiled is None:
        return NO_GRAPH, {}
    paths = table["paths"]
    held = set(choice.paths)
    blocks = repeated_blocks(prof)
    units = [b for b in blocks if not any(tl.inside(b, c) for c in held)] if blocks else [""]
    if not units:
        return ALL_CHECKPOINTED, {}

    def unit(index: int) -> str | None:
        path = paths[index]
        if path == OUTSIDE or any(tl.inside(path, c) for c in held):
            return None  # the loss's (after the model's exit), a checkpointed module's
        return next((u for u in units if tl.inside(path, u)), None)

    eager = dict.fromkeys(units, 0)
    saved = dict(eager)
    for nbytes, savers, _, _, param in table["rows"]:
        if savers and not param and (u := unit(savers[0])) is not None:
            eager[u] += int(nbytes)
    for index, nbytes in compiled:
        if (u := unit(index)) is not None:
            saved[u] += int(nbytes)
    less = {u: nbytes - saved[u] for u, nbytes in eager.items() if nbytes != saved[u]}
    for u, nbytes in less.items():
        setup.drops[u] = setup.drops.get(u, 0) + nbytes
    where = "the model" if units == [""] else f"{len(units)} repeated blocks"
    note = RULE.format(where=where, saved=sum(saved.values()), eager=sum(eager.values()))
    return note, less


__all__ = ["ALL_CHECKPOINTED", "NO_GRAPH", "RULE", "compiled_memory"]
