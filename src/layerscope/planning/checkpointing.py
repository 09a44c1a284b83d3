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

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from layerscope.analysis.fold import REPEAT_TYPE, fold
from layerscope.analysis.whatif import OUTSIDE as _OUTSIDE
from layerscope.analysis.whatif import checkpointed_activation_bytes, recompute_flops
from layerscope.errors import InvalidInputError
from layerscope.planning import timeline as tl
from layerscope.profile import Profile


def repeated_blocks(prof: Profile) -> list[str]:
    """Paths of the model's repeated blocks: the members of the run of one module
    repeated (``layers.0–31 ×32``, as views fold it) that holds the most parameters
    (ties: the outer run, then the one with more members), with every other module of
    their class numbered in a list and not inside another (T5's first block, whose
    relative position bias sets it apart from the run, and an encoder-decoder's other
    stack of the same blocks); [] when nothing repeats. A pipeline stage's are the whole
    model's blocks it holds (``planning.pipeline``)."""
    stage = prof.model.get("stage")
    if isinstance(stage, dict) and stage.get("blocks"):
        return list(stage["blocks"])
    best: list[str] = []
    best_key = (0, 0)
    for node in fold(prof).nodes():
        if node.type == REPEAT_TYPE or node.repeat < 2 or len(node.members) != node.repeat:
            continue  # a window of several modules, an unfolded module, or a nested run
        params = sum(int(prof.node(p).metrics.get("params", 0)) for p in node.members)
        key = (params, len(node.members))
        if key > best_key:
            best, best_key = list(node.members), key
    return _kin(prof, best)


#: Container classes: their instances are not blocks of one kind.
_CONTAINERS = frozenset({"Sequential", "ModuleList", "ModuleDict"})


def _kin(prof: Profile, run: list[str]) -> list[str]:
    """``run`` with the modules of its members' class that sit numbered in a list (a
    path ending in a number) outside one another, in the model's order; ``run`` as it
    is when its members' class is a container or its members differ in class. Without
    a run (no two members alike: T5's 2 blocks a stack, the first set apart), the class
    of at least two such modules, each with modules of its own, that holds the most
    parameters."""
    numbered: dict[str, list[str]] = {}
    for n in prof.nodes():
        if n.calls and n.type not in _CONTAINERS and n.path.rpartition(".")[2].isdigit():
            numbered.setdefault(n.type, []).append(n.path)
    outer = {
        kind: [p for p in paths if not any(q != p and p.startswith(q + ".") for q in paths)]
        for kind, paths in numbered.items()
    }
    if not run:  # blocks of modules of their own, not leaves such as two Linears
        held = {
            kind: sum(int(prof.node(p).metrics.get("params", 0)) for p in paths)
            for kind, paths in outer.items()
            if len(paths) >= 2 and all(prof.node(p).children for p in paths)
        }  # fmt: skip
        return outer[max(held, key=held.__getitem__)] if held and max(held.values()) else []
    kinds = {prof.node(p).type for p in run}
    kind = kinds.pop() if len(kinds) == 1 else None
    found = outer.get(kind or "", [])
    return found if set(run) <= set(found) else run


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
    #: per module, all the bytes its policy's saved outputs hold (its recompute does not
    #: make them again), those the analysis held past its exit as well
    policy_saved: Mapping[str, int] = field(default_factory=dict)


def per_op(checkpoint: Any) -> bool:
    """Whether ``checkpoint`` checkpoints each block under a per-op policy: ``"op"``
    (torchtitan's) or a policy function (``planning.oppolicy``)."""
    return checkpoint == "op" or callable(checkpoint)


def resolve(prof: Profile, checkpoint: Any) -> CheckpointChoice:
    """``None`` (nothing), ``"blocks"`` (every repeated block), ``"op"`` or a policy
    function (every repeated block under torchtitan's per-op policy or that one:
    ``planning.oppolicy``) or module paths (none inside another), with their figures."""
    if checkpoint is None:
        paths: list[str] = []
    elif checkpoint == "blocks" or per_op(checkpoint):
        paths = repeated_blocks(prof)
        if not paths:
            raise InvalidInputError(
                f"checkpoint={checkpoint if isinstance(checkpoint, str) else 'a policy'!r}: "
                "this model has no repeated blocks (no module "
                "repeated in a ModuleList or numbered Sequential); give the module paths"
            )
        if per_op(checkpoint):
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
        tuple(paths),
        kept,
        sum(recomputed.values()),
        True,
        dict(policy.kept),
        recomputed,
        dict(policy.saved),
    )


def choose_checkpoints(prof: Profile, budget: int) -> CheckpointChoice:
    """The modules to checkpoint, among the repeated blocks and their direct children,
    so that the kept activation bytes fit ``budget``, by the module doc's greedy rule.
    Where even every block checkpointed does not fit, that set with ``fits=False``."""
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise InvalidInputError(f"budget must be a whole number of bytes, got {budget!r}")
    blocks = repeated_blocks(prof)
    children = {b: [c.path for c in prof.node(b).children] for b in blocks}
    order = [c for b in blocks for c in (b, *children[b])]
    search = _Search(prof, order)
    greedy = _Greedy(search, blocks, children, order)
    kept = search.kept_now()
    while kept > budget:
        best = greedy.best()
        if best is None:  # nothing frees more: every block is checkpointed already
            return _choice(prof, greedy.chosen, fits=False)
        kept -= greedy.take(*best)
    return _choice(prof, greedy.chosen)


class _Greedy:
    """The greedy rule's candidates, best first: each candidate's freed bytes per FLOP
    recomputed kept in a heap, and worked out again only when a module taken touched
    its storage rows (or, for a block, when one of its children was taken), so that
    choosing ``n`` modules costs about ``n log n`` steps, not ``n`` scans of them all.
    Ties go to the candidate first in the model's order, as a scan would."""

    def __init__(
        self, search: _Search, blocks: list[str], children: dict[str, list[str]],
        order: list[str],
    ) -> None:  # fmt: skip
        self.search, self.children = search, children
        self.rank = {c: i for i, c in enumerate(order)}
        self.parent = {c: b for b in blocks for c in children[b]}
        self.by_row: dict[int, list[str]] = {}
        for c in order:
            for k in search.touched[c]:
                self.by_row.setdefault(k, []).append(c)
        self._chosen: dict[str, None] = {}  # in the order taken
        self.taken: set[str] = set()
        self.version = dict.fromkeys(order, 0)
        self.heap: list[tuple[float, int, int, str, int]] = []
        for c in order:
            self._push(c)

    @property
    def chosen(self) -> list[str]:
        return list(self._chosen)

    def _valid(self, c: str) -> bool:
        return c not in self.taken and self.parent.get(c) not in self.taken

    def _replaced(self, c: str) -> list[str]:
        """A block's children already chosen (the block replaces them)."""
        return [p for p in self.children.get(c, ()) if p in self.taken]

    def _push(self, c: str) -> None:
        self.version[c] += 1
        if not self._valid(c):
            return
        replaced = self._replaced(c)
        freed = self.search.freed(c, replaced)
        if freed <= 0:
            return
        added = self.search.flops[c] - sum(self.search.flops[p] for p in replaced)
        heapq.heappush(self.heap, (-freed / max(added, 1), self.rank[c], self.version[c], c, freed))

    def best(self) -> tuple[str, int] | None:
        """The candidate that frees the most bytes per FLOP, and the bytes it frees."""
        heap = self.heap
        while heap and (heap[0][2] != self.version[heap[0][3]] or not self._valid(heap[0][3])):
            heapq.heappop(heap)
        if not heap:
            return None
        _, _, _, c, freed = heapq.heappop(heap)
        return c, freed

    def take(self, c: str, freed: int) -> int:
        """Checkpoint ``c`` (replacing its chosen children); the bytes it frees."""
        replaced = self._replaced(c)
        rows = {k for p in (c, *replaced) for k in self.search.touched[p]}
        self.search.take(c, replaced)
        for p in replaced:  # a block replaces its chosen children
            del self._chosen[p]
            self.taken.discard(p)
        self._chosen[c] = None
        self.taken.add(c)
        dirty = {x for k in rows for x in self.by_row.get(k, ())}
        if c in self.parent:
            dirty.add(self.parent[c])
        for x in sorted(dirty, key=self.rank.__getitem__):
            self._push(x)
        return freed


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
        # the rows each candidate touches: one its subtree saved, or one it takes in;
        # found from each row's modules (no scan of every row per candidate)
        within: dict[int, list[str]] = {}  # module index -> the candidates holding it
        named: dict[int, list[str]] = {}  # module index -> the candidates it is
        for c in candidates:
            sub = {index[n.path] for n in prof.node(c).walk() if n.path in index}
            self.subtree[c] = sub
            for i in sub:
                within.setdefault(i, []).append(c)
            named.setdefault(self.index[c], []).append(c)
        self.touched: dict[str, list[int]] = {c: [] for c in candidates}
        for k, r in enumerate(self.rows):
            mine = {c for i in r[1] for c in within.get(i, ())}
            mine.update(c for i in r[2] for c in named.get(i, ()))
            for c in mine:
                self.touched[c].append(k)

    def _kept(
        self, row: list[Any], extra: set[int] | None = None, dropped: set[int] | None = None,
        added: int | None = None,
    ) -> bool:  # fmt: skip
        """Whether ``row`` is kept for the backward with the set as it is, or, given
        ``extra``, ``dropped`` and ``added``, with a candidate's subtree ``extra`` inside
        and the held inputs less ``dropped`` plus ``added`` (no set copied)."""
        held, inside = self.held, self.inside
        for i in row[2]:
            if i == added or (i in held and (dropped is None or i not in dropped)):
                return True
        for i in row[1]:
            if i not in inside and (extra is None or i not in extra):
                return bool(i != self.outside)
        return False

    def kept_now(self) -> int:
        return sum(int(r[0]) for r in self.rows if self._kept(r))

    def freed(self, candidate: str, replaced: list[str]) -> int:
        """Bytes no longer kept with ``candidate`` added (and ``replaced`` dropped)."""
        extra, added = self.subtree[candidate], self.index[candidate]
        dropped = {self.index[p] for p in replaced}
        rows = {k for p in (candidate, *replaced) for k in self.touched[p]}
        out = 0
        for k in rows:
            row = self.rows[k]
            now, then = self._kept(row), self._kept(row, extra, dropped, added)
            out += int(row[0]) * (now - then)
        return out

    def take(self, candidate: str, replaced: list[str]) -> None:
        """Add ``candidate`` to the set, ``replaced`` (its chosen children) out."""
        self.inside.update(self.subtree[candidate])
        self.held.difference_update(self.index[p] for p in replaced)
        self.held.add(self.index[candidate])


def checkpoint_moments(prof: Profile, choice: CheckpointChoice, setup: tl.Setup) -> None:
    """What each checkpointed module frees at its exit (storages only its subtree saved,
    not the checkpointed modules' inputs, not saved outside the model either: a loss
    holds those), the inputs it keeps that the analysis freed, and its recompute's peak
    (its forward's)."""
    table = prof.memory["storages"]
    index = {p: i for i, p in enumerate(table["paths"])}
    held = {index[p] for p in choice.paths if p in index}
    # storage-table entry -> the checkpointed modules whose subtree holds it
    within: dict[int, set[str]] = {}
    for path in choice.paths:
        for n in prof.node(path).walk():
            if n.path in index:
                within.setdefault(index[n.path], set()).add(path)
    drops = dict.fromkeys(choice.paths, 0)
    # a checkpointed module's output that it saved itself (and only checkpointed
    # subtrees saved) and the next checkpointed module keeps as its input: the analysis
    # holds it until the module's own backward, the checkpointed run frees it after the
    # next module's backward, before this one's recompute makes it again
    regenerated = dict.fromkeys(choice.paths, 0)
    path_at = {index[p]: p for p in choice.paths if p in index}
    # a checkpointed module's input nothing saved, not the step's own (the model's inputs
    # are held all step): the analysis frees it in the forward, the checkpoint keeps it
    # to the module's backward (the first such module's, in the
    # forward's order, when several read it: its backward comes last)
    inputs_of = dict.fromkeys(choice.paths, 0)
    root = index.get("", -1)
    order = {p: k for k, p in enumerate(choice.paths)}
    for nbytes, savers, inputs, outputs, param in table["rows"]:
        if not param and not savers and root not in inputs and (readers := held & set(inputs)):
            inputs_of[min((path_at[i] for i in readers), key=order.__getitem__)] += int(nbytes)
        if param or not savers or any(i not in within for i in savers):
            continue
        first, rest = savers[0], savers[1:]
        for path in within[first]:
            if all(path in within[i] for i in rest) and not held.intersection(inputs):
                drops[path] += int(nbytes)
        for i in set(outputs).intersection(path_at):
            # held by the analysis to the module's own backward only if the module saved
            # it itself; saved by the next module alone, the analysis freed it there too
            mine = any(path_at[i] in within[s] for s in savers)
            if mine and (held - {i}).intersection(inputs):
                regenerated[path_at[i]] += int(nbytes)
    # checkpoint="op": the kept outputs stay to the backward, and its recompute does not
    # make them again
    peaks = {p: int(prof.node(p).metrics.get("peak_bytes", 0)) for p in drops}
    for path, kept in choice.policy_kept.items():
        drops[path] -= kept
        peaks[path] = max(0, peaks[path] - choice.policy_saved.get(path, kept))
    setup.drops = drops
    setup.recompute_peak = peaks
    setup.regenerated.update(regenerated)
    setup.held_inputs = {p: n for p, n in inputs_of.items() if n}


__all__ = [
    "CheckpointChoice",
    "checkpoint_moments",
    "choose_checkpoints",
    "repeated_blocks",
    "resolve",
]
