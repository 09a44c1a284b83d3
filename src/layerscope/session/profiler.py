"""``Profiler``: the ``with`` block (or ``start()``/``stop()``) around any user code, and
the state machine of a user's loop (``step()``, schedules, cycles, timed steps).

Each analysed span is one ``AnalysisSession`` (``session/instrument.py``); a cycle's
analysed steps are merged (``analysis.merge``); timed steps use the loop timers
(``collect.timing.loop``).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from types import TracebackType
from typing import TYPE_CHECKING, Any

from torch import nn
from torch.optim import Optimizer

from layerscope.analysis.merge import merge_profiles
from layerscope.collect.common import unwrap_model
from layerscope.collect.grads import GradShapes
from layerscope.collect.hfmeta import masks_note, meta_values
from layerscope.collect.observer import Observer
from layerscope.collect.runmode import grad_mode
from layerscope.collect.scopes import ScopeTracker
from layerscope.collect.target import Target
from layerscope.collect.timing import LoopTimer
from layerscope.collect.tree import ModelTree
from layerscope.errors import InvalidInputError, LayerscopeError
from layerscope.gcpause import gc_paused
from layerscope.metrics.bytes import ByteCounter
from layerscope.metrics.comm import comm_observers
from layerscope.metrics.flop_counter import FlopCounter
from layerscope.metrics.flops import Formula
from layerscope.metrics.memory import MemoryObserver
from layerscope.metrics.memory.baseline import OptimizerWatch
from layerscope.metrics.numerics import NonFiniteMode, NumericsObserver
from layerscope.profile import Profile
from layerscope.session.build import build_profile
from layerscope.session.instrument import AnalysisSession, as_target
from layerscope.session.options import (
    check_callable,
    check_optimizer,
    check_session,
    check_timing,
    check_timing_device,
)
from layerscope.session.schedule import IDLE, Action, Schedule
from layerscope.session.stack import frames_for_depth, lower_recursion_limit, raise_recursion_limit
from layerscope.session.staging import Rule, Staging, stage_rule
from layerscope.session.stepfacts import Step, StepFacts, loop_facts
from layerscope.validate import check_bool

if TYPE_CHECKING:
    from layerscope.generation.result import Generation


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
    on one model nest, and may end in any order. ``step()``, ``stop()`` and the exit of
    the block belong to the thread that started it: from another thread they raise and
    change nothing, so that the starting thread can still stop it.

    On a ``meta`` model, analysed steps follow the kernels of ``target`` (default
    ``"cpu"``; ``"h100"``, ``"a100"``, ... as in ``ls.profile``).

    ``grad_shapes`` (default: as ``record_shapes``) records the shapes of the gradients
    that reach each module's inputs and outputs in a backward pass inside the block
    (``Node.grad_inputs``/``grad_outputs``).

    ``optimizer`` (one or a list): the optimizers whose states ``memory=True`` counts in
    ``profile.memory["baseline"]``; an optimizer that steps while the Profiler runs is
    found without it. ``profile.model["loop"]`` says whether their states existed when
    the analysed steps began, and whether DDP rebuilt its buckets in them.

    ``stages=True`` (or a callable ``rule(args, kwargs) -> stage name``) measures a
    decoding loop per stage: each call of the model is analysed on its own (as
    ``ls.profile(..., memory=True)`` would) while it runs once for the loop, and named a
    stage by the rule (``layerscope.generation.stages.cache_stage`` by default:
    ``prefill``, ``decode``, ``extend`` or ``full``). After the block ``p.stages`` holds
    one merged Profile per stage, ``p.calls`` a row per call, ``p.generation`` a
    ``Generation`` as ``ls.profile_generate`` gives, and ``p.profile`` every call
    together. Not with ``timing`` or ``schedule``. See ``docs/generate.md``.

    ``dtensor="local"`` observes ops on DTensors as this rank runs them (its local ops
    and DTensor's collectives), as ``ls.profile``'s.
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
        optimizer: Optimizer | Sequence[Optimizer] | None = None,
        stages: bool | Rule = False,
        dtensor: str = "logical",
    ) -> None:
        self._watch = OptimizerWatch(check_optimizer(optimizer))
        self._facts = StepFacts(model, self._watch)
        self.model, self._notices = unwrap_model(model)
        self._target = as_target(target)
        rule = stage_rule(stages, self.model)
        self._options = check_session(
            record_shapes=record_shapes,
            count_flops=count_flops,
            flop_formulas=flop_formulas,
            count_bytes=count_bytes,
            numerics=numerics,
            memory=memory,
            observers=observers,
            dtensor=dtensor,
        )
        if rule is not None:  # every call as ls.profile(..., memory=True) analyses it
            self._options = dataclasses.replace(self._options, memory=True)
        self.record_shapes = self._options.record_shapes
        self._grad_shapes = (
            self._options.record_shapes and rule is None
            if grad_shapes is None
            else check_bool("grad_shapes", grad_shapes)
        )
        self.observers: list[Observer] = self._make_observers()
        self._timing = check_timing(timing, loop=True)
        if schedule is not None and not isinstance(schedule, Schedule):
            raise InvalidInputError(
                f"schedule must be ls.schedule(wait=, warmup=, active=, repeat=) or None, "
                f"got {schedule!r}"
            )
        self.schedule = schedule
        if rule is not None and (self._timing is not None or schedule is not None):
            raise InvalidInputError(
                "stages= analyses every call of the model and cannot be combined with "
                + (
                    "timing= (time a generation with ls.profile_generate(..., timing=True))"
                    if self._timing is not None
                    else "schedule= (each call is its own analysed step)"
                )
            )
        #: the stages of a decoding loop (``stages=``), None without them
        self._staging = None if rule is None else Staging(self.model, *rule, self._analysed)
        self._generation: Generation | None = None
        check_callable("on_ready", on_ready, "a callable(profile)")
        self.on_ready = on_ready
        self._session: AnalysisSession | None = None  # the last analysis session opened
        #: the open step's ``meta_values`` and the attention masks it answered
        self._values = ExitStack()
        self._masks: list[str] = []
        self._profile: Profile | None = None
        self._run: dict[str, Any] = {}
        # the loop: "new" -> "running" (start) -> "stopped" (stop)
        self._state = "new"
        self._owner: int | None = None  # the thread that started it
        self._step = 0  # the current step, counted from start()
        self._action = Action.DONE  # what the current step does
        self._sessions = 0  # analysis sessions opened so far
        self._cycle: list[Profile] = []  # this cycle's analysed steps' profiles
        self._cycle_facts: list[Step] = []  # and which steps they were
        self._cycle_steps: list[int] = []  # the steps measured in this cycle
        self._cycles = 0  # profiles built so far
        self._timer: LoopTimer | None = None
        self._timer_room = 0
        #: where the session's tensors are (``profiler_for_run`` sets it: a model without
        #: tensors can run on meta inputs); None: the model's parameters' device
        self._tensors_on: str | None = None

    def _make_observers(self) -> list[Observer]:
        """The session's observers: fresh built-in ones, then the user's own."""
        options = self._options
        observers: list[Observer] = []
        if options.count_flops:
            observers.append(FlopCounter(options.flop_formulas))
        if options.count_bytes:
            observers.append(ByteCounter())
        if options.memory:
            observers.append(MemoryObserver(optimizers=self._watch, ddp=self._facts.ddp))
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
        self._stop(exc, "__exit__()")

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
            self._timer_room = frames_for_depth(self._timer.depth)
        self._run = {"training": self.model.training, "grad_mode": grad_mode()}
        self._owner = threading.get_ident()
        self._step = 0
        self._watch.start()
        try:
            if self._staging is not None:
                self._staging.install()  # the model held for the block, its forward wrapped
            else:
                self._begin_step()
        except BaseException:
            self._watch.stop()
            raise
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
        self._in_owner_thread("step()")
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
        self._stop(None, "stop()")

    def _stop(self, exc: BaseException | None, call: str) -> None:
        if self._state != "running":
            raise LayerscopeError(
                "stop() before start(): the Profiler has not started"
                if self._state == "new"
                else "the Profiler has already stopped"
            )
        self._in_owner_thread(call)
        self._state = "stopped"
        try:
            self._end_step(exc, at_stop=True)
        finally:
            try:
                if self._staging is not None:
                    self._staging.uninstall()
            finally:
                self._watch.stop()
        ready = self._finish_cycle() if self._staging is None else self._staged_profile()
        if ready is not None and self.on_ready is not None and exc is None:
            self.on_ready(ready)

    def _in_owner_thread(self, call: str) -> None:
        """Refuse ``call`` from a thread other than the one that started the Profiler,
        before it changes anything: the dispatch mode is on that thread's stack and the
        hooks and claims are that thread's, so only that thread can take them off."""
        if threading.get_ident() != self._owner:
            raise LayerscopeError(
                f"{call} must be called in the thread that started the Profiler (its "
                "instrumentation belongs to that thread); nothing was changed: call it there"
            )

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
            session = self._session
            assert session is not None
            facts = self._facts.end()
            try:
                prof = session.close(exc)
            finally:
                self._values.close()
            prof.notices.extend(masks_note(self._masks))
            tracker = session.tracker
            # the step a loop begins after its last step() and never runs is not one
            if not at_stop or tracker.called or self.schedule is None:
                self._cycle.append(prof)
                self._cycle_facts.append(facts)
                self._cycle_steps.append(self._step)
        elif action is Action.TIME:
            timer = self._timer
            assert timer is not None
            if exc is not None:
                timer.index.add_note(exc)
            try:
                if timer.end():
                    self._cycle_steps.append(self._step)
            finally:
                lower_recursion_limit(self._timer_room)

    def _finish_cycle(self) -> Profile | None:
        """The profile of the cycle that just ended, or None if it measured nothing."""
        profiles, self._cycle = self._cycle, []
        facts, self._cycle_facts = self._cycle_facts, []
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
            unused = [
                n
                for n, on in (
                    ("memory", self._options.memory),
                    ("numerics", self._options.numerics is not None),
                )
                if on
            ]
            prof.notices.append(
                "timed only: FLOPs, memory, numerics and shapes need an analysed step"
                + (f" ({' and '.join(f'{n}=' for n in unused)} not used)" if unused else "")
                + ", and the analysis instrumentation would be in the times; give a schedule "
                "(ls.schedule(active=2) or more) to analyse the first active step of each "
                "cycle and time the others"
            )
        if timer is not None:
            if timed:
                timer.apply(prof)
                if not profiles:
                    timer.set_calls(prof)
            else:
                active = getattr(self.schedule, "active", None)
                why = (
                    "time needs active >= 2"
                    if not isinstance(active, int) or active < 2
                    else "the loop ended before a step after the analysed one ran"
                )
                prof.notices.append(
                    "no step was timed: with timing the first active step of a cycle is "
                    f"analysed and the others are timed, so {why}"
                )
            timer.reset()
        keys, notices = loop_facts(facts)
        prof.notices.extend(n for n in notices if n not in prof.notices)
        if self.schedule is not None or timer is not None or self._step > 0:
            prof.model["loop"] = {**self._loop_info(steps, len(profiles), timed), **keys}
        self._cycles += 1
        self._profile = prof
        return prof

    def _loop_info(self, steps: list[int], analysed: int, timed: int) -> dict[str, Any]:
        """``profile.model["loop"]``: which steps of the loop the cycle's profile holds."""
        sched = self.schedule
        loop: dict[str, Any] = {
            "cycle": self._cycles,
            "steps": len(steps),
            "analysed_steps": analysed,
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
            loop["analysed_steps"] = 1 if analysed else 0
            loop["steps"] = len(steps) if timed else max(self._step, 1)
            if not timed:
                loop["first_step"], loop["last_step"] = 0, loop["steps"] - 1
        return loop

    # ---- one analysis session --------------------------------------------------------
    def _new_session(self) -> AnalysisSession:
        """A fresh analysis session on the model (fresh observers after the first)."""
        if self._sessions:
            self.observers = self._make_observers()
        self._sessions += 1
        return AnalysisSession(
            self.model,
            record_shapes=self.record_shapes,
            observers=self.observers,
            notices=self._notices,
            target=self._target,
            tensors_on=self._tensors_on,
            local_dtensors=self._options.dtensor == "local",
        )

    def _open(self) -> None:
        """Install the analysis instrumentation (a fresh tracker and observers)."""
        session = self._new_session()
        self._facts.begin(self.model)
        values = ExitStack()  # transformers' value checks, answered on meta for the step
        self._masks = values.enter_context(meta_values())
        try:
            session.open()
        except BaseException:
            values.close()
            self._facts.end()
            raise
        self._session, self._run, self._values = session, session.run, values

    # ---- stages: each call of the model analysed on its own -----------------------------
    def _analysed(self, call: Callable[[], Any]) -> tuple[Profile, Any]:
        """Run ``call`` (one call of the model) inside an analysis session of its own, as
        ``ls.profile`` analyses a call: its Profile and what it returned. What the call
        raises gets a note naming the module, and goes on to the loop."""
        session = self._new_session()
        self._session = session
        with gc_paused(), meta_values() as masks:
            session.open()
            try:
                out = call()
            except BaseException as e:
                session.close(e)
                raise
            prof = session.close(None)
        prof.notices.extend(masks_note(masks))
        return prof, out

    def _staged_profile(self) -> Profile:
        """Every call of the block together (a Profile of the structure alone when none
        ran)."""
        assert self._staging is not None
        prof = self._staging.profile()
        if prof is None:
            tree = ModelTree.build(self.model)
            prof = build_profile(ScopeTracker(tree), ran=False, notices=self._notices, observers=())
            prof.notices.append("stages: the model was not called in the block")
        self._profile = prof
        return prof

    def _staged(self, what: str) -> Staging:
        if self._staging is None:
            raise LayerscopeError(f"p.{what} needs a Profiler with stages (stages=True or a rule)")
        if self._state != "stopped":
            raise LayerscopeError(f"p.{what} is available after the `with` block exits")
        return self._staging

    @property
    def stages(self) -> dict[str, Profile]:
        """One Profile per stage (its calls merged), in the order first seen."""
        return self._staged("stages").stages

    @property
    def calls(self) -> list[Any]:
        """One ``CallRow`` per call of the model: stage, cache tokens before, tokens fed per row,
        MACs, FLOPs, bytes moved, peak above the call's entry level, KV bytes after."""
        return self._staged("calls").rows

    @property
    def generation(self) -> Generation:
        """The calls as a ``Generation`` (``ls.profile_generate``'s result)."""
        if self._generation is None:
            self._generation = self._staged("generation").generation()
        return self._generation

    @property
    def tracker(self) -> ScopeTracker:
        if self._session is None:
            raise LayerscopeError("the Profiler has not been entered")
        return self._session.tracker

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


def profiler_for_run(model: nn.Module, tensors_on: str, **options: Any) -> Profiler:
    """A ``Profiler`` for one run of ``ls.profile`` whose tensors are on ``tensors_on``
    (a model without tensors run on meta inputs is analysed as a meta model)."""
    p = Profiler(model, **options)
    p._tensors_on = tensors_on
    return p


__all__ = ["Profiler", "profiler_for_run"]
