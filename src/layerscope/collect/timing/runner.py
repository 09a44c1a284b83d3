"""The timing pass itself: ``time_profile`` and ``measure`` (calibrate, warm up, dispatch
to a timer backend, restore the model), and the default ``hooks`` timer's runs.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch import Tensor, nn

from layerscope.collect.common import unwrap_model
from layerscope.collect.inputs import model_device_dtype
from layerscope.collect.scopes import REGION
from layerscope.collect.signature import iter_tensors
from layerscope.collect.state import ModelState
from layerscope.collect.timing.backward import BackwardTimer, grad_steps, replay_backward_log
from layerscope.collect.timing.calibrate import (
    calibrate_backward,
    calibrate_clock,
    calibrate_forward,
)
from layerscope.collect.timing.context import PassContext, stateful_copy
from layerscope.collect.timing.forward import ForwardHooks, region_times, replay_forward
from layerscope.collect.timing.index import ModuleIndex
from layerscope.collect.timing.options import Clock, GradMode, Timer, TimingOptions
from layerscope.collect.timing.progress import Progress
from layerscope.collect.timing.result import TimingResult, _module_nodes, add_repeat
from layerscope.collect.timing.spans import (
    RepeatSpans,
    build_trace,
    forward_spans,
    logged_backward,
)
from layerscope.errors import InvalidInputError, LayerscopeError
from layerscope.gcpause import gc_paused
from layerscope.profile import Profile


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
    result = measure(
        model, tuple(args), dict(kwargs or {}), options, region_paths=region_paths(profile)
    )
    result.apply(profile)
    return result


def region_paths(profile: Profile) -> frozenset[str]:
    """The paths of the profile's region nodes (inside the model)."""
    return frozenset(n.path for n in profile.root.walk() if n.type == REGION)


def measure(
    model: nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    options: TimingOptions,
    *,
    region_paths: frozenset[str] = frozenset(),
    template: tuple[tuple[Any, ...], dict[str, Any]] | None = None,
) -> TimingResult:
    """Run the whole timing pass (calibration, bare latency runs, instrumented runs);
    ``region_paths``: those of the analysed profile's regions (``collect.labels``);
    ``template``: the inputs as given before any run (``stateful_copy``), copied for
    each run (default: copied now)."""

    model, notices = unwrap_model(model)
    index = ModuleIndex.build(model)
    device = _input_device(args, kwargs, model)
    ctx = PassContext(model, args, kwargs, options, index, device)
    ctx.region_paths = region_paths
    ctx.template = template if template is not None else stateful_copy(args, kwargs)
    versions = [(t, t._version) for t in iter_tensors((args, kwargs))]
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
    instrumented = options.repeats + (1 if options.warmup > 0 else 0)
    state = ModelState.capture(model)
    state.add_inputs(ctx.input_leaves)
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
                    from layerscope.collect.timing.kineto import kineto_runs

                    kineto_runs(ctx, result)
                else:
                    from layerscope.collect.timing.fx import fx_runs

                    fx_runs(ctx, result)
            except Exception:
                raise  # a ModelError naming the module already, or layerscope's own
            except BaseException as e:  # an interrupt: a note names where it struck
                index.add_note(e, " during the timing pass")
                raise
            finally:
                ctx.progress.close()
    finally:
        result.notices.extend(state.restore())
    if ctx.template is None and any(t._version != v for t, v in versions):
        result.notices.append(
            "the model changed its input tensors in place: each timed run saw the earlier "
            "runs' changes, and the inputs keep them (pass inputs the model does not change)"
        )
    result.overhead = dict(ctx.overhead)
    result.trace = build_trace(index, result.spans, result.info["clock"])
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
        origin = stamper.record()  # time 0 of this run's spans, outside every window
        try:
            out = ctx.call()
            entries = hooks.take()
            regions = hooks.taken_regions
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
            codes = [e[0] for e in entries]
            stamps = [stamper.ns(e[1]) for e in entries]
            fwd = replay_forward(index, codes, stamps, inner, outer)
            windows.append(fwd.root_window)
            result.add_regions(region_times(index, entries, regions, stamper.ns, outer))
            bwd_self: list[float] | None = None
            t0 = stamper.ns(origin)
            spans = RepeatSpans(forward_spans(index, codes, stamps, t0))
            spans.end = max(stamps, default=t0) - t0
            if options.backward:
                bwd_self = replay_backward_log(
                    len(index), stamper, b_start, b_end, b_log, ctx.overhead
                )
                spans.backward, spans.end = logged_backward(
                    stamper, b_start, b_end, b_log, t0, index.root
                )
            add_repeat(result, index, fwd, bwd_self)
            result.spans.append(spans)
        used = [origin, *(e[1] for e in entries), *(s for _, s in b_log)]
        if b_start is not None:
            used += [b_start, b_end]
        stamper.recycle(used)
        ctx.progress.advance()
    result.whole["instrumented_forward"] = windows
