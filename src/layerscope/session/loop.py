"""The pieces of a ``Profiler`` driven by a user's loop: merging the Profiles of a
cycle's analysed steps (``merge_profiles``) and the cheap timers of its timed steps
(``LoopTimer``).

A timed step carries no analysis instrumentation (rule 4): only the forward pre/post hook
pair of the timing pass per module, which appends ``(module, stamp)`` to a list, and two
stamps around the step. The log is replayed into per-call times after the step's end
stamp, so the replay is not part of the step's time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn

from layerscope.collect.inputs import model_device_dtype
from layerscope.collect.timing.calibrate import calibrate_clock, calibrate_forward
from layerscope.collect.timing.clock import Stamper
from layerscope.collect.timing.forward import ForwardHooks, replay_forward
from layerscope.collect.timing.index import ModuleIndex
from layerscope.collect.timing.options import TimingOptions
from layerscope.collect.timing.result import TimingResult, add_repeat
from layerscope.collect.timing.spans import RepeatSpans, build_trace, forward_spans
from layerscope.errors import InvalidInputError
from layerscope.profile import ADDITIVE_METRICS, Node, Number, Profile

#: ``timing=`` options that apply to a loop's timed steps (the rest describe the timing
#: pass's own runs: warmup, repeats, backward, loss, timer backend, grad mode, ops).
LOOP_TIMING_OPTIONS: tuple[str, ...] = ("sync", "clock", "correct_overhead", "batch_size")

#: Metrics that describe the model, not the work of a step: the last step's value.
STATIC_METRICS = frozenset(
    {
        "params",
        "trainable_params",
        "buffers",
        "param_bytes",
        "buffer_bytes",
        "grad_bytes",
        "local_params",
        "local_param_bytes",
        "local_buffer_bytes",
    }
)
#: Work metrics summed over a cycle's analysed steps.
SUMMED_METRICS = frozenset(ADDITIVE_METRICS) - STATIC_METRICS


def check_loop_timing(timing: object) -> TimingOptions | None:
    """``Profiler(timing=)``: off (None) or the checked options of the loop's timers."""
    from layerscope.collect.common import is_bool

    if is_bool(timing):
        return TimingOptions() if timing else None
    if isinstance(timing, Mapping):
        unknown = sorted(map(str, set(timing) - set(LOOP_TIMING_OPTIONS)))
        if unknown:
            raise InvalidInputError(
                f"unknown timing option(s) for a Profiler: {', '.join(unknown)}; known: "
                f"{', '.join(LOOP_TIMING_OPTIONS)} (the others belong to ls.profile's timing "
                "pass, which runs the model itself)"
            )
        return TimingOptions(**dict(timing))
    raise InvalidInputError(
        f"timing must be True/False or a mapping of options ({', '.join(LOOP_TIMING_OPTIONS)}),"
        f" got {timing!r} ({type(timing).__name__})"
    )


# ---- merging a cycle's analysed steps --------------------------------------------------
def _merge_metrics(into: dict[str, Number], earlier: Mapping[str, Number]) -> None:
    for key, value in earlier.items():
        mine = into.get(key)
        if key in SUMMED_METRICS:
            into[key] = value if mine is None else mine + value
        elif key.endswith("peak_bytes"):
            into[key] = value if mine is None else max(mine, value)
        elif mine is None and key not in STATIC_METRICS:
            into[key] = value


def merge_profiles(profiles: Sequence[Profile]) -> Profile:
    """One Profile for several analysed steps of the same model, built on the last.

    Nodes are matched by path. Work metrics (FLOPs, MACs, activation, output and
    communication bytes; self and inclusive) and ``calls`` are summed; ``*peak_bytes``
    take the max; static metrics (parameters, buffers, gradient bytes), node numerics and
    everything else come from the last step. Distinct signatures are kept in order of
    first appearance. ``unsupported_ops`` counts and ``outside`` are summed, whole-model
    ``memory`` numbers take the max (its timeline is the last step's), ``numerics`` is the
    first step's that found a non-finite value, else the last's; notices are united.
    The profiles are consumed: the result is the last one, updated in place.
    """
    if not profiles:
        raise ValueError("no profiles to merge")
    last = profiles[-1]
    if len(profiles) == 1:
        return last
    by_path = {n.path: n for n in last.root.walk()}
    for prof in reversed(profiles[:-1]):  # newest first: signatures end in step order
        for node in prof.root.walk():
            mine = by_path.get(node.path)
            if mine is not None:
                _merge_node(mine, node)
    outside = dict(last.outside)
    unsupported = last.unsupported_ops
    notices: list[str] = []
    for prof in profiles:
        for key, value in prof.outside.items():
            if prof is not last:
                outside[key] = outside.get(key, 0) + value
        if prof is not last:
            _merge_unsupported(unsupported, prof.unsupported_ops)
            for key, value in prof.memory.items():
                mine = last.memory.get(key)
                if _is_number(value) and (mine is None or (_is_number(mine) and value > mine)):
                    last.memory[key] = value
        notices.extend(n for n in prof.notices if n not in notices)
    last.outside = outside
    last.notices = notices
    for prof in profiles:
        if prof.numerics.get("first_nonfinite") is not None:
            last.numerics = prof.numerics
            break
    return last


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _merge_node(mine: Node, earlier: Node) -> None:
    mine.calls += earlier.calls
    _merge_metrics(mine.metrics, earlier.metrics)
    _merge_metrics(mine.self_metrics, earlier.self_metrics)
    for name in ("inputs", "outputs", "grad_inputs", "grad_outputs"):
        old = getattr(earlier, name)
        if old:
            current = getattr(mine, name)
            setattr(mine, name, [s for s in old if s not in current] + current)


def _merge_unsupported(into: dict[str, Any], earlier: Mapping[str, Any]) -> None:
    for op, entry in earlier.items():
        mine = into.get(op)
        if mine is None:
            into[op] = {**entry, "modules": dict(entry.get("modules", {}))}
            continue
        for key in ("count", "forward", "backward"):
            mine[key] = mine.get(key, 0) + entry.get(key, 0)
        modules = mine.setdefault("modules", {})
        for where, n in entry.get("modules", {}).items():
            modules[where] = modules.get(where, 0) + n
        if "error" in entry:
            mine.setdefault("error", entry["error"])


# ---- timing steps ------------------------------------------------------------------------
def index_depth(index: ModuleIndex) -> int:
    """The deepest node's depth (the root is 0)."""
    depth = [0] * len(index)
    for i, p in enumerate(index.parent):  # pre-order: a parent comes before its children
        if p >= 0:
            depth[i] = depth[p] + 1
    return max(depth, default=0)


class LoopTimer:
    """Times whole steps of a user's loop and every module's forward calls in them.

    ``begin()`` installs the hooks and takes the start stamp; ``end(keep)`` takes the
    end stamp, removes the hooks and (``keep``) replays the step's log into the result.
    Per step it keeps the step time, the root's forward time (all its calls in the step,
    calibrated hook cost taken off) and the rest, ``other`` = step - forward.
    """

    def __init__(self, model: nn.Module, options: TimingOptions, grad_mode: str = "") -> None:
        self.model = model
        self.grad_mode = grad_mode
        self.options = options
        self.index = ModuleIndex.build(model)
        self.device = model_device_dtype(model)[0]
        self.stamper = Stamper(options.clock, self.device, options.sync)
        self.hooks = ForwardHooks(self.index, self.stamper, record_seq=False)
        self.overhead: dict[str, float] = {"clock_read": 0.0}
        self.corrected = options.correct_overhead and not self.stamper.events
        if self.corrected:
            self.overhead["clock_read"] = calibrate_clock(self.stamper.clock)
            inner, outer = calibrate_forward(self.stamper, False)
            self.overhead["forward_hook_inner"] = inner
            self.overhead["forward_hook_outer"] = outer
        self.result = TimingResult()
        self.calls = [0] * len(self.index)
        self.steps: dict[str, list[float]] = {"step_time": [], "step_forward": [], "step_other": []}
        self._start: Any = None
        self.running = False

    def reset(self) -> None:
        """Forget the steps timed so far (a new cycle)."""
        self.result = TimingResult()
        self.calls = [0] * len(self.index)
        self.steps = {k: [] for k in self.steps}

    @property
    def timed_steps(self) -> int:
        return len(self.steps["step_time"])

    def begin(self) -> None:
        stamper = self.stamper
        stamper.begin()
        self.hooks.install()
        self.running = True
        self._start = stamper.record()

    def end(self, keep: bool = True) -> bool:
        """End the step; ``keep`` adds it to the result when it ran the model at all.
        Returns whether it was kept."""
        stamper = self.stamper
        stop = stamper.record()
        self.hooks.uninstall()
        self.running = False
        stamper.end()
        entries = self.hooks.take()
        start, self._start = self._start, None
        kept = keep and bool(entries)
        if kept:
            self._add(entries, stamper.ns(start), stamper.ns(stop))
        stamper.recycle([start, stop, *(e[1] for e in entries)])
        return kept

    def _add(self, entries: list[tuple[int, Any, int]], t0: float, t1: float) -> None:
        index, stamper = self.index, self.stamper
        codes = [e[0] for e in entries]
        stamps = [stamper.ns(e[1]) for e in entries]
        fwd = replay_forward(
            index,
            codes,
            stamps,
            self.overhead.get("forward_hook_inner", 0.0),
            self.overhead.get("forward_hook_outer", 0.0),
        )
        add_repeat(self.result, index, fwd, None)
        for i, n in enumerate(fwd.calls):
            self.calls[i] += n
        spans = RepeatSpans(forward_spans(index, codes, stamps, t0))
        spans.end = t1 - t0
        self.result.spans.append(spans)
        step = max(t1 - t0 - self.overhead["clock_read"], 0.0)
        forward = min(fwd.inclusive[index.root], step)
        self.steps["step_time"].append(step)
        self.steps["step_forward"].append(forward)
        self.steps["step_other"].append(step - forward)

    def apply(self, profile: Profile) -> None:
        """Write the timed steps' numbers into ``profile`` (``TimingResult.apply``)."""
        result = self.result
        result.info = {
            "timer": "hooks",
            "clock": self.stamper.name,
            "device": str(self.device),
            "sync": self.options.sync,
            "grad_mode": self.grad_mode,
            "backward": False,
            "warmup": 0,
            "repeats": self.timed_steps,
            "ops": False,
            "batch_size": self.options.batch_size,
            "batch_source": "given" if self.options.batch_size is not None else None,
            "training": self.model.training,
            "source": "loop",
            "timed_steps": self.timed_steps,
            "overhead_corrected": self.corrected,
        }
        result.whole = {k: list(v) for k, v in self.steps.items()}
        result.overhead = dict(self.overhead)
        result.trace = build_trace(self.index, result.spans, self.stamper.name)
        result.apply(profile)
        timing = profile.timing
        step = timing.get("step_time")
        batch = self.options.batch_size
        if step and batch and step["median"] > 0:
            timing["throughput"] = batch / step["median"]
            timing["throughput_unit"] = "inputs/s (per step)"

    def set_calls(self, profile: Profile) -> None:
        """Calls per node as counted by the timers (a profile with no analysed step)."""
        by_path = {n.path: n for n in profile.root.walk()}
        for i, path in enumerate(self.index.paths):
            node = by_path.get(path)
            if node is not None:
                node.calls = self.calls[i]


__all__ = [
    "LOOP_TIMING_OPTIONS",
    "STATIC_METRICS",
    "SUMMED_METRICS",
    "LoopTimer",
    "check_loop_timing",
    "index_depth",
    "merge_profiles",
]
