"""Repeat folding: runs of structurally identical sibling modules shown as one entry ×N.

``fold(profile)`` returns a new Profile in which, under every node, consecutive children
with the same structural signature are merged, so a 12-layer stack reads ``layers.0–11 ×12``
and a repeated window of several modules (Linear, ReLU, Linear, ×3) reads ``0–8 Repeat ×3``.

Which runs fold (``mode``):

- ``True`` (the default): only runs whose siblings *all* have decimal-integer names, the
  numbered items of a ``ModuleList`` or of a plain ``nn.Sequential``. Named attributes
  (``k_proj``, ``v_proj``) and the named items of ``Sequential(OrderedDict(...))`` are
  distinct parts of a model, so they never fold, however alike. A window of several
  modules ×N folds only when every module it covers has an integer name.
- ``"all"``: any run of alike siblings folds, whatever their names (``A–B ×2``,
  ``C–K Repeat ×3``).
- ``False``: no folding; ``fold`` returns ``profile`` itself, not a copy.

The rule applies at every level, inside folded entries too. At each position the longest
cover ``w × N`` (N ≥ 2) wins, ties going to the smaller window ``w``; folding then goes on
after the run (greedy, left to right).

Structural signature: type, repr, own tensors by dtype, calls, repeat, input and output
shapes, the children's signatures, and the numerics range flags (``fp16_overflow``,
``bf16_overflow``, ``fp16_underflow``, ``bf16_underflow``): alike members may fold, unlike
ones may not. Never the name or path, so ``layers.3`` and ``layers.4`` can match. A module
with a numerics event (``nan`` or ``inf`` > 0, non-finite gradients, or the path of
``profile.numerics["first_nonfinite"]`` or ``["origin"]``) gets a signature of its own:
it and its ancestors are never hidden inside a fold, while its alike neighbours on either
side still fold among themselves.

Metric rule for merged entries: each key's ``fold`` rule in the metric table
(``metricspec``). Additive metrics (and the dtype breakdowns and ``calls``) are summed over
the members, so the folded totals equal the unfolded totals exactly; any other key
(``peak_bytes``, ``forward_time``, keys not in the table) is not a quantity that adds up
over modules, so the merged entry takes the maximum over its members. Its numerics
sum the checked calls, combine min, max and abs-max, and keep the (shared) range flags.

Paths and members: a merged entry's ``members`` lists the paths of *every* original module
it sums, in tree order (inside an entry folded ×4, an inner entry folded ×2 has 8 members;
``repeat`` stays the count within one instance of its parent). Its ``path`` is the original
parent path of its first member plus the range name; an unfolded inner entry keeps the
path and name of its first member.
"""

from __future__ import annotations

import copy
from bisect import bisect_right
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, Literal, TypeAlias

import layerscope.metricspec as ms
from layerscope.errors import InvalidInputError
from layerscope.gcpause import gc_paused
from layerscope.profile import Node, Number, Profile

__all__ = [
    "REPEAT_TYPE",
    "FoldMode",
    "fold",
    "renumber_as",
]

#: ``Node.type`` of the synthetic entry standing for a window of several modules ×N.
REPEAT_TYPE = "Repeat"

#: ``True``: fold integer-named siblings only; ``"all"``: any names; ``False``: no folding.
FoldMode: TypeAlias = bool | Literal["all"]

_DASH = "–"  # en dash, as in "layers.0–11"

#: ``node.numerics`` flags that are part of the structural signature.
_RANGE_FLAGS: tuple[str, ...] = (
    "fp16_overflow",
    "bf16_overflow",
    "fp16_underflow",
    "bf16_underflow",
)

_NO_FLAGS: tuple[None, ...] = (None,) * len(_RANGE_FLAGS)

#: ``profile.numerics`` entries naming the module of a non-finite event.
_EVENT_KEYS: tuple[str, ...] = ("first_nonfinite", "origin")


def fold(profile: Profile, mode: FoldMode = True) -> Profile:
    """A new Profile with repeated sibling runs folded; ``profile`` is left untouched.

    ``mode`` is ``True`` (integer-named siblings only), ``"all"`` (any names) or ``False``
    (no folding: ``profile`` itself is returned, not a copy). See the module docstring.
    """
    if mode is False:
        return profile
    if mode is not True and mode != "all":
        raise InvalidInputError(f"fold mode must be True, False or 'all', not {mode!r}")
    folder = _Folder(any_names=mode == "all", event_paths=_event_paths(profile))
    with gc_paused():  # the tree has no cycles; collections of a large heap cost most
        root = folder.entry([profile.root], profile.root.name, profile.root.path, repeat=1)
    _renumber(root, "0", 0)
    return Profile(
        root=root,
        model=copy.deepcopy(profile.model),
        env=copy.deepcopy(profile.env),
        unsupported_ops=copy.deepcopy(profile.unsupported_ops),
        memory=copy.deepcopy(profile.memory),
        numerics=copy.deepcopy(profile.numerics),
        timing=copy.deepcopy(profile.timing),
        notices=list(profile.notices),
        outside=dict(profile.outside),
        dist=copy.deepcopy(profile.dist),
        ranks=list(profile.ranks),  # each rank's own profile, unfolded
        schema=profile.schema,
        extra=copy.deepcopy(profile.extra),
    )


def _event_paths(profile: Profile) -> frozenset[str]:
    """Paths of the modules named by the profile's first non-finite event and origin."""
    paths = set()
    for key in _EVENT_KEYS:
        event = profile.numerics.get(key)
        if isinstance(event, Mapping) and isinstance(event.get("path"), str):
            paths.add(event["path"])
    return frozenset(paths)


def _has_event(node: Node, event_paths: frozenset[str]) -> bool:
    """Whether the node saw non-finite values or is named by a profile-level event."""
    numerics = node.numerics
    if numerics and (
        (numerics.get("nan") or 0) > 0
        or (numerics.get("inf") or 0) > 0
        or numerics.get("nonfinite_calls")
        or numerics.get("nonfinite_grad_calls")
    ):
        return True
    if event_paths:
        return node.path in event_paths or any(p in event_paths for p in node.members)
    return False


class _Folder:
    """One folding pass; interns structural signatures to small ints for cheap comparison."""

    def __init__(self, any_names: bool, event_paths: frozenset[str]) -> None:
        self._any_names = any_names
        self._event_paths = event_paths
        self._ids: dict[Hashable, int] = {}
        self._of_node: dict[int, int] = {}

    def signature(self, node: Node) -> int:
        """Id of the node's structure (see the module docstring); unique for a node with a
        numerics event. Never its name or path, so ``layers.3`` and ``layers.4`` can match.
        """
        known = self._of_node.get(id(node))
        if known is not None:
            return known
        signature = self.signature
        children = tuple([signature(c) for c in node.children]) if node.children else ()
        numerics = node.numerics
        key: Hashable
        if (numerics or self._event_paths) and _has_event(node, self._event_paths):
            key = (_Folder, id(node))  # a key no other node has
        else:
            own = node.self_by_dtype
            key = (
                node.type,
                node.repr,
                tuple(sorted((d, tuple(sorted(r.items()))) for d, r in own.items())) if own else (),
                node.calls,
                node.repeat,
                tuple(node.inputs),
                tuple(node.outputs),
                children,
                tuple([numerics.get(f) for f in _RANGE_FLAGS]) if numerics else _NO_FLAGS,
            )
        sig = self._ids.setdefault(key, len(self._ids))
        self._of_node[id(node)] = sig
        return sig

    def fold_level(self, groups: Sequence[list[Node]], parent_path: str) -> list[Node]:
        """Fold a list of sibling positions, each a group of corresponding original nodes.

        At the top of the tree every group holds one node; below a folded entry a group
        holds the node at that position in every instance the entry stands for.
        """
        count = len(groups)
        sigs = [self.signature(g[0]) for g in groups]
        ends = self._fold_limits(groups)
        where: dict[int, list[int]] = {}
        for k, sig in enumerate(sigs):
            where.setdefault(sig, []).append(k)
        out: list[Node] = []
        i = 0
        while i < count:
            w, n = _best_window(sigs, i, ends[i], where)
            if n < 2:
                g = groups[i]
                out.append(self.entry(g, g[0].name, g[0].path, repeat=1))
                i += 1
                continue
            covered = groups[i : i + w * n]
            name = f"{covered[0][0].name}{_DASH}{covered[-1][0].name}"
            path = f"{parent_path}.{name}" if parent_path else name
            if w == 1:
                out.append(self.entry(_interleave(covered), name, path, repeat=n))
            else:
                positions = [_interleave(covered[j::w]) for j in range(w)]
                out.append(self.window(positions, covered, name, path, n, parent_path))
            i += w * n
        return out

    def _fold_limits(self, groups: Sequence[list[Node]]) -> list[int]:
        """For each position, the end of the stretch a run starting there may cover.

        Any names: the end of the list. Integer names only: the end of the stretch of
        integer-named positions (every node of the group so named); a named position
        ends at itself plus one, so nothing folds there.
        """
        count = len(groups)
        if self._any_names:
            return [count] * count
        ends = [0] * count
        end = count
        for k in range(count - 1, -1, -1):
            if all(m.name.isdigit() for m in groups[k]):
                ends[k] = end
            else:
                ends[k] = k + 1
                end = k
        return ends

    def entry(self, group: list[Node], name: str, path: str, repeat: int) -> Node:
        """One node summing ``group`` (nodes of equal structure), its children folded too.

        A lone node keeps its own ``repeat`` and ``members`` (empty unless folded before).
        """
        first = group[0]
        if len(group) == 1:  # most entries: copies of one node's containers
            node = Node(
                path=path,
                name=name,
                type=first.type,
                calls=first.calls,
                repr=first.repr,
                inputs=list(first.inputs),
                outputs=list(first.outputs),
                grad_inputs=list(first.grad_inputs),
                grad_outputs=list(first.grad_outputs),
                metrics=dict(first.metrics),
                self_metrics=dict(first.self_metrics),
                by_dtype=_copy_by_dtype(first.by_dtype),
                self_by_dtype=_copy_by_dtype(first.self_by_dtype),
                shared=list(dict.fromkeys(first.shared)),
                repeat=first.repeat,
                members=list(first.members),
                numerics=dict(first.numerics),
            )
        else:
            node = Node(
                path=path,
                name=name,
                type=first.type,
                calls=sum(m.calls for m in group),
                repr=first.repr,
                inputs=list(first.inputs),
                outputs=list(first.outputs),
                grad_inputs=list(first.grad_inputs),
                grad_outputs=list(first.grad_outputs),
                metrics=_combine(m.metrics for m in group),
                self_metrics=_combine(m.self_metrics for m in group),
                by_dtype=_sum_by_dtype(m.by_dtype for m in group),
                self_by_dtype=_sum_by_dtype(m.self_by_dtype for m in group),
                shared=list(dict.fromkeys(s for m in group for s in m.shared)),
                repeat=repeat,
                members=_paths(group),
                numerics=_merge_numerics(group),
            )
        if first.children:
            children = [[m.children[k] for m in group] for k in range(len(first.children))]
            node.children = self.fold_level(children, first.path)
        return node

    def window(
        self,
        positions: list[list[Node]],
        covered: Sequence[list[Node]],
        name: str,
        path: str,
        repeat: int,
        parent_path: str,
    ) -> Node:
        """The synthetic ``Repeat`` node for a window of several modules repeated ×N."""
        children = self.fold_level(positions, parent_path)
        metrics = _combine(c.metrics for c in children)
        return Node(
            path=path,
            name=name,
            type=REPEAT_TYPE,
            calls=0,
            repr="",
            metrics=metrics,
            self_metrics={k: 0 for k in metrics if k in ms.ADDITIVE},
            by_dtype=_sum_by_dtype(c.by_dtype for c in children),
            repeat=repeat,
            members=_paths(_interleave(covered)),
            children=children,
        )


def _best_window(
    sigs: Sequence[int], i: int, end: int, where: Mapping[int, Sequence[int]]
) -> tuple[int, int]:
    """(w, N) maximising the cover ``w × N`` (N ≥ 2) of a run ``sigs[i:i+w] × N`` that ends
    by ``end``; ties go to the smaller w; ``(1, 1)`` when nothing repeats at ``i``.

    ``where`` maps each signature to its positions, ascending. The result is the same as
    trying every w, but only the w that can repeat are tried: a window of w repeats only
    if ``sigs[i+t+w] == sigs[i+t]`` for every ``t < w``, so the candidates for ``w > t``
    are read off the positions of ``sigs[i+t]``, for the t (0, the end of the leading run
    of ``sigs[i]``, the end of a tried window's run) that leaves the fewest. The search
    stops once the cover reaches ``end``.
    """
    span = end - i
    if span < 2:
        return 1, 1
    first = sigs[i]
    run = 1  # sigs[i : i + run] all equal sigs[i]
    while run < span and sigs[i + run] == first:
        run += 1
    if run == span:
        return 1, run
    best_w, best_n, best_cover = (1, run, run) if run > 1 else (1, 1, 1)
    reach = span // 2  # the longest window that can repeat
    if reach <= run:
        return best_w, best_n
    # A window of w <= run is sigs[i] w times: its repeats end where the run ends, so it
    # covers no more than w = 1 does. Longer ones: by the positions of sigs[i] or sigs[i+run].
    at, base, k, hi = _candidates(where, first, i, run, reach)
    other = _candidates(where, sigs[i + run], i + run, run, reach)
    if other[3] - other[2] < hi - k:
        at, base, k, hi = other
    pending: tuple[Sequence[int], int, int, int] | None = None
    while True:
        if k == hi:
            if pending is None:
                break
            (at, base, k, hi), pending = pending, None
            continue
        w = at[k] - base
        k += 1
        if w * (span // w) <= best_cover:  # even a run to the end covers no more
            continue
        j = i + w  # the run has period w over sigs[i:j]
        while j < end and sigs[j] == sigs[j - w]:
            j += 1
        n = (j - i) // w
        if n >= 2 and w * n > best_cover:
            best_w, best_n, best_cover = w, n, w * n
            if best_cover == span:  # reaches the end: nothing can cover more
                break
        t = j - i  # sigs[j] differs from sigs[j - w]: a new t for the w beyond t
        if pending is None and j < end and t < reach:
            after = _candidates(where, sigs[j], j, t, reach)
            cut = bisect_right(at, base + t, k, hi)  # the w <= t still to try
            if after[3] - after[2] < hi - cut:
                pending, hi = after, cut
    return best_w, best_n


def _candidates(
    where: Mapping[int, Sequence[int]], sig: int, base: int, floor: int, reach: int
) -> tuple[Sequence[int], int, int, int]:
    """The positions ``p`` of ``sig`` with ``floor < p - base <= reach``, as the list, the
    base and the index range: the window lengths ``p - base`` in that range."""
    at = where[sig]
    lo = bisect_right(at, base + floor)
    return at, base, lo, bisect_right(at, base + reach, lo)


def _interleave(groups: Sequence[list[Node]]) -> list[Node]:
    """Concatenate equal-sized groups in original tree order (instance by instance)."""
    return [g[m] for m in range(len(groups[0])) for g in groups]


def _paths(nodes: Iterable[Node]) -> list[str]:
    """Original module paths, expanding entries that were already folded."""
    return [p for n in nodes for p in (n.members or [n.path])]


def _combine(parts: Iterable[Mapping[str, Number]]) -> dict[str, Number]:
    """Each key present by its ``fold`` rule: summed, or the max (keys not in the table)."""
    summed = ms.rule_keys("fold", "sum")
    out: dict[str, Number] = {}
    for part in parts:
        for key, value in part.items():
            if key not in out:
                out[key] = value
            elif key in summed:
                out[key] += value
            else:
                out[key] = max(out[key], value)
    return out


#: How folded entries combine the per-module numerics that still mean something merged.
_NUMERICS_MERGE: dict[str, Callable[[list[Any]], Any]] = {
    "checked_calls": sum,
    "nan": sum,
    "inf": sum,
    "min": min,
    "max": max,
    "absmax": max,
    "fp16_overflow": any,
    "bf16_overflow": any,
    "fp16_underflow": any,
    "bf16_underflow": any,
}


def _merge_numerics(group: Sequence[Node]) -> dict[str, Any]:
    """Numerics of a folded entry: checked calls summed, extremes combined, range flags
    kept (equal over the members: they are part of the signature). ``nan`` and ``inf`` sum
    to 0, since a module that saw any is never merged. Statistics that do not combine
    without the raw data (mean, std) and per-call lists are left out."""
    merged: dict[str, Any] = {}
    if not any(n.numerics for n in group):
        return merged
    for key, combine in _NUMERICS_MERGE.items():
        values = [n.numerics[key] for n in group if n.numerics.get(key) is not None]
        if values:
            merged[key] = combine(values)
    return merged


def _sum_by_dtype(parts: Iterable[Mapping[str, Mapping[str, int]]]) -> dict[str, dict[str, int]]:
    """Element-wise sum of per-dtype breakdowns, sorted by dtype like ``Profile.rollup``."""
    merged: dict[str, dict[str, int]] = {}
    for part in parts:
        for dtype, row in part.items():
            acc = merged.setdefault(dtype, {})
            for key, value in row.items():
                acc[key] = acc.get(key, 0) + value
    return dict(sorted(merged.items()))


def _copy_by_dtype(rows: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """``_sum_by_dtype`` of one breakdown: a copy, sorted by dtype."""
    if len(rows) > 1:
        return {dtype: dict(rows[dtype]) for dtype in sorted(rows)}
    return {dtype: dict(row) for dtype, row in rows.items()}


def renumber_as(folded: Profile, reference: Profile) -> None:
    """Give ``folded`` the node ids ``reference`` has for the same paths, in place.

    ``folded`` is the fold of a profile with some modules taken out (``ignore``) and
    ``reference`` the fold of the whole one: a module taken out leaves a gap in its
    siblings' numbers, as ``exclude`` does, instead of renumbering them. A node whose
    path ``reference`` has under another parent, or whose id would not follow its
    previous sibling's (a run folded anew across the gap), takes the next number."""
    ids = {n.path: n.node_id for n in reference.nodes()}
    stack = [folded.root]
    while stack:
        node = stack.pop()
        last = 0
        for child in node.children:
            parent, _, number = ids.get(child.path, "").rpartition(".")
            mine = (parent or "0") == node.node_id and number.isdigit()
            last = int(number) if mine and int(number) > last else last + 1
            child.node_id = f"{last}" if node.node_id == "0" else f"{node.node_id}.{last}"
        stack.extend(node.children)


def _renumber(node: Node, node_id: str, depth: int) -> None:
    """Fresh node ids (root "0", then "1", "1.1", ...) and depths for the folded tree."""
    node.node_id = node_id
    node.depth = depth
    for i, child in enumerate(node.children, start=1):
        _renumber(child, f"{i}" if node_id == "0" else f"{node_id}.{i}", depth + 1)
