"""Which modules to checkpoint: the model's repeated blocks, and a choice that fits an
activation budget with the least recomputation.

All figures come from one profile made with ``memory=True, backward=True`` (fresh or
loaded) through ``analysis.whatif``: the activation bytes kept with a set of modules
checkpointed (non-reentrant) and the FLOPs recomputed.

``choose_checkpoints(prof, budget)`` searches the repeated blocks and their direct
children. Greedy: while the kept bytes exceed ``budget``, add the candidate that frees
the most bytes per FLOP it adds to the recomputation (a block replaces its children
already chosen; a child is not offered inside a chosen block), each step's figures
computed exactly from the storage records, not added up. Identical blocks give the same
ratio, so ties go to the earlier block: the first blocks are checkpointed first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from layerscope.analysis.fold import REPEAT_TYPE, fold
from layerscope.analysis.whatif import OUTSIDE as _OUTSIDE
from layerscope.analysis.whatif import checkpointed_activation_bytes, recompute_flops
from layerscope.errors import InvalidInputError
from layerscope.profile import Profile


def repeated_blocks(prof: Profile) -> list[str]:
    """Paths of the model's repeated blocks: the members of the run of one module
    repeated (``layers.0–31 ×32``, as views fold it) that holds the most parameters
    (ties: the outer run, then the one with more members); [] when nothing repeats."""
    best: list[str] = []
    best_key = (0, 0)
    for node in fold(prof).nodes():
        if node.type == REPEAT_TYPE or node.repeat < 2 or len(node.members) != node.repeat:
            continue  # a window of several modules, an unfolded module, or a nested run
        params = sum(int(prof.node(p).metrics.get("params", 0)) for p in node.members)
        key = (params, len(node.members))
        if key > best_key:
            best, best_key = list(node.members), key
    return best


@dataclass(frozen=True)
class CheckpointChoice:
    """A set of checkpointed modules and what it gives."""

    paths: tuple[str, ...]
    #: activation bytes saved for backward with these modules checkpointed
    kept_activation_bytes: int
    #: FLOPs the backward recomputes (early stop off: an upper bound with it on)
    recompute_flops: int
    #: whether ``kept_activation_bytes`` fits the budget it was chosen for
    fits: bool = True
    #: ``checkpoint="op"`` (``planning.oppolicy``): per module, the bytes its policy
    #: keeps from its forward to its backward, and the FLOPs its recompute runs
    policy_kept: Mapping[str, int] = field(default_factory=dict)
    recomputed: Mapping[str, int] = field(default_factory=dict)


def resolve(prof: Profile, checkpoint: str | Sequence[str] | None) -> CheckpointChoice:
    """``None`` (nothing), ``"blocks"`` (every repeated block), ``"op"`` (every repeated
    block under torchtitan's per-op policy: ``planning.oppolicy``) or module paths (none
    inside another), with their figures."""
    if checkpoint is None:
        paths: list[str] = []
    elif checkpoint in ("blocks", "op"):
        paths = repeated_blocks(prof)
        if not paths:
            raise InvalidInputError(
                f"checkpoint={checkpoint!r}: this model has no repeated blocks (no module "
                "repeated in a ModuleList or numbered Sequential); give the module paths"
            )
        if checkpoint == "op":
            return _op_choice(prof, paths)
    elif isinstance(checkpoint, str):
        raise InvalidInputError(
            f"checkpoint must be None, 'blocks', 'op', 'auto' or a list of module paths, "
            f"got {checkpoint!r}"
        )
    else:
        paths = list(checkpoint)
    return _choice(prof, paths)


def _choice(prof: Profile, paths: Sequence[str], fits: bool = True) -> CheckpointChoice:
    return CheckpointChoice(
        tuple(paths),
        checkpointed_activation_bytes(prof, paths),
        recompute_flops(prof, paths) if paths else 0,
        fits,
    )


def _op_choice(prof: Profile, paths: list[str]) -> CheckpointChoice:
    """Every block under the per-op policy: what the blocks keep, plus the policy's
    saved outputs; the recompute less the saved ops' FLOPs."""
    from layerscope.planning.oppolicy import op_policy

    policy = op_policy(prof, paths)
    flops = {p: int(prof.node(p).metrics.get("flops", 0)) for p in paths}
    recomputed = {p: max(0, flops[p] - policy.saved_flops[p]) for p in paths}
    kept = checkpointed_activation_bytes(prof, paths) + sum(policy.kept.values())
    return CheckpointChoice(
        tuple(paths), kept, sum(recomputed.values()), True, dict(policy.kept), recomputed
    )


def choose_checkpoints(prof: Profile, budget: int) -> CheckpointChoice:
    """The modules to checkpoint, among the repeated blocks and their direct children,
    so that the kept activation bytes fit ``budget``, by the module doc's greedy rule.
    Where even every block checkpointed does not fit, that set with ``fits=False``."""
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise InvalidInputError(f"budget must be a whole number of bytes, got {budget!r}")
    blocks = repeated_blocks(prof)
    children = {b: [c.path for c in prof.node(b).children] for b in blocks}
    search = _Search(prof, [c for b in blocks for c in (b, *children[b])])
    chosen: list[str] = []
    kept = search.kept_now()
    while kept > budget:
        best: tuple[float, str, int] | None = None
        for candidate in _candidates(blocks, children, chosen):
            replaced = [p for p in chosen if p in children.get(candidate, ())]
            freed = search.freed(candidate, replaced)
            if freed <= 0:
                continue
            added = search.flops[candidate] - sum(search.flops[p] for p in replaced)
            ratio = freed / max(added, 1)
            if best is None or ratio > best[0]:
                best = (ratio, candidate, freed)
        if best is None:  # nothing frees more: every block is checkpointed already
            return _choice(prof, chosen, fits=False)
        _, candidate, freed = best
        search.take(candidate, [p for p in chosen if p in children.get(candidate, ())])
        chosen = _with(chosen, candidate, children)
        kept -= freed
    return _choice(prof, chosen)


class _Search:
    """The kept bytes of a growing set of checkpointed modules, updated per candidate
    from the storage records it touches (the rule of ``analysis.whatif``), so that a
    greedy step costs the rows a candidate affects, not the whole table."""

    def __init__(self, prof: Profile, candidates: list[str]) -> None:
        table = prof.memory["storages"]
        self.paths: list[str] = list(table["paths"])
        self.rows = [r for r in table["rows"] if not r[4]]  # parameters are never kept
        index = {p: i for i, p in enumerate(self.paths)}
        self.outside = index.get(_OUTSIDE, -1)
        self.inside: set[int] = set()
        self.held: set[int] = set()
        self.flops = {c: int(prof.node(c).metrics.get("flops", 0)) for c in candidates}
        self.subtree: dict[str, set[int]] = {}
        self.index = {c: index.get(c, -1) for c in candidates}
        self.touched: dict[str, list[int]] = {}
        for c in candidates:
            sub = {index[n.path] for n in prof.node(c).walk() if n.path in index}
            self.subtree[c] = sub
            mine = self.index[c]
            self.touched[c] = [
                k for k, r in enumerate(self.rows) if sub.intersection(r[1]) or mine in r[2]
            ]

    def _kept(self, row: list[Any], inside: set[int], held: set[int]) -> bool:
        if held.intersection(row[2]):
            return True
        outside = next((i for i in row[1] if i not in inside), None)
        return outside is not None and outside != self.outside

    def kept_now(self) -> int:
        return sum(int(r[0]) for r in self.rows if self._kept(r, self.inside, self.held))

    def _after(self, candidate: str, replaced: list[str]) -> tuple[set[int], set[int]]:
        held = (self.held - {self.index[p] for p in replaced}) | {self.index[candidate]}
        return self.inside | self.subtree[candidate], held

    def freed(self, candidate: str, replaced: list[str]) -> int:
        """Bytes no longer kept with ``candidate`` added (and ``replaced`` dropped)."""
        inside, held = self._after(candidate, replaced)
        rows = {k for p in (candidate, *replaced) for k in self.touched[p]}
        return sum(
            int(self.rows[k][0])
            for k in rows
            if self._kept(self.rows[k], self.inside, self.held)
            and not self._kept(self.rows[k], inside, held)
        ) - sum(
            int(self.rows[k][0])
            for k in rows
            if not self._kept(self.rows[k], self.inside, self.held)
            and self._kept(self.rows[k], inside, held)
        )

    def take(self, candidate: str, replaced: list[str]) -> None:
        """Add ``candidate`` to the set, ``replaced`` (its chosen children) out."""
        self.inside, self.held = self._after(candidate, replaced)


def _candidates(blocks: list[str], children: dict[str, list[str]], chosen: list[str]) -> list[str]:
    taken = set(chosen)
    out: list[str] = []
    for block in blocks:
        if block in taken:
            continue
        out.append(block)
        out.extend(c for c in children[block] if c not in taken)
    return out


def _with(chosen: list[str], candidate: str, children: dict[str, list[str]]) -> list[str]:
    """``chosen`` plus ``candidate``; a block replaces its chosen children."""
    inside = set(children.get(candidate, ()))
    return [p for p in chosen if p not in inside] + [candidate]


__all__ = ["CheckpointChoice", "choose_checkpoints", "repeated_blocks", "resolve"]
