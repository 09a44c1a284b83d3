"""What a view can show: every metric key, derived column and text column, by name.

A view asks for values by key (``flops``, ``self_flops``, ``flops_pct``,
``forward_time_total``, ``flops_per_s``, ``flops_per_call``, ``input_shape``, ...).
``Values`` answers for any node of a profile, plain or folded, from the numbers alone.

Times are stored per call; a time total is per-call time × calls, summed over the modules
a folded entry stands for (its ``members``), so % of time and achieved FLOP/s stay right
on folded rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import layerscope.metricspec as ms
from layerscope.analysis.roofline import PHASE_KEYS, Roof, intensity, roof_times, work
from layerscope.profile import Node, Number, Profile

__all__ = [
    "Column",
    "Values",
    "column",
    "has_column",
    "known_keys",
]

#: How a value is written: exact counts, SI magnitudes, bytes, seconds, rates, %.
Kind = Literal["count", "si", "bytes", "seconds", "rate", "pct", "number", "text"]


@dataclass(frozen=True)
class Column:
    """A column a view can show: its key, header, how its values are written, and its
    priority when a narrow table must drop columns (lower goes first)."""

    key: str
    header: str
    kind: Kind
    priority: int
    #: Sums over modules (so a % of the whole-model total means something).
    additive: bool = False


#: How a metric's values are written, by its unit.
_KIND_OF_UNIT: dict[str, Kind] = {
    "count": "count",
    "bytes": "bytes",
    "seconds": "seconds",
    "FLOP": "si",
    "MAC": "si",
}

#: Statistics of a numerics check (``node.numerics``).
_NUMERICS: dict[str, tuple[str, Kind, int]] = {
    "absmax": ("Abs max", "number", 55),
    "nan": ("NaN", "count", 65),
    "inf": ("Inf", "count", 65),
    "min": ("Min", "number", 25),
    "max": ("Max", "number", 25),
    "mean": ("Mean", "number", 25),
    "std": ("Std", "number", 25),
}


def _build() -> dict[str, Column]:
    cols: dict[str, Column] = {
        "input_shape": Column("input_shape", "Input shape", "text", 0),
        "output_shape": Column("output_shape", "Output shape", "text", 1),
        "grad_input_shape": Column("grad_input_shape", "Grad in", "text", 0),
        "grad_output_shape": Column("grad_output_shape", "Grad out", "text", 0),
        "calls": Column("calls", "Calls", "count", 45),
    }
    for spec in ms.METRICS.values():
        if spec.column:
            cols.update(_metric_columns(spec))
    for key, (header, kind, prio) in _NUMERICS.items():
        cols[key] = Column(key, header, kind, prio)
    cols["flops_per_s"] = Column("flops_per_s", "FLOP/s", "rate", 55)
    cols["macs_per_s"] = Column("macs_per_s", "MAC/s", "rate", 35)
    cols["backward_flops_per_s"] = Column("backward_flops_per_s", "Bwd FLOP/s", "rate", 35)
    cols["bytes_per_s"] = Column("bytes_per_s", "B/s", "rate", 30)
    cols["backward_bytes_per_s"] = Column("backward_bytes_per_s", "Bwd B/s", "rate", 25)
    # the roofline (analysis.roofline): intensity from the numbers alone, the rest on the
    # device spec a view names (``device=``)
    for phase, short in (("", ""), ("backward_", "Bwd ")):
        for own, prefix in ((False, ""), (True, "Self ")):
            lead = "self_" if own else ""
            head = f"{prefix}{short}".strip()
            rows: tuple[tuple[str, str, Kind, int], ...] = (
                ("intensity", "FLOP/B", "number", 40),
                ("roofline_time", "Roofline", "seconds", 45),
                ("efficiency", "Eff", "pct", 45),
                ("lost_time", "Lost", "seconds", 40),
            )
            for name, header, kind, prio in rows:
                key = f"{lead}{phase}{name}"
                title = f"{head} {header.lower() if head else header}".strip()
                cols[key] = Column(key, title, kind, prio - (15 if own else 0) - len(phase) // 3)
            cols[f"{lead}{phase}bound"] = Column(
                f"{lead}{phase}bound", f"{head} bound".strip().capitalize(), "text", 35
            )
    return cols


def _metric_columns(spec: ms.MetricSpec) -> dict[str, Column]:
    """A stored metric's columns: itself, self, % of total, time totals, per call; their
    headers by the table's naming rule (``MetricSpec.headers``)."""
    key, prio = spec.key, spec.priority
    kind = _KIND_OF_UNIT[spec.unit]
    heads = spec.headers()
    cols = {
        key: Column(key, heads[key], kind, prio, additive=spec.additive),
        f"self_{key}": Column(f"self_{key}", heads[f"self_{key}"], kind, prio - 15, spec.additive),
    }
    if f"{key}_pct" in heads:
        cols[f"{key}_pct"] = Column(f"{key}_pct", heads[f"{key}_pct"], "pct", prio - 5)
        own = f"self_{key}_pct"
        cols[own] = Column(own, heads[own], "pct", prio - 20)
    if f"{key}_total" in heads:
        name = f"{key}_total"
        cols[name] = Column(name, heads[name], "seconds", prio - 10, True)
        own = f"self_{name}"
        cols[own] = Column(own, heads[own], "seconds", prio - 20, True)
    if f"{key}_per_call" in heads:
        per_call = f"{key}_per_call"
        cols[per_call] = Column(per_call, heads[per_call], "si", prio - 20)
    return cols


class _Table:
    """The columns and direct getters, built on first use and again after the metric
    table changes."""

    def __init__(self) -> None:
        self.columns: dict[str, Column] | None = None
        self.getters: dict[str, Callable[[Node], Number | None]] = {}
        ms.on_change(self.invalidate)

    def invalidate(self) -> None:
        self.columns = None

    def build(self) -> dict[str, Column]:
        self.getters = _getters()
        self.columns = columns = _build()
        return columns


_TABLE = _Table()


def _columns() -> dict[str, Column]:
    return _TABLE.columns or _TABLE.build()


#: Keys whose value is a rate: (work metric, time metric) whose total it divides by.
_RATES = {
    "flops_per_s": (ms.FLOPS, ms.FORWARD_TIME),
    "macs_per_s": (ms.MACS, ms.FORWARD_TIME),
    "backward_flops_per_s": (ms.BACKWARD_FLOPS, ms.BACKWARD_TIME),
    "bytes_per_s": (ms.BYTES_ACCESSED, ms.FORWARD_TIME),
    "backward_bytes_per_s": (ms.BACKWARD_BYTES_ACCESSED, ms.BACKWARD_TIME),
}

#: Derived roofline keys (after ``self_`` and ``backward_``): what needs a device spec.
ROOFLINE_KEYS = ("roofline_time", "efficiency", "lost_time", "bound")


def roofline_parts(key: str) -> tuple[bool, str, str] | None:
    """(own, phase, quantity) of a roofline key: ``self_backward_efficiency`` ->
    (True, "backward", "efficiency"); None for other keys."""
    own = key.startswith("self_")
    rest = key.removeprefix("self_")
    phase = "backward" if rest.startswith("backward_") else "forward"
    rest = rest.removeprefix("backward_")
    if rest in ROOFLINE_KEYS or rest == "intensity":
        return own, phase, rest
    return None


def column(key: str) -> Column:
    """The column for ``key``; ``KeyError`` if unknown."""
    return (_TABLE.columns or _TABLE.build())[key]


def has_column(key: str) -> bool:
    """Whether ``key`` is a column the views know."""
    return key in _columns()


def known_keys(*, numeric: bool = True) -> list[str]:
    """Keys a view accepts; only numeric ones (sortable) with ``numeric=True``."""
    return [k for k, c in _columns().items() if not numeric or c.kind != "text"]


def pct_base(key: str) -> str | None:
    """The metric a % of total is taken of, for ``key`` (``flops_pct`` -> ``flops``;
    ``self_flops`` -> ``flops``), or None when ``key`` does not add up over modules."""
    base = key.removesuffix("_pct").removeprefix("self_").removesuffix("_total")
    col = _columns().get(base)
    if col is None or not (col.additive or base in ms.TIMES):
        return None
    return base


class Values:
    """Values of any column key for the nodes of ``original`` and of profiles made from it
    (folded, filtered, sorted): a folded entry's time totals are summed over the original
    modules it stands for, found by path."""

    def __init__(
        self, original: Profile, *, ops_apart: bool = False, roof: Roof | None = None
    ) -> None:
        self.original = original
        self.ops_apart = ops_apart
        self.roof = roof  # the device the roofline keys are derived for, if any
        self._by_path: dict[str, Node] | None = None
        self._cache: dict[tuple[Node, str], Number | None] = {}
        self._roof_times: dict[tuple[str, bool], dict[str, float]] = {}
        self.root = original.root
        _columns()
        self._getters = _TABLE.getters
        self._times = ms.TIMES

    def _index(self) -> dict[str, Node]:
        if self._by_path is None:
            self._by_path = {n.path: n for n in self.original.root.walk()}
        return self._by_path

    def originals(self, node: Node) -> list[Node]:
        """The original modules ``node`` stands for (itself when not folded)."""
        if not node.members:
            return [node]
        index = self._index()
        return [index[p] for p in node.members if p in index]

    def time_total(self, node: Node, key: str, *, own: bool = False) -> float | None:
        """Per-call time × calls of ``key``, summed over the modules ``node`` stands for.

        With ``own`` and ``ops_apart``, a module's self time leaves out the time of its op
        rows (``aten::mm`` children of a kineto/fx timing pass), which a flat list shows as
        rows of their own: then nothing is counted twice.
        """
        total = 0.0
        seen = False
        for o in self.originals(node):
            op_row = "::" in o.type
            # an op row stands for its nested ops too, which are no rows of their own
            source = o.self_metrics if own and not (self.ops_apart and op_row) else o.metrics
            t = source.get(key)
            if t is not None:
                total += float(t) * o.calls
                seen = True
                if own and self.ops_apart and not op_row:
                    for child in o.children:
                        if "::" in child.type:
                            total -= float(child.metrics.get(key, 0.0)) * child.calls
        return total if seen else None

    def total(self, base: str) -> float | None:
        """The whole-model value a % of ``base`` is taken of."""
        if base in self._times:
            return self.time_total(self.root, base)
        v = self.root.metrics.get(base)
        return None if v is None else float(v)

    def get(self, node: Node, key: str) -> Number | None:
        """The value of ``key`` for ``node``, or None when the profile lacks it."""
        getter = self._getters.get(key)
        if getter is not None:
            return getter(node)
        cache_key = (node, key)
        if cache_key in self._cache:
            return self._cache[cache_key]
        value = self._derive(node, key)
        self._cache[cache_key] = value
        return value

    def _derive(self, node: Node, key: str) -> Number | None:
        if key.endswith("_pct"):
            base = key.removesuffix("_pct")
            own = base.startswith("self_")
            base = base.removeprefix("self_")
            total = self.total(base)
            if not total:
                return None
            if base in self._times:
                part = self.time_total(node, base, own=own)
            else:
                part = (node.self_metrics if own else node.metrics).get(base)
            return None if part is None else 100.0 * float(part) / total
        if key.endswith("_total"):
            base = key.removesuffix("_total")
            own = base.startswith("self_")
            return self.time_total(node, base.removeprefix("self_"), own=own)
        if key in _RATES:
            work, time = _RATES[key]
            amount = node.metrics.get(work)
            seconds = self.time_total(node, time)
            if amount is None or not seconds:
                return None
            return float(amount) / seconds
        if key.endswith("_per_call"):
            amount = node.metrics.get(key.removesuffix("_per_call"))
            if amount is None or not node.calls:
                return None
            return float(amount) / node.calls
        parts = roofline_parts(key)
        if parts is not None:
            return self._roofline(node, *parts)
        raise KeyError(key)

    # ---- the roofline ----------------------------------------------------------------
    def roof_time(self, node: Node, phase: str, *, own: bool = False) -> float | None:
        """Roofline seconds of ``node``'s work in ``phase`` (all calls), summed over the
        modules it stands for; None without a roof or without bytes moved."""
        if self.roof is None:
            return None
        table = self._roof_times.get((phase, own))
        if table is None:
            table = self._roof_times[(phase, own)] = self._roof_table(phase, own)
        times = [table[o.path] for o in self.originals(node) if o.path in table]
        return sum(times) if times else None

    def _roof_table(self, phase: str, own: bool) -> dict[str, float]:
        assert self.roof is not None
        roof = self.roof
        if own:
            out = {}
            for n in self.original.root.walk():
                w = work(n.self_metrics, phase)
                if w is not None:
                    out[n.path] = roof.time(*w)
            return out
        if work(self.original.root.metrics, phase) is None:
            return {}
        by_id = roof_times(self.original, roof, phase)
        return {n.path: by_id[id(n)] for n in self.original.root.walk()}

    def _roofline(self, node: Node, own: bool, phase: str, what: str) -> Number | None:
        metrics = node.self_metrics if own else node.metrics
        w = work(metrics, phase)
        if w is None:
            return None
        if what == "intensity":
            return intensity(*w)
        roofline = self.roof_time(node, phase, own=own)
        if roofline is None:
            return None
        if what == "roofline_time":
            return roofline
        measured = self.time_total(node, PHASE_KEYS[phase][2], own=own)
        if not measured:
            return None
        if what == "efficiency":
            return 100.0 * roofline / measured
        return measured - roofline  # lost_time

    def bound(self, node: Node, key: str) -> str | None:
        """ "compute" or "memory" for a ``bound`` key; None without a roof or bytes."""
        parts = roofline_parts(key)
        if self.roof is None or parts is None:
            return None
        own, phase, _ = parts
        w = work(node.self_metrics if own else node.metrics, phase)
        return None if w is None else self.roof.bound(*w)


def _metric(key: str) -> Callable[[Node], Number | None]:
    return lambda node: node.metrics.get(key)


def _self_metric(key: str) -> Callable[[Node], Number | None]:
    return lambda node: node.self_metrics.get(key)


def _numeric_stat(key: str) -> Callable[[Node], Number | None]:
    def get(node: Node) -> Number | None:
        value = node.numerics.get(key)
        return value if isinstance(value, int | float) and not isinstance(value, bool) else None

    return get


def _getters() -> dict[str, Callable[[Node], Number | None]]:
    """Keys read straight from a node (no derivation, no cache)."""
    stored = ms.STORED_METRICS
    return {
        "calls": lambda node: node.calls,
        **{k: _metric(k) for k in stored},
        **{f"self_{k}": _self_metric(k) for k in stored},
        **{k: _numeric_stat(k) for k in _NUMERICS},
    }
