"""``ls.profile``: run a model once under instrumentation and return its Profile.

It checks every option first, runs the model inside a ``Profiler`` (the analysis pass)
with everything the run could change captured and put back (RNG, buffers, flags), then
the timing pass when asked.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer

from layerscope.collect.common import default_loss, in_mode, is_compiled, unwrap_model
from layerscope.collect.hfmeta import masks_note, meta_values
from layerscope.collect.inputs import model_device_dtype, random_inputs
from layerscope.collect.observer import Observer
from layerscope.collect.scopes import ScopeTracker
from layerscope.collect.signature import iter_tensors
from layerscope.collect.state import ModelState
from layerscope.collect.target import Target
from layerscope.collect.timing import TimingOptions, measure, region_paths, time_compiled
from layerscope.collect.timing.context import stateful_copy
from layerscope.collect.tree import ModelTree
from layerscope.errors import InvalidInputError, LayerscopeError, ModelError
from layerscope.gcpause import gc_paused
from layerscope.metrics.flops import Formula
from layerscope.metrics.numerics import NonFiniteMode
from layerscope.profile import Profile
from layerscope.session.build import build_profile
from layerscope.session.claims import claimed
from layerscope.session.instrument import as_target, raised_where, resolve_target
from layerscope.session.options import (
    Mode,
    check_callable,
    check_dtype,
    check_input_shape,
    check_mode,
    check_numerics,
    check_timing,
    check_timing_device,
)
from layerscope.session.profiler import Profiler, profiler_for_run
from layerscope.session.stack import recursion_room, stack_room
from layerscope.validate import check_bool

_MISSING: Any = object()


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
    optimizer: Optimizer | Sequence[Optimizer] | None = None,
    dtensor: str = "logical",
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
    - ``optimizer`` (one or a list): with ``memory=True``, their states for the model's
      parameters count in ``profile.memory["baseline"]`` (the bytes live before the run).
    - ``observers`` adds measurements of your own (``layerscope.collect.observer``); an
      exception in one of their methods is raised as ``ObserverError``.
    - ``dtensor="local"`` observes ops on DTensors (tensor parallelism) as this rank runs
      them: its local ops, at its shards' shapes, and the collectives DTensor issues to
      redistribute; ``"logical"`` (default) each op once, at the logical shapes
      (``docs/distributed.md``).

    Calls of the model from other threads meanwhile are not counted; a ``profile`` of a
    model that another thread is profiling waits for it to finish.
    """
    compiled = model if is_compiled(model) else None
    model, notices = unwrap_model(model)
    given = _RunInputs.check(inputs, args, kwargs, input_shape, input_dtype)
    backward = check_bool("backward", backward)
    check_callable("loss_fn", loss_fn, "a callable(output) -> loss tensor")
    if loss_fn is not None and not backward:
        raise InvalidInputError("loss_fn only applies with backward=True")
    run = _Run(model, check_mode(mode), backward, loss_fn)
    timing_options = check_timing(timing, backward=backward, loss_fn=loss_fn)
    on = model_device_dtype(model)[0].type
    if on == "cpu" and any(t.is_meta for t in iter_tensors(given.values)):
        on = "meta"  # a model without tensors
    resolve_target(as_target(target), on)
    # Builds the observers, checking their options. Without a backward there are no
    # gradients to check: no tensor hooks for them.
    p = profiler_for_run(
        model,
        on,
        record_shapes=record_shapes,
        count_flops=count_flops,
        flop_formulas=flop_formulas,
        count_bytes=count_bytes,
        numerics=check_numerics(numerics, grads=backward),
        memory=memory,
        observers=observers,
        grad_shapes=record_shapes is True and backward,
        target=target,
        optimizer=optimizer,
        dtensor=dtensor,
    )
    # One session on a model at a time: another thread's waits here for this one to end.
    with claimed(model):
        if not given.will_run:
            if backward or timing_options is not None:
                raise InvalidInputError("backward=True and timing need an input")
            tree = ModelTree.build(model)
            return build_profile(ScopeTracker(tree), ran=False, notices=notices, observers=())
        template = _timing_inputs(model, given, timing_options)
        with meta_values() as masks:  # transformers' value checks, answered on meta
            prof, call_args = run.analyse(p, given)
        prof.notices.extend(masks_note(masks))
        # what unwrapping found first (the analysis may have found compiled submodules too)
        prof.notices[:0] = [n for n in notices if n not in prof.notices]
        if timing_options is not None:
            run.time(prof, compiled, call_args, given.kwargs or {}, timing_options, p.tracker.tree,
                     template)  # fmt: skip
        return prof


def _timing_inputs(
    model: nn.Module, given: _RunInputs, options: TimingOptions | None
) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """Before the analysis, with a timing pass: its device checked, and the inputs as
    given copied for every timed run when they hold objects a call may change (the
    analysis may change a cache: ``collect.timing.context.stateful_copy``)."""
    if options is None:
        return None
    check_timing_device(model, given.values)
    return stateful_copy(given.args or (), given.kwargs or {})


class _Released(threading.local):
    on = False


_released = _Released()


@contextmanager
def output_released() -> Iterator[None]:
    """Inside, an analysis with a backward drops the model's output once the loss is
    made, before the backward, as a training loop does (``loss_fn(model(x)).backward()``,
    torchtitan's ``del pred``): what the loss and the model saved stay, the logits go.
    Outside, the output is held until the backward ends (``out = model(x)``, then
    ``loss_fn(out).backward()``): ``ls.profile``'s figures. A plan's analysis runs in it."""
    before, _released.on = _released.on, True
    try:
        yield
    finally:
        _released.on = before


@dataclass(frozen=True)
class _RunInputs:
    """The inputs of one run, checked: a positional value, ``args``/``kwargs``, or shapes
    (``input_shape``, ``input_dtype``) to draw random ones from."""

    value: Any
    args: tuple[Any, ...] | list[Any] | None
    kwargs: dict[str, Any] | None
    shapes: list[tuple[int, ...]] | None
    dtype: torch.dtype | None
    #: whether any input was given (a model with none is only described, not run)
    will_run: bool

    @classmethod
    def check(
        cls, value: Any, args: Any, kwargs: Any, input_shape: Any, input_dtype: Any
    ) -> _RunInputs:
        """The inputs as given, refused when they conflict or are of the wrong kind."""
        given = [
            name
            for name, v in (
                ("a positional input", value),
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
        return cls(
            value=value,
            args=args,
            kwargs=kwargs,
            shapes=check_input_shape(input_shape) if input_shape is not None else None,
            dtype=check_dtype("input_dtype", input_dtype) if input_dtype is not None else None,
            will_run=bool(given) or bool(kwargs),
        )

    @property
    def values(self) -> tuple[Any, ...]:
        """Every input value given (for the tensors in them)."""
        return (self.args, self.kwargs, None if self.value is _MISSING else self.value)

    def call_args(self, model: nn.Module) -> tuple[Any, ...]:
        """The positional arguments of the call (random inputs drawn now, from shapes)."""
        if self.value is not _MISSING:
            return (self.value,)
        if self.shapes is not None:
            return random_inputs(model, self.shapes, self.dtype)
        return tuple(self.args or ())


@dataclass(frozen=True)
class _Run:
    """How ``ls.profile`` runs the model: in which mode, with which backward."""

    model: nn.Module
    mode: Mode | None
    backward: bool
    loss_fn: Callable[[Any], torch.Tensor] | None

    def analyse(self, p: Profiler, given: _RunInputs) -> tuple[Profile, tuple[Any, ...]]:
        """The analysis pass: one call of the model (and its backward) inside ``p``, with
        the model's state captured before and put back after; the Profile and the
        positional arguments the model ran with."""
        model = self.model
        with gc_paused():
            state = ModelState.capture(model)
            try:
                call_args = given.call_args(model)  # random inputs: the RNG is put back
                if self.backward:
                    state.add_inputs(iter_tensors((call_args, given.kwargs)))
                self._call(p, call_args, given.kwargs or {})
            finally:
                restore_notices = state.restore()
        prof = p.profile
        prof.notices.extend(restore_notices)
        return prof, call_args

    def _call(self, p: Profiler, call_args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Run the model once in ``p``; what it raises is a ``ModelError`` naming where."""
        try:
            with in_mode(self.model, self.mode), p:
                out = self.model(*call_args, **kwargs)
                if self.backward:
                    loss = self._loss(out)
                    if _released.on:  # a training loop's: the output gone, the loss kept
                        out = None
                    loss.backward()  # type: ignore[no-untyped-call]
                    del loss
                # Freed while the GC is still paused: the first collection after it
                # resumes then has the output's autograd graph out of its way.
                del out
        except LayerscopeError:
            raise
        except Exception as e:
            site, where = raised_where(p.tracker, e)
            raise ModelError(
                f"the model raised {type(e).__name__}{where}: {e}",
                path=site.path if site is not None else None,
                module_type=site.type if site is not None else None,
            ) from e

    def _loss(self, out: Any) -> torch.Tensor:
        """The loss the backward starts from: ``loss_fn(out)``, which must be a tensor of
        one element (what it raises is a ``ModelError`` that names it), or the default."""
        if self.loss_fn is None:
            return default_loss(out)
        try:
            loss: Any = self.loss_fn(out)
        except LayerscopeError:
            raise
        except Exception as e:
            raise ModelError(f"loss_fn raised {type(e).__name__}: {e}") from e
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            got = (
                f"shape {list(loss.shape)}"
                if isinstance(loss, torch.Tensor)
                else "None"
                if loss is None
                else f"a {type(loss).__name__}"
            )
            raise InvalidInputError(
                f"loss_fn must return the loss, a tensor of one element; it returned {got}"
            )
        return loss

    def time(
        self,
        prof: Profile,
        compiled: nn.Module | None,
        call_args: tuple[Any, ...],
        kwargs: dict[str, Any],
        options: TimingOptions,
        tree: ModelTree,
        template: tuple[tuple[Any, ...], dict[str, Any]] | None = None,
    ) -> None:
        """The timing pass on the same inputs (each run on a fresh copy of ``template``,
        the inputs as given, when they hold objects a call may change), written into
        ``prof`` (and the compiled model's whole-run time, when ``ls.profile`` was given
        one)."""
        # The timers' hooks add a frame per level, as the analysis pass's wrappers do.
        with in_mode(self.model, self.mode), recursion_room(stack_room(tree)):
            paths = region_paths(prof)
            measure(
                self.model, call_args, dict(kwargs), options, region_paths=paths,
                template=template,
            ).apply(prof)  # fmt: skip
            if compiled is not None:
                prof.timing["compiled"] = time_compiled(
                    compiled, self.model, call_args, kwargs, options, template
                )


__all__ = ["profile"]
