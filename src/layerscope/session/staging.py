"""``ls.Profiler(model, stages=...)``: one Profile per stage of any decoding loop
(``docs/generate.md``, "Other decoding loops").

While the Profiler runs, the root module's ``forward`` is replaced on the instance by a
wrapper (an encoder-decoder's encoder's too), put back at the end, also when the block
raises. Each call of the root from the Profiler's thread is named a stage by the rule
(``generation.stages.cache_stage`` by default), then runs once inside an analysis
session of its own (``ls.profile``'s analysis, ``memory=True``): the wrapper calls the
module again under the session, and that inner call, seeing the guard set, runs the
forward that was there before. Its output goes back to the loop. Forward and backward
hooks of the module's own are set aside for the inner call, so that they run once, in
the loop's call, as without the Profiler (global hooks for every module run in both).
Calls of the encoder made outside a call of the root (``generate()`` runs it on its own)
are analysed the same way, in a session on the root, and count as ``"prefill"``.

Each call gives a row as ``ls.profile_generate``'s: stage, tokens in the cache before
it, tokens fed per row, MACs, FLOPs, bytes moved, peak above the call's entry level, the
KV cache's bytes after it (the cache the call was given, or the one its output holds
when it made one). A stage's calls are merged as they come (``analysis.merge``).
"""

from __future__ import annotations

import copy
import importlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import MethodType
from typing import Any

from torch import nn

from layerscope.analysis.merge import merge_profiles
from layerscope.errors import InvalidInputError, LayerscopeError
from layerscope.profile import Profile
from layerscope.session.claims import Claim, claim, release
from layerscope.validate import is_bool, refuse

#: The one plug from the session to the generation wing (``tests/test_layering.py``
#: lists it): the module whose ``Recorder`` records a staged Profiler's calls and makes
#: their ``Generation``, and whose ``default_rule`` is ``stages=True``'s rule. Loaded by
#: name when ``stages=`` is given: the session imports nothing of the generation wing,
#: which imports the session.
RECORDER = "layerscope.generation.recorder"


def _recorder() -> Any:
    return importlib.import_module(RECORDER)


#: A stage rule: the stage's name of one call, from the call's arguments.
Rule = Callable[[tuple[Any, ...], dict[str, Any]], str]
#: Runs one call inside an analysis session: its Profile and its output.
Analyse = Callable[[Callable[[], Any]], tuple[Profile, Any]]

#: A module's own hook tables, which ``nn.Module.__call__`` runs.
_HOOK_TABLES = (
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_backward_pre_hooks",
    "_backward_hooks",
)


def stage_rule(stages: object, model: nn.Module) -> tuple[Rule, str] | None:
    """``stages=``: None when off (False or None), else the rule and its name: True for
    ``cache_stage`` on ``model``, or a callable ``rule(args, kwargs) -> str``."""
    if stages is None or (is_bool(stages) and not stages):
        return None
    if is_bool(stages):
        return _recorder().default_rule(model), "cache_stage"
    if callable(stages):
        return stages, getattr(stages, "__qualname__", None) or repr(stages)
    refuse(
        "stages",
        stages,
        "True (each call's stage read from its cache: prefill, decode, extend or full), "
        "False, or a callable rule(args, kwargs) -> stage name",
    )


def encoder_of(model: nn.Module) -> nn.Module | None:
    """An encoder-decoder's encoder (``get_encoder()``), else None."""
    config = getattr(model, "config", None)
    get = getattr(model, "get_encoder", None)
    if not getattr(config, "is_encoder_decoder", False) or not callable(get):
        return None
    encoder = get()
    return encoder if isinstance(encoder, nn.Module) and encoder is not model else None


def _own_hooks(module: nn.Module) -> dict[str, dict[Any, Any]]:
    """The module's own hooks, table by table (only the tables that hold some)."""
    found = {}
    for name in _HOOK_TABLES:
        table = getattr(module, name, None)
        if table:
            found[name] = dict(table)
    return found


@contextmanager
def _hooks_set_aside(module: nn.Module, hooks: dict[str, dict[Any, Any]]) -> Iterator[None]:
    """Take ``hooks`` out of the module's tables for the block, then put them back after
    whatever was added meanwhile (the session's hooks, removed later, leave the tables
    in their first order)."""
    for name, entries in hooks.items():
        table = getattr(module, name)
        for key in entries:
            table.pop(key, None)
    try:
        yield
    finally:
        for name, entries in hooks.items():
            getattr(module, name).update(entries)


class Staging:
    """The wrappers of one Profiler with stages, and what the calls gave (module doc)."""

    def __init__(self, model: nn.Module, rule: Rule, rule_name: str, analyse: Analyse) -> None:
        self.model, self.rule, self.analyse, self.rule_name = model, rule, analyse, rule_name
        self.encoder = encoder_of(model)
        #: one merged Profile per stage, in the order the stages were first seen
        self.stages: dict[str, Profile] = {}
        #: the calls' rows and cache facts (``RECORDER``)
        self.recorder = _recorder().Recorder(model, self.encoder is not None)
        self._busy = False  # a call is being analysed: the inner call runs the forward
        self._owner: int | None = None
        self._claim: Claim | None = None  # the model's modules, held while installed
        self._wrapped: list[tuple[nn.Module, Any, MethodType, list[Any]]] = []

    # ---- the wrappers ----------------------------------------------------------------
    def install(self) -> None:
        """Hold the model for this thread (one thread at a time profiles a model) and
        wrap the root's forward (and the encoder's), for calls from this thread."""
        taken = claim(self.model, wait=False)
        if taken is None:
            raise LayerscopeError(
                f"the model ({type(self.model).__name__}) or a module of it is being "
                "profiled in another thread; profile it from one thread at a time"
            )
        self._claim, self._owner = taken, threading.get_ident()
        try:
            self._wrap(self.model, root=True)
            if self.encoder is not None:
                self._wrap(self.encoder, root=False)
        except BaseException:
            self.uninstall()
            raise

    def uninstall(self) -> None:
        """Put every module's ``forward`` back as it was found, and let the model go."""
        try:
            for module, previous, method, live in reversed(self._wrapped):
                if module.__dict__.get("forward") is method:
                    if previous is None:
                        del module.__dict__["forward"]
                    else:
                        module.__dict__["forward"] = previous
                live.clear()
            self._wrapped.clear()
        finally:
            taken, self._claim = self._claim, None
            if taken is not None:
                release(taken)

    def _wrap(self, module: nn.Module, *, root: bool) -> None:
        previous = module.__dict__.get("forward")  # a forward of the instance's own
        forward_fn = type(module).forward
        run = previous if previous is not None else MethodType(forward_fn, module)
        # All that ties the wrapper to the Profiler, emptied by uninstall: a copy of the
        # module made meanwhile (``copy.deepcopy`` rebinds the method to the copy) runs
        # its class's forward, and keeps neither the Profiler nor the module alive.
        live: list[Any] = [self, module, run]

        def forward(this: nn.Module, *args: Any, **kwargs: Any) -> Any:
            if not live or this is not live[1]:
                return forward_fn(this, *args, **kwargs)
            staging, module, run = live
            return staging._call(module, run, root, args, kwargs)

        forward.__wrapped__ = forward_fn  # type: ignore[attr-defined]
        method = MethodType(forward, module)
        module.__dict__["forward"] = method
        self._wrapped.append((module, previous, method, live))

    # ---- one call --------------------------------------------------------------------
    def _call(
        self,
        module: nn.Module,
        run: Callable[..., Any],
        root: bool,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """One call from the loop: named, analysed while it runs, recorded."""
        if self._busy or threading.get_ident() != self._owner:
            return run(*args, **kwargs)  # the analysed call itself, or another thread's
        facts = self.recorder.before(args, kwargs, root)
        stage = self._stage(args, kwargs) if root else "prefill"
        hooks = _own_hooks(module)

        def call() -> Any:
            with _hooks_set_aside(module, hooks):
                return module(*args, **kwargs)

        self._busy = True
        try:
            prof, out = self.analyse(call)
        finally:
            self._busy = False
        self._record(stage, facts, prof, out if root else None)
        return out

    def _stage(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        stage = self.rule(args, kwargs)
        if not isinstance(stage, str) or not stage:
            raise InvalidInputError(
                f"the stages rule ({self.rule_name}) must return a stage's name, a "
                f"non-empty string; it returned {stage!r}"
            )
        return stage

    def _record(self, stage: str, facts: Any, prof: Profile, out: Any) -> None:
        self.recorder.after(stage, facts, prof, out)
        before = self.stages.get(stage)
        self.stages[stage] = prof if before is None else merge_profiles([before, prof])

    # ---- the results -----------------------------------------------------------------
    def profile(self) -> Profile | None:
        """Every call together (the stages merged, on copies), None if none ran."""
        if not self.stages:
            return None
        return merge_profiles([copy.deepcopy(p) for p in self.stages.values()])

    @property
    def rows(self) -> list[Any]:
        """One row per call (``RECORDER``'s ``CallRow``s)."""
        rows: list[Any] = self.recorder.rows
        return rows

    def generation(self) -> Any:
        """The calls as a ``Generation`` (``ls.profile_generate``'s result)."""
        return self.recorder.generation(self.stages, self.rule_name)


__all__ = ["RECORDER", "Analyse", "Rule", "Staging", "encoder_of", "stage_rule"]
