"""The cheap timers of a ``Profiler``'s timed loop steps (``LoopTimer``).

A timed step carries no analysis instrumentation (rule 4): only the forward pre/post hook
pair of the timing pass per module, which appends ``(module, stamp, sequence number)`` to
a list, two stamps around the step, and, for a step that runs a backward pass, one
autograd pre-hook per node of the model's graph (the timing pass's backward timer) and a
stamp around each optimizer step. The logs are replayed into per-call times after the
step's end stamp, so the replay is not part of the step's time.
"""

from __future__ import annotations

import threading
from typing import Any

import torch
from torch import nn
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)
from torch.utils.hooks import RemovableHandle

from layerscope.collect.common import remove_hooks
from layerscope.collect.inputs import model_device_dtype
from layerscope.collect.signature import iter_tensors
from layerscope.collect.timing.backward import grad_steps, owner_of
from layerscope.collect.timing.calibrate import (
    calibrate_backward,
    calibrate_clock,
    calibrate_forward,
)
from layerscope.collect.timing.clock import Stamper
from layerscope.collect.timing.forward import Entry, ForwardHooks, region_times, replay_forward
from layerscope.collect.timing.index import ModuleIndex
from layerscope.collect.timing.options import TimingOptions
from layerscope.collect.timing.result import TimingResult, add_repeat
from layerscope.collect.timing.spans import (
    RepeatSpans,
    backward_intervals,
    build_trace,
    forward_spans,
)
from layerscope.profile import Profile
from layerscope.torchapi import NO_SEQUENCE

#: Sequence number of autograd nodes outside the sequence (AccumulateGrad).
#: Backward log marker: the backward pass that the entries since the last marker ran in
#: has ended.
_BACKWARD_END = -1


class LoopTimer:
    """Times whole steps of a user's loop, and every module's forward and backward in them.

    ``begin()`` installs the hooks and takes the start stamp; ``end(keep)`` takes the
    end stamp, removes the hooks and (``keep``) replays the step's logs into the result.

    Backward: when a forward call of the root module returns an output with an autograd
    graph, every node of that graph gets a pre-hook that logs (its sequence number, stamp)
    as it starts, and the first one to run queues a callback for the end of that backward
    pass; the forward log's sequence numbers say which module created each node, so an
    interval between two stamps is the earlier node's module's (as in the timing pass).
    Hooking the graph takes a moment after the root's forward returned; that moment is
    measured and taken off the step. Nodes the model did not create (the loss) have no
    hook: their time before the model's first node is not counted as the model's.

    Optimizer: torch's global optimizer step hooks stamp each ``optimizer.step()``.

    Per step it keeps the step time and its parts: ``step_forward`` (the root's forward
    calls), ``step_backward`` (from the first model node's start to the end of each
    backward pass), ``step_optimizer`` and ``step_other`` = the rest (loss, data, user
    code, the hooks' own small cost), each with calibrated hook cost taken off.
    """

    def __init__(self, model: nn.Module, options: TimingOptions, grad_mode: str = "") -> None:
        self.model = model
        self.grad_mode = grad_mode
        self.options = options
        self.index = ModuleIndex.build(model)
        self.device = model_device_dtype(model)[0]
        self.stamper = Stamper(options.clock, self.device, options.sync)
        self.hooks = ForwardHooks(self.index, self.stamper, record_seq=True)
        self.overhead: dict[str, float] = {"clock_read": 0.0}
        self.corrected = options.correct_overhead and not self.stamper.events
        if self.corrected:
            self.overhead["clock_read"] = calibrate_clock(self.stamper.clock)
            inner, outer = calibrate_forward(self.stamper, True)
            self.overhead["forward_hook_inner"] = inner
            self.overhead["forward_hook_outer"] = outer
            self.overhead["backward_hook"] = calibrate_backward(self.stamper)
        self.result = TimingResult()
        self.calls = [0] * len(self.index)
        self.steps: dict[str, list[float]] = {
            "step_time": [],
            "step_forward": [],
            "step_backward": [],
            "step_optimizer": [],
            "step_other": [],
        }
        self.backward_steps = 0
        self._start: Any = None
        self.running = False
        self._thread = 0
        # per step: the graph's hooks, the nodes hooked, the logs
        self._node_handles: list[RemovableHandle] = []
        self._other_handles: list[RemovableHandle] = []
        self._hooked: set[Any] = set()
        self._bwd_log: list[tuple[int, Any]] = []
        self._bwd_open = False
        self._hooking: list[tuple[Any, Any]] = []  # (start, end) stamps of graph hooking
        self._optim: list[Any] = []  # pre, post, pre, post, ... stamps

    def reset(self) -> None:
        """Forget the steps timed so far (a new cycle)."""
        self.result = TimingResult()
        self.calls = [0] * len(self.index)
        self.steps = {k: [] for k in self.steps}
        self.backward_steps = 0

    @property
    def timed_steps(self) -> int:
        return len(self.steps["step_time"])

    @property
    def depth(self) -> int:
        """The deepest module's depth (the root is 0): the timers add a frame per level."""
        index = self.index
        depth = [0] * len(index)
        for i, p in enumerate(index.parent):  # pre-order: a parent comes before its children
            if p >= 0:
                depth[i] = depth[p] + 1
        return max(depth, default=0)

    def begin(self) -> None:
        stamper = self.stamper
        stamper.begin()
        self._thread = threading.get_ident()
        self.hooks.install()
        root = self.index.modules[self.index.root]
        self._other_handles = [
            root.register_forward_hook(self._root_returned),  # after the timer's own
            register_optimizer_step_pre_hook(self._optimizer_stamp),
            register_optimizer_step_post_hook(self._optimizer_stamp),
        ]
        self.running = True
        self._start = stamper.record()

    def end(self, keep: bool = True) -> bool:
        """End the step; ``keep`` adds it to the result when it ran the model at all.
        Returns whether it was kept."""
        stamper = self.stamper
        stop = stamper.record()
        self.hooks.uninstall()
        remove_hooks(self._other_handles)
        remove_hooks(self._node_handles)
        self._hooked.clear()
        self._bwd_open = False
        self.running = False
        stamper.end()
        entries = self.hooks.take()
        regions = self.hooks.taken_regions
        bwd_log, self._bwd_log = self._bwd_log, []
        hooking, self._hooking = self._hooking, []
        optim, self._optim = self._optim, []
        start, self._start = self._start, None
        kept = keep and bool(entries)
        if kept:
            self._add(entries, bwd_log, hooking, optim, stamper.ns(start), stamper.ns(stop))
            outer = self.overhead.get("forward_hook_outer", 0.0)
            self.result.add_regions(region_times(self.index, entries, regions, stamper.ns, outer))
        used = [start, stop, *(e[1] for e in entries), *(t for _, t in bwd_log), *optim]
        stamper.recycle(used + [t for pair in hooking for t in pair])
        return kept

    # ---- hooks of a timed step -------------------------------------------------------
    def _optimizer_stamp(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if threading.get_ident() == self._thread:
            self._optim.append(self.stamper.record())

    def _root_returned(self, module: nn.Module, args: Any, output: Any) -> None:
        """Hook every node of the graph behind the root's output (once per node)."""
        if not torch.is_grad_enabled() or threading.get_ident() != self._thread:
            return
        starts = [t.grad_fn for t in iter_tensors(output) if t.grad_fn is not None]
        if not starts:
            return
        stamper = self.stamper
        t0 = stamper.record()
        hooked, handles = self._hooked, self._node_handles
        todo: list[tuple[Any, int]] = []
        for fn in starts:
            if fn not in hooked:
                hooked.add(fn)
                todo.append((fn, fn._sequence_nr()))
        while todo:
            fn, consumer = todo.pop()
            seq = fn._sequence_nr()
            key = consumer if seq == NO_SEQUENCE else seq
            handles.append(fn.register_prehook(self._node_hook(key)))
            for nxt, _ in fn.next_functions:
                if nxt is not None and nxt not in hooked:
                    hooked.add(nxt)
                    todo.append((nxt, key))
        self._hooking.append((t0, stamper.record()))

    def _node_hook(self, key: int) -> Any:
        append, stamp = self._bwd_log.append, self.stamper.record

        def hook(grad_outputs: Any) -> None:
            if not self._bwd_open:
                self._bwd_open = True
                torch.autograd.Variable._execution_engine.queue_callback(self._backward_ended)
            append((key, stamp()))

        return hook

    def _backward_ended(self) -> None:
        self._bwd_open = False
        self._bwd_log.append((_BACKWARD_END, self.stamper.record()))

    # ---- replay ----------------------------------------------------------------------
    def _add(
        self,
        entries: list[Entry],
        bwd_log: list[tuple[int, Any]],
        hooking: list[tuple[Any, Any]],
        optim: list[Any],
        t0: float,
        t1: float,
    ) -> None:
        index, stamper, overhead = self.index, self.stamper, self.overhead
        codes = [e[0] for e in entries]
        stamps = [stamper.ns(e[1]) for e in entries]
        fwd = replay_forward(
            index,
            codes,
            stamps,
            overhead.get("forward_hook_inner", 0.0),
            overhead.get("forward_hook_outer", 0.0),
        )
        passes: list[tuple[list[int], list[float]]] = []  # (owners, stamps) per backward
        bwd_self, backward = (
            self._replay_backward(entries, bwd_log, passes) if bwd_log else (None, 0.0)
        )
        add_repeat(self.result, index, fwd, bwd_self)
        for i, n in enumerate(fwd.calls):
            self.calls[i] += n
        spans = RepeatSpans(forward_spans(index, codes, stamps, t0))
        for owners, times in passes:  # the last stamp is the pass's end
            spans.backward += backward_intervals(
                times[0], times[-1], owners, times[:-1], t0, index.root
            )
        spans.end = t1 - t0
        self.result.spans.append(spans)
        hooking_ns = sum(stamper.ns(b) - stamper.ns(a) for a, b in hooking)
        step = max(t1 - t0 - overhead["clock_read"] - hooking_ns, 0.0)
        forward = min(fwd.inclusive[index.root], step)
        backward = min(backward, step - forward)
        ns = [stamper.ns(t) for t in optim]
        optimizer = min(
            sum(b - a for a, b in zip(ns[::2], ns[1::2], strict=False)), step - forward - backward
        )
        self.steps["step_time"].append(step)
        self.steps["step_forward"].append(forward)
        self.steps["step_backward"].append(backward)
        self.steps["step_optimizer"].append(optimizer)
        self.steps["step_other"].append(step - forward - backward - optimizer)
        if bwd_self is not None:
            self.backward_steps += 1

    def _replay_backward(
        self,
        entries: list[Entry],
        log: list[tuple[int, Any]],
        passes: list[tuple[list[int], list[float]]],
    ) -> tuple[list[float], float]:
        """Self backward time per module (ns) and the backward passes' total: each
        interval between two stamps of a pass is the earlier node's module's; one hook's
        cost comes off each interval. Each pass's (owners, stamps) go to ``passes``, the
        pass's end stamp last."""
        index, stamper = self.index, self.stamper
        seqs, owners = grad_steps(index, entries)
        hook = self.overhead.get("backward_hook", 0.0)
        out = [0.0] * len(index)
        total = 0.0
        prev_t: float | None = None
        prev_owner = index.root
        pass_owners: list[int] = []
        pass_stamps: list[float] = []
        for key, stamp in log:
            t = stamper.ns(stamp)
            if prev_t is not None:
                out[prev_owner] += max(t - prev_t - hook, 0.0)
            if key == _BACKWARD_END:
                if prev_t is not None:
                    total += t - pass_stamps[0]
                    passes.append((pass_owners, [*pass_stamps, t]))
                prev_t = None
                continue
            if prev_t is None:
                pass_owners, pass_stamps = [], []
            prev_t, prev_owner = t, owner_of(seqs, owners, key, index.root)
            pass_owners.append(prev_owner)
            pass_stamps.append(t)
        return out, total

    def apply(self, profile: Profile) -> None:
        """Write the timed steps' numbers into ``profile`` (``TimingResult.apply``)."""
        result = self.result
        result.info = {
            "timer": "hooks",
            "clock": self.stamper.name,
            "device": str(self.device),
            "sync": self.options.sync,
            "grad_mode": self.grad_mode,
            "backward": self.backward_steps > 0,
            "backward_steps": self.backward_steps,
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


__all__ = ["LoopTimer"]
