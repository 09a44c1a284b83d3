"""``timer="kineto"``: module times from ``torch.profiler`` events, device time included.

Each module call is wrapped in a ``record_function`` range (entered by a forward pre hook,
left by an ``always_call`` post hook), every repeat in a ``layerscope::repeat`` range, and
the whole instrumented phase runs under one ``torch.profiler.profile``. From the event
tree of each repeat:

- module ``forward_time``: the range's duration per call; self = minus the ranges of the
  modules called inside it. ``device_time``: the kernels launched inside the range (the
  profiler links each kernel to the op that launched it), self = minus nested modules'.
- ``ops=True``: the *top-level* events inside each module's own code (the first event
  below the module's range that is not a module range: ``aten::conv2d``, not also the
  ``aten::convolution`` it calls) become op rows, so rows never double-count nested ops.
  An op row's self time excludes its nested ops, as in the profiler's own tables.
- user regions (``ls.region``): each call is a ``layerscope::region::<name>#<n>`` range;
  its duration is the region's time, under the path the analysed run gives it (the
  scope it was entered in, then ``.[name]``). It is not an op row, and the ops inside
  it stay rows of the module running it.
- the user's ``record_function`` labels that the analysed run made regions
  (``collect.labels``: their path is one of the profile's region paths) are read as
  region ranges too; other labels are ops (an op row keeps only its time outside the
  modules inside it).
- ``backward=True``: every ``autograd::engine::evaluate_function`` event carries the
  sequence number of its autograd node; the forward hooks recorded which module owned
  which sequence numbers, so each is attributed to the module that created it.
  AccumulateGrad (no sequence number) goes to the module of the node that ran before it.

torch's C++ code writes a ``USDT: ... profiler_start`` / ``profiler_stop`` line to file
descriptor 2 when a profiler session starts and stops; the start and stop run with fd 2
sent to a temporary file (``usdt_filtered``), whose lines other than those are written
back to stderr.

Times include the profiler's own per-op cost, which is larger than the hooks timer's;
use this timer for where device time goes and for the op breakdown, the default one for
the most faithful wall times.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import torch
from torch import nn
from torch._C._autograd import DeviceType
from torch.autograd.profiler import record_function
from torch.profiler import ProfilerActivity
from torch.utils.hooks import RemovableHandle

from layerscope.collect.active import active
from layerscope.collect.common import install_hook_pairs, remove_hooks
from layerscope.collect.labels import label_region_name
from layerscope.collect.scopes import OUTSIDE
from layerscope.collect.timing.backward import grad_steps, owner_of
from layerscope.collect.timing.context import PassContext
from layerscope.collect.timing.forward import Entry, ForwardRepeat
from layerscope.collect.timing.index import ModuleIndex
from layerscope.collect.timing.result import (
    OpSamples,
    TimingResult,
    add_repeat,
)
from layerscope.collect.timing.spans import NodeSpan, RepeatSpans
from layerscope.errors import LayerscopeError
from layerscope.metricspec import BACKWARD_DEVICE_TIME, BACKWARD_TIME, DEVICE_TIME, FORWARD_TIME
from layerscope.torchapi import NO_SEQUENCE, get_sequence_nr

REPEAT_LABEL = "layerscope::repeat"
MODULE_PREFIX = "layerscope::module::"
EVALUATE_PREFIX = "autograd::engine::evaluate_function: "
REGION_PREFIX = "layerscope::region::"


#: The start of the lines torch's C++ profiler writes to fd 2 at its start and stop.
USDT_PREFIX = b"USDT:"


@contextmanager
def usdt_filtered() -> Iterator[None]:
    """Run the block with file descriptor 2 sent to a temporary file, then write its
    lines back to fd 2 except torch's ``USDT:`` lines (C++ writes them below Python's
    ``sys.stderr``, so only the descriptor can catch them). Without a usable fd 2 the
    block runs as it is."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            with suppress(OSError, ValueError, AttributeError):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            kept = [
                line
                for line in tmp.read().splitlines(keepends=True)
                if not line.startswith(USDT_PREFIX)
            ]
            data = b"".join(kept)
            while data:
                data = data[os.write(2, data) :]


class RangeHooks:
    """Pre/post forward hooks opening and closing one ``record_function`` range per call.

    With ``record_seq`` they also log autograd sequence numbers for backward attribution.
    """

    def __init__(self, index: ModuleIndex, record_seq: bool) -> None:
        self.index = index
        self.names = [
            MODULE_PREFIX + (index.paths[nodes[0]] or "<root>") for nodes in index.nodes_of
        ]
        self.log: list[Entry] = []
        self._record_seq = record_seq
        self._open: list[tuple[nn.Module, record_function]] = []
        self._handles: list[RemovableHandle] = []
        self._timers: list[Any] | None = None
        #: user region calls so far (their ranges are numbered) and those not counted
        self._region_calls = 0
        self.uncounted: set[str] = set()

    def install(self) -> None:
        self._handles = install_hook_pairs(
            (module, *self._make(mid, self.names[mid]))
            for mid, module in enumerate(self.index.modules)
        )
        self._timers = active.timers  # user regions of this thread report here too
        self._timers.append(self)

    def uninstall(self) -> None:
        remove_hooks(self._handles)
        timers, self._timers = self._timers, None
        if timers is not None and self in timers:
            timers.reverse()
            timers.remove(self)  # the innermost entry that is this timer
            timers.reverse()
        while self._open:  # ranges left open by a raising model
            self._open.pop()[1].__exit__(None, None, None)

    # ---- user regions (``ls.region``) -------------------------------------------------
    def enter_region(self, name: str) -> tuple[str, record_function]:
        """A user region starts: a numbered range, closed by ``exit_region``."""
        self._region_calls += 1
        label = f"{REGION_PREFIX}{name}#{self._region_calls}"
        rf = record_function(label)
        rf.__enter__()  # type: ignore[no-untyped-call]
        return label, rf

    def exit_region(self, token: tuple[str, record_function], *, count: bool = True) -> None:
        label, rf = token
        rf.__exit__(None, None, None)
        if not count:
            self.uncounted.add(label)

    def _make(self, mid: int, name: str) -> tuple[Callable[..., None], Callable[..., None]]:
        opened = self._open
        append = self.log.append
        seq = get_sequence_nr if self._record_seq else None
        exit_code = ~mid

        def pre(module: nn.Module, args: Any) -> None:
            rf = record_function(name)
            rf.__enter__()  # type: ignore[no-untyped-call]
            opened.append((module, rf))
            if seq is not None:
                append((mid, 0, seq()))

        def post(module: nn.Module, args: Any, output: Any) -> None:
            if opened and opened[-1][0] is module:
                opened.pop()[1].__exit__(None, None, None)
            if seq is not None:
                append((exit_code, 0, seq()))

        return pre, post

    def take(self) -> list[Entry]:
        entries = list(self.log)
        self.log.clear()
        return entries


def kineto_runs(ctx: PassContext, result: TimingResult) -> None:
    """The instrumented runs under torch.profiler, then the parse of its events."""
    options, index = ctx.options, ctx.index
    activities = [ProfilerActivity.CPU]
    if ctx.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    hooks = RangeHooks(index, record_seq=options.backward)
    warm = 1 if options.warmup > 0 else 0
    steps: list[tuple[list[int], list[int]]] = []
    # The profiler would record bare runs too, so they all come first here.
    for _ in range(options.repeats):
        ctx.bare_run(record=True)
    prof = torch.profiler.profile(activities=activities)
    try:
        with usdt_filtered():
            prof.__enter__()  # type: ignore[no-untyped-call]
    except RuntimeError as e:
        raise LayerscopeError(
            f"timer='kineto' could not start torch.profiler ({e}); is another profiler "
            "session active? Use timer='hooks' inside your own profiler session."
        ) from e
    hooks.install()
    try:
        for _ in range(warm + options.repeats):
            ctx.clear_grads()
            try:
                with record_function(REPEAT_LABEL):
                    out = ctx.call()
                    entries = hooks.take()
                    if options.backward:
                        steps.append(grad_steps(index, entries))
                        ctx.loss(out).backward()  # type: ignore[no-untyped-call]
                    del out
                    ctx.stamper.end()
            except LayerscopeError:
                raise
            except Exception as e:
                raise ctx.model_error(e) from e
            ctx.progress.advance()
    finally:
        hooks.uninstall()
        with usdt_filtered():
            prof.__exit__(None, None, None)  # type: ignore[no-untyped-call]
    events = prof.events()  # type: ignore[no-untyped-call]
    parse_events(
        events,
        index,
        result,
        warm,
        options.ops,
        steps if options.backward else None,
        hooks.uncounted,
        ctx.region_paths,
    )


def _us_to_ns(us: float) -> float:
    return float(us) * 1e3


def _device_total(ev: Any) -> float:
    """Device time (us) of the kernels launched by ``ev`` and everything under it."""
    total = sum(k.duration for k in ev.kernels)
    for c in ev.cpu_children:
        total += _device_total(c)
    return float(total)


class _RepeatParser:
    """Walks one repeat's event tree into module totals, op-row totals and the spans of
    module calls and op rows (ns from ``origin``, the repeat range's start in us)."""

    def __init__(
        self, index: ModuleIndex, names: dict[str, int], ops: bool, origin: float = 0.0
    ) -> None:
        n = len(index)
        self.index = index
        self.names = names
        self.ops = ops
        self.origin = origin
        self.spans = RepeatSpans()
        self.fwd = ForwardRepeat([0] * n, [0.0] * n, [0.0] * n)
        self.dev_incl = [0.0] * n
        self.dev_self = [0.0] * n
        # (node, op name) -> [count, total ns, self ns, device ns, device self ns]
        self.op_acc: dict[tuple[int, str], list[float]] = {}
        self._running: list[int] = []
        #: user regions: wall ns of each call by path; labels of calls not counted
        self.regions: dict[str, list[float]] = {}
        self.uncounted: set[str] = set()
        #: paths of the analysed profile's regions: a user's label there is one
        self.region_paths: Collection[str] = frozenset()
        self._scopes: list[str] = []  # paths of the running modules and regions
        # module frame: [node, children cpu ns, children device us, open op depth]
        self._frames: list[list[Any]] = []

    def visit(self, ev: Any) -> float:
        """Visit ``ev`` and its subtree; return its device time (us)."""
        mid = self.names.get(ev.name)
        own = float(sum(k.duration for k in ev.kernels))
        if ev.name.startswith(REGION_PREFIX):
            name = ev.name.removeprefix(REGION_PREFIX).rpartition("#")[0]
            return own + self._region(ev, name, ev.name not in self.uncounted)
        if mid is None and self.region_paths:
            path = self._label_path(ev.name)
            if path is not None:
                return own + self._region(ev, ev.name, True)
        if mid is not None:
            node = self.index.resolve(mid, self._running)
            self.spans.forward.append((node, *self._span(ev)))
            self._running.append(node)
            self._scopes.append(self.index.paths[node])
            frame: list[Any] = [node, 0.0, 0.0, 0]
            self._frames.append(frame)
            dev = own + sum(self.visit(c) for c in ev.cpu_children)
            self._frames.pop()
            self._scopes.pop()
            self._running.pop()
            cpu = _us_to_ns(ev.time_range.elapsed_us())
            self.fwd.calls[node] += 1
            self.fwd.inclusive[node] += cpu
            self.fwd.exclusive[node] += max(cpu - frame[1], 0.0)
            self.dev_incl[node] += _us_to_ns(dev)
            self.dev_self[node] += _us_to_ns(max(dev - frame[2], 0.0))
            if self._frames:
                self._frames[-1][1] += cpu
                self._frames[-1][2] += dev
            return dev
        top = self._frames[-1] if self._frames else None
        row = self.ops and top is not None and top[3] == 0
        if top is not None:
            top[3] += 1
        # module ranges inside this event add to the enclosing module's frame
        before = (top[1], top[2]) if top is not None else (0.0, 0.0)
        child_dev = 0.0
        child_cpu = 0.0
        for c in ev.cpu_children:
            child_dev += self.visit(c)
            child_cpu += _us_to_ns(c.time_range.elapsed_us())
        if top is not None:
            top[3] -= 1
        dev = own + child_dev
        if row and top is not None:
            self.spans.ops.append((f"{self.index.paths[top[0]]}/{ev.name}", *self._span(ev)))
            # a user's record_function label around modules: the modules are rows of
            # their own, so the label's row keeps only the time outside them
            inner_cpu, inner_dev = top[1] - before[0], top[2] - before[1]
            cpu = max(_us_to_ns(ev.time_range.elapsed_us()) - inner_cpu, 0.0)
            acc = self.op_acc.setdefault((top[0], ev.name), [0, 0.0, 0.0, 0.0, 0.0])
            acc[0] += 1
            acc[1] += cpu
            acc[2] += max(_us_to_ns(ev.time_range.elapsed_us()) - child_cpu, 0.0)
            acc[3] += _us_to_ns(max(dev - inner_dev, 0.0))
            acc[4] += _us_to_ns(own)
        return dev

    def _path(self, name: str) -> str:
        """The path of a region named ``name`` entered in the running scope."""
        scope = self._scopes[-1] if self._scopes else OUTSIDE
        return f"{scope}.[{name}]" if scope else f"[{name}]"

    def _label_path(self, label: str) -> str | None:
        """The region path of a user's ``record_function`` label here, if the analysed
        run made it a region (``collect.labels``: its path is a region's); else None (it
        is an op)."""
        if label_region_name(label) is None:
            return None
        path = self._path(label)
        return path if path in self.region_paths else None

    def _region(self, ev: Any, name: str, counted: bool) -> float:
        """A user region's range (an ``ls.region`` call's, or a label's the analysed run
        made a region): its time under its path, its children visited as the running
        module's (the region is no op row); return their device time (us)."""
        path = self._path(name)
        if counted:
            self.regions.setdefault(path, []).append(_us_to_ns(ev.time_range.elapsed_us()))
        self._scopes.append(path)
        dev = sum(self.visit(c) for c in ev.cpu_children)
        self._scopes.pop()
        return dev

    def _span(self, ev: Any) -> tuple[float, float]:
        """The event's start and end, ns from the repeat's start."""
        return (
            _us_to_ns(ev.time_range.start - self.origin),
            _us_to_ns(ev.time_range.end - self.origin),
        )


def parse_events(
    events: Sequence[Any],
    index: ModuleIndex,
    result: TimingResult,
    warm: int,
    ops: bool,
    steps: list[tuple[list[int], list[int]]] | None,
    uncounted: set[str] | None = None,
    region_paths: Collection[str] = frozenset(),
) -> None:
    """Fill ``result`` from the profiler's events (the first ``warm`` repeats skipped);
    ``uncounted``: labels of region calls that are not counted; ``region_paths``: the
    paths of the analysed profile's regions, where a user's ``record_function`` label
    whose region path is one of them is a region range, not an op row."""
    # With CUDA activities kineto also lists each record_function range as a device-side
    # annotation (same name, no CPU children): only the CPU ranges are repeats and calls.
    events = [e for e in events if e.device_type == DeviceType.CPU]
    names = {
        MODULE_PREFIX + (index.paths[nodes[0]] or "<root>"): mid
        for mid, nodes in enumerate(index.nodes_of)
    }
    repeats = sorted(
        (e for e in events if e.name == REPEAT_LABEL), key=lambda e: e.time_range.start
    )
    evaluations = _evaluations(events) if steps is not None else []
    any_device = any(e.kernels for e in events)
    rows: dict[tuple[int, str], OpSamples] = {}
    for r, rep in enumerate(repeats):
        if r < warm:
            continue
        origin = rep.time_range.start
        parser = _RepeatParser(index, names, ops, origin)
        parser.uncounted = uncounted or set()
        parser.region_paths = region_paths
        for c in rep.cpu_children:
            parser.visit(c)
        result.add_regions(parser.regions)
        spans = parser.spans
        spans.end = _us_to_ns(rep.time_range.elapsed_us())
        bwd_self: list[float] | None = None
        bdev_self: list[float] | None = None
        if steps is not None and r < len(steps):
            bwd_self, bdev_self = _backward(
                index, steps[r], evaluations, origin, rep.time_range.end, spans.backward
            )
        result.spans.append(spans)
        add_repeat(result, index, parser.fwd, bwd_self, FORWARD_TIME, BACKWARD_TIME)
        if any_device:
            dev = ForwardRepeat(parser.fwd.calls, parser.dev_incl, parser.dev_self)
            add_repeat(result, index, dev, bdev_self, DEVICE_TIME, BACKWARD_DEVICE_TIME)
        for (node, name), acc in parser.op_acc.items():
            row = rows.get((node, name))
            if row is None:
                parent = index.paths[node]
                row = rows[(node, name)] = OpSamples(
                    path=f"{parent}/{name}",
                    parent=parent,
                    name=name,
                    type=name if "::" in name else f"user::{name}",
                )
                result.ops.append(row)
            count = int(acc[0])
            row.calls = count
            row.add(FORWARD_TIME, acc[1] / count, acc[2] / count)
            if any_device:
                row.add(DEVICE_TIME, acc[3] / count, acc[4] / count)


def _evaluations(events: Sequence[Any]) -> list[Any]:
    """Outermost ``evaluate_function`` events (one per autograd node run), by start time."""
    out = []
    for e in events:
        if not e.name.startswith(EVALUATE_PREFIX):
            continue
        parent = e.cpu_parent
        while parent is not None and not parent.name.startswith(EVALUATE_PREFIX):
            parent = parent.cpu_parent
        if parent is None:
            out.append(e)
    out.sort(key=lambda e: e.time_range.start)
    return out


def _backward(
    index: ModuleIndex,
    steps: tuple[list[int], list[int]],
    evaluations: list[Any],
    start: float,
    end: float,
    stretches: list[NodeSpan] | None = None,
) -> tuple[list[float], list[float]]:
    """Self backward CPU and device totals (ns) per node for the repeat in [start, end];
    each evaluation's (owner, start, end) in ns from ``start`` appended to ``stretches``."""
    seqs, owners = steps
    cpu = [0.0] * len(index)
    dev = [0.0] * len(index)
    owner = index.root
    for e in evaluations:
        if e.time_range.start < start or e.time_range.start > end:
            continue
        seq = e.sequence_nr
        if seq >= 0 and seq != NO_SEQUENCE:
            owner = owner_of(seqs, owners, seq, index.root)
        cpu[owner] += _us_to_ns(e.time_range.elapsed_us())
        dev[owner] += _us_to_ns(_device_total(e))
        if stretches is not None:
            stretches.append(
                (owner, _us_to_ns(e.time_range.start - start), _us_to_ns(e.time_range.end - start))
            )
    return cpu, dev
