"""Profile -> Profile transforms behind the views: filter, sort, flatten, group by type.

Each returns new Nodes (shallow copies sharing the metric dicts) in a new Profile and
leaves its input untouched. Values come from a caller's function, so these work for any
metric a view knows, derived ones included.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase

import layerscope.metricspec as ms
from layerscope.profile import Node, Number, Profile

__all__ = [
    "Ignored",
    "by_type",
    "filter_tree",
    "ignore_modules",
    "matches",
    "post_order",
    "sort_tree",
    "top_k",
]

Getter = Callable[[Node], Number | None]


def matches(node: Node, patterns: Sequence[str]) -> bool:
    """Whether a case-sensitive glob matches the node's path, its type, or the path of a
    module it stands for (a folded entry's members)."""
    for pattern in patterns:
        if fnmatchcase(node.path, pattern) or fnmatchcase(node.type, pattern):
            return True
        if any(fnmatchcase(m, pattern) for m in node.members):
            return True
    return False


def filter_tree(
    profile: Profile,
    *,
    max_depth: int | None = None,
    exclude: Sequence[str] = (),
    hide_not_called: bool = False,
    select: Callable[[Node], bool] | None = None,
) -> Profile:
    """The profile's tree without the rows a view hides.

    A node is dropped with its subtree when it is deeper than ``max_depth``, matches an
    ``exclude`` glob, or (``hide_not_called``) nothing in its subtree ran. Of the rest,
    when ``select`` is given, a node stays if it is selected or has a selected
    descendant (a kept row keeps its ancestors). The root always stays.
    """
    root = profile.root
    visible: dict[Node, bool] = {}
    called: dict[Node, bool] = {}
    if hide_not_called:
        for node in post_order(root):
            called[node] = node.calls > 0 or any(called[c] for c in node.children)
    stack = [root]
    while stack:
        node = stack.pop()
        ok = node is root or not (
            (max_depth is not None and node.depth > max_depth)
            or (exclude and matches(node, exclude))
            or (hide_not_called and not called[node])
        )
        visible[node] = ok
        if ok:
            stack.extend(node.children)
    keep: dict[Node, bool] = {}
    copies: dict[Node, Node] = {}
    for node in post_order(root, visible.__contains__):
        if not visible[node]:
            continue
        kids = [copies[c] for c in node.children if visible.get(c) and keep[c]]
        keep[node] = node is root or select is None or bool(kids) or select(node)
        if keep[node]:
            twin = copy.copy(node)
            twin.children = kids
            copies[node] = twin
    return replace(profile, root=copies[root])


@dataclass(frozen=True)
class Ignored:
    """A profile with some modules' work taken out (``ignore_modules``)."""

    profile: Profile
    #: The outermost modules taken out, as measured, in tree order.
    nodes: list[Node] = field(default_factory=list)
    #: Non-additive metric keys left out of those modules' ancestors.
    dropped: list[str] = field(default_factory=list)


def ignore_modules(profile: Profile, patterns: Sequence[str]) -> Ignored:
    """The profile without the modules a glob matches (path, type; ``matches``), their
    work taken out of every ancestor and the root, as DeepSpeed's ``ignore_modules``.

    Additive metrics (the table's ``additive``) of each ancestor lose the ignored
    modules' inclusive values, so inclusive = self + children still holds. A
    non-additive value of an ancestor (a peak, a per-call time, inclusive or self)
    cannot be recomputed without the ignored work and is left out, except self times,
    which never held the children's time, and values that are facts of the module's own
    calls (``subtree=False`` in the table: ``input_bytes``). The root is never ignored;
    the input profile is untouched (ancestors get new metric dicts, other nodes are
    shallow copies).
    """
    root = profile.root
    ignored: list[Node] = []
    stack = list(reversed(root.children))
    while stack:
        node = stack.pop()
        if matches(node, patterns):
            ignored.append(node)
        else:
            stack.extend(reversed(node.children))
    if not ignored:
        return Ignored(profile)
    parent_of = {id(c): n for n in root.walk() for c in n.children}
    removed: dict[int, dict[str, Number]] = {}
    for node in ignored:
        take = {k: v for k, v in node.metrics.items() if k in ms.ADDITIVE}
        up = parent_of.get(id(node))
        while up is not None:
            acc = removed.setdefault(id(up), {})
            for k, v in take.items():
                acc[k] = acc.get(k, 0) + v
            up = parent_of.get(id(up))
    skip = {id(n) for n in ignored}
    dropped: dict[str, None] = {}
    copies: dict[Node, Node] = {}
    for node in post_order(root, lambda n: id(n) not in skip):
        if id(node) in skip:
            continue
        twin = copy.copy(node)
        twin.children = [copies[c] for c in node.children if id(c) not in skip]
        taken = removed.get(id(node))
        if taken is not None:
            twin.metrics = _without(node.metrics, taken, dropped, own=False)
            twin.self_metrics = _without(node.self_metrics, {}, dropped, own=True)
        copies[node] = twin
    # ``replace`` links the copies' parents
    return Ignored(replace(profile, root=copies[root]), ignored, list(dropped))


def _kept(key: str, *, own: bool) -> bool:
    """Whether an ancestor of an ignored module keeps its value of ``key``."""
    spec = ms.METRICS.get(key)
    if spec is None or spec.additive or not spec.subtree:
        return True
    return own and spec.calls == "per_call"


def _without(
    metrics: dict[str, Number], taken: dict[str, Number], dropped: dict[str, None], *, own: bool
) -> dict[str, Number]:
    """``metrics`` less ``taken``, without the values an ancestor cannot keep (their keys
    noted in ``dropped``)."""
    out: dict[str, Number] = {}
    for key, value in metrics.items():
        if key in taken:
            out[key] = value - taken[key]
        elif _kept(key, own=own):
            out[key] = value
        else:
            dropped.setdefault(key, None)
    return out


def sort_tree(profile: Profile, key: Getter) -> Profile:
    """Siblings sorted by ``key``, largest first (missing values last, ties in order)."""
    copies: dict[Node, Node] = {}
    for node in post_order(profile.root):
        twin = copy.copy(node)
        twin.children = sorted((copies[c] for c in node.children), key=_descending(key))
        copies[node] = twin
    return replace(profile, root=copies[profile.root])


def top_k(nodes: Iterable[Node], key: Getter, k: int | None) -> list[Node]:
    """The ``k`` nodes with the largest ``key`` (all, sorted, when ``k`` is None)."""
    ranked = sorted(nodes, key=_descending(key))
    return ranked if k is None else ranked[:k]


def by_type(nodes: Iterable[Node]) -> list[Node]:
    """One synthetic node per module type summing the given nodes (in first-seen order).

    Metrics by their ``by_type`` rule (summed or dropped; keys not in the table are
    dropped) and calls are summed, self and inclusive; ``members`` lists the
    paths summed (so time totals can be summed over them); ``repeat`` counts the modules.
    Give nodes that do not contain each other (one depth, or self values only).
    """
    groups: dict[str, list[Node]] = {}
    for node in nodes:
        groups.setdefault(node.type, []).append(node)
    out = []
    for type_name, group in groups.items():
        agg = Node(path=type_name, name=type_name, type=type_name)
        agg.calls = sum(n.calls for n in group)
        agg.metrics = _sum(n.metrics for n in group)
        agg.self_metrics = _sum(n.self_metrics for n in group)
        agg.members = [p for n in group for p in (n.members or [n.path])]
        agg.repeat = len(group)
        agg.depth = group[0].depth
        out.append(agg)
    return out


def _sum(parts: Iterable[dict[str, Number]]) -> dict[str, Number]:
    summed = ms.rule_keys("by_type", "sum")
    out: dict[str, Number] = {}
    for part in parts:
        for key, value in part.items():
            if key in summed:
                out[key] = out.get(key, 0) + value
    return out


def _descending(key: Getter) -> Callable[[Node], tuple[bool, float]]:
    def sort_key(node: Node) -> tuple[bool, float]:
        value = key(node)
        return (value is None, 0.0 if value is None else -float(value))

    return sort_key


def post_order(root: Node, follow: Callable[[Node], bool] | None = None) -> list[Node]:
    """Every node after all its descendants (iterative: any depth)."""
    order = [root]
    for node in order:  # grows while read: breadth-first
        if node.children:
            order += node.children if follow is None else filter(follow, node.children)
    order.reverse()
    return order
