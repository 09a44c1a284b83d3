"""Repeat folding: runs of structurally identical sibling modules shown as one entry ×N.

``fold(profile)`` returns a new Profile in which, under every node, consecutive children
with the same structural signature are merged, so a 12-layer stack reads ``layers.0–11 ×12``
and a repeated window of several modules (Linear, ReLU, Linear, ×3) reads ``C–K ×3``.

Metric rule for merged entries: keys in ``ADDITIVE_METRICS`` (and the dtype breakdowns and
``calls``) are summed over the members, so the folded totals equal the unfolded totals
exactly; any other key (``peak_bytes``, ``forward_time``, ...) is not a quantity that adds
up over modules, so the merged entry takes the maximum over its members.

Paths and members: a merged entry's ``members`` lists the paths of *every* original module
it sums, in tree order (inside an entry folded ×4, an inner entry folded ×2 has 8 members;
``repeat`` stays the count within one instance of its parent). Its ``path`` is the original
parent path of its first member plus the range name; an unfolded inner entry keeps the
path and name of its first member.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

from layerscope.profile import ADDITIVE_METRICS, Node, Number, Profile

__all__ = ["REPEAT_TYPE", "fold"]

#: ``Node.type`` of the synthetic entry standing for a window of several modules ×N.
REPEAT_TYPE = "Repeat"

_ADDITIVE = frozenset(ADDITIVE_METRICS)
_DASH = "–"  # en dash, as in "layers.0–11"


def fold(profile: Profile) -> Profile:
    """A new Profile with repeated sibling runs folded; ``profile`` is left untouched."""
    folder = _Folder()
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
        schema=profile.schema,
    )


class _Folder:
    """One folding pass; interns structural signatures to small ints for cheap comparison."""

    def __init__(self) -> None:
        self._ids: dict[Hashable, int] = {}
        self._of_node: dict[int, int] = {}

    def signature(self, node: Node) -> int:
        """Id of the node's structure: type, repr, own tensors, calls, repeat, shapes, children.

        Never its name or path, so ``layers.3`` and ``layers.4`` can match.
        """
        known = self._of_node.get(id(node))
        if known is not None:
            return known
        key = (
            node.type,
            node.repr,
            tuple(sorted((d, tuple(sorted(row.items()))) for d, row in node.self_by_dtype.items())),
            node.calls,
            node.repeat,
            tuple(node.inputs),
            tuple(node.outputs),
            tuple(self.signature(c) for c in node.children),
        )
        sig = self._ids.setdefault(key, len(self._ids))
        self._of_node[id(node)] = sig
        return sig

    def fold_level(self, groups: Sequence[list[Node]], parent_path: str) -> list[Node]:
        """Fold a list of sibling positions, each a group of corresponding original nodes.

        At the top of the tree every group holds one node; below a folded entry a group
        holds the node at that position in every instance the entry stands for.
        """
        sigs = [self.signature(g[0]) for g in groups]
        out: list[Node] = []
        i = 0
        while i < len(groups):
            w, n = _best_window(sigs, i)
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

    def entry(self, group: list[Node], name: str, path: str, repeat: int) -> Node:
        """One node summing ``group`` (nodes of equal structure), its children folded too.

        A lone node keeps its own ``repeat`` and ``members`` (empty unless folded before).
        """
        first = group[0]
        lone = len(group) == 1
        node = Node(
            path=path,
            name=name,
            type=first.type,
            calls=sum(m.calls for m in group),
            repr=first.repr,
            inputs=list(first.inputs),
            outputs=list(first.outputs),
            metrics=_combine(m.metrics for m in group),
            self_metrics=_combine(m.self_metrics for m in group),
            by_dtype=_sum_by_dtype(m.by_dtype for m in group),
            self_by_dtype=_sum_by_dtype(m.self_by_dtype for m in group),
            shared=list(dict.fromkeys(s for m in group for s in m.shared)),
            repeat=first.repeat if lone else repeat,
            members=list(first.members) if lone else _paths(group),
            numerics=dict(first.numerics) if lone else _merge_numerics(group),
        )
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
            self_metrics={k: 0 for k in metrics if k in _ADDITIVE},
            by_dtype=_sum_by_dtype(c.by_dtype for c in children),
            repeat=repeat,
            members=_paths(_interleave(covered)),
            children=children,
        )


def _best_window(sigs: Sequence[int], i: int) -> tuple[int, int]:
    """(w, N) maximising the run ``sigs[i:i+w] × N`` covered at ``i``; ties go to smaller w."""
    best_w, best_n, best_cover = 1, 1, 1
    for w in range(1, (len(sigs) - i) // 2 + 1):
        unit = sigs[i : i + w]
        n = 1
        while sigs[i + n * w : i + (n + 1) * w] == unit:
            n += 1
        if n >= 2 and w * n > best_cover:
            best_w, best_n, best_cover = w, n, w * n
    return best_w, best_n


def _interleave(groups: Sequence[list[Node]]) -> list[Node]:
    """Concatenate equal-sized groups in original tree order (instance by instance)."""
    return [g[m] for m in range(len(groups[0])) for g in groups]


def _paths(nodes: Iterable[Node]) -> list[str]:
    """Original module paths, expanding entries that were already folded."""
    return [p for n in nodes for p in (n.members or [n.path])]


def _combine(parts: Iterable[Mapping[str, Number]]) -> dict[str, Number]:
    """Sum additive metrics, take the max of the others, over every key present."""
    out: dict[str, Number] = {}
    for part in parts:
        for key, value in part.items():
            if key not in out:
                out[key] = value
            elif key in _ADDITIVE:
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
    """Numerics of a folded entry: counts summed, extremes and flags combined; statistics
    that do not combine without the raw data (mean, std) are left out."""
    merged: dict[str, Any] = {}
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


def _renumber(node: Node, node_id: str, depth: int) -> None:
    """Fresh node ids (root "0", then "1", "1.1", ...) and depths for the folded tree."""
    node.node_id = node_id
    node.depth = depth
    for i, child in enumerate(node.children, start=1):
        _renumber(child, f"{i}" if node_id == "0" else f"{node_id}.{i}", depth + 1)
