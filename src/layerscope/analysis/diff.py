"""Compare two Profiles module by module: ``diff(a, b) -> ProfileDiff``.

Modules are matched by qualified path. For every metric either profile carries (inclusive
and self), each matched module gets A, B, the change B - A and the ratio B / A. A module
only in B is *added*, one only in A *removed*; a path whose module type differs is a
*type change* (a renamed module shows as removed + added). The model and environment
facts that differ (torch version, device, dtype, mode, the root's input shapes, ...) are
listed too, so a diff across a batch size, a dtype or a layerscope version says why the
numbers moved. The view is ``render.diff``; this module holds numbers only.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any, Literal, TypeAlias

import layerscope.metricspec as ms
from layerscope.errors import InvalidInputError
from layerscope.profile import Node, Number, Profile, TensorSpec

__all__ = ["Change", "DiffRow", "ProfileDiff", "Status", "diff"]

SCHEMA = "layerscope-diff/1"

#: How a path fares from A to B.
Status: TypeAlias = Literal["same", "added", "removed", "type_changed"]


@dataclass(frozen=True, slots=True)
class Change:
    """One metric of one module in A and in B (None where that side lacks it).

    ``delta`` is B - A; where the module itself is absent on one side (an added or
    removed module) that side counts as 0, so an added layer's delta is its whole cost.
    Where the module exists but the metric was not measured (timing only in B), the
    delta is None. ``ratio`` is B / A, None when A is 0 or missing.
    """

    a: Number | None
    b: Number | None
    delta: Number | None
    ratio: float | None

    @property
    def pct(self) -> float | None:
        """The change in % of A (``inf`` from 0 to something); None when unknown."""
        if self.delta is None:
            return None
        if not self.a:
            return 0.0 if self.delta == 0 else float("inf")
        return 100.0 * float(self.delta) / abs(float(self.a))

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "delta": self.delta, "ratio": self.ratio}


def change(a: Number | None, b: Number | None, *, a_exists: bool, b_exists: bool) -> Change:
    """The Change of a metric from ``a`` to ``b``; ``*_exists``: the module is on that side."""
    if a is not None and b is not None:
        delta: Number | None = b - a
    elif a is None and b is not None and not a_exists:
        delta = b
    elif b is None and a is not None and not b_exists:
        delta = -a
    else:
        delta = None
    ratio = float(b) / float(a) if a and b is not None else None
    return Change(a, b, delta, ratio)


@dataclass(eq=False)
class DiffRow:
    """One module path: its nodes in A and B (None where absent) and the metric changes."""

    path: str
    name: str
    depth: int
    status: Status
    type_a: str | None
    type_b: str | None
    #: Inclusive metrics (and ``calls``), every key of ``ProfileDiff.metric_keys``.
    metrics: dict[str, Change] = field(default_factory=dict)
    #: Self metrics (work done directly in the module), every key of ``self_keys``.
    self_metrics: dict[str, Change] = field(default_factory=dict)
    node_a: Node | None = field(default=None, repr=False)
    node_b: Node | None = field(default=None, repr=False)
    #: The row of the enclosing module (None for the root).
    parent: DiffRow | None = field(default=None, repr=False)

    @property
    def type(self) -> str:
        """The module type: B's, else A's."""
        return self.type_b if self.type_b is not None else self.type_a or ""

    def value(self, key: str) -> Change | None:
        """The Change of a metric key, or of ``self_<key>`` from the self metrics."""
        if key.startswith("self_"):
            return self.self_metrics.get(key.removeprefix("self_"))
        return self.metrics.get(key)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "name": self.name,
            "depth": self.depth,
            "status": self.status,
            "type_a": self.type_a,
            "type_b": self.type_b,
            "metrics": {k: c.to_dict() for k, c in self.metrics.items()},
            "self_metrics": {k: c.to_dict() for k, c in self.self_metrics.items()},
        }

    def __repr__(self) -> str:
        return f"DiffRow({self.path or '<root>'} {self.type}, {self.status})"


@dataclass(eq=False)
class ProfileDiff:
    """What changed from profile ``a`` to profile ``b`` (see the module docstring)."""

    a: Profile
    b: Profile
    #: One row per path, in tree order: A's, with B's new paths after their parent's
    #: last row.
    rows: list[DiffRow]
    #: Inclusive metric keys of either profile (``calls`` last).
    metric_keys: list[str]
    #: Self metric keys of either profile.
    self_keys: list[str]
    #: Paths only in B / only in A, in row order.
    added: list[str]
    removed: list[str]
    #: path -> (type in A, type in B), where they differ.
    changed_types: dict[str, tuple[str, str]]
    #: The model and environment facts that differ: key -> (A's value, B's value).
    #: Keys are ``model.<key>``, ``env.<key>`` and ``inputs`` (the root's input shapes).
    facts: dict[str, tuple[Any, Any]]

    def row(self, path: str) -> DiffRow:
        """The row of a module path ("" is the root); KeyError if neither has it."""
        for r in self.rows:
            if r.path == path:
                return r
        raise KeyError(f"no module with path {path!r} in either profile")

    @property
    def only_in_a(self) -> list[str]:
        """Metric keys that only A carries (``calls`` aside: every run has it)."""
        return self._only(self.a, self.b)

    @property
    def only_in_b(self) -> list[str]:
        """Metric keys that only B carries (``calls`` aside: every run has it)."""
        return self._only(self.b, self.a)

    def _only(self, this: Profile, other: Profile) -> list[str]:
        mine, theirs = _keys(this), _keys(other)
        return [k for k in self.metric_keys if k in mine[0] and k not in theirs[0]]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data: the two profiles' names, the facts that differ, every row."""
        return {
            "schema": SCHEMA,
            "a": {"model": _plain(self.a.model), "env": _plain(self.a.env)},
            "b": {"model": _plain(self.b.model), "env": _plain(self.b.env)},
            "facts": {k: {"a": _plain(va), "b": _plain(vb)} for k, (va, vb) in self.facts.items()},
            "metric_keys": list(self.metric_keys),
            "self_keys": list(self.self_keys),
            "added": list(self.added),
            "removed": list(self.removed),
            "changed_types": {p: {"a": ta, "b": tb} for p, (ta, tb) in self.changed_types.items()},
            "rows": [r.to_dict() for r in self.rows],
        }

    # ---- display (render.diff) -----------------------------------------------------
    def render(self, **options: Any) -> str:
        """The diff view as plain text. Options: ``metrics``, ``sort_by``, ``top``,
        ``min_change_pct``, ``width`` (see docs/diff.md)."""
        from layerscope.render.diff import render

        return render(self, **options)

    def show(self, *, file: IO[str] | None = None, **options: Any) -> None:
        """Print the diff view to the terminal (or ``file``); options as for ``render``."""
        from layerscope.render.diff import show

        show(self, file=file, **options)

    def __str__(self) -> str:
        return self.render()

    def __rich__(self) -> Any:
        from layerscope.render.diff import renderable

        return renderable(self)

    def __repr__(self) -> str:
        from layerscope.render.units import plural

        facts = plural(len(self.facts), "fact differs", "facts differ")
        return (
            f"<ProfileDiff {self.a.root.type} -> {self.b.root.type}: "
            f"{plural(len(self.rows), 'module')}, "
            f"{len(self.added)} added, {len(self.removed)} removed, "
            f"{plural(len(self.changed_types), 'type change')}, {facts}>"
        )


def diff(a: Profile, b: Profile) -> ProfileDiff:
    """What changed from ``a`` to ``b``, module by module (see the module docstring)."""
    for name, p in (("a", a), ("b", b)):
        if not isinstance(p, Profile):
            raise InvalidInputError(
                f"diff({name}=...) takes a layerscope Profile (ls.profile(...) or "
                f"ls.load(path)), got {type(p).__name__}"
            )
    keys_a, self_a = _keys(a)
    keys_b, self_b = _keys(b)
    metric_keys = _ordered(keys_a | keys_b)
    ran = a.model.get("ran", True) or b.model.get("ran", True)
    if ran:
        metric_keys.append("calls")
    self_keys = _ordered(self_a | self_b)

    index_a = _index(a)
    index_b = _index(b)
    rows: list[DiffRow] = []
    by_path: dict[str, DiffRow] = {}
    for path, parent, node_a, node_b in _merged(a.root, b.root, index_a, index_b):
        row = _row(path, node_a, node_b, metric_keys, self_keys)
        row.parent = by_path.get(parent) if parent is not None else None
        by_path[path] = row
        rows.append(row)
    return ProfileDiff(
        a=a,
        b=b,
        rows=rows,
        metric_keys=metric_keys,
        self_keys=self_keys,
        added=[r.path for r in rows if r.status == "added"],
        removed=[r.path for r in rows if r.status == "removed"],
        changed_types={
            r.path: (r.type_a or "", r.type_b or "") for r in rows if r.status == "type_changed"
        },
        facts=facts(a, b),
    )


def facts(a: Profile, b: Profile) -> dict[str, tuple[Any, Any]]:
    """The model and environment facts whose values differ, A's and B's (None: absent)."""
    out: dict[str, tuple[Any, Any]] = {}
    for section in ("model", "inputs", "env"):
        if section == "inputs":
            ia, ib = input_shapes(a.root), input_shapes(b.root)
            if ia != ib:
                out["inputs"] = (ia, ib)
            continue
        da: dict[str, Any] = getattr(a, section)
        db: dict[str, Any] = getattr(b, section)
        for key in dict.fromkeys([*da, *db]):
            va, vb = da.get(key), db.get(key)
            if _plain(va) != _plain(vb):
                out[f"{section}.{key}"] = (va, vb)
    return out


def input_shapes(root: Node) -> str | None:
    """The root's first call's tensor inputs as text (``[2, 8]``); None when not run."""
    if not root.inputs:
        return None
    tensors = [s for s in root.inputs[0] if isinstance(s, TensorSpec)]
    if not tensors:
        return None
    parts = []
    for s in tensors:
        text = "[" + ", ".join(str(d) for d in s.shape) + "]"
        parts.append(text if s.dtype.startswith(("float", "bfloat")) else f"{text} {s.dtype}")
    return " ".join(parts)


# ---- helpers -------------------------------------------------------------------------


def _keys(p: Profile) -> tuple[set[str], set[str]]:
    """The inclusive and the self metric keys any node of ``p`` carries."""
    inclusive: set[str] = set()
    own: set[str] = set()
    for n in p.root.walk():
        inclusive.update(n.metrics)
        own.update(n.self_metrics)
    return inclusive, own


def _ordered(keys: set[str]) -> list[str]:
    """Metric keys in the order views list them; others (from newer profiles) follow."""
    order = ms.STORED_METRICS
    known = [k for k in order if k in keys]
    return known + sorted(keys - set(order))


def _index(p: Profile) -> dict[str, Node]:
    """Path -> node (the first node of a path, should a tree repeat one)."""
    out: dict[str, Node] = {}
    for n in p.root.walk():
        out.setdefault(n.path, n)
    return out


def _merged(
    root_a: Node, root_b: Node, index_a: dict[str, Node], index_b: dict[str, Node]
) -> Iterator[tuple[str, str | None, Node | None, Node | None]]:
    """(path, parent's path, node in A, node in B) in pre-order of the merged tree: a
    node's children are A's in A's order, then B's new ones in B's order (so an added
    path comes after its parent's last row)."""
    seen: set[str] = set()
    stack: list[tuple[str | None, Node | None, Node | None]] = [(None, root_a, root_b)]
    while stack:
        parent, na, nb = stack.pop()
        path = na.path if na is not None else nb.path if nb is not None else ""
        if path in seen:  # a repeated path in one tree: listed once
            continue
        seen.add(path)
        yield path, parent, na, nb
        kids: list[tuple[str | None, Node | None, Node | None]] = []
        if na is not None:
            kids += [(path, c, index_b.get(c.path)) for c in na.children]
        if nb is not None:
            kids += [(path, None, c) for c in nb.children if c.path not in index_a]
        stack.extend(reversed(kids))


def _row(
    path: str,
    na: Node | None,
    nb: Node | None,
    metric_keys: list[str],
    self_keys: list[str],
) -> DiffRow:
    if na is None:
        status: Status = "added"
    elif nb is None:
        status = "removed"
    elif na.type != nb.type:
        status = "type_changed"
    else:
        status = "same"
    some = nb if nb is not None else na
    assert some is not None
    a_exists, b_exists = na is not None, nb is not None
    metrics: dict[str, Change] = {}
    for key in metric_keys:
        if key == "calls":
            va: Number | None = na.calls if na is not None else None
            vb: Number | None = nb.calls if nb is not None else None
        else:
            va = na.metrics.get(key) if na is not None else None
            vb = nb.metrics.get(key) if nb is not None else None
        metrics[key] = change(va, vb, a_exists=a_exists, b_exists=b_exists)
    own: dict[str, Change] = {}
    for key in self_keys:
        va = na.self_metrics.get(key) if na is not None else None
        vb = nb.self_metrics.get(key) if nb is not None else None
        own[key] = change(va, vb, a_exists=a_exists, b_exists=b_exists)
    return DiffRow(
        path=path,
        name=some.name,
        depth=some.depth,
        status=status,
        type_a=na.type if na is not None else None,
        type_b=nb.type if nb is not None else None,
        metrics=metrics,
        self_metrics=own,
        node_a=na,
        node_b=nb,
    )


def _plain(value: Any) -> Any:
    """JSON data: tuples to lists, keys to strings, other objects to their str."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)
