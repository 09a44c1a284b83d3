"""What a timing pass measured (``TimingResult`` and its samples) and how it is written
into a Profile: the node time metrics, op rows and ``Profile.timing``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from layerscope.collect.regions import apply_region_times
from layerscope.collect.timing.forward import ForwardRepeat
from layerscope.collect.timing.index import ModuleIndex
from layerscope.collect.timing.spans import RepeatSpans
from layerscope.collect.timing.stats import summarize
from layerscope.errors import InvalidInputError
from layerscope.metricspec import BACKWARD_DEVICE_TIME, BACKWARD_TIME, DEVICE_TIME, FORWARD_TIME
from layerscope.profile import Node, Profile

#: Suffixes of the spread keys written next to each time key.
MIN_SUFFIX = "_min"
IQR_SUFFIX = "_iqr"
_BASE_KEYS = (FORWARD_TIME, BACKWARD_TIME, DEVICE_TIME, BACKWARD_DEVICE_TIME)
#: Every node metric the timing pass writes (all non-additive, seconds).
TIME_METRICS: tuple[str, ...] = tuple(
    k + s for k in _BASE_KEYS for s in ("", MIN_SUFFIX, IQR_SUFFIX)
)


def is_op_row(node: Node) -> bool:
    """Whether ``node`` is an op row added by ``ops=True`` (type like ``aten::mm``).

    Module types are Python class names and never contain ``::``.
    """
    return "::" in node.type


@dataclass
class Series:
    """Per-repeat values (ns per call) of one time metric of one row: inclusive and self."""

    inclusive: list[float] = field(default_factory=list)
    exclusive: list[float] = field(default_factory=list)

    def add(self, inclusive: float, exclusive: float) -> None:
        self.inclusive.append(inclusive)
        self.exclusive.append(exclusive)


@dataclass
class RowSamples:
    """Samples of one module (by path): calls per forward and a Series per time metric."""

    path: str
    calls: int = 0
    series: dict[str, Series] = field(default_factory=dict)

    def add(self, key: str, inclusive: float, exclusive: float) -> None:
        self.series.setdefault(key, Series()).add(inclusive, exclusive)


@dataclass
class OpSamples(RowSamples):
    """Samples of an op row under a module: ``parent`` path, op ``name`` and row ``type``."""

    parent: str = ""
    name: str = ""
    type: str = ""


@dataclass
class TimingResult:
    """Everything one timing pass measured, in nanoseconds, before it is written out.

    ``modules`` maps module paths to samples; ``ops`` lists op rows (``ops=True``);
    ``whole`` holds whole-model series (``latency``, ``forward_latency``,
    ``backward_latency``, ``instrumented_forward``); ``info`` the options and facts that
    go into ``Profile.timing``; ``overhead`` the calibrated instrumentation costs;
    ``spans`` every timed repeat's timeline and ``trace`` the median one as written to
    ``Profile.timing["trace"]``; ``regions`` the user regions' call times by path.
    """

    modules: dict[str, RowSamples] = field(default_factory=dict)
    ops: list[OpSamples] = field(default_factory=list)
    whole: dict[str, list[float]] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    overhead: dict[str, float] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)
    spans: list[RepeatSpans] = field(default_factory=list)
    trace: dict[str, Any] | None = None
    #: user regions: per-call wall times (ns) by region path
    regions: dict[str, list[float]] = field(default_factory=dict)

    def add_regions(self, times: dict[str, list[float]]) -> None:
        for path, samples in times.items():
            self.regions.setdefault(path, []).extend(samples)

    def row(self, path: str) -> RowSamples:
        return self.modules.setdefault(path, RowSamples(path))

    def apply(self, profile: Profile) -> None:
        """Write node time metrics, op rows and ``Profile.timing`` into ``profile``.

        Re-applying replaces what an earlier timing pass wrote (keys and op rows).
        """
        by_path = _module_nodes(profile)
        for node in by_path.values():
            node.children = [c for c in node.children if not is_op_row(c)]
            for d in (node.metrics, node.self_metrics):
                for key in TIME_METRICS:
                    d.pop(key, None)
        for path, row in self.modules.items():
            target = by_path.get(path)
            if target is not None:
                _write(target, row)
        for op in self.ops:
            parent = by_path.get(op.parent)
            if parent is None:
                continue
            k = sum(1 for _ in parent.children) + 1
            child = Node(
                path=f"{op.parent}/{op.name}",
                name=op.name,
                type=op.type,
                node_id=f"{k}" if parent.node_id == "0" else f"{parent.node_id}.{k}",
                depth=parent.depth + 1,
                calls=op.calls,
                repr=op.type,
            )
            _write(child, op)
            parent.children.append(child)
        timing = dict(self.info)
        for name, values in self.whole.items():
            if values:
                timing[name] = summarize(values, 1e-9)
        batch = timing.get("batch_size")
        latency = timing.get("latency")
        timing["throughput"] = (
            batch / latency["median"] if batch and latency and latency["median"] > 0 else None
        )
        timing["throughput_unit"] = "inputs/s"
        timing["overhead"] = {k: v * 1e-9 for k, v in self.overhead.items()} | {
            "corrected": bool(self.info.get("overhead_corrected"))
        }
        timing.pop("overhead_corrected", None)
        if self.trace is not None:
            timing["trace"] = self.trace
        profile.timing = timing
        apply_region_times(
            profile, {path: [t * 1e-9 for t in ts] for path, ts in self.regions.items()}
        )
        profile.notices.extend(n for n in self.notices if n not in profile.notices)


def _module_nodes(profile: Profile) -> dict[str, Node]:
    out: dict[str, Node] = {}
    for node in profile.root.walk():
        if node.members or node.repeat != 1:
            raise InvalidInputError(
                "time_profile needs the unfolded profile from ls.profile, not a folded view"
            )
        if not is_op_row(node):
            out[node.path] = node
    return out


def _write(node: Node, row: RowSamples) -> None:
    for key, s in row.series.items():
        if not s.inclusive:
            continue
        for d, values in ((node.metrics, s.inclusive), (node.self_metrics, s.exclusive)):
            st = summarize(values, 1e-9)
            d[key] = st["median"]
            d[key + MIN_SUFFIX] = st["min"]
            d[key + IQR_SUFFIX] = st["iqr"]


def add_repeat(
    result: TimingResult,
    index: ModuleIndex,
    fwd: ForwardRepeat,
    bwd_self: list[float] | None,
    key: str = FORWARD_TIME,
    bwd_key: str = BACKWARD_TIME,
) -> None:
    """Append one repeat's per-call values (totals / calls) to the result's series."""
    bwd_incl = index.rollup(bwd_self) if bwd_self is not None else None
    for i, calls in enumerate(fwd.calls):
        if calls == 0:
            continue
        row = result.row(index.paths[i])
        row.calls = calls
        row.add(key, fwd.inclusive[i] / calls, fwd.exclusive[i] / calls)
        if bwd_self is not None and bwd_incl is not None:
            row.add(bwd_key, bwd_incl[i] / calls, bwd_self[i] / calls)
