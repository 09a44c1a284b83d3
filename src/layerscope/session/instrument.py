"""One analysis session: the analysis instrumentation installed on a model (a scope
tracker, the observers, the dispatch mode, on ``meta`` the steering to a target's
kernels), removed again at close, which builds the session's Profile.

A ``Profiler`` opens one per analysed step (or one for its whole block).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from torch import nn

from layerscope.collect.dispatch import LocalSessionMode, SessionMode, remove_mode
from layerscope.collect.dtensors import local_shards
from layerscope.collect.inputs import model_device_dtype
from layerscope.collect.labels import LabelRegions
from layerscope.collect.observer import Observer
from layerscope.collect.runmode import describe_modes, run_state
from layerscope.collect.scopes import ScopeTracker
from layerscope.collect.target import KernelLog, Target, parse_target, steer, steering_active
from layerscope.collect.tree import ModelTree
from layerscope.errors import InvalidInputError, LayerscopeError
from layerscope.profile import Node, Profile
from layerscope.render.units import plural
from layerscope.session.build import build_profile, call_observer
from layerscope.session.claims import Claim, claim, release
from layerscope.session.stack import lower_recursion_limit, raise_recursion_limit, stack_room


class AnalysisSession:
    """The analysis instrumentation of one span of a model's calls: ``open()`` installs
    it, ``close(exc)`` removes it and returns the span's Profile.

    ``tensors_on`` is where the span's tensors are (None: the model's parameters'
    device); on ``meta`` the session follows ``target``'s kernels.
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        record_shapes: bool,
        observers: Sequence[Observer],
        notices: list[str],
        target: Target | None,
        tensors_on: str | None,
        local_dtensors: bool = False,
    ) -> None:
        self.model = model
        self.record_shapes = record_shapes
        self.observers = observers
        self.notices = notices
        self.target = target
        self.tensors_on = tensors_on
        #: whether the model trains, the autograd mode and autocast: at open, then as
        #: the root's first call found them
        self.run: dict[str, Any] = {}
        #: the root's calls' modes, each one that differs from the one before
        self._modes: list[dict[str, Any]] = []
        self._device_type = "cpu"
        self._tracker: ScopeTracker | None = None
        self._mode: SessionMode | None = None
        self._claim: Claim | None = None  # the model's modules, held while open
        self._thread: int | None = None
        self._stack_room = 0
        #: the steering of a session on meta, and the kernels it chose
        self._steering: AbstractContextManager[KernelLog] | None = None
        self._steered: Target | None = None
        self._kernels: KernelLog | None = None
        #: ops on DTensors observed as this rank's local work (``collect.dtensors``)
        self._shards: AbstractContextManager[None] | None = (
            local_shards() if local_dtensors else None
        )

    @property
    def tracker(self) -> ScopeTracker:
        """The session's scope tracker (its tree and the calls it saw)."""
        if self._tracker is None:
            raise LayerscopeError("the analysis session has not been opened")
        return self._tracker

    def open(self) -> None:
        """Install the analysis instrumentation (a fresh tracker and the observers)."""
        taken = claim(self.model, wait=False)
        if taken is None:
            raise LayerscopeError(
                f"the model ({type(self.model).__name__}) or a module of it is being "
                "profiled in another thread; profile it from one thread at a time "
                "(ls.profile waits its turn)"
            )
        try:
            tree = ModelTree.build(self.model)
            self._device_type = model_device_dtype(self.model)[0].type
            self.run, self._modes = run_state(self.model, self._device_type), []
            self._tracker = ScopeTracker(tree, self.record_shapes, self.observers)
            self._tracker.on_root_call = self._root_called
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
        self._install(self._tracker)

    def _install(self, tracker: ScopeTracker) -> None:
        """Install the observers, the dispatch mode and the steering, or nothing at all."""
        installed: list[Observer] = []
        try:
            for observer in self.observers:
                call_observer(observer, "install", tracker)
                installed.append(observer)
            on_op = [o.on_op for o in self.observers if o.overrides("on_op")]
            if on_op:
                # torch imports torch._dynamo lazily at the first __torch_dispatch__ call;
                # imported there, with the model's frames on the stack, it leaves a
                # reference cycle through them that keeps the first run's tensors alive
                # (and the memory observer's storages live) while the GC is paused.
                import torch._dynamo  # noqa: F401

                mode = SessionMode if self._shards is None else LocalSessionMode
                self._mode = mode(tracker, on_op, LabelRegions(tracker).on_label_op)
                if self._shards is not None:
                    self._shards.__enter__()
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
                    self._end_shards()
                _uninstall(installed)
            finally:
                try:
                    tracker.uninstall()
                finally:
                    self._release()
            raise

    def _steer_to(self) -> Target | None:
        """The target whose kernels this session's meta tensors follow, or None when
        they are real tensors (which run their own device's kernels)."""
        on = self.tensors_on or model_device_dtype(self.model)[0].type
        target = resolve_target(self.target, on)
        # inside an outer steer context (collect.target), that one steers
        return target if on == "meta" and not steering_active() else None

    def _end_shards(self) -> None:
        shards, self._shards = self._shards, None
        if shards is not None:
            shards.__exit__(None, None, None)

    def _end_steering(self) -> None:
        steering, self._steering = self._steering, None
        if steering is not None:
            steering.__exit__(None, None, None)

    def _release(self) -> None:
        """Give back the recursion room and the model's claim (both taken at open)."""
        lower_recursion_limit(self._stack_room)
        taken, self._claim = self._claim, None
        if taken is not None:
            release(taken)

    def close(self, exc: BaseException | None) -> Profile:
        """Remove the analysis instrumentation and build the session's Profile; ``exc``,
        what the span raised, gets a note naming the module it was raised in."""
        if self._thread != threading.get_ident():  # (the Profiler refuses this first)
            raise LayerscopeError(
                "an analysis session must close in the thread that opened it: its dispatch "
                "mode is on that thread's stack; nothing was changed"
            )
        tracker = self.tracker
        failed: Exception | None = None
        try:
            try:
                self._end_steering()
            finally:
                if self._mode is not None:
                    # Its own mode, wherever it is on the stack: sessions may end in any
                    # order.
                    remove_mode(self._mode)
                    self._end_shards()
        finally:
            self._mode = None
            try:
                failed = _uninstall(self.observers)
            finally:
                try:
                    tracker.uninstall()
                finally:
                    self._release()
        if failed is not None:
            tracker.keep_site_of(None)
            raise failed
        if exc is not None:
            site, where = raised_where(tracker, exc)
            if site is not None:
                exc.add_note(f"layerscope: raised{where}")
        tracker.keep_site_of(exc)  # the others were caught on their way: not held
        return self._build(tracker)

    def _root_called(self, model: nn.Module) -> None:
        state = run_state(model, self._device_type)
        if not self._modes or self._modes[-1] != state:
            self._modes.append(state)

    def _build(self, tracker: ScopeTracker) -> Profile:
        """The session's Profile, with the kernels a steered session chose."""
        if self._modes:
            self.run = self._modes[0]
        prof = build_profile(
            tracker, ran=True, notices=self.notices, observers=self.observers, run=self.run
        )
        if len(self._modes) > 1:
            prof.notices.append(describe_modes(self._modes))
        steered, kernels, self._steered, self._kernels = self._steered, self._kernels, None, None
        if steered is not None:
            prof.model["target"] = steered.describe()
            if kernels:
                prof.model["kernels"] = kernels.as_dict()
                notice = kernels.version_notice()
                if notice is not None:
                    prof.notices.append(notice)
        if tracker.foreign_calls:
            n = tracker.foreign_calls
            calls = plural(n, "module call")
            prof.notices.append(
                f"{calls} from threads other than the profiling one "
                f"{'was' if n == 1 else 'were'} seen and not counted"
            )
        return prof


def raised_where(tracker: ScopeTracker, exc: BaseException) -> tuple[Node | None, str]:
    """The module ``exc`` was raised in (in its forward, else in its backward), and the
    words that say so (" in module 'a' (Linear)"); (None, "") if in none."""
    site = tracker.site_of(exc)
    if site is not None:
        return site, f" in module {_describe(site)}"
    site = tracker.backward_site_of(exc)
    if site is not None:
        return site, f" in the backward of module {_describe(site)}"
    return None, ""


def _describe(node: Node) -> str:
    return f"'{node.path}' ({node.type})" if node.path else f"<root> ({node.type})"


def _uninstall(observers: Sequence[Observer]) -> Exception | None:
    """Uninstall every observer, last first, even when one fails; the first failure."""
    failed: Exception | None = None
    for observer in reversed(observers):
        try:
            call_observer(observer, "uninstall")
        except Exception as e:
            failed = failed or e
    return failed


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


__all__ = ["AnalysisSession", "as_target", "raised_where", "resolve_target"]
