"""What-ifs computed from a profile's storage records (``profile.memory["storages"]``,
``metrics/memory/records.py``; ``docs/memory.md``), without running the model again.

``checkpointed_activation_bytes(prof, paths)``: the model's ``activation_bytes`` if the
modules at ``paths`` (one, or several, none inside another) ran under non-reentrant
activation checkpointing (``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``).
Under it the ops of a checkpointed module's subtree save nothing (the backward recomputes
what they saved); the checkpoint keeps the module's inputs instead. So the storages saved
for backward are:

- those saved by some module outside every checkpointed subtree (the root's own ops
  included; a storage saved inside and outside stays saved), and
- the storages of the checkpointed modules' inputs (every call's, positional or
  keyword), counted once even if they were saved already;

never a parameter's or buffer's storage, and not those saved only outside the
profiled model (``prof.outside``: a loss in a ``Profiler`` block), which the root's
``activation_bytes`` never counts.

``recompute_flops(prof, paths)``: the FLOPs the backward then recomputes.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from layerscope.errors import InvalidInputError
from layerscope.profile import Profile

__all__ = ["checkpointed_activation_bytes", "recompute_flops"]

#: The path ``prof.outside`` records under (``collect.scopes.OUTSIDE``).
OUTSIDE = "<outside>"


def _table(prof: Profile) -> tuple[list[str], list[list[Any]]]:
    table = prof.memory.get("storages")
    if not isinstance(table, Mapping):
        raise InvalidInputError(
            "this profile has no storage records (profile.memory['storages']): profile "
            "with memory=True (and backward=True for saved activations)"
        )
    if table.get("dropped"):
        raise InvalidInputError(
            "this profile's storage records were not kept (more storages than the limit, "
            "layerscope.metrics.memory.records.MAX_ROWS): no what-if figures"
        )
    loop = prof.model.get("loop")
    steps = loop.get("analysed_steps", 1) if isinstance(loop, Mapping) else 1
    if isinstance(steps, int) and steps > 1:
        raise InvalidInputError(
            f"this profile sums {steps} analysed steps, and its storage records are the "
            "last step's: a what-if of one step needs a profile of one (ls.profile, or a "
            "Profiler whose schedule analyses one step a cycle: active=1, or timing=True)"
        )
    return list(table["paths"]), list(table["rows"])


def _paths(prof: Profile, paths: str | Collection[str]) -> list[str]:
    """The module paths checked: each known (``prof.node`` raises ``KeyError``), not the
    root, and none inside another."""
    chosen = [paths] if isinstance(paths, str) else list(dict.fromkeys(paths))
    for path in chosen:
        prof.node(path)  # raises for an unknown path
    known = set(chosen)
    for b in chosen:
        a = b.rpartition(".")[0] if b else None
        while a is not None and a not in known:  # b's parents, up to the root
            a = a.rpartition(".")[0] if a else None
        if a is not None:
            raise InvalidInputError(
                f"checkpointed modules may not nest: {b!r} is inside {a or '<root>'!r}"
            )
    return chosen


def checkpointed_activation_bytes(prof: Profile, paths: str | Collection[str]) -> int:
    """The root's ``activation_bytes`` if the module at ``paths`` (one path, or several,
    none inside another) were checkpointed (non-reentrant); module doc. A path is a
    module path of ``prof`` (``""``: the root; ``KeyError`` for an unknown one, as
    ``prof.node``). Raises ``InvalidInputError`` for a profile without storage records
    or nested paths."""
    chosen = _paths(prof, paths)
    table_paths, rows = _table(prof)
    subtree = {n.path for path in chosen for n in prof.node(path).walk()}
    inside = {i for i, p in enumerate(table_paths) if p in subtree}
    held = {table_paths.index(p) for p in chosen if p in table_paths}
    total = 0
    for nbytes, savers, input_of, _output_of, param in rows:
        if param:
            continue
        outside = [i for i in savers if i not in inside]
        kept = bool(held.intersection(input_of)) or any(
            table_paths[i] != OUTSIDE for i in outside[:1]
        )
        if kept:
            total += nbytes
    return total


def recompute_flops(prof: Profile, paths: str | Collection[str]) -> int:
    """FLOPs the backward would recompute with the modules at ``paths`` checkpointed
    (non-reentrant, early stop off: each module's whole forward, every call): the sum of
    their ``flops``. With torch's default early stop the recomputation can end sooner;
    this is then an upper bound."""
    return sum(int(prof.node(p).metrics.get("flops", 0)) for p in _paths(prof, paths))
