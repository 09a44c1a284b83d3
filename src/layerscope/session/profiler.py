"""One measurement session: instrument the model, run it, build the Profile, clean up.

``Profiler`` is the ``with`` block around any user code; ``profile`` runs the model itself
and also restores everything the run could have changed (RNG, buffers, flags).
"""

from __future__ import annotations

import operator
import platform
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from types import TracebackType
from typing import Any

import torch
from torch import nn

from layerscope.collect.common import (
    check_bool,
    default_loss,
    in_mode,
    is_compiled,
    unwrap_model,
)
from layerscope.collect.dispatch import SessionMode, remove_mode
from layerscope.collect.grads import GradShapes
from layerscope.collect.inputs import model_device_dtype, random_inputs
from layerscope.collect.observer import Observer, observer_error
from layerscope.collect.regions import attach_regions
from layerscope.collect.scopes import MAX_SIGNATURES, ScopeTracker
from layerscope.collect.signature import dtype_name, iter_tensors
from layerscope.collect.state import ModelState
from layerscope.collect.target import KernelLog, Target, parse_target, steer, steering_active
from layerscope.collect.timing import TimingOptions, time_profile
from layerscope.collect.timing.compiled import time_compiled
from layerscope.collect.tree import ModelTree
from layerscope.errors import InvalidInputError, LayerscopeError, ModelError
from layerscope.gcpause import gc_paused
from layerscope.metrics.bytes import ByteCounter
from layerscope.metrics.comm import comm_observers
from layerscope.metrics.flop_counter import FlopCounter
from layerscope.metrics.flops import Formula
from layerscope.metrics.memory import MemoryObserver
from layerscope.metrics.numerics import NonFiniteMode, NumericsObserver
from layerscope.metrics.params import fill_parameters
from layerscope.profile import Node, Profile
from layerscope.session.claims import Claim, claim, claimed, release
from layerscope.session.loop import LoopTimer, check_loop_timing, index_depth, merge_profiles
from layerscope.session.options import NUMERICS_OPTIONS as NUMERICS_OPTIONS
from layerscope.session.options import TIMING_OPTIONS as TIMING_OPTIONS
from layerscope.session.options import (
    Mode,
    check_callable,
    check_dtype,
    check_input_shape,
    check_mode,
    check_numerics,
    check_session,
    check_timing,
    check_timing_device,
)
from layerscope.session.schedule import IDLE, Action, Schedule
from layerscope.version import __version__

_MISSING: Any = object()

# ---- room on the stack for the session's frames ----------------------------------------
#: Frames a session adds per level of module nesting: the forward wrapper, or the frame
#: in which nn.Module runs the hooks of a module that had none of its own.
_FRAMES_PER_LEVEL = 1
#: Frames a session adds once, whatever the depth: its own calls around the model's, the
#: dispatch mode, observers and formulas under the innermost op.
_FRAMES_MARGIN = 64
_limit_guard = threading.Lock()
_limit_set: int | None = None  # the recursion limit as layerscope last set it
_get_depth = operator.attrgetter("depth")


def stack_room(tree: ModelTree, per_level: int = _FRAMES_PER_LEVEL) -> int:
    """How many more frames than a bare run a run under instrumentation may need."""
    depth = max(map(_get_depth, tree.by_path.values()), default=0)
    return per_level * (depth + 1) + _FRAMES_MARGIN


def raise_recursion_limit(extra: int) -> None:
    """Raise Python's recursion limit by ``extra`` frames (see ``lower_recursion_limit``)."""
    global _limit_set
    with _limit_guard:
        limit = sys.getrecursionlimit() + extra
        sys.setrecursionlimit(limit)
        _limit_set = limit


def lower_recursion_limit(extra: int) -> None:
    """Take back the ``extra`` frames ``raise_recursion_limit`` gave, unless someone set the
    limit since: what the user sets stays, never lowered."""
    global _limit_set
    with _limit_guard:
        limit = sys.getrecursionlimit()
        if limit != _limit_set:
            return
        try:
            sys.setrecursionlimit(limit - extra)
        except RecursionError:  # deeper than that right now: leave it raised
            return
        _limit_set = limit - extra


@contextmanager
def recursion_room(extra: int) -> Iterator[None]:
    """The block runs with ``extra`` more frames of recursion limit."""
    raise_recursion_limit(extra)
    try:
        yield
    finally:
        lower_recursion_limit(extra)


class Profiler:
    """Profile whatever code runs inside the ``with`` block, or between ``start()`` and
    ``stop()``.

    >>> with Profiler(model) as p:          # doctest: +SKIP
    ...     model(x).sum().backward()
    >>> p.profile.root.metrics["params"]    # doctest: +SKIP

    In a training (or generation) loop, ``schedule=ls.schedule(wait=, warmup=, active=,
    repeat=)`` and one ``p.step()`` per iteration measure only some steps: nothing is
    installed in ``wait`` and ``warmup`` steps; the ``active`` steps of a cycle are
    analysed and merged into one Profile (work metrics and calls summed), handed to
    ``on_ready(profile)`` at the end of each cycle and kept as ``p.profile``.

    ``timing=True`` (or a mapping of ``sync``, ``clock``, ``correct_overhead``,
    ``batch_size``) times steps with the cheap forward timers only: with a schedule the
    first active step of each cycle is analysed and the others are timed
    (``forward_time`` per module, the step time split in ``profile.timing``); without
    one every call in the block is timed and nothing is analysed (instrumentation would
    be in the times). See ``docs/loops.md``.

    Only the thread that entered it is measured: calls of the model from other threads
    are not counted (a notice says how many there were). One thread at a time profiles a
    model: entering a Profiler on a model another thread is profiling raises. Sessions
    on one model nest, and may end in any order.

    On a ``meta`` model, analysed steps follow the kernels of ``target`` (default
    ``"cpu"``; ``"h100"``, ``"a100"``, ... as in ``ls.profile``).

    ``grad_shapes`` (default: as ``record_shapes``) records the shapes of the gradients
    that reach each module's inputs and outputs in a backward pass inside the block
    (``Node.grad_inputs``/``grad_outputs``).
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        record_shapes: bool = True,
        count_flops: bool = True,
        flop_formulas: Mapping[Any, Formula] | None = None,
        count_bytes: bool = True,
        numerics: NonFiniteMode | Mapping[str, Any] | None = None,
        memory: bool = False,
        observers: Sequence[Observer] = (),
        grad_shapes: bool | None = None,
        timing: bool | Mapping[str, Any] = False,
        schedule: Schedule | None = None,
        on_ready: Callable[[Profile], Any] | None = None,
        target: str | Target | None = None,
    ) -> None:
        self.model, self._notices = unwrap_model(model)
        self._target = as_target(target)
        self._options = check_session(
            record_shapes=record_shapes,
            count_flops=count_flops,
            flop_formulas=flop_formulas,
            count_bytes=count_bytes,
            numerics=numerics,
            memory=memory,
            observers=observers,
        )
        self.record_shapes = self._options.record_shapes
        self._grad_shapes = (
            self._options.record_shapes
            if grad_shapes is None
            else check_bool("grad_shapes", grad_shapes)
        )
        self.observers: list[Observer] = self._make_observers()
        self._timing = check_loop_timing(timing)
        if schedule is not None and not isinstance(schedule, Schedule):
            raise InvalidInputError(
                f"schedule must be ls.schedule(wait=, warmup=, active=, repeat=) or None, "
                f"got {schedule!r}"
            )
        self.schedule = schedule
        check_callable("on_ready", on_ready, "a callable(profile)")
        self.on_ready = on_ready
        self._tracker: ScopeTracker | None = None
        self._mode: SessionMode | None = None
        self._profile: Profile | None = None
        self._run: dict[str, Any] = {}
        self._claim: Claim | None = None  # the model's modules, held while analysing
        self._thread: int | None = None
        self._stack_room = 0
        # the loop: "new" -> "running" (start) -> "stopped" (stop)
        self._state = "new"
        self._owner: int | None = None  # the thread that started it
        self._step = 0  # the current step, counted from start()
        self._action = Action.DONE  # what the current step does
        self._sessions = 0  # analysis sessions opened so far
        self._cycle: list[Profile] = []  # this cycle's analysed steps' profiles
        self._cycle_steps: list[int] = []  # the steps measured in this cycle
        self._cycles = 0  # profiles built so far
        self._timer: LoopTimer | None = None
        self._timer_room = 0
        #: where the session's tensors are (ls.profile sets it: a model without tensors
        #: can run on meta inputs); None: the model's parameters' device
        self._tensors_on: str | None = None
        #: the steering of an analysis session on meta, and the kernels it chose
        self._steering: AbstractContextManager[KernelLog] | None = None
        self._steered: Target | None = None
        self._kernels: KernelLog | None = None

    def _make_observers(self) -> list[Observer]:
        """The session's observers: fresh built-in ones, then the user's own."""
        options = self._options
        observers: list[Observer] = []
        if options.count_flops:
            observers.append(FlopCounter(options.flop_formulas))
        if options.count_bytes:
            observers.append(ByteCounter())
        if options.memory:
            observers.append(MemoryObserver())
        if options.numerics is not None:
            observers.append(NumericsObserver(**options.numerics))
        # collective ops' bytes, when a process group is initialised
        observers.extend(comm_observers(options.observers))
        observers.extend(options.observers)
        # the shapes of the gradients reaching each module: with the other shapes
        if self._grad_shapes:
            observers.append(GradShapes())
        return observers

    # ---- the loop: start, step, stop -------------------------------------------------
    def __enter__(self) -> Profiler:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop(exc)

    def start(self) -> Profiler:
        """Begin measuring (step 0 begins); what ``with`` does on entry."""
        if self._state != "new":
            raise LayerscopeError(
                "a Profiler cannot be entered twice (nor started again after stop()); "
                "create a new one"
            )
        if self._timing is not None:
            check_timing_device(self.model, ())
            self._timer = LoopTimer(self.model, self._timing, grad_mode())
            self._timer_room = _FRAMES_PER_LEVEL * (index_depth(self._timer.index) + 1)
            self._timer_room += _FRAMES_MARGIN
        self._run = {"training": self.model.training, "grad_mode": grad_mode()}
        self._owner = threading.get_ident()
        self._step = 0
        self._begin_step()
        self._state = "running"
        return self

    def step(self) -> None:
        """End the current step of the loop and begin the next (call it once per
        iteration, after the optimizer step). Ends a cycle after its last active step:
        its profile is built and handed to ``on_ready``."""
        if self._state != "running":
            raise LayerscopeError(
                "step() needs a running Profiler: call start() (or enter the `with` block) first"
                if self._state == "new"
                else "step() after stop(): the Profiler has stopped"
            )
        if threading.get_ident() != self._owner:
            raise LayerscopeError("step() must be called in the thread that started the Profiler")
        action = self._action
        if self.schedule is None:
            self._step += 1
            if action is Action.TIME:  # each step's time apart
                timer = self._timer
                assert timer is not None
                if timer.end():
                    self._cycle_steps.append(self._step - 1)
                timer.begin()
            return
        if action in IDLE:
            self._step += 1
            self._action = self.schedule.action(self._step, self._timer is not None)
            if self._action not in IDLE:
                self._begin_step()
            return
        last = self.schedule.last_of_cycle(self._step)
        self._end_step(None, at_stop=False)
        self._step += 1
        ready = self._finish_cycle() if last else None
        try:
            if ready is not None and self.on_ready is not None:
                self.on_ready(ready)
        finally:
            self._begin_step()

    def stop(self) -> None:
        """Stop measuring; what ``with`` does on exit. A cycle with measured steps that
        has not ended yet is built as it is (``profile.model["loop"]["complete"]``)."""
        self._stop(None)

    def _stop(self, exc: BaseException | None) -> None:
        if self._state != "running":
            raise LayerscopeError(
                "stop() before start(): the Profiler has not started"
                if self._state == "new"
                else "the Profiler has already stopped"
            )
        self._state = "stopped"
        self._end_step(exc, at_stop=True)
        ready = self._finish_cycle()
        if ready is not None and self.on_ready is not None and exc is None:
            self.on_ready(ready)

    def _begin_step(self) -> None:
        if self.schedule is None:
            action = Action.ANALYSE if self._timer is None else Action.TIME
        else:
            action = self.schedule.action(self._step, self._timer is not None)
        self._action = action
        if action is Action.ANALYSE:
            self._open()
        elif action is Action.TIME:
            timer = self._timer
            assert timer is not None
            raise_recursion_limit(self._timer_room)
            try:
                timer.begin()
            except BaseException:
                lower_recursion_limit(self._timer_room)
                raise

    def _end_step(self, exc: BaseException | None, *, at_stop: bool) -> None:
        action, self._action = self._action, Action.DONE
        if action is Action.ANALYSE:
            prof = self._close(exc)
            tracker = self._tracker
            assert tracker is not None
            # the step a loop begins after its last step() and never runs is not one
            if not at_stop or tracker.called or self.schedule is None:
                self._cycle.append(prof)
                self._cycle_steps.append(self._step)
        elif action is Action.TIME:
            timer = self._timer
            assert timer is not None
            try:
                if timer.end():
                    self._cycle_steps.append(self._step)
            finally:
                lower_recursion_limit(self._timer_room)

    def _finish_cycle(self) -> Profile | None:
        """The profile of the cycle that just ended, or None if it measured nothing."""
        profiles, self._cycle = self._cycle, []
        steps, self._cycle_steps = self._cycle_steps, []
        timer = self._timer
        timed = timer.timed_steps if timer is not None else 0
        if not profiles and not timed:
            return None
        if profiles:
            prof = merge_profiles(profiles)
        else:  # timed only: structure and parameters, calls from the timers
            tree = ModelTree.build(self.model)
            prof = build_profile(
                ScopeTracker(tree), ran=True, notices=self._notices, observers=(), run=self._run
            )
            prof.notices.append(
                "timed only: FLOPs, memory and shapes need an analysed step, and the "
                "analysis instrumentation would be in the times; give a schedule "
                "(ls.schedule(active=2) or more) to analyse the first active step of each "
                "cycle and time the others"
            )
        if timer is not None:
            if timed:
                timer.apply(prof)
                if not profiles:
                    timer.set_calls(prof)
            else:
                prof.notices.append(
                    "no step was timed: with timing the first active step of a cycle is "
                    "analysed and the others are timed, so time needs active >= 2"
                )
            timer.reset()
        if self.schedule is not None or timer is not None or self._step > 0:
            sched = self.schedule
            prof.model["loop"] = {
                "cycle": self._cycles,
                "steps": len(steps),
                "analysed_steps": len(profiles),
                "timed_steps": timed,
                "first_step": steps[0] if steps else None,
                "last_step": steps[-1] if steps else None,
                "steps_seen": self._step,
                "complete": sched is None or len(steps) == sched.active,
                "schedule": None
                if sched is None
                else {
                    "wait": sched.wait,
                    "warmup": sched.warmup,
                    "active": sched.active,
                    "repeat": sched.repeat,
                },
            }
            if sched is None:
                # one span: analysed as a whole however many steps; or every step timed
                loop = prof.model["loop"]
                loop["analysed_steps"] = 1 if profiles else 0
                loop["steps"] = len(steps) if timed else max(self._step, 1)
                if not timed:
                    loop["first_step"], loop["last_step"] = 0, loop["steps"] - 1
        self._cycles += 1
        self._profile = prof
        return prof

    # ---- one analysis session --------------------------------------------------------
    def _open(self) -> None:
        """Install the analysis instrumentation (a fresh tracker and observers)."""
        if self._sessions:
            self.observers = self._make_observers()
        self._sessions += 1
        taken = claim(self.model, wait=False)
        if taken is None:
            raise LayerscopeError(
                f"the model ({type(self.model).__name__}) or a module of it is being "
                "profiled in another thread; profile it from one thread at a time "
                "(ls.profile waits its turn)"
            )
        try:
            tree = ModelTree.build(self.model)
            self._run = {"training": self.model.training, "grad_mode": grad_mode()}
            self._tracker = ScopeTracker(tree, self.record_shapes, self.observers)
            # Deep models that run bare must run instrumented too.
            self._stack_room = stack_room(tree)
            raise_recursion_limit(self._stack_room)
        except BaseException:
            release(taken)
            raise
        self._claim, self._thread = taken, threading.get_ident()
        self._mode = None
        try:
            self._tracker.install()
        except BaseException:
            self._release()
            raise
        installed: list[Observer] = []
        try:
            for observer in self.observers:
                _call_observer(observer, "install", self._tracker)
                installed.append(observer)
            on_op = [o.on_op for o in self.observers if o.overrides("on_op")]
            if on_op:
                # torch imports torch._dynamo lazily at the first __torch_dispatch__ call;
                # imported there, with the model's frames on the stack, it leaves a
                # reference cycle through them that keeps the first run's tensors alive
                # (and the memory observer's storages live) while the GC is paused.
                import torch._dynamo  # noqa: F401

                self._mode = SessionMode(self._tracker, on_op)
                self._mode.__enter__()  # type: ignore[no-untyped-call]
            target = self._steer_to()
            if target is not None:
                steering = steer(target, "meta")
                self._kernels = steering.__enter__()
                self._steering, self._steered = steering, target
        except BaseException:
            try:
                self._end_steering()
                if self._mode is not None:
                    remove_mode(self._mode)
                _uninstall(installed)
            finally:
                try:
                    self._tracker.uninstall()
                finally:
                    self._release()
            raise

    def _steer_to(self) -> Target | None:
        """The target whose kernels this session's meta tensors follow, or None when
        they are real tensors (which run their own device's kernels)."""
        on = self._tensors_on or model_device_dtype(self.model)[0].type
        target = resolve_target(self._target, on)
        # inside an outer steer context (collect.target), that one steers
        return target if on == "meta" and not steering_active() else None

    def _end_steering(self) -> None:
        steering, self._steering = self._steering, None
        if steering is not None:
            steering.__exit__(None, None, None)

    def _release(self) -> None:
        """Give back the recursion room and the model's claim (both taken at enter)."""
        lower_recursion_limit(self._stack_room)
        taken, self._claim = self._claim, None
        if taken is not None:
            release(taken)

    def _close(self, exc: BaseException | None) -> Profile:
        """Remove the analysis instrumentation and build the session's Profile."""
        assert self._tracker is not None
        failed: Exception | None = None
        wrong_thread = self._thread != threading.get_ident()
        try:
            try:
                self._end_steering()
            finally:
                if self._mode is not None:
                    # Its own mode, wherever it is on the stack: sessions may end in any
                    # order.
                    remove_mode(self._mode)
        finally:
            self._mode = None
            try:
                failed = _uninstall(self.observers)
            finally:
                try:
                    self._tracker.uninstall()
                finally:
                    self._release()
        if wrong_thread:
            raise LayerscopeError(
                "a Profiler must exit in the thread that entered it: its dispatch mode is "
                "on that thread's stack, and the model stays locked to that thread"
            )
        if failed is not None:
            raise failed
        if exc is not None:
            site = self._tracker.site_of(exc)
            if site is not None:
                exc.add_note(f"layerscope: raised in module {_describe(site)}")
            else:
                site = self._tracker.backward_site_of(exc)
                if site is not None:
                    exc.add_note(f"layerscope: raised in the backward of module {_describe(site)}")
        prof = build_profile(
            self._tracker,
            ran=True,
            notices=self._notices,
            observers=self.observers,
            run=self._run,
        )
        steered, kernels, self._steered, self._kernels = self._steered, self._kernels, None, None
        if steered is not None:
            prof.model["target"] = steered.describe()
            if kernels:
                prof.model["kernels"] = kernels.as_dict()
        if self._tracker.foreign_calls:
            prof.notices.append(
                f"{self._tracker.foreign_calls} module calls from threads other than the "
                "profiling one were seen and not counted"
            )
        return prof

    @property
    def tracker(self) -> ScopeTracker:
        if self._tracker is None:
            raise LayerscopeError("the Profiler has not been entered")
        return self._tracker

    @property
    def profile(self) -> Profile:
        """The result: of the whole block once it has exited, or with a schedule of the
        last cycle that ended."""
        if self._profile is None:
            raise LayerscopeError(
                "the profile is available after the `with` block exits"
                if self.schedule is None
                else "no profile yet: no cycle of the schedule has ended (and stop() has "
                "not been called)"
            )
        return self._profile


def as_target(value: str | Target | None) -> Target | None:
    """``target=`` as a Target: a name (``parse_target``) or a Target as it is."""
    return value if value is None or isinstance(value, Target) else parse_target(value)


def resolve_target(target: Target | None, on: str) -> Target | None:
    """The target of a session whose tensors are on ``on``: the one given, else the CPU
    for meta and CPU tensors (None on a GPU, whose own kernels run). A target of another
    device than real tensors' is an ``InvalidInputError``."""
    if target is None:
        return parse_target("cpu") if on in ("meta", "cpu") else None
    if on not in ("meta", target.device_type):
        raise InvalidInputError(
            f"target={target.name!r} makes a meta analysis follow that device's kernels; "
            f"the model's tensors are on {on}, which run {on} kernels (move the model to "
            "meta with ls.to_meta, or leave target out)"
        )
    return target


def profile(
    model: nn.Module,
    inputs: Any = _MISSING,
    /,
    *,
    args: tuple[Any, ...] | list[Any] | None = None,
    kwargs: dict[str, Any] | None = None,
    input_shape: Any = None,
    input_dtype: torch.dtype | str | None = None,
    backward: bool = False,
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    record_shapes: bool = True,
    count_flops: bool = True,
    flop_formulas: Mapping[Any, Formula] | None = None,
    count_bytes: bool = True,
    numerics: NonFiniteMode | Mapping[str, Any] | None = None,
    memory: bool = False,
    timing: bool | Mapping[str, Any] = False,
    observers: Sequence[Observer] = (),
    mode: Mode | None = None,
    target: str | Target | None = None,
) -> Profile:
    """Run ``model`` once under instrumentation and return its Profile.

    Input: one positional value (passed as ``model(inputs)``), ``args``/``kwargs``, or
    ``input_shape`` (random tensors on the model's device and dtype; token ids if the
    model starts with an embedding; ``input_dtype`` a ``torch.dtype`` or a name such as
    ``"float16"``). With no input at all, the profile has structure and parameters only.
    The model is left exactly as found, gradients included. Every option is checked
    before the model is touched (``InvalidInputError``).

    - ``target`` makes an analysis on ``meta`` follow the kernels of the device the
      model will run on: ``"cpu"`` (the default on meta: SDPA's CPU flash kernel,
      oneDNN's LSTM, eval BatchNorm's empty saved statistics), ``"cuda"`` or a GPU name
      (``"h100"``, ``"a100"``, ``"l4"``, ...: the SDPA kernel torch would select there), or
      a ``collect.target.Target``. The kernels chosen go to ``profile.model["kernels"]``
      and the footer (``docs/target.md``). Real tensors on another device than the
      target are an error.
    - ``mode="eval"|"train"`` runs both passes with ``model.eval()``/``model.train()``
      in force and puts every submodule's own flag back afterwards; None (default) runs
      the model as it is. ``profile.model["training"]`` says which mode ran.

    - ``backward=True`` also runs ``loss_fn(output).backward()`` (default loss: the sum
      of every floating output tensor that requires grad) and measures the backward ops.
      The loss and its backward are counted in ``prof.outside``, not in the model.
    - ``flop_formulas`` overrides or adds FLOP formulas for this call, keyed by op
      (``torch.ops.aten.mm`` or ``torch.ops.aten.mm.default``). A formula of the user's
      that raises or returns anything but a ``Cost`` raises ``FlopFormulaError``.
    - ``count_bytes`` (default on) counts the bytes each op reads and writes, per module:
      ``bytes_accessed`` and ``backward_bytes_accessed`` (``docs/roofline.md``).
    - ``memory=True`` measures per module the bytes autograd saves for backward, output
      bytes and peak live bytes (gradient bytes after a backward), and the whole-model
      peaks in ``profile.memory``.
    - ``numerics="record"|"warn"|"raise"`` checks every module's outputs (and, with
      ``backward=True``, gradients) for NaN/Inf, names the first offending module and the
      origin, and records activation statistics; ``"raise"`` stops at the origin with
      ``NonFiniteError``. A mapping instead sets ``NumericsObserver``'s options
      (``nonfinite``, ``stats``, ``grads``, ``underflow``; see ``docs/numerics.md``).
    - ``timing=True`` adds the timing pass, separate from the analysis, on the same
      inputs: per-module forward (and backward) time, whole-model latency and
      throughput. A mapping instead of ``True`` sets its options (``timer``, ``warmup``,
      ``repeats``, ``sync``, ``grad_mode``, ``ops``, ``batch_size``, ``progress``; see
      ``docs/timing.md``). Not on the meta device, where nothing runs to be timed.
    - ``observers`` adds measurements of your own (``layerscope.collect.observer``); an
      exception in one of their methods is raised as ``ObserverError``.

    Calls of the model from other threads meanwhile are not counted; a ``profile`` of a
    model that another thread is profiling waits for it to finish.
    """
    compiled = model if is_compiled(model) else None
    model, notices = unwrap_model(model)
    given = [
        name
        for name, v in (
            ("a positional input", inputs),
            ("args", args),
            ("input_shape", input_shape),
        )
        if v is not _MISSING and v is not None
    ]
    if len(given) > 1:
        raise InvalidInputError(f"give only one of {' / '.join(given)}")
    if input_shape is not None and kwargs:
        raise InvalidInputError("input_shape cannot be combined with kwargs")
    if input_dtype is not None and input_shape is None:
        raise InvalidInputError("input_dtype only applies with input_shape")
    if args is not None and not isinstance(args, tuple | list):
        raise InvalidInputError(f"args must be a tuple or list, got {type(args).__name__}")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise InvalidInputError(f"kwargs must be a dict, got {type(kwargs).__name__}")
    shapes = check_input_shape(input_shape) if input_shape is not None else None
    dtype = check_dtype("input_dtype", input_dtype) if input_dtype is not None else None
    backward = check_bool("backward", backward)
    check_callable("loss_fn", loss_fn, "a callable(output) -> loss tensor")
    if loss_fn is not None and not backward:
        raise InvalidInputError("loss_fn only applies with backward=True")
    run_mode = check_mode(mode)
    timing_options = check_timing(timing, backward=backward, loss_fn=loss_fn)
    on = model_device_dtype(model)[0].type
    given_tensors = iter_tensors((args, kwargs, None if inputs is _MISSING else inputs))
    if on == "cpu" and any(t.is_meta for t in given_tensors):  # a model without tensors
        on = "meta"
    resolve_target(as_target(target), on)
    # Builds the observers, checking their options. Without a backward there are no
    # gradients to check: no tensor hooks for them.
    p = Profiler(
        model,
        record_shapes=record_shapes,
        count_flops=count_flops,
        flop_formulas=flop_formulas,
        count_bytes=count_bytes,
        numerics=check_numerics(numerics, grads=backward),
        memory=memory,
        observers=observers,
        grad_shapes=record_shapes is True and backward,
        target=target,
    )
    p._tensors_on = on

    # One session on a model at a time: another thread's waits here for this one to end.
    with claimed(model):
        will_run = bool(given) or bool(kwargs)
        if not will_run:
            if backward or timing_options is not None:
                raise InvalidInputError("backward=True and timing need an input")
            tree = ModelTree.build(model)
            return build_profile(ScopeTracker(tree), ran=False, notices=notices, observers=())
        if timing_options is not None:
            check_timing_device(model, (args, kwargs, None if inputs is _MISSING else inputs))

        with gc_paused():
            state = ModelState.capture(model)
            try:
                if inputs is not _MISSING:
                    call_args: tuple[Any, ...] = (inputs,)
                elif shapes is not None:
                    call_args = random_inputs(model, shapes, dtype)
                else:
                    call_args = tuple(args or ())
                if backward:
                    state.add_inputs(iter_tensors((call_args, kwargs)))
                try:
                    with in_mode(model, run_mode), p:
                        out = model(*call_args, **(kwargs or {}))
                        if backward:
                            loss = loss_fn(out) if loss_fn is not None else default_loss(out)
                            loss.backward()  # type: ignore[no-untyped-call]
                            del loss
                        # Freed while the GC is still paused: the first collection after it
                        # resumes then has the output's autograd graph out of its way.
                        del out
                except LayerscopeError:
                    raise
                except Exception as e:
                    site = p.tracker.site_of(e)
                    where = f" in module {_describe(site)}" if site is not None else ""
                    if site is None:
                        site = p.tracker.backward_site_of(e)
                        if site is not None:
                            where = f" in the backward of module {_describe(site)}"
                    raise ModelError(
                        f"the model raised {type(e).__name__}{where}: {e}",
                        path=site.path if site is not None else None,
                        module_type=site.type if site is not None else None,
                    ) from e
            finally:
                restore_notices = state.restore()
        prof = p.profile
        prof.notices[:0] = notices  # what unwrapping the model found comes first
        prof.notices.extend(restore_notices)
        if timing_options is not None:
            # The timers' hooks add a frame per level, as the analysis pass's wrappers do.
            with in_mode(model, run_mode), recursion_room(stack_room(p.tracker.tree)):
                time_profile(
                    prof,
                    model,
                    call_args,
                    kwargs or {},
                    backward=backward,
                    loss_fn=loss_fn,
                    **timing_options,
                )
                if compiled is not None:
                    prof.timing["compiled"] = time_compiled(
                        compiled,
                        model,
                        call_args,
                        kwargs or {},
                        TimingOptions(**timing_options, backward=backward, loss_fn=loss_fn),
                    )
        return prof


def numerics_options(
    numerics: NonFiniteMode | Mapping[str, Any] | None, **defaults: Any
) -> dict[str, Any] | None:
    """``numerics=`` as ``NumericsObserver`` keyword arguments over ``defaults``."""
    return check_numerics(numerics, **defaults)


def _call_observer(observer: Observer, name: str, *args: Any) -> None:
    """Call an observer's lifecycle method ``name``; what it raises is an ``ObserverError``."""
    method = getattr(observer, name)
    try:
        method(*args)
    except LayerscopeError:
        raise
    except Exception as e:
        raise observer_error(method, name, e) from e


def _uninstall(observers: Sequence[Observer]) -> Exception | None:
    """Uninstall every observer, last first, even when one fails; the first failure."""
    failed: Exception | None = None
    for observer in reversed(observers):
        try:
            _call_observer(observer, "uninstall")
        except Exception as e:
            failed = failed or e
    return failed


def _describe(node: Node) -> str:
    return f"'{node.path}' ({node.type})" if node.path else f"<root> ({node.type})"


def grad_mode() -> str:
    """The autograd mode in force: "inference_mode", "no_grad" or "enabled"."""
    if torch.is_inference_mode_enabled():
        return "inference_mode"
    return "enabled" if torch.is_grad_enabled() else "no_grad"


def build_profile(
    tracker: ScopeTracker,
    *,
    ran: bool,
    notices: list[str],
    observers: Sequence[Observer],
    run: dict[str, Any] | None = None,
) -> Profile:
    """Order, number and roll up the tree the tracker filled, and wrap it in a Profile."""
    tree = tracker.tree
    notices = list(notices)
    tracker.record_signatures()
    lazy = fill_parameters(tree)  # a notice per lazy tensor, so empty if no module is lazy
    notices.extend(lazy)
    if lazy and ran:
        notices.append("the model has lazy modules that were not initialised by this run")
    # A subtree's place is its earliest call anywhere inside it: a ModuleList is never
    # called itself but goes where its first block ran. Subtrees that never ran keep
    # definition order after those that did.
    # Nodes are hashed by identity. Calls come in order, so the first to reach an
    # ancestor is its earliest.
    first: dict[Node, int] = {}
    parent = tree.parent
    for i, node in enumerate(tracker.called):
        up: Node | None = node
        while up is not None and up not in first:
            first[up] = i
            up = parent[id(up)]
    tree.root.node_id, tree.root.depth = "0", 0
    stack = [tree.root]
    while stack:
        node = stack.pop()
        children = node.children
        if not children:
            continue
        called = sorted((c for c in children if c in first), key=first.__getitem__)
        if len(called) < len(children):
            called += [c for c in children if c not in first]
        node.children = children = called
        prefix = "" if node.node_id == "0" else f"{node.node_id}."
        depth = node.depth + 1
        for i, child in enumerate(children, start=1):
            child.node_id = f"{prefix}{i}"
            child.depth = depth
        stack.extend(children)
    if tracker.extra_signatures:
        for node in tree.root.walk():
            extra = tracker.extra_signatures.get(id(node))
            if extra:
                counts = " and ".join(
                    f"{n} more distinct {kind}" for kind, n in sorted(extra.items())
                )
                notices.append(
                    f"{node.path or '<root>'}: {counts} not kept (the first {MAX_SIGNATURES} "
                    "of each are)"
                )
    prof = Profile(root=tree.root, notices=notices)
    for observer in observers:
        _call_observer(observer, "finish", prof)
    prof.outside = {k: v for k, v in tracker.outside.self_metrics.items() if v}
    attach_regions(prof, tracker)
    prof.rollup()
    device, dtype = model_device_dtype(tree.model)
    prof.model = {
        "name": type(tree.model).__name__,
        "class": f"{type(tree.model).__module__}.{type(tree.model).__qualname__}",
        "ran": ran,
        "training": tree.model.training,
        **(run or {}),
        "device": str(device),
        "dtype": dtype_name(dtype),
    }
    prof.env = environment()
    return prof


def environment() -> dict[str, Any]:
    return {
        "layerscope": __version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cuda": torch.version.cuda,
    }
