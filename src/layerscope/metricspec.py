"""The metric table: every fact about a metric key, written once.

One ``MetricSpec`` per key of ``node.metrics`` says what the number is (unit, phase,
description, JSON type), how values combine wherever several become one (calls, timing
repeats, folded siblings, by-type groups, a loop cycle's steps, ranks), whether it has
self and inclusive forms, and how views show it (header, priority, shown by default; the
HTML report's table and chart, the trace's span args).
Observers write under the key constants below; the catalog, JSON schema, fold, merge,
diff, views and exports read the table. Adding a metric is one row (``register_metric``).

Rules (``Rule``), per place where values combine:

- ``sum``: the values add up.
- ``max``: the largest value.
- ``median``: the median over timing repeats of the per-call value.
- ``first``: the first value found (a loop cycle: the last step's, else the newest
  earlier step's that has one; timing repeats: the analysis pass's single value).
- ``keep``: each source keeps its own value (a loop cycle: the last step's only, since it
  describes the model, not a step's work; ranks: every rank's value, compared side by side).
- ``drop``: left out of the combined entry.

This module is on ``profile.py``'s floor: it imports nothing from layerscope but errors.
Derived key sets are rebuilt when the table changes: read them through the module
(``metricspec.ADDITIVE_METRICS``), not a copy taken at import, to see registered metrics.

Headers follow one naming rule (``MetricSpec.headers`` derives every column's):

- Count or size: the tensors a module holds (parameters, buffers, gradients) are named by
  a plural noun for their element count (``Params``, ``Buffers``) and by the singular noun
  and ``size`` for their bytes (``Param size``, ``Buffer size``, ``Grad size``); other
  byte amounts are named by what the bytes are (``Saved``, ``Out``, ``Peak``, ``Comm``).
- Self or inclusive: a header that starts with ``Self`` is the module's own value; every
  other is inclusive (the module with everything inside it). The self form is ``Self``
  and the short name (``Self FLOPs``, ``Self fwd``), and ``Self`` before any derived
  header (``% FLOPs`` / ``Self % FLOPs``, ``Fwd total`` / ``Self fwd total``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, TypeAlias

from layerscope.errors import InvalidInputError

__all__ = [
    "ADDITIVE",
    "ADDITIVE_METRICS",
    "AMOUNT_METRICS",
    "METRICS",
    "STATIC_METRICS",
    "STORED_METRICS",
    "SUMMED_METRICS",
    "TIMES",
    "MetricSpec",
    "Phase",
    "Rule",
    "Stage",
    "Unit",
    "merge_cycle_metrics",
    "on_change",
    "register_metric",
    "rule_keys",
    "unregister_metric",
]

Number: TypeAlias = int | float
#: Base unit of a value: element counts, bytes, seconds, floating-point operations, MACs.
Unit = Literal["count", "bytes", "seconds", "FLOP", "MAC"]
#: When the value is made: from the model alone, in its forward, in its backward.
Phase = Literal["static", "forward", "backward"]
#: How several values become one (module docstring).
Rule = Literal["sum", "max", "median", "first", "keep", "drop"]
#: Where values combine: timing repeats, folded siblings, by-type groups, a loop
#: cycle's analysed steps, ranks of a distributed run.
Stage = Literal["repeats", "fold", "by_type", "cycles", "ranks"]
#: The trace spans whose args carry a metric: forward spans, backward spans.
Spans: TypeAlias = tuple[Literal["forward", "backward"], ...]

#: The rules each stage implements.
_ALLOWED: dict[str, frozenset[str]] = {
    "repeats": frozenset({"median", "first"}),
    "fold": frozenset({"sum", "max"}),
    "by_type": frozenset({"sum", "drop"}),
    "cycles": frozenset({"sum", "max", "first", "keep"}),
    "ranks": frozenset({"keep"}),
}


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """Everything layerscope knows about one metric key (module docstring)."""

    key: str
    unit: Unit
    phase: Phase
    #: One line for docs and tooltips: what the number counts.
    description: str
    #: Column header; empty: the key is stored and exported but is no view column.
    header: str = ""
    #: Short name used in the self / % headers ("fwd": "Self fwd", "% fwd"); empty: the
    #: header (lower-cased after ``Self`` unless a unit keeps its case, as FLOPs).
    short: str = ""
    #: Column priority: when a narrow table must drop columns, lower goes first.
    priority: int = 0
    #: Inclusive = self + sum over children holds exactly (self and inclusive forms).
    additive: bool = True
    #: Over a module's calls: ``sum`` (a total) or ``per_call`` (times: seconds per call).
    calls: Literal["sum", "per_call"] = "sum"
    repeats: Rule = "first"
    fold: Rule = "sum"
    by_type: Rule = "sum"
    cycles: Rule = "sum"
    ranks: Rule = "keep"
    #: JSON type: ``finite`` (an amount: never NaN/inf) or ``number`` (any number).
    json: Literal["finite", "number"] = "finite"
    #: Shown by default (when the profile has it), and its self column after it.
    default: bool = False
    default_self: bool = False
    #: A whole-model value of 0 still counts as having it (default columns, % base).
    show_zero: bool = False
    #: A non-additive value of a module covers its children's work too (a peak, a time);
    #: False: a fact of the module's own calls (its inputs), whatever its children do.
    subtree: bool = True
    #: The HTML report: a column of its module table (when some node has it; its self
    #: column after it where ``default_self``), and (``chart`` > 0) a size of its chart,
    #: offered in ``chart`` order as ``chart_label`` (default: the header).
    report: bool = False
    chart: int = 0
    chart_label: str = ""
    #: The trace spans whose args carry it (when the module has it), by phase.
    spans: Spans = ()

    def __post_init__(self) -> None:
        for stage, allowed in _ALLOWED.items():
            rule = getattr(self, stage)
            if rule not in allowed:
                raise InvalidInputError(
                    f"metric {self.key!r}: {stage}={rule!r} is not a rule of that stage; "
                    f"allowed: {', '.join(sorted(allowed))}"
                )
        if self.additive != (self.fold == "sum") or self.additive != (self.by_type == "sum"):
            raise InvalidInputError(
                f"metric {self.key!r}: an additive metric sums in folds and by-type groups, "
                "a non-additive one does not (fold and by_type rules)"
            )

    @property
    def column(self) -> bool:
        """Whether views show it as a column (it has a header)."""
        return bool(self.header)

    def headers(self) -> dict[str, str]:
        """The header of each column key derived from this metric, by the naming rule
        (module docstring): the metric, its self form, their % of the whole-model total
        (additive metrics and times), time totals, and work per call (FLOPs and MACs)."""
        key, header = self.key, self.header
        counted = self.unit in ("FLOP", "MAC")  # names that keep their case: "Self MACs"
        own = f"Self {self.short or (header if counted else header.lower())}"
        out = {key: header, f"self_{key}": own}
        if self.additive or self.calls == "per_call":
            pct = f"% {self.short or header}"
            out[f"{key}_pct"] = pct
            out[f"self_{key}_pct"] = f"Self {pct}"
        if self.calls == "per_call":
            total = f"{header.split()[0]} total"
            out[f"{key}_total"] = total
            out[f"self_{key}_total"] = f"Self {total.lower()}"
        if counted:
            out[f"{key}_per_call"] = f"{header}/call"
        return out


def _work(
    key: str,
    unit: Unit,
    phase: Phase,
    header: str,
    priority: int,
    description: str,
    *,
    cycles: Rule = "sum",
    default: bool = False,
    report: bool = False,
    chart: int = 0,
    chart_label: str = "",
    spans: Spans = (),
) -> MetricSpec:
    """An additive amount of work or memory, summed everywhere."""
    return MetricSpec(
        key,
        unit,
        phase,
        description,
        header,
        priority=priority,
        cycles=cycles,
        default=default,
        report=report,
        chart=chart,
        chart_label=chart_label,
        spans=spans,
    )


def _count(noun: str) -> str:
    """The header of an element count of tensors: the plural noun ("Params")."""
    return f"{noun[:1].upper()}{noun[1:]}s"


def _size(noun: str) -> str:
    """The header of the bytes of those tensors: the noun and "size" ("Param size")."""
    return f"{noun[:1].upper()}{noun[1:]} size"


def _static(
    key: str,
    unit: Unit,
    header: str,
    priority: int,
    description: str,
    *,
    default: bool = False,
    show_zero: bool = False,
    report: bool = False,
    chart: int = 0,
    spans: Spans = (),
) -> MetricSpec:
    """An additive fact of the model itself: a loop cycle keeps its last step's value."""
    return MetricSpec(
        key,
        unit,
        "static",
        description,
        header,
        priority=priority,
        cycles="keep",
        default=default,
        show_zero=show_zero,
        report=report,
        chart=chart,
        spans=spans,
    )


def _peak(
    key: str,
    phase: Phase,
    header: str,
    priority: int,
    description: str,
    *,
    default: bool = False,
    subtree: bool = True,
    report: bool = False,
    spans: Spans = (),
) -> MetricSpec:
    """A high-water mark: not additive, the largest wins wherever values combine."""
    return MetricSpec(
        key,
        "bytes",
        phase,
        description,
        header,
        priority=priority,
        additive=False,
        fold="max",
        by_type="drop",
        cycles="max",
        default=default,
        subtree=subtree,
        report=report,
        spans=spans,
    )


def _time(
    key: str,
    phase: Phase,
    header: str,
    short: str,
    priority: int,
    description: str,
    *,
    default: bool = False,
    default_self: bool = False,
    report: bool = False,
    chart: int = 0,
) -> MetricSpec:
    """Seconds per call, the median over timing repeats."""
    return MetricSpec(
        key,
        "seconds",
        phase,
        description,
        header,
        short,
        priority,
        additive=False,
        calls="per_call",
        repeats="median",
        fold="max",
        by_type="drop",
        cycles="first",
        json="number",
        default=default,
        default_self=default_self,
        show_zero=True,
        report=report,
        chart=chart,
    )


# fmt: off
PARAMS = "params"
TRAINABLE_PARAMS = "trainable_params"
BUFFERS = "buffers"
PARAM_BYTES = "param_bytes"
BUFFER_BYTES = "buffer_bytes"
MACS = "macs"
FLOPS = "flops"
BACKWARD_MACS = "backward_macs"
BACKWARD_FLOPS = "backward_flops"
RECOMPUTE_FLOPS = "recompute_flops"
ACTIVATION_BYTES = "activation_bytes"
OUTPUT_BYTES = "output_bytes"
INPUT_BYTES = "input_bytes"
PEAK_BYTES = "peak_bytes"
SIMULATED_PEAK_BYTES = "simulated_peak_bytes"
BACKWARD_PEAK_BYTES = "backward_peak_bytes"
GRAD_BYTES = "grad_bytes"
BYTES_ACCESSED = "bytes_accessed"
BACKWARD_BYTES_ACCESSED = "backward_bytes_accessed"
COMM_BYTES = "comm_bytes"
BACKWARD_COMM_BYTES = "backward_comm_bytes"
COMM_WIRE_BYTES = "comm_wire_bytes"
BACKWARD_COMM_WIRE_BYTES = "backward_comm_wire_bytes"
LOCAL_PARAMS = "local_params"
LOCAL_PARAM_BYTES = "local_param_bytes"
LOCAL_BUFFER_BYTES = "local_buffer_bytes"
LOCAL_GRAD_BYTES = "local_grad_bytes"
FORWARD_TIME = "forward_time"
BACKWARD_TIME = "backward_time"
DEVICE_TIME = "device_time"
BACKWARD_DEVICE_TIME = "backward_device_time"
#: The kinds of ``profile.memory["baseline"]`` (``metrics/memory/baseline.py``), in order.
BASELINE_KINDS = ("parameters", "gradients", "optimizer_states", "buffers", "other")
_FWD: Spans = ("forward",)
_BWD: Spans = ("backward",)
_BOTH: Spans = ("forward", "backward")

_BUILTIN: tuple[MetricSpec, ...] = (
    _static(PARAMS, "count", _count("param"), 90, "parameter elements; a tensor shared by several "
            "modules counts once, at their lowest common ancestor", default=True,
            show_zero=True, report=True, chart=5, spans=_BOTH),
    _static(TRAINABLE_PARAMS, "count", _count("trainable param"), 30, "parameter elements with "
            "requires_grad", report=True, spans=_BOTH),
    _static(BUFFERS, "count", _count("buffer"), 20, "buffer elements", report=True,
            spans=_FWD),
    _static(PARAM_BYTES, "bytes", _size("param"), 30, "bytes of parameters", default=True,
            report=True, chart=7, spans=_FWD),
    _static(BUFFER_BYTES, "bytes", _size("buffer"), 20, "bytes of buffers", default=True,
            report=True, spans=_FWD),
    _work(MACS, "MAC", "forward", "MACs", 60, "multiply-accumulates of contraction ops "
          "(mm, bmm, conv, attention and RNN gate matmuls) in the forward", default=True,
          report=True, spans=_FWD),
    _work(FLOPS, "FLOP", "forward", "FLOPs", 90, "floating-point operations of the forward: "
          "2 per MAC plus every other arithmetic op", default=True, report=True, chart=3,
          spans=_FWD),
    _work(BACKWARD_MACS, "MAC", "backward", "Bwd MACs", 50, "multiply-accumulates of the "
          "backward ops autograd ran", report=True, spans=_BWD),
    _work(BACKWARD_FLOPS, "FLOP", "backward", "Bwd FLOPs", 70, "floating-point operations "
          "of the backward ops autograd ran", default=True, report=True, chart=4,
          spans=_BWD),
    _work(RECOMPUTE_FLOPS, "FLOP", "backward", "Recompute", 45, "floating-point operations "
          "of forward work the backward pass ran again (activation checkpointing's "
          "recomputation); part of backward_flops"),
    _work(ACTIVATION_BYTES, "bytes", "forward", "Saved", 70, "bytes saved for backward by "
          "the module's ops (deduplicated by storage, parameters excluded)", default=True,
          report=True, chart=6, chart_label="Memory (saved)", spans=_FWD),
    _work(OUTPUT_BYTES, "bytes", "forward", "Out", 40, "bytes of the module's tensor "
          "outputs", default=True, report=True, spans=_FWD),
    _peak(INPUT_BYTES, "forward", "In", 30, "bytes of the tensors passed to one call of the "
          "module's forward (each distinct tensor once), the largest over its calls",
          subtree=False),
    _peak(PEAK_BYTES, "forward", "Peak", 50, "highest live bytes above the level at module "
          "entry, during its forward", default=True, report=True, spans=_FWD),
    _peak(SIMULATED_PEAK_BYTES, "forward", "", 0, "the simulated peak_bytes, kept beside "
          "the CUDA allocator's as a cross-check"),
    _peak(BACKWARD_PEAK_BYTES, "backward", "Bwd peak", 35, "highest live bytes during the "
          "module's backward"),
    _work(GRAD_BYTES, "bytes", "backward", _size("grad"), 40, "bytes of the parameter gradients "
          "the module holds", cycles="keep", default=True, report=True, spans=_BWD),
    _work(BYTES_ACCESSED, "bytes", "forward", "Bytes", 40, "bytes read and written by the "
          "module's forward ops", report=True, spans=_FWD),
    _work(BACKWARD_BYTES_ACCESSED, "bytes", "backward", "Bwd bytes", 30, "bytes read and "
          "written by the module's backward ops", report=True, spans=_BWD),
    _work(COMM_BYTES, "bytes", "forward", "Comm", 45, "bytes handed to collectives in the "
          "forward"),
    _work(BACKWARD_COMM_BYTES, "bytes", "backward", "Bwd comm", 45, "bytes handed to "
          "collectives in the backward"),
    _work(COMM_WIRE_BYTES, "bytes", "forward", "Wire", 40, "bytes on the wire per rank for "
          "the forward's collectives (ring algorithms; docs/distributed.md)"),
    _work(BACKWARD_COMM_WIRE_BYTES, "bytes", "backward", "Bwd wire", 40, "bytes on the wire "
          "per rank for the backward's collectives (ring algorithms; docs/distributed.md)"),
    _static(LOCAL_PARAMS, "count", _count("local param"), 35, "parameter elements of this rank's "
            "DTensor shards"),
    _static(LOCAL_PARAM_BYTES, "bytes", _size("local param"), 25, "bytes of this rank's parameter "
            "shards"),
    _static(LOCAL_BUFFER_BYTES, "bytes", _size("local buffer"), 15, "bytes of this rank's buffer "
            "shards"),
    _work(LOCAL_GRAD_BYTES, "bytes", "backward", _size("local grad"), 20, "bytes of this "
          "rank's shards of the parameter gradients the module holds", cycles="keep"),
    _time(FORWARD_TIME, "forward", "Fwd time", "fwd", 80, "seconds per call of the "
          "module's forward, median over timed repeats", default=True, default_self=True,
          report=True, chart=1),
    _time(BACKWARD_TIME, "backward", "Bwd time", "bwd", 75, "seconds per call of the "
          "backward work created by the module's forward", default=True, default_self=True,
          report=True, chart=2),
    _time(DEVICE_TIME, "forward", "Device", "device", 60, "device (kernel) seconds per call "
          "of the module's forward", default=True, report=True),
    _time(BACKWARD_DEVICE_TIME, "backward", "", "", 0, "device (kernel) seconds per call "
          "of the module's backward"),
)
# fmt: on

#: The table, in the canonical order (views, CSV and diff list metrics in this order).
METRICS: dict[str, MetricSpec] = {spec.key: spec for spec in _BUILTIN}

# Derived key sets, rebuilt by ``_refresh`` whenever the table changes.
#: Metrics for which inclusive = self + sum over children holds exactly.
ADDITIVE_METRICS: tuple[str, ...] = ()
ADDITIVE: frozenset[str] = frozenset()
#: The per-call time metrics that are view columns (a total is per-call time × calls).
TIMES: tuple[str, ...] = ()
#: The metric keys views show as columns, in the table's order.
STORED_METRICS: tuple[str, ...] = ()
#: Metrics that are amounts (finite numbers in JSON).
AMOUNT_METRICS: frozenset[str] = frozenset()
#: Metrics that describe the model, not a step's work: a loop cycle keeps the last step's.
STATIC_METRICS: frozenset[str] = frozenset()
#: Metrics summed over a loop cycle's analysed steps.
SUMMED_METRICS: frozenset[str] = frozenset()
_rules: dict[tuple[str, str], frozenset[str]] = {}
#: Called after every change of the table (readers drop what they derived from it).
_listeners: list[Callable[[], None]] = []


def _refresh() -> None:
    """Rebuild the derived key sets from ``METRICS``."""
    global ADDITIVE_METRICS, ADDITIVE, TIMES, STORED_METRICS, AMOUNT_METRICS
    global STATIC_METRICS, SUMMED_METRICS
    specs = METRICS.values()
    ADDITIVE_METRICS = tuple(s.key for s in specs if s.additive)
    ADDITIVE = frozenset(ADDITIVE_METRICS)
    TIMES = tuple(s.key for s in specs if s.calls == "per_call" and s.column)
    STORED_METRICS = tuple(s.key for s in specs if s.column)
    AMOUNT_METRICS = frozenset(s.key for s in specs if s.json == "finite")
    _rules.clear()
    STATIC_METRICS = rule_keys("cycles", "keep")
    SUMMED_METRICS = rule_keys("cycles", "sum")
    for listener in _listeners:
        listener()


def rule_keys(stage: Stage, rule: Rule) -> frozenset[str]:
    """The keys combined by ``rule`` at ``stage`` (``rule_keys("fold", "sum")``)."""
    found = _rules.get((stage, rule))
    if found is None:
        found = frozenset(k for k, s in METRICS.items() if getattr(s, stage) == rule)
        _rules[(stage, rule)] = found
    return found


def on_change(listener: Callable[[], None]) -> None:
    """Call ``listener`` whenever the table changes, so that a reader rebuilds what it
    derived from it (and need not ask on every use)."""
    _listeners.append(listener)


def register_metric(spec: MetricSpec) -> None:
    """Add a metric to the table: every reader sees it from then on."""
    if spec.key in METRICS:
        raise InvalidInputError(f"metric {spec.key!r} is already in the table")
    METRICS[spec.key] = spec
    _refresh()


def unregister_metric(key: str) -> None:
    """Remove a metric that ``register_metric`` added (KeyError if absent)."""
    del METRICS[key]
    _refresh()


def merge_cycle_metrics(into: dict[str, Number], earlier: Mapping[str, Number]) -> None:
    """Fold an earlier step's metrics into ``into`` (a later step's) by each key's
    ``cycles`` rule; a key not in the table counts as ``first``."""
    summed = rule_keys("cycles", "sum")
    peaks = rule_keys("cycles", "max")
    kept = rule_keys("cycles", "keep")
    for key, value in earlier.items():
        mine = into.get(key)
        if key in summed:
            into[key] = value if mine is None else mine + value
        elif key in peaks:
            into[key] = value if mine is None else max(mine, value)
        elif mine is None and key not in kept:
            into[key] = value


_refresh()
