"""The timing pass: per-module forward/backward time and whole-model latency and throughput.

Separate from the analysis pass (DESIGN.md rule 4): ``time_profile`` runs the model again,
``warmup`` times and then ``repeats`` times, with nothing but light timers installed, and
writes the results into an existing Profile (nodes matched by path). Three timers:

- ``"hooks"`` (default, here): a forward pre/post hook pair per module that only appends
  ``(module, timestamp)`` to a list: ``time.perf_counter_ns`` on CPU, a recorded
  ``torch.cuda.Event`` on CUDA (one synchronize per repeat; per-module with ``sync=True``).
  The log is replayed after each repeat into inclusive and self times per call.
  Each timed repeat is a bare run then an instrumented run (hooks installed only around
  it), so machine-load drift hits the whole-model latency and module times alike.
- ``"kineto"`` (``collect/kineto.py``): a ``record_function`` range per module under
  ``torch.profiler``; CPU and device time, optionally the aten ops under each module.
- ``"fx"`` (``collect/fx.py``): a ``torch.fx`` trace run by a timing interpreter; every
  graph node timed, functional calls (``add``, ``flatten``) included.

Backward (``backward=True``): autograd numbers every node it creates; the forward hooks
record which module was running from which sequence number on, so each autograd node of
the graph gets an owner. A pre-hook on each node stamps the time it starts; the interval
until the next node starts is that node's (the engine runs CPU nodes one at a time).

The instrumentation's own cost is calibrated on empty modules and subtracted (see
``docs/timing.md``). The model is left as found: ``ModelState`` is captured before and
restored after the whole pass (BatchNorm running stats, RNG, grads), hooks are removed in
``finally``.
"""

from __future__ import annotations

import sys
import time
from bisect import bisect_right
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TypeAlias

import torch
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from layerscope.collect.common import default_loss, gc_paused, unwrap_model
from layerscope.collect.inputs import model_device_dtype
from layerscope.collect.signature import iter_tensors
from layerscope.collect.state import ModelState
from layerscope.collect.tree import ModelTree
from layerscope.errors import InvalidInputError, LayerscopeError, ModelError
from layerscope.profile import Node, Profile

__all__ = [
    "BACKWARD_DEVICE_TIME",
    "BACKWARD_TIME",
    "DEVICE_TIME",
    "FORWARD_TIME",
    "TIME_METRICS",
    "Clock",
    "GradMode",
    "OpSamples",
    "RowSamples",
    "Series",
    "Timer",
    "TimingOptions",
    "TimingResult",
    "is_op_row",
    "summarize",
    "time_profile",
]

#: Seconds per call, median over repeats, of the module's forward (inclusive / self).
FORWARD_TIME = "forward_time"
#: Seconds per call of the backward work created by the module's forward.
BACKWARD_TIME = "backward_time"
#: Device (CUDA kernel) seconds per call, from torch.profiler (``timer="kineto"``).
DEVICE_TIME = "device_time"
#: Device seconds per call of the module's backward kernels (``timer="kineto"``).
BACKWARD_DEVICE_TIME = "backward_device_time"
#: Suffixes of the spread keys written next to each time key.
MIN_SUFFIX = "_min"
IQR_SUFFIX = "_iqr"
_BASE_KEYS = (FORWARD_TIME, BACKWARD_TIME, DEVICE_TIME, BACKWARD_DEVICE_TIME)
#: Every node metric the timing pass writes (all non-additive, seconds).
TIME_METRICS: tuple[str, ...] = tuple(
    k + s for k in _BASE_KEYS for s in ("", MIN_SUFFIX, IQR_SUFFIX)
)

#: A clock: integer nanoseconds from an arbitrary origin, like ``time.perf_counter_ns``.
Clock: TypeAlias = Callable[[], int]
#: ``progress``: None (auto: a bar on a terminal when the pass takes over ~1 s), a bool,
#: or a callback ``(done, total)`` called after each run of the model.
ProgressArg: TypeAlias = "bool | Callable[[int, int], None] | None"

_NO_SEQUENCE = 2**64 - 1  # the sequence number of autograd nodes outside the sequence
_get_sequence_nr = torch._C._autograd._get_sequence_nr


class Timer(str, Enum):
    """Which timer the pass uses (see the module docstring)."""

    HOOKS = "hooks"
    KINETO = "kineto"
    FX = "fx"


class GradMode(str, Enum):
    """Autograd mode of every timed forward: as given, ``no_grad`` or ``inference_mode``."""

    ENABLED = "enabled"
    NO_GRAD = "no_grad"
    INFERENCE = "inference_mode"


def is_op_row(node: Node) -> bool:
    """Whether ``node`` is an op row added by ``ops=True`` (type like ``aten::mm``).

    Module types are Python class names and never contain ``::``.
    """
    return "::" in node.type


# ---- options ------------------------------------------------------------------------


@dataclass(frozen=True)
class TimingOptions:
    """Validated options of one timing pass (strings turned into enums at the boundary)."""

    warmup: int = 3
    repeats: int = 10
    backward: bool = False
    loss_fn: Callable[[Any], Tensor] | None = None
    timer: Timer = Timer.HOOKS
    sync: bool = False
    grad_mode: GradMode = GradMode.ENABLED
    ops: bool = False
    batch_size: int | None = None
    clock: Clock | None = None
    progress: ProgressArg = None
    correct_overhead: bool = True

    def __post_init__(self) -> None:
        for name in ("warmup", "repeats"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise InvalidInputError(f"{name} must be an int, got {v!r}")
        if self.warmup < 0:
            raise InvalidInputError(f"warmup must be >= 0, got {self.warmup}")
        if self.repeats < 1:
            raise InvalidInputError(f"repeats must be >= 1, got {self.repeats}")
        try:
            object.__setattr__(self, "timer", Timer(self.timer))
        except ValueError:
            known = ", ".join(repr(t.value) for t in Timer)
            raise InvalidInputError(f"unknown timer {self.timer!r}; use one of {known}") from None
        try:
            object.__setattr__(self, "grad_mode", GradMode(self.grad_mode))
        except ValueError:
            known = ", ".join(repr(g.value) for g in GradMode)
            raise InvalidInputError(
                f"unknown grad_mode {self.grad_mode!r}; use one of {known}"
            ) from None
        if self.loss_fn is not None and not self.backward:
            raise InvalidInputError("loss_fn only applies with backward=True")
        if self.backward and self.grad_mode is not GradMode.ENABLED:
            raise InvalidInputError(
                "backward=True needs gradients; it cannot run with "
                f"grad_mode={self.grad_mode.value!r}"
            )
        if self.batch_size is not None and (
            isinstance(self.batch_size, bool)
            or not isinstance(self.batch_size, int)
            or self.batch_size < 1
        ):
            raise InvalidInputError(f"batch_size must be a positive int, got {self.batch_size!r}")
        if self.ops and self.timer is Timer.HOOKS:
            raise InvalidInputError("ops=True needs timer='kineto' or timer='fx'")
        if self.clock is not None and not callable(self.clock):
            raise InvalidInputError("clock must be a callable returning nanoseconds")
        p = self.progress
        if p is not None and not isinstance(p, bool) and not callable(p):
            raise InvalidInputError("progress must be None, a bool or a callable(done, total)")

    def grad_context(self) -> AbstractContextManager[Any]:
        if self.grad_mode is GradMode.NO_GRAD:
            return torch.no_grad()
        if self.grad_mode is GradMode.INFERENCE:
            return torch.inference_mode()
        return nullcontext()


# ---- statistics ---------------------------------------------------------------------


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, ``method='linear'``)."""
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(values: Sequence[float], scale: float = 1.0) -> dict[str, float]:
    """median, mean, min, max, p90 and iqr (p75 - p25) of ``values``, times ``scale``."""
    if not values:
        raise ValueError("no values to summarize")
    ordered = sorted(values)
    out = {
        "median": _quantile(ordered, 0.5),
        "mean": sum(ordered) / len(ordered),
        "min": ordered[0],
        "max": ordered[-1],
        "p90": _quantile(ordered, 0.9),
        "iqr": _quantile(ordered, 0.75) - _quantile(ordered, 0.25),
    }
    return {k: v * scale for k, v in out.items()} | {"n": len(ordered)}


# ---- results ------------------------------------------------------------------------


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
    go into ``Profile.timing``; ``overhead`` the calibrated instrumentation costs.
    """

    modules: dict[str, RowSamples] = field(default_factory=dict)
    ops: list[OpSamples] = field(default_factory=list)
    whole: dict[str, list[float]] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    overhead: dict[str, float] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)

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
        profile.timing = timing
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


# ---- the module index ---------------------------------------------------------------


@dataclass
class ModuleIndex:
    """Tree nodes and module instances as small ints, for cheap logs and replays.

    Node 0 is the root; nodes are in pre-order. A module registered under several paths
    has several nodes; a call is resolved to the one whose parent is running.
    """

    paths: list[str]
    parent: list[int]
    children: list[list[int]]
    modules: list[nn.Module]
    nodes_of: list[list[int]]
    by_path: dict[str, int]
    module_of: list[int]
    root: int = 0

    @classmethod
    def build(cls, model: nn.Module) -> ModuleIndex:
        tree = ModelTree.build(model)
        nodes = list(tree.root.walk())
        pos = {id(n): i for i, n in enumerate(nodes)}
        parent: list[int] = []
        for n in nodes:
            up = tree.parent[id(n)]
            parent.append(-1 if up is None else pos[id(up)])
        children: list[list[int]] = [[] for _ in nodes]
        for i, up_i in enumerate(parent):
            if up_i >= 0:
                children[up_i].append(i)
        modules: list[nn.Module] = []
        nodes_of: list[list[int]] = []
        mid_of: dict[int, int] = {}
        for i, n in enumerate(nodes):
            m = tree.module[id(n)]
            if id(m) not in mid_of:
                mid_of[id(m)] = len(modules)
                modules.append(m)
                nodes_of.append([])
            nodes_of[mid_of[id(m)]].append(i)
        paths = [n.path for n in nodes]
        module_of = [0] * len(nodes)
        for mid, ns in enumerate(nodes_of):
            for i in ns:
                module_of[i] = mid
        by_path = {p: i for i, p in enumerate(paths)}
        return cls(paths, parent, children, modules, nodes_of, by_path, module_of)

    def __len__(self) -> int:
        return len(self.paths)

    def module_at(self, node: int) -> nn.Module:
        return self.modules[self.module_of[node]]

    def resolve(self, mid: int, running: Sequence[int]) -> int:
        """The node of module ``mid`` for this call: the one whose parent is running."""
        nodes = self.nodes_of[mid]
        if len(nodes) == 1:
            return nodes[0]
        for frame in reversed(running):
            for n in nodes:
                if self.parent[n] == frame:
                    return n
        return nodes[0]

    def rollup(self, values: list[float]) -> list[float]:
        """Inclusive sums over the tree of per-node self values."""
        out = list(values)
        for i in range(len(out) - 1, -1, -1):  # pre-order reversed: children first
            p = self.parent[i]
            if p >= 0:
                out[p] += out[i]
        return out

    def site(self, exc: BaseException) -> int | None:
        """The innermost module of this model running when ``exc`` was raised, if any."""
        mids = {id(m): i for i, m in enumerate(self.modules)}
        running: list[int] = []
        tb = exc.__traceback__
        while tb is not None:
            frame = tb.tb_frame
            if frame.f_code.co_name == "_call_impl":
                mid = mids.get(id(frame.f_locals.get("self")))
                if mid is not None:
                    running.append(self.resolve(mid, running))
            tb = tb.tb_next
        return running[-1] if running else None


# ---- stamps: CPU clock or CUDA events -----------------------------------------------


class Stamper:
    """Takes timestamps (``clock`` ints, or recorded CUDA events) and turns them into ns.

    ``events``: CUDA events from a reused pool, read after one synchronize per repeat.
    """

    def __init__(self, clock: Clock | None, device: torch.device, sync: bool) -> None:
        self.events = clock is None and device.type == "cuda"
        self.clock: Clock = clock or time.perf_counter_ns
        self.device_sync = _device_sync(device)
        self.sync_scopes = sync and self.device_sync is not None
        self._pool: list[Any] = []
        self._ref: Any = None
        #: Take one stamp: the bare clock on CPU (no extra call inside timed windows).
        self.record: Callable[[], Any] = self._record_event if self.events else self.clock
        self.name = (
            "cuda_event"
            if self.events
            else ("perf_counter_ns" if clock is None else getattr(clock, "__name__", "custom"))
        )

    def _record_event(self) -> Any:
        ev = self._pool.pop() if self._pool else torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        ev.record()
        return ev

    def pre_stamp(self) -> Callable[[], Any]:
        """The stamp function for scope entry (synchronizes first with ``sync=True``)."""
        if not self.sync_scopes:
            return self.record
        sync, record = self.device_sync, self.record
        assert sync is not None

        def stamp() -> Any:
            sync()
            return record()

        return stamp

    def post_stamp(self) -> Callable[[], Any]:
        """The stamp function for scope exit (events need no synchronize before it)."""
        return self.record if self.events else self.pre_stamp()

    def begin(self) -> None:
        """Start a repeat: the reference every event of this repeat is measured from."""
        if self.events:
            self._ref = self.record()

    def end(self) -> None:
        """End a repeat: the one synchronize, so that all its stamps can be read."""
        if self.device_sync is not None:
            self.device_sync()

    def ns(self, stamp: Any) -> float:
        if self.events:
            return float(self._ref.elapsed_time(stamp)) * 1e6
        return float(stamp)

    def recycle(self, stamps: Sequence[Any]) -> None:
        if self.events:
            self._pool.extend(stamps)
            if self._ref is not None:
                self._pool.append(self._ref)
                self._ref = None


def _device_sync(device: torch.device) -> Callable[[], None] | None:
    if device.type == "cuda":
        cuda_sync = torch.cuda.synchronize

        def sync_cuda() -> None:
            cuda_sync(device)

        return sync_cuda
    if device.type in ("cpu", "meta"):
        return None
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and hasattr(accelerator, "synchronize"):
        sync: Callable[[], None] = accelerator.synchronize
        return sync
    backend = getattr(torch, device.type, None)
    fn = getattr(backend, "synchronize", None)
    return fn if callable(fn) else None


# ---- forward hooks and their log ----------------------------------------------------

#: A log entry: (module index, stamp, next autograd sequence number) on entry, and
#: (~module index, stamp, sequence number) on exit.
Entry: TypeAlias = tuple[int, Any, int]


class ForwardHooks:
    """Light pre/post forward hooks on every module, appending entries to ``log``.

    The pre hook runs after the user's pre hooks and the post hook before the user's post
    hooks, so the window is as tight around ``forward`` as hooks allow. The post hook is
    ``always_call`` so a raising module still logs its exit.
    """

    def __init__(self, index: ModuleIndex, stamper: Stamper, record_seq: bool) -> None:
        self.index = index
        self.log: list[Entry] = []
        self._pre_stamp = stamper.pre_stamp()
        self._post_stamp = stamper.post_stamp()
        self._record_seq = record_seq
        self._handles: list[RemovableHandle] = []
        self._hooks = [self._make(mid) for mid in range(len(index.modules))]

    def install(self) -> None:
        try:
            for module, (pre, post) in zip(self.index.modules, self._hooks, strict=True):
                self._handles.append(module.register_forward_pre_hook(pre))
                self._handles.append(
                    module.register_forward_hook(post, prepend=True, always_call=True)
                )
        except BaseException:
            self.uninstall()
            raise

    def uninstall(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def _make(self, mid: int) -> tuple[Callable[..., None], Callable[..., None]]:
        append = self.log.append
        pre_stamp, post_stamp = self._pre_stamp, self._post_stamp
        exit_code = ~mid
        if self._record_seq:
            seq = _get_sequence_nr

            def pre_seq(module: nn.Module, args: Any) -> None:
                append((mid, pre_stamp(), seq()))

            def post_seq(module: nn.Module, args: Any, output: Any) -> None:
                append((exit_code, post_stamp(), seq()))

            return pre_seq, post_seq

        def pre(module: nn.Module, args: Any) -> None:
            append((mid, pre_stamp(), 0))

        def post(module: nn.Module, args: Any, output: Any) -> None:
            append((exit_code, post_stamp(), 0))

        return pre, post

    def take(self) -> list[Entry]:
        entries = list(self.log)
        self.log.clear()
        return entries


@dataclass
class ForwardRepeat:
    """One repeat's forward, replayed: per node calls, inclusive and self totals (ns)."""

    calls: list[int]
    inclusive: list[float]
    exclusive: list[float]
    root_window: float = 0.0


def replay_forward(
    index: ModuleIndex,
    codes: Sequence[int],
    stamps: Sequence[float],
    inner: float = 0.0,
    outer: float = 0.0,
) -> ForwardRepeat:
    """Inclusive and self totals per node from one repeat's enter/exit log.

    A call's window is exit stamp - entry stamp. ``inner`` (the part of one hook pair's
    cost that falls inside its own window) is taken off every call, and ``outer`` (the
    whole cost of one instrumented call as seen from outside) once per call nested in it.
    A corrected window is never below the sum of its direct children's, so self >= 0 and
    parent >= sum of children hold for every call. Nesting is dynamic: a module called
    from inside a non-parent is still taken out of the caller's self time.
    """
    n = len(index)
    out = ForwardRepeat([0] * n, [0.0] * n, [0.0] * n)
    # frame: [node, entry stamp, corrected sum of direct children, calls nested inside]
    stack: list[list[Any]] = []
    running: list[int] = []
    for code, t in zip(codes, stamps, strict=True):
        if code >= 0:
            node = index.resolve(code, running)
            stack.append([node, t, 0.0, 0])
            running.append(node)
            continue
        if not stack:
            continue
        node, t0, kids, nested = stack.pop()
        running.pop()
        raw = t - t0
        corrected = max(raw - inner - nested * outer, kids)
        out.calls[node] += 1
        out.inclusive[node] += corrected
        out.exclusive[node] += corrected - kids
        if stack:
            top = stack[-1]
            top[2] += corrected
            top[3] += nested + 1
        else:
            out.root_window += raw
    return out


def grad_steps(index: ModuleIndex, entries: Sequence[Entry]) -> tuple[list[int], list[int]]:
    """The ownership step function: from ``seqs[i]`` on, new autograd nodes belong to
    ``owners[i]`` (a node index), built from a forward log with sequence numbers."""
    seqs: list[int] = []
    owners: list[int] = []
    running: list[int] = []
    for code, _, seq in entries:
        if code >= 0:
            node = index.resolve(code, running)
            running.append(node)
            owner = node
        else:
            if running:
                running.pop()
            owner = running[-1] if running else index.root
        if seqs and seqs[-1] == seq:
            owners[-1] = owner
        else:
            seqs.append(seq)
            owners.append(owner)
    return seqs, owners


def owner_of(seqs: Sequence[int], owners: Sequence[int], seq: int, root: int = 0) -> int:
    i = bisect_right(seqs, seq) - 1
    return root if i < 0 or seq == _NO_SEQUENCE else owners[i]


# ---- backward -----------------------------------------------------------------------


class BackwardTimer:
    """Times one ``loss.backward()`` per autograd node and attributes it to modules.

    Each node of the graph gets a pre-hook that stamps (owner, time) as the node starts;
    the interval until the next stamp is the owner's. AccumulateGrad nodes (no sequence
    number) belong to the module of the node that feeds them. Hooks live on this one
    graph only and are removed right after the backward.
    """

    def __init__(self, index: ModuleIndex, stamper: Stamper) -> None:
        self.index = index
        self.stamper = stamper
        self.log: list[tuple[int, Any]] = []

    def run(
        self, loss: Tensor, seqs: Sequence[int], owners: Sequence[int]
    ) -> tuple[Any, Any, list[tuple[int, Any]]]:
        root = self.index.root
        handles: list[RemovableHandle] = []
        append = self.log.append
        stamp = self.stamper.record

        def make(owner: int) -> Callable[[Any], None]:
            def hook(grad_outputs: Any) -> None:
                append((owner, stamp()))

            return hook

        try:
            fn = loss.grad_fn
            if fn is not None:
                seen = {fn}
                todo: list[tuple[Any, int]] = [(fn, root)]
                while todo:
                    gnode, consumer = todo.pop()
                    seq = gnode._sequence_nr()
                    owner = consumer if seq == _NO_SEQUENCE else owner_of(seqs, owners, seq, root)
                    handles.append(gnode.register_prehook(make(owner)))
                    for nxt, _ in gnode.next_functions:
                        if nxt is not None and nxt not in seen:
                            seen.add(nxt)
                            todo.append((nxt, owner))
            self.log.clear()
            start = stamp()
            loss.backward()  # type: ignore[no-untyped-call]
            end = stamp()
        finally:
            for h in handles:
                h.remove()
        entries = list(self.log)
        self.log.clear()
        return start, end, entries


def replay_backward(
    n: int,
    start: float,
    end: float,
    owners: Sequence[int],
    stamps: Sequence[float],
    hook: float = 0.0,
    clock_read: float = 0.0,
    root: int = 0,
) -> list[float]:
    """Self backward totals per node: each interval between stamps goes to the owner of
    the node that started it (the first, before any node started, to the root). One
    hook's cost is taken off every interval after a hook, one clock read off the first."""
    out = [0.0] * n
    prev_t, prev_owner, cost = start, root, clock_read
    for owner, t in zip(owners, stamps, strict=True):
        out[prev_owner] += max(t - prev_t - cost, 0.0)
        prev_t, prev_owner, cost = t, owner, hook
    out[prev_owner] += max(end - prev_t - cost, 0.0)
    return out


# ---- calibration --------------------------------------------------------------------


class _Empty(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x


def calibrate_clock(clock: Clock, trials: int = 64) -> float:
    """Cost of one clock read: the smallest gap between two back-to-back reads."""
    best = float("inf")
    for _ in range(trials):
        a = clock()
        b = clock()
        best = min(best, b - a)
    return max(float(best), 0.0)


def calibrate_forward(
    stamper: Stamper, record_seq: bool, k: int = 32, trials: int = 15
) -> tuple[float, float]:
    """(inner, outer) cost in ns of one instrumented module call, measured on empty modules.

    ``inner``: the smallest median window of an empty leaf (what a hook pair puts inside
    its own window). ``outer``: (instrumented chain - bare chain) / (k + 1), the extra
    wall time each instrumented call adds to whatever encloses it.
    """
    clock = stamper.clock
    bare = nn.Sequential(*[_Empty() for _ in range(k)])
    hooked = nn.Sequential(*[_Empty() for _ in range(k)])
    index = ModuleIndex.build(hooked)
    hooks = ForwardHooks(index, stamper, record_seq)
    x = torch.zeros(1)
    best_bare = best_hooked = best_inner = float("inf")
    hooks.install()
    try:
        for _ in range(trials):
            t0 = clock()
            bare(x)
            t1 = clock()
            best_bare = min(best_bare, t1 - t0)
            t0 = clock()
            hooked(x)
            t1 = clock()
            best_hooked = min(best_hooked, t1 - t0)
            entries = hooks.take()
            windows: list[float] = []
            open_at: dict[int, float] = {}
            for code, t, _ in entries:
                if code > 0:  # leaves only (the container is module 0)
                    open_at[code] = float(t)
                elif code < -1:
                    windows.append(float(t) - open_at[~code])
            if windows:
                windows.sort()
                best_inner = min(best_inner, windows[len(windows) // 2])
    finally:
        hooks.uninstall()
    outer = max((best_hooked - best_bare) / (k + 1), 0.0)
    inner = max(best_inner, 0.0) if best_inner != float("inf") else 0.0
    return inner, outer


def calibrate_backward(stamper: Stamper, k: int = 32, trials: int = 15) -> float:
    """Cost in ns of one autograd-node pre-hook: (hooked - bare) backward / hooked nodes."""
    clock = stamper.clock
    x = torch.zeros((), requires_grad=True)

    def chain() -> Tensor:
        y = x
        for _ in range(k):
            y = y * 1.0
        return y

    sink: list[tuple[int, int]] = []
    best_bare = best_hooked = float("inf")
    hooked_nodes = 1
    for _ in range(trials):
        y = chain()
        t0 = clock()
        y.backward()  # type: ignore[no-untyped-call]
        t1 = clock()
        best_bare = min(best_bare, t1 - t0)
        y = chain()
        handles = []
        fn: Any = y.grad_fn
        seen: set[Any] = set()
        while fn is not None and fn not in seen:
            seen.add(fn)
            handles.append(fn.register_prehook(lambda g: sink.append((0, clock()))))
            nxt = fn.next_functions
            fn = nxt[0][0] if nxt else None
        hooked_nodes = len(handles)
        t0 = clock()
        y.backward()  # type: ignore[no-untyped-call]
        t1 = clock()
        for h in handles:
            h.remove()
        best_hooked = min(best_hooked, t1 - t0)
    return max((best_hooked - best_bare) / hooked_nodes, 0.0)


# ---- progress -----------------------------------------------------------------------


class Progress:
    """Progress over the model runs of a pass: a callback, or a rich bar on stderr.

    The bar appears only once the pass is projected to take over ``threshold`` seconds,
    in automatic mode only on a terminal; it never refreshes by itself (no thread
    competing with the timed runs): it is redrawn between runs.
    """

    def __init__(self, setting: Any, total: int, label: str, threshold: float = 1.0) -> None:
        self.total = max(total, 1)
        self.done = 0
        self.label = label
        self.threshold = threshold
        self._callback = setting if callable(setting) and not isinstance(setting, bool) else None
        self._enabled = (
            setting is True or (setting is None and sys.stderr.isatty())
        ) and self._callback is None
        self._start = time.perf_counter()
        self._bar: Any = None
        self._task: Any = None

    def advance(self, n: int = 1) -> None:
        self.done = min(self.done + n, self.total)
        if self._callback is not None:
            self._callback(self.done, self.total)
            return
        if not self._enabled:
            return
        if self._bar is None:
            elapsed = time.perf_counter() - self._start
            if self.done < self.total and elapsed / self.done * self.total > self.threshold:
                self._open()
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done)
            self._bar.refresh()

    def _open(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
        from rich.progress import Progress as RichProgress

        self._bar = RichProgress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=True,
            auto_refresh=False,
        )
        self._bar.start()
        self._task = self._bar.add_task(self.label, total=self.total, completed=self.done)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


# ---- the pass -----------------------------------------------------------------------


class PassContext:
    """What every timer backend needs: the model call, grads, loss, stamps and progress."""

    def __init__(
        self,
        model: nn.Module,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        options: TimingOptions,
        index: ModuleIndex,
        device: torch.device,
    ) -> None:
        self.model = model
        self.args = args
        self.kwargs = kwargs
        self.options = options
        self.index = index
        self.device = device
        self.stamper = Stamper(options.clock, device, options.sync)
        self.progress: Progress = Progress(False, 1, "")
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.input_leaves = [
            t for t in iter_tensors((args, kwargs)) if t.requires_grad and t.is_leaf
        ]
        self.overhead: dict[str, float] = {}
        #: Whole-model series (ns) from the bare runs: latency, forward/backward_latency.
        self.whole: dict[str, list[float]] = {}

    def call(self) -> Any:
        """One forward of the model under the chosen grad mode."""
        with self.options.grad_context():
            return self.model(*self.args, **self.kwargs)

    def loss(self, out: Any) -> Tensor:
        if self.options.loss_fn is not None:
            return self.options.loss_fn(out)

        return default_loss(out)

    def clear_grads(self) -> None:
        """Start each repeat as ``optimizer.zero_grad()`` would (``set_to_none``), so each
        backward allocates its grads like a training step; the originals are restored."""
        for p in self.params:
            p.grad = None
        for t in self.input_leaves:
            t.grad = None

    def bare_run(self, record: bool) -> None:
        """One uninstrumented run (forward, and loss + backward with ``backward=True``);
        ``record`` adds its times to the whole-model latency series."""
        options, stamper = self.options, self.stamper
        self.clear_grads()
        stamper.begin()
        try:
            t0 = stamper.record()
            out = self.call()
            t1 = stamper.record()
            t2 = t1
            if options.backward:
                self.loss(out).backward()  # type: ignore[no-untyped-call]
                t2 = stamper.record()
        except LayerscopeError:
            raise
        except Exception as e:
            raise self.model_error(e) from e
        del out
        stamper.end()
        if record:
            clock_read = self.overhead.get("clock_read", 0.0)
            a, b, c = stamper.ns(t0), stamper.ns(t1), stamper.ns(t2)
            fwd = max(b - a - clock_read, 0.0)
            self.whole.setdefault("forward_latency", []).append(fwd)
            total = fwd
            if options.backward:
                bwd = max(c - b - clock_read, 0.0)
                self.whole.setdefault("backward_latency", []).append(bwd)
                total += bwd
            self.whole.setdefault("latency", []).append(total)
        stamper.recycle([t0, t1, t2] if options.backward else [t0, t1])
        self.progress.advance()

    def model_error(self, e: Exception) -> ModelError:
        site = self.index.site(e)
        path = self.index.paths[site] if site is not None else None
        typ = type(self.index.module_at(site)).__name__ if site is not None else None
        where = ""
        if site is not None:
            where = f" in module {path!r} ({typ})" if path else f" in the root module ({typ})"
        return ModelError(
            f"the model raised {type(e).__name__}{where} during the timing pass: {e}",
            path=path,
            module_type=typ,
        )


def _batch_size(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int | None, str | None]:
    """Dim 0 of the first tensor input (args in order, then kwargs), and where it came from."""
    for where, value in [
        *((f"args[{i}]", a) for i, a in enumerate(args)),
        *((f"kwargs[{k!r}]", v) for k, v in kwargs.items()),
    ]:
        tensors = [value] if isinstance(value, Tensor) else iter_tensors(value)
        if tensors:
            t = tensors[0]
            if t.dim() == 0:
                return None, None
            source = where if t is value else f"first tensor in {where}"
            return int(t.shape[0]), f"{source}.shape[0]"
    return None, None


def _input_device(args: tuple[Any, ...], kwargs: dict[str, Any], model: nn.Module) -> torch.device:
    for t in iter_tensors((args, kwargs)):
        if t.device.type != "meta":
            return t.device
    return model_device_dtype(model)[0]


def time_profile(
    profile: Profile,
    model: nn.Module,
    args: tuple[Any, ...] | list[Any] = (),
    kwargs: dict[str, Any] | None = None,
    *,
    warmup: int = 3,
    repeats: int = 10,
    backward: bool = False,
    loss_fn: Callable[[Any], Tensor] | None = None,
    timer: Timer | str = Timer.HOOKS,
    sync: bool = False,
    grad_mode: GradMode | str = GradMode.ENABLED,
    ops: bool = False,
    batch_size: int | None = None,
    clock: Clock | None = None,
    progress: bool | Callable[[int, int], None] | None = None,
    correct_overhead: bool = True,
) -> TimingResult:
    """Run the timing pass and write its results into ``profile`` (built by ``ls.profile``
    for this model); return the raw samples too.

    Per node: ``forward_time`` (and ``backward_time`` with ``backward=True``) in
    ``metrics`` (inclusive) and ``self_metrics`` (self), seconds per call, median over
    ``repeats`` after ``warmup`` runs, with ``*_min`` and ``*_iqr``. ``Profile.timing``:
    whole-model latency (uninstrumented runs), throughput and how it was all measured.
    See ``docs/timing.md``.
    """
    options = TimingOptions(
        warmup=warmup,
        repeats=repeats,
        backward=backward,
        loss_fn=loss_fn,
        timer=timer,  # type: ignore[arg-type]  # validated into a Timer
        sync=sync,
        grad_mode=grad_mode,  # type: ignore[arg-type]
        ops=ops,
        batch_size=batch_size,
        clock=clock,
        progress=progress,
        correct_overhead=correct_overhead,
    )
    if not isinstance(args, tuple | list):
        raise InvalidInputError(f"args must be a tuple or list, got {type(args).__name__}")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise InvalidInputError(f"kwargs must be a dict, got {type(kwargs).__name__}")
    _module_nodes(profile)  # fail early on a folded profile
    result = measure(model, tuple(args), dict(kwargs or {}), options)
    result.apply(profile)
    return result


def measure(
    model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], options: TimingOptions
) -> TimingResult:
    """Run the whole timing pass (calibration, bare latency runs, instrumented runs)."""

    model, notices = unwrap_model(model)
    index = ModuleIndex.build(model)
    device = _input_device(args, kwargs, model)
    ctx = PassContext(model, args, kwargs, options, index, device)
    result = TimingResult(notices=list(notices))
    batch, source = _batch_size(args, kwargs)
    if options.batch_size is not None:
        batch, source = options.batch_size, "given"
    result.info = {
        "timer": options.timer.value,
        "clock": ctx.stamper.name if options.timer is not Timer.KINETO else "torch.profiler",
        "device": str(device),
        "sync": options.sync,
        "grad_mode": options.grad_mode.value,
        "backward": options.backward,
        "warmup": options.warmup,
        "repeats": options.repeats,
        "ops": options.ops,
        "batch_size": batch,
        "batch_source": source,
        "training": model.training,
    }
    saved_input_grads = [(t, t.grad) for t in ctx.input_leaves]
    instrumented = options.repeats + (1 if options.warmup > 0 else 0)
    state = ModelState.capture(model)
    # CUDA events are recorded on the current device: make it the model's.
    on_device: AbstractContextManager[Any] = nullcontext()
    if device.type == "cuda" and device.index is not None:
        on_device = torch.cuda.device(device.index)
    try:
        with gc_paused(), on_device:
            ctx.progress = Progress(
                options.progress,
                options.warmup + options.repeats + instrumented,
                f"timing {type(model).__name__} ({options.timer.value})",
            )
            try:
                _calibrate(ctx)
                for _ in range(options.warmup):
                    ctx.bare_run(record=False)
                if options.timer is Timer.HOOKS:
                    _hooks_runs(ctx, result)
                elif options.timer is Timer.KINETO:
                    from layerscope.collect.kineto import kineto_runs

                    kineto_runs(ctx, result)
                else:
                    from layerscope.collect.fx import fx_runs

                    fx_runs(ctx, result)
            finally:
                ctx.progress.close()
    finally:
        for t, g in saved_input_grads:
            t.grad = g
        result.notices.extend(state.restore())
    result.overhead = dict(ctx.overhead)
    result.whole = ctx.whole | result.whole
    result.info["overhead_corrected"] = (
        options.correct_overhead and not ctx.stamper.events and (options.timer is not Timer.KINETO)
    )
    return result


def _calibrate(ctx: PassContext) -> None:
    options, stamper = ctx.options, ctx.stamper
    ctx.overhead = {"clock_read": 0.0}
    if not options.correct_overhead or stamper.events:
        return
    ctx.overhead["clock_read"] = calibrate_clock(stamper.clock)
    if options.timer is Timer.HOOKS:
        inner, outer = calibrate_forward(stamper, options.backward)
        ctx.overhead["forward_hook_inner"] = inner
        ctx.overhead["forward_hook_outer"] = outer
    if options.backward and options.timer is not Timer.KINETO:
        ctx.overhead["backward_hook"] = calibrate_backward(stamper)


def _hooks_runs(ctx: PassContext, result: TimingResult) -> None:
    """The timed repeats of the default timer, each a bare run then an instrumented one.

    The hooks are installed only around the instrumented run, so the bare run of the same
    repeat is truly bare and machine-load drift hits both alike.
    """
    options, index, stamper = ctx.options, ctx.index, ctx.stamper
    inner = ctx.overhead.get("forward_hook_inner", 0.0)
    outer = ctx.overhead.get("forward_hook_outer", 0.0)
    hooks = ForwardHooks(index, stamper, record_seq=options.backward)
    back = BackwardTimer(index, stamper)
    warm = 1 if options.warmup > 0 else 0
    windows: list[float] = []
    for i in range(warm + options.repeats):
        if i >= warm:
            ctx.bare_run(record=True)
        ctx.clear_grads()
        stamper.begin()
        b_start: Any = None
        b_end: Any = None
        b_log: list[tuple[int, Any]] = []
        hooks.install()
        try:
            out = ctx.call()
            entries = hooks.take()
            hooks.uninstall()
            if options.backward:
                seqs, owners = grad_steps(index, entries)
                b_start, b_end, b_log = back.run(ctx.loss(out), seqs, owners)
        except LayerscopeError:
            raise
        except Exception as e:
            raise ctx.model_error(e) from e
        finally:
            hooks.uninstall()
            hooks.take()
        del out
        stamper.end()
        if i >= warm:
            fwd = replay_forward(
                index,
                [e[0] for e in entries],
                [stamper.ns(e[1]) for e in entries],
                inner,
                outer,
            )
            windows.append(fwd.root_window)
            bwd_self: list[float] | None = None
            if options.backward:
                bwd_self = replay_backward(
                    len(index),
                    stamper.ns(b_start),
                    stamper.ns(b_end),
                    [o for o, _ in b_log],
                    [stamper.ns(s) for _, s in b_log],
                    ctx.overhead.get("backward_hook", 0.0),
                    ctx.overhead.get("clock_read", 0.0),
                )
            add_repeat(result, index, fwd, bwd_self)
        used = [e[1] for e in entries] + [s for _, s in b_log]
        if b_start is not None:
            used += [b_start, b_end]
        stamper.recycle(used)
        ctx.progress.advance()
    result.whole["instrumented_forward"] = windows


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
