"""The result tree: a Profile of Nodes holding numbers only, never formatted strings.

Every metric exists per node as ``self_metrics`` (work done directly in the module) and
``metrics`` (inclusive: self plus all descendants). ``Profile.rollup()`` derives the
inclusive values of the additive metrics; ``Profile.self_check()`` asserts the invariant.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any, TypeAlias

import layerscope.metricspec as ms
from layerscope.errors import ProfileCheckError

SCHEMA = "layerscope/1"

#: Keys of the per-dtype breakdown, additive like the metrics of the same names.
DTYPE_KEYS: tuple[str, ...] = (ms.PARAMS, ms.PARAM_BYTES, ms.BUFFERS, ms.BUFFER_BYTES)

Number: TypeAlias = int | float


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """Shape, dtype and device of one tensor in a module's inputs or outputs."""

    path: str
    shape: tuple[int, ...]
    dtype: str
    device: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "device": self.device,
        }


@dataclass(frozen=True, slots=True)
class ValueSpec:
    """A non-tensor leaf of a module's inputs or outputs: its type and a short repr."""

    path: str
    type: str
    value: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "type": self.type, "value": self.value}


Spec: TypeAlias = TensorSpec | ValueSpec
#: One call's inputs (or outputs), flattened to leaves in a fixed order.
Signature: TypeAlias = tuple[Spec, ...]


@dataclass(eq=False)
class Node:
    """One module (or, in a folded view, a run of repeated modules) in the tree."""

    # A field added here must be added to new_node too (a test checks they agree).
    path: str
    name: str
    type: str
    node_id: str = "0"
    depth: int = 0
    calls: int = 0
    repr: str = ""
    inputs: list[Signature] = field(default_factory=list)
    outputs: list[Signature] = field(default_factory=list)
    #: Distinct signatures of the gradients that reached the module's inputs and outputs
    #: in a backward pass (leaves with no gradient are ``ValueSpec(path, "None")``).
    grad_inputs: list[Signature] = field(default_factory=list)
    grad_outputs: list[Signature] = field(default_factory=list)
    metrics: dict[str, Number] = field(default_factory=dict)
    self_metrics: dict[str, Number] = field(default_factory=dict)
    by_dtype: dict[str, dict[str, int]] = field(default_factory=dict)
    self_by_dtype: dict[str, dict[str, int]] = field(default_factory=dict)
    #: Qualified names of parameters/buffers this module holds but that are counted at
    #: an ancestor because another module holds them too (tied weights).
    shared: list[str] = field(default_factory=list)
    #: How many repeats a folded entry stands for (1 when not folded).
    repeat: int = 1
    #: Paths of the modules a folded entry stands for (empty when not folded).
    members: list[str] = field(default_factory=list)
    #: Numerics of this module's outputs and gradients (statistics, non-finite calls),
    #: when checked; plain JSON values.
    numerics: dict[str, Any] = field(default_factory=dict)
    children: list[Node] = field(default_factory=list)
    #: The node this one is a child of (None for the root); set by ``Profile``.
    parent: Node | None = field(default=None, repr=False, compare=False)
    #: Keys of a loaded node that this version does not know, written back by ``to_dict``.
    extra: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    @property
    def called(self) -> bool:
        return self.calls > 0

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def walk(self) -> Iterator[Node]:
        """This node and all its descendants, pre-order."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            if node.children:  # most nodes are leaves: skip reversed() for them
                stack.extend(reversed(node.children))

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "name": self.name,
            "type": self.type,
            "node_id": self.node_id,
            "depth": self.depth,
            "calls": self.calls,
            "repr": self.repr,
            "inputs": [[s.to_dict() for s in sig] for sig in self.inputs],
            "outputs": [[s.to_dict() for s in sig] for sig in self.outputs],
            **(
                {
                    "grad_inputs": [[s.to_dict() for s in sig] for sig in self.grad_inputs],
                    "grad_outputs": [[s.to_dict() for s in sig] for sig in self.grad_outputs],
                }
                if self.grad_inputs or self.grad_outputs
                else {}
            ),
            "metrics": dict(self.metrics),
            "self_metrics": dict(self.self_metrics),
            "by_dtype": {k: dict(v) for k, v in self.by_dtype.items()},
            "self_by_dtype": {k: dict(v) for k, v in self.self_by_dtype.items()},
            "shared": list(self.shared),
            "repeat": self.repeat,
            "members": list(self.members),
            "numerics": _jsonable(self.numerics),
            **({k: _jsonable(v) for k, v in self.extra.items()} if self.extra else {}),
            "children": [c.to_dict() for c in self.children],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Node:
        """A node and its subtree from ``to_dict``'s form, every known key checked (no
        recursion; at most 256 levels): ``SchemaError`` names the JSON path of a bad value."""
        from layerscope.export.json import node_from_dict

        return node_from_dict(data)

    def __repr__(self) -> str:
        return f"Node({self.node_id} {self.path or '<root>'!s} {self.type}, calls={self.calls})"


_object_new = object.__new__


def new_node(path: str, name: str, type: str, depth: int, repr: str) -> Node:
    """``Node(path=..., name=..., type=..., depth=..., repr=...)``, about twice as fast.

    Skips the dataclass ``__init__`` (a call per default factory): the fields are stored
    in declaration order, the containers as literals, each a fresh one.
    """
    node = _object_new(Node)
    node.path = path
    node.name = name
    node.type = type
    node.node_id = "0"
    node.depth = depth
    node.calls = 0
    node.repr = repr
    node.inputs = []
    node.outputs = []
    node.grad_inputs = []
    node.grad_outputs = []
    node.metrics = {}
    node.self_metrics = {}
    node.by_dtype = {}
    node.self_by_dtype = {}
    node.shared = []
    node.repeat = 1
    node.members = []
    node.numerics = {}
    node.children = []
    node.parent = None
    node.extra = None
    return node


@dataclass(eq=False)
class Profile:
    """What one measurement session found: a tree of Nodes plus model and environment facts."""

    root: Node
    model: dict[str, Any] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)
    unsupported_ops: dict[str, Any] = field(default_factory=dict)
    #: Whole-model memory facts (forward/backward peaks, training footprint), if measured.
    memory: dict[str, Any] = field(default_factory=dict)
    #: Non-finite values found (first offending module, origin) and checks run, if any.
    numerics: dict[str, Any] = field(default_factory=dict)
    #: Whole-model latency and throughput and how they were measured, if timed.
    timing: dict[str, Any] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)
    #: Work done while no call of the profiled module ran (the loss of
    #: ``ls.profile(backward=True)`` and its backward, the user's code around the calls
    #: in a ``Profiler`` block), metric key -> value; not part of the root's totals.
    outside: dict[str, Number] = field(default_factory=dict)
    #: Where a profile of a torch.distributed run was made: ``rank``, ``world_size`` and
    #: ``backend`` of the default process group; empty outside such a run.
    dist: dict[str, Any] = field(default_factory=dict)
    #: Every rank's own profile, in rank order, after ``gather``; empty otherwise. Each
    #: holds no ``ranks`` of its own.
    ranks: list[Profile] = field(default_factory=list)
    schema: str = SCHEMA
    #: Top-level keys of a loaded file that this version does not know (a newer version's
    #: sections), written back by ``to_dict`` and ``save``.
    extra: dict[str, Any] = field(default_factory=dict)
    #: Collectives by module path (``"<outside>"`` for work outside the profiled module),
    #: phase (``forward``, ``backward``) and kind (``all_gather``, ``reduce_scatter``,
    #: ...): ``{"calls", "bytes", "wire_bytes"}`` (docs/distributed.md); empty when no
    #: collective was observed.
    comm: dict[str, Any] = field(default_factory=dict)
    #: path -> node, built by the first ``node()`` lookup, checked on every hit
    _paths: dict[str, Node] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.link()

    def link(self) -> None:
        """Set every node's ``parent`` (done on creation; again after editing the tree)."""
        self._paths = None
        self.root.parent = None
        for node in self.root.walk():
            for child in node.children:
                child.parent = node

    # ---- queries -------------------------------------------------------------------
    def nodes(self) -> list[Node]:
        """All nodes, pre-order (the order of the printed tree)."""
        return list(self.root.walk())

    def node(self, path: str) -> Node:
        """The node with this qualified path ("" is the root); KeyError if absent."""
        hit = self._paths.get(path) if self._paths is not None else None
        if hit is not None and hit.path == path and self._in_tree(hit):
            return hit
        self._paths = {}
        for n in self.root.walk():  # the first in pre-order wins, as a search would find
            self._paths.setdefault(n.path, n)
        if path in self._paths:
            return self._paths[path]
        raise KeyError(f"no module with path {path!r} in this profile")

    def _in_tree(self, node: Node) -> bool:
        """Whether ``node``'s parents lead to the root (an edited tree is ``link``ed again,
        which forgets the paths)."""
        while node is not self.root:
            up = node.parent
            if up is None:
                return False
            node = up
        return True

    def by_id(self, node_id: str) -> Node:
        """The node with this id ("0" is the root, then "1", "1.2", ...); KeyError if absent."""
        for n in self.root.walk():
            if n.node_id == node_id:
                return n
        raise KeyError(f"no node with id {node_id!r} in this profile")

    @property
    def partial_metrics(self) -> list[str]:
        """Metric keys whose totals miss ops that have no FLOP formula (``unsupported_ops``)."""
        entries = self.unsupported_ops.values()
        keys: list[str] = []
        if any(e.get("forward") for e in entries):
            keys += [ms.MACS, ms.FLOPS]
        if any(e.get("backward") for e in entries):
            keys += [ms.BACKWARD_MACS, ms.BACKWARD_FLOPS]
        return keys

    # ---- invariants ----------------------------------------------------------------
    def rollup(self) -> None:
        """Set inclusive additive metrics and dtype breakdowns from the self values."""
        # Breadth-first order, reversed: every node comes after all of its descendants.
        order = [self.root]
        for node in order:  # the list grows while it is read
            if node.children:
                order += node.children
        additive = ms.ADDITIVE
        only_additive = additive.issuperset
        keys = DTYPE_KEYS
        for node in reversed(order):
            own = node.self_metrics
            metrics = node.metrics
            children = node.children
            if not children:  # most nodes: inclusive is self, no sums
                if only_additive(own):
                    metrics.update(own)
                else:
                    metrics.update({k: v for k, v in own.items() if k in additive})
                rows = node.self_by_dtype
                by_dtype: dict[str, dict[str, int]] = {}
                if rows:
                    # Each row a new dict with exactly DTYPE_KEYS (absent keys count 0).
                    for dtype, row in sorted(rows.items()) if len(rows) > 1 else rows.items():
                        if tuple(row) == keys:
                            by_dtype[dtype] = row.copy()
                        else:
                            by_dtype[dtype] = {k: row.get(k, 0) for k in keys}
                node.by_dtype = by_dtype
                continue
            # Summed in place when there is nothing to keep (the first rollup).
            totals = {} if metrics else metrics
            if only_additive(own):
                totals.update(own)
            else:
                totals.update({k: v for k, v in own.items() if k in additive})
            get = totals.get
            for c in children:
                child = c.metrics
                if only_additive(child):
                    for k, v in child.items():
                        totals[k] = get(k, 0) + v
                else:
                    for k, v in child.items():
                        if k in additive:
                            totals[k] = get(k, 0) + v
            if totals is not metrics:
                metrics.update(totals)
            merged: dict[str, dict[str, int]] = {}
            for dtype, row in node.self_by_dtype.items():
                merged[dtype] = {k: row.get(k, 0) for k in keys}
            for c in children:
                # A child's rows were made above, with exactly DTYPE_KEYS in order.
                for dtype, row in c.by_dtype.items():
                    acc = merged.get(dtype)
                    if acc is None:
                        merged[dtype] = row.copy()
                    else:
                        for k, v in row.items():
                            acc[k] += v
            node.by_dtype = dict(sorted(merged.items())) if len(merged) > 1 else merged

    def self_check(self) -> None:
        """Assert inclusive = self + sum of children for every additive metric and node."""
        for node in self.root.walk():
            for key in ms.ADDITIVE_METRICS:
                if key not in node.metrics:
                    continue
                expected = node.self_metrics.get(key, 0) + sum(
                    c.metrics.get(key, 0) for c in node.children
                )
                got = node.metrics[key]
                tol = 1e-9 * max(1.0, abs(float(expected)))
                if abs(got - expected) > tol:
                    raise ProfileCheckError(
                        f"{key} of {node.path or '<root>'}: inclusive {got} != "
                        f"self + children {expected}"
                    )

    # ---- serialisation -------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "model": _jsonable(self.model),
            "env": _jsonable(self.env),
            "unsupported_ops": _jsonable(self.unsupported_ops),
            "partial_metrics": self.partial_metrics,  # derived from unsupported_ops
            "memory": _jsonable(self.memory),
            "numerics": _jsonable(self.numerics),
            "timing": _jsonable(self.timing),
            "notices": list(self.notices),
            "outside": dict(self.outside),
            **({"dist": _jsonable(self.dist)} if self.dist else {}),
            **({"comm": _jsonable(self.comm)} if self.comm else {}),
            **({"ranks": [_rank_dict(r) for r in self.ranks]} if self.ranks else {}),
            **{k: _jsonable(v) for k, v in self.extra.items()},
            "root": self.root.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Profile:
        """The profile in ``to_dict``'s form (parsed JSON), every known key checked:
        ``SchemaError`` names the JSON path of the first malformed value. See docs/json.md."""
        from layerscope.export.json import profile_from_dict

        return profile_from_dict(data)

    def to_json(self, indent: int | None = 2) -> str:
        """The profile as JSON text, non-finite numbers as "NaN"/"Infinity"/"-Infinity"
        (``indent=None``: one line, and much faster); ``ExportError`` names the JSON path of
        a value that is not JSON data."""
        from layerscope.export.json import to_json

        return to_json(self, indent)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the profile as JSON (schema ``layerscope/1``); ``ls.load`` reads it back.

        Atomic: on any failure (``ExportError``, naming the file and, for a value that is
        not JSON data, its JSON path) an existing file is left as it was."""
        from layerscope.export.json import save

        save(self, path)

    # ---- torch.distributed ---------------------------------------------------------
    def gather(self, dst: int = 0, group: Any = None, timeout: float = 300.0) -> Profile | None:
        """Collect every rank's profile on rank ``dst`` (a collective: call it on every
        rank of ``group``, default the whole world).

        Returns on ``dst`` a Profile whose tree and sections are ``dst``'s own and whose
        ``ranks`` holds each rank's profile in group rank order; ``None`` on the other
        ranks. ``InvalidInputError`` without an initialised process group; a
        ``LayerscopeError`` naming the ranks that did not call it within ``timeout``
        seconds. See docs/distributed.md."""
        from layerscope.distributed import gather

        return gather(self, dst=dst, group=group, timeout=timeout)

    def rank_summary(self, metrics: Any = None) -> Any:
        """Per module and metric, min / median / max over the gathered ``ranks``, the
        rank with the max and the imbalance (max / median): a ``RankSummary``, printable
        (``print(prof.rank_summary())``, ``.render(width=80)``): the cross-rank view."""
        from layerscope.render.ranks import rank_summary

        return rank_summary(self, metrics)

    # ---- exports (layerscope.export) -----------------------------------------------
    def export(
        self, path: str | os.PathLike[str], format: str | None = None, **options: Any
    ) -> None:
        """Write the profile in the format its extension names: ``.json``, ``.csv``,
        ``.md``, ``.html``, ``.trace.json`` (or ``format="trace"``, ...)."""
        from layerscope.export import export

        export(self, path, format, **options)

    def to_csv(self, path: str | os.PathLike[str] | None = None) -> str | None:
        """One row per node, pre-order, every metric in base units; the text when no
        path is given."""
        from layerscope.export.csv import to_csv

        return to_csv(self, path)

    def to_dataframe(self) -> Any:
        """The CSV's rows as a ``pandas.DataFrame`` (``pip install layerscope[pandas]``)."""
        from layerscope.export.dataframe import to_dataframe

        return to_dataframe(self)

    def to_markdown(self, **options: Any) -> str:
        """The table view as a GitHub Markdown table (view options as for ``show``)."""
        from layerscope.export.markdown import to_markdown

        return to_markdown(self, **options)

    def to_trace(self, path: str | os.PathLike[str]) -> None:
        """A Chrome/Perfetto trace (Trace Event Format) of a timed profile."""
        from layerscope.export.trace import to_trace

        to_trace(self, path)

    def to_html(self, path: str | os.PathLike[str], *, device: Any = None) -> None:
        """A self-contained HTML report (inline JS and CSS; opens from disk). ``device``
        (a spec name such as ``"h100"`` or ``"cpu"``, ``ls.device_spec(...)`` or a
        mapping) draws that device's roof in the roofline chart."""
        from layerscope.export.html import to_html

        to_html(self, path, device=device)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Profile):
            return NotImplemented
        from layerscope.export.json import comparable  # NaN equals NaN here

        return bool(comparable(self.to_dict()) == comparable(other.to_dict()))

    __hash__ = None  # type: ignore[assignment]

    # ---- display -------------------------------------------------------------------
    def render(self, **options: Any) -> str:
        """A view as plain text. Options as for ``show``; ``width`` defaults to the
        terminal's (80 when there is none)."""
        from layerscope.render.console import render

        return render(self, **options)

    def show(self, *, file: IO[str] | None = None, **options: Any) -> None:
        """Print a view to the terminal (or ``file``).

        Options (all optional, validated; see docs/views.md): ``view`` ("table", "tree",
        "repr", "top", "ops"), ``columns``, ``max_depth``, ``min_pct``, ``pct_of``,
        ``include``, ``exclude``, ``sort_by``, ``top``, ``by_type``, ``fold`` (True,
        False, "all"), ``show_not_called``, ``pct``, ``raw``, ``shapes``, ``width``.
        """
        from layerscope.render.console import show

        show(self, file=file, **options)

    def __str__(self) -> str:
        from layerscope.render.console import render_text

        return render_text(self)

    def __repr__(self) -> str:
        """One line for logs: the model and its headline totals."""
        m = self.root.metrics
        from layerscope.render import units

        parts = [units.plural(sum(1 for _ in self.root.walk()), "module")]

        if ms.PARAMS in m:
            parts.append(f"params={units.count(m[ms.PARAMS])}")
        for key, label in ((ms.MACS, "MACs"), (ms.FLOPS, "FLOPs")):
            if m.get(key):
                parts.append(f"{label}={units.si(m[key]).replace(' ', '')}")
        if ms.FORWARD_TIME in m:
            parts.append(f"fwd={units.seconds(m[ms.FORWARD_TIME]).replace(' ', '')}")
        peak = self.memory.get("forward_peak_bytes")
        if peak is not None:
            parts.append(f"peak={units.nbytes(peak).replace(' ', '')}")
        if self.partial_metrics:
            parts.append("partial=" + "/".join(self.partial_metrics))
        return f"<Profile {self.root.type}: {', '.join(parts)}>"

    def __rich__(self) -> Any:
        from layerscope.render.console import renderable

        return renderable(self)

    def _repr_html_(self) -> str:
        from layerscope.render.console import html_table

        return html_table(self)


def _rank_dict(profile: Profile) -> dict[str, Any]:
    """One entry of ``"ranks"``: the rank's profile without ranks of its own."""
    data = profile.to_dict()
    data.pop("ranks", None)
    return data


def _jsonable(value: Any) -> Any:
    """Deep-copy plain JSON data, turning tuples into lists so round trips compare equal,
    and every NaN into ``math.nan``: one object, so a NaN equals itself inside containers."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and value != value:
        import math

        return math.nan
    return value


# ---- numerics events (Profile.numerics) -------------------------------------------
def _event_label(path: str, type_name: str) -> str:
    return f"'{path}' ({type_name})" if path else f"<root> ({type_name})"


_WHERE_TEXT: dict[str, str] = {
    "output": "output",
    "grad_output": "gradient w.r.t. its output",
    "grad_input": "gradient w.r.t. its input",
}


def describe_nonfinite(event: dict[str, Any], origin: bool) -> str:
    """One sentence about a first_nonfinite/origin event of ``Profile.numerics``: the
    words of ``NonFiniteError``/``NonFiniteWarning`` and of the views' numerics line."""
    what = f"{event['nan']} NaN, {event['inf']} Inf"
    head = (
        f"module {_event_label(event['path'], event['type'])} call {event['call']}: "
        f"non-finite values ({what}) in its {_WHERE_TEXT[event['where']]}, "
        f"shapes {event['shapes']}"
    )
    if origin:
        before = "inputs" if event["where"] == "output" else "output gradients"
        return f"{head}; its {before} were finite, so this module produced them (origin)"
    return (
        f"{head}; they were already there when it ran: no module produced them from "
        "finite values (they came from the inputs, or from code outside any module)"
    )
