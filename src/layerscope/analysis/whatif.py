"""What-ifs computed from a profile's storage records (``profile.memory["storages"]``,
``metrics/memory/records.py``; ``docs/memory.md``), without running the model again.

``checkpointed_activation_bytes(prof, path)``: the model's ``activation_bytes`` if the
module at ``path`` alone ran under non-reentrant activation checkpointing
(``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``). Under it the ops of
the module's subtree save nothing (the backward recomputes what they saved); the
checkpoint keeps the module's inputs instead. So the storages saved for backward are:

- those saved by some module outside the subtree (the root's own ops included; a
  storage saved inside and outside the subtree stays saved), and
- the storages of the module's inputs (every call's, positional or keyword), counted
  once even if they were saved already;

never a parameter's or buffer's storage, and not those saved only outside the
profiled model (``prof.outside``: a loss in a ``Profiler`` block), which the root's
``activation_bytes`` never counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from layerscope.errors import InvalidInputError
from layerscope.profile import Profile

__all__ = ["checkpointed_activation_bytes"]

#: The path ``prof.outside`` records under (``collect.scopes.OUTSIDE``).
_OUTSIDE = "<outside>"


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
    return list(table["paths"]), list(table["rows"])


def checkpointed_activation_bytes(prof: Profile, path: str) -> int:
    """The root's ``activation_bytes`` if the module at ``path`` alone were checkpointed
    (non-reentrant); module doc. ``path`` is a module path of ``prof`` (``""``: the
    root; ``KeyError`` for an unknown one, as ``prof.node``). Raises
    ``InvalidInputError`` for a profile without storage records."""
    node = prof.node(path)  # raises for an unknown path
    paths, rows = _table(prof)
    subtree = {n.path for n in node.walk()}
    inside = {i for i, p in enumerate(paths) if p in subtree}
    here = paths.index(path) if path in paths else -1
    total = 0
    for nbytes, savers, input_of, _output_of, param in rows:
        if param:
            continue
        outside = [i for i in savers if i not in inside]
        kept = here in input_of or any(paths[i] != _OUTSIDE for i in outside[:1])
        if kept:
            total += nbytes
    return total
