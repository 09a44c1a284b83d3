"""User regions: named stretches of the user's own code, as nodes of the module tree.

``with ls.region("data"): ...``, ``@ls.region("loss")`` on a function, and
``for batch in ls.region.iter(loader, "data"): ...`` (each ``next()`` runs in the region)
report to every session active in the thread (``collect.active``); with none, a region
costs one thread-local lookup and touches nothing else.

A region is a scope like a module call: ops and module calls inside it (and not inside a
deeper scope) are counted in it. Its node (``type == "region"``) is a child of the scope
it was entered in. Where that is a module (or a region inside one) it sits in the model
tree, path ``<scope path>.[<name>]`` (``[name]`` under the root); a module whose first
call was inside it is moved under it, keeping its own path. Where no module ran (code
around the model in a ``Profiler`` block), it is outside the model: its work is in
``prof.outside`` as before, and the node, path ``<outside>.[<name>]``, is kept in
``prof.extra["regions"]`` (``region.outside(prof)`` gives the Nodes). ``forward_time``
of a region is the median wall time of its calls: in the analysed run itself, unless a
timing pass or a loop's timed steps timed it (``apply_region_times``, rule 4).
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar, cast

import layerscope.metricspec as ms
from layerscope.collect.active import active
from layerscope.collect.labels import dissolve_label_regions
from layerscope.collect.scopes import REGION, REGION_MODULE, ScopeTracker
from layerscope.errors import InvalidInputError
from layerscope.profile import Node, Profile

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

#: Key of ``Profile.extra`` holding the regions outside the model, as JSON nodes.
OUTSIDE_KEY = "regions"

_Tokens = list[tuple[Any, Any]]  # (a ScopeTracker or a forward timer, its token)


def _enter(name: str) -> _Tokens | None:
    """Enter the region in every session and timer of this thread; None when there is
    none."""
    trackers, timers = active.trackers, active.timers
    if not trackers and not timers:
        return None
    return [(t, t.enter_region(name)) for t in (*trackers, *timers)]


def _exit(tokens: _Tokens | None, count: bool = True) -> None:
    if tokens is None:
        return
    for tracker, token in reversed(tokens):
        tracker.exit_region(token, count=count)


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name or "." in name:
        raise InvalidInputError(
            f"a region name must be a non-empty string without '.', got {name!r}"
        )
    return name


class region:
    """A named region of user code, counted as a node of the profile's tree.

    A context manager (``with region("data"):``), a decorator (``@region("loss")``), or,
    through ``region.iter(iterable, name)``, an iterator whose every ``next()`` runs in
    the region. Outside any ``Profiler`` or ``profile`` it does nothing.

    The decorator and ``iter`` keep no state in the object; one object used as a
    ``with`` block serves one thread at a time (``with region(...)`` makes one per use).
    """

    __slots__ = ("_tokens", "name")

    def __init__(self, name: str) -> None:
        self.name = _check_name(name)
        self._tokens: list[_Tokens | None] = []  # one per open ``with``, innermost last

    def __enter__(self) -> region:
        self._tokens.append(_enter(self.name))
        return self

    def __exit__(self, *exc: object) -> None:
        _exit(self._tokens.pop())

    def __call__(self, fn: F) -> F:
        """Decorate ``fn``: each of its calls runs in the region."""
        name = self.name

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            tokens = _enter(name)
            try:
                return fn(*args, **kwargs)
            finally:
                _exit(tokens)

        return cast(F, wrapper)

    @staticmethod
    def iter(iterable: Iterable[T], name: str) -> Iterator[T]:
        """The items of ``iterable``; fetching each one (its ``next()``) runs in the
        region ``name``. The last ``next()``, which finds no item, is not counted as a
        call (what it runs still is), so ``calls`` is the number of items."""
        _check_name(name)
        return _iter_in_region(iter(iterable), name)

    @staticmethod
    def outside(profile: Profile) -> list[Node]:
        """The regions of a profile that ran outside the model, as Nodes (rolled up)."""
        return [Node.from_dict(d) for d in profile.extra.get(OUTSIDE_KEY, [])]

    def __repr__(self) -> str:
        return f"region({self.name!r})"


def _iter_in_region(it: Iterator[T], name: str) -> Iterator[T]:
    while True:
        tokens = _enter(name)
        try:
            item = next(it)
        except StopIteration:
            _exit(tokens, count=False)
            return
        except BaseException:
            _exit(tokens)
            raise
        _exit(tokens)
        yield item


# ---- building the profile -----------------------------------------------------------
def attach_regions(profile: Profile, tracker: ScopeTracker) -> None:
    """Put the tracker's region nodes in ``profile``: called by ``build_profile`` after
    the observers' ``finish`` and ``prof.outside``, before the rollup.

    A region entered in a module goes under it (under the region it was entered in, for
    nested ones), and each subtree of that module whose first call was inside the region
    moves under the region; the tree is then ordered and numbered again. Regions entered
    outside the model are rolled up on their own, added to ``profile.outside`` and kept
    in ``profile.extra["regions"]``.
    """
    dissolve_label_regions(profile, tracker)
    if not tracker.regions:
        return
    _move_subtrees(tracker)
    forest = _place_regions(profile, tracker)
    # First calls in order: a module's index in ``called``; a region goes before the
    # module called first after it, regions made at one index in the order made.
    order: dict[int, tuple[int, ...]] = {id(n): (i, 0) for i, n in enumerate(tracker.called)}
    for seq, r in enumerate(tracker.regions.values()):
        order[id(r)] = (tracker.region_created[id(r)], -1, seq)
    _number(profile.root, order, "")
    profile.link()
    if forest:
        _outside_forest(profile, forest, order)


def _move_subtrees(tracker: ScopeTracker) -> None:
    """Move each module subtree whose first call was inside a region (entered in the
    subtree's parent) under that region; inner regions end first, so they claim first."""
    parent = tracker.tree.parent
    region_parent = tracker.region_parent
    called = tracker.called
    # Earliest first call in each module subtree (of the module tree as built).
    first: dict[int, int] = {}
    for i, node in enumerate(called):
        up: Node | None = node
        while up is not None and id(up) not in first:
            first[id(up)] = i
            up = parent[id(up)]

    def anchor(r: Node) -> Node | None:
        """The module node a region runs in (None: outside the model)."""
        p = region_parent[id(r)]
        while id(p) in region_parent:
            p = region_parent[id(p)]
        return None if p is tracker.outside else p

    moved: dict[int, tuple[Node, Node]] = {}  # id(module node) -> (it, its region)
    for r, start, end in tracker.region_calls:
        a = anchor(r)
        if a is None:
            continue
        for i in range(start, end):
            up = called[i]
            while up is not None and parent[id(up)] is not a:
                up = parent[id(up)]
            if up is None or id(up) in moved or first[id(up)] < start:
                continue
            moved[id(up)] = (up, r)
    for node, r in moved.values():
        old = parent[id(node)]
        assert old is not None
        old.children.remove(node)
        r.children.append(node)
        parent[id(node)] = r


def _place_regions(profile: Profile, tracker: ScopeTracker) -> list[Node]:
    """Give each region its time and hang it under its parent; return the regions entered
    outside the model, which have none."""
    tree = tracker.tree
    forest: list[Node] = []
    defaults = {k: 0 for k in profile.root.self_metrics if k in ms.ADDITIVE_METRICS}
    for r in tracker.regions.values():
        times = tracker.region_times[id(r)]
        if times:
            r.metrics[ms.FORWARD_TIME] = statistics.median(times)
        p = tracker.region_parent[id(r)]
        if p is tracker.outside:
            forest.append(r)
            continue
        for k, v in defaults.items():
            r.self_metrics.setdefault(k, v)
        p.children.append(r)
        tree.parent[id(r)] = p
        tree.module[id(r)] = REGION_MODULE
        tree.by_path.setdefault(r.path, r)
    return forest


def _number(top: Node, order: dict[int, tuple[int, ...]], prefix: str) -> None:
    """Order the children of every node under ``top`` by their subtree's first call
    (never-called subtrees after, in their order) and number them below ``top``'s id."""
    nodes = list(top.walk())
    never = (len(order) + 1,)
    first: dict[int, tuple[int, ...]] = {}
    for node in reversed(nodes):  # children before their parent
        best = order.get(id(node), never)
        for c in node.children:
            best = min(best, first[id(c)])
        first[id(node)] = best
    stack = [(top, prefix)]
    while stack:
        node, pre = stack.pop()
        node.children.sort(key=lambda c: first[id(c)])  # stable: uncalled keep order
        for i, child in enumerate(node.children, start=1):
            child.node_id = f"{pre}{i}"
            child.depth = node.depth + 1
            stack.append((child, f"{child.node_id}."))


def _outside_forest(
    profile: Profile, forest: list[Node], order: dict[int, tuple[int, ...]]
) -> None:
    """Roll up, number (``o1``, ``o1.1``, ...) and keep the regions outside the model."""
    forest.sort(key=lambda r: order[id(r)])
    totals: dict[str, float] = {}
    for i, r in enumerate(forest, start=1):
        r.node_id, r.depth = f"o{i}", 1
        _number(r, order, f"o{i}.")
        Profile(root=r).rollup()
        for k in ms.ADDITIVE_METRICS:
            v = r.metrics.get(k, 0)
            if v:
                totals[k] = totals.get(k, 0) + v
    for k, v in totals.items():
        profile.outside[k] = profile.outside.get(k, 0) + v
    profile.extra[OUTSIDE_KEY] = [r.to_dict() for r in forest]
    profile.notices.append(_outside_notice(forest))


_OUTSIDE_NOTICE = "regions outside the model (in the outside totals; region.outside(prof)): "


def _outside_notice(forest: Iterable[Node]) -> str:
    parts = []
    for r in forest:
        part = f"[{r.name}] ×{r.calls}"
        if ms.FORWARD_TIME in r.metrics:
            part += f" {_seconds(r.metrics[ms.FORWARD_TIME])}/call"
        if r.metrics.get(ms.FLOPS):
            part += f" {r.metrics[ms.FLOPS]:.4g} FLOPs"
        parts.append(part)
    return _OUTSIDE_NOTICE + ", ".join(parts)


def apply_region_times(profile: Profile, times: dict[str, list[float]]) -> None:
    """Set each region's ``forward_time`` to the median of ``times[path]`` (seconds per
    call, measured by a timing pass or a loop's timed steps with the light timers only),
    replacing the time the analysed run measured; a region the timers did not see keeps
    no time (rule 4: no time with analysis instrumentation in it)."""
    for node in profile.root.walk():
        if node.type == REGION:
            _set_time(node.metrics, times.get(node.path))
    forest = profile.extra.get(OUTSIDE_KEY)
    if not forest:
        return
    todo = list(forest)
    while todo:
        d = todo.pop()
        _set_time(d.setdefault("metrics", {}), times.get(d.get("path", "")))
        todo.extend(d.get("children", []))
    notice = _outside_notice(region.outside(profile))
    profile.notices = [notice if n.startswith(_OUTSIDE_NOTICE) else n for n in profile.notices]


def _set_time(metrics: dict[str, Any], samples: list[float] | None) -> None:
    if samples:
        metrics[ms.FORWARD_TIME] = statistics.median(samples)
    else:
        metrics.pop(ms.FORWARD_TIME, None)


def _seconds(t: float) -> str:
    """``12.3 µs``, ``4.56 ms``, ``1.2 s``: a wall time for the notice line."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms")):
        if t >= scale:
            return f"{t / scale:.3g} {unit}"
    return f"{t * 1e6:.3g} µs"
