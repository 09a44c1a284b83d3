"""Every option of ``ls.profile`` and ``ls.Profiler``, checked at the boundary.

All of it runs before the model is touched (no state captured, no input drawn, no forward
run), so a bad option costs nothing. Each bad value raises ``InvalidInputError`` with one
line that names the option, the value and what is allowed; strings become enums (timer,
grad_mode, dtypes) here, so the passes behind can trust what they get.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import torch
from torch import nn
from torch._ops import OpOverload, OpOverloadPacket
from torch.nn.parameter import is_lazy

from layerscope.collect.inputs import normalise_shapes
from layerscope.collect.observer import Observer
from layerscope.collect.signature import iter_tensors
from layerscope.collect.timing.options import TimingOptions
from layerscope.errors import InvalidInputError
from layerscope.metrics.flops import Formula, op_key_problem
from layerscope.metrics.numerics import NonFiniteMode
from layerscope.validate import (
    check_bool,
    check_callable,
    check_choice,
    check_keys,
    is_bool,
    refuse,
    refuse_keys,
)

#: ``mode=``: the train/eval mode a run happens in (None: as the model is).
Mode = Literal["eval", "train"]
MODES: tuple[str, ...] = get_args(Mode)
#: ``numerics="..."``: what a non-finite value does.
NONFINITE_MODES: tuple[str, ...] = get_args(NonFiniteMode)
#: The options ``numerics=`` accepts as a mapping (``NumericsObserver``'s arguments).
NUMERICS_OPTIONS = ("nonfinite", "stats", "grads", "underflow")
#: The options ``timing=`` accepts as a mapping (the rest of ``time_profile``'s are set by
#: ``ls.profile`` itself).
TIMING_OPTIONS = (
    "timer",
    "warmup",
    "repeats",
    "sync",
    "grad_mode",
    "ops",
    "batch_size",
    "progress",
)
#: The options ``timing=`` accepts as a mapping in a ``Profiler``: those of a loop's timed
#: steps (the rest describe the timing pass's own runs: warmup, repeats, backward, loss,
#: timer backend, grad mode, ops).
LOOP_TIMING_OPTIONS = ("sync", "clock", "correct_overhead", "batch_size")
#: Dtype names shown when one is not known.
_DTYPE_EXAMPLES = "'float32', 'float16', 'bfloat16', 'half', 'int64', 'long', 'bool'"


@dataclass(frozen=True)
class SessionOptions:
    """The checked options of one ``Profiler`` session (the measurements to run)."""

    record_shapes: bool = True
    count_flops: bool = True
    flop_formulas: dict[Any, Formula] | None = None
    count_bytes: bool = True
    #: ``NumericsObserver`` keyword arguments, or None for no numerics check.
    numerics: dict[str, Any] | None = None
    memory: bool = False
    observers: tuple[Observer, ...] = ()
    #: how ops on DTensors are observed: "logical" (the op as written, logical shapes)
    #: or "local" (this rank's local ops and DTensor's collectives: ``collect.dtensors``)
    dtensor: str = "logical"


#: ``dtensor=``'s choices.
DTENSOR_VIEWS = ("logical", "local")


def check_session(
    *,
    record_shapes: object = True,
    count_flops: object = True,
    flop_formulas: object = None,
    count_bytes: object = True,
    numerics: object = None,
    memory: object = False,
    observers: object = (),
    numerics_defaults: Mapping[str, Any] | None = None,
    dtensor: object = "logical",
) -> SessionOptions:
    """The options ``Profiler`` takes, checked; ``numerics_defaults`` are the numerics
    options a string ``numerics=`` (and a mapping that leaves them out) gets."""
    return SessionOptions(
        record_shapes=check_bool("record_shapes", record_shapes),
        count_flops=check_bool("count_flops", count_flops),
        flop_formulas=check_flop_formulas(flop_formulas),
        count_bytes=check_bool("count_bytes", count_bytes),
        numerics=check_numerics(numerics, **(numerics_defaults or {})),
        memory=check_bool("memory", memory),
        observers=check_observers(observers),
        dtensor=check_choice("dtensor", dtensor, DTENSOR_VIEWS),
    )


def check_optimizer(optimizer: object) -> tuple[torch.optim.Optimizer, ...]:
    """``optimizer=``: a ``torch.optim.Optimizer``, a list or tuple of them, or None."""
    if optimizer is None:
        return ()
    if isinstance(optimizer, torch.optim.Optimizer):
        return (optimizer,)
    if isinstance(optimizer, list | tuple) and all(
        isinstance(o, torch.optim.Optimizer) for o in optimizer
    ):
        return tuple(optimizer)
    refuse("optimizer", optimizer, "a torch.optim.Optimizer, a list of them, or None")


def check_mode(mode: object) -> Mode | None:
    """``mode=``: "eval", "train" or None (the model's own flags)."""
    checked: Mode | None = check_choice("mode", mode, MODES, none=True)
    return checked


def check_dtype(name: str, value: object) -> torch.dtype:
    """A ``torch.dtype`` or its name: "float16", "torch.float16", "half", "long", ..."""
    if isinstance(value, torch.dtype):
        return value
    if isinstance(value, str):
        key = value.strip().lower().removeprefix("torch.")
        found = getattr(torch, key, None) if key.isidentifier() else None
        if isinstance(found, torch.dtype):
            return found
    refuse(name, value, f"a torch.dtype or a dtype name such as {_DTYPE_EXAMPLES}")


def check_input_shape(input_shape: object) -> list[tuple[int, ...]]:
    """``input_shape=`` as a list of shapes of Python ints (numpy ints accepted)."""
    return normalise_shapes(input_shape)


def check_observers(observers: object) -> tuple[Observer, ...]:
    """``observers=``: a list or tuple of ``Observer`` instances."""
    if isinstance(observers, Observer):
        raise InvalidInputError(
            f"observers must be a list of Observer instances, got one observer "
            f"({type(observers).__name__}); pass observers=[it]"
        )
    if not isinstance(observers, Sequence) or isinstance(observers, str | bytes):
        refuse(
            "observers",
            observers,
            "a list or tuple of layerscope.collect.observer.Observer instances",
        )
    for i, observer in enumerate(observers):
        if isinstance(observer, type) and issubclass(observer, Observer):
            raise InvalidInputError(
                f"observers[{i}] is the class {observer.__name__}, not an instance; pass "
                f"{observer.__name__}()"
            )
        if not isinstance(observer, Observer):
            refuse(f"observers[{i}]", observer, "a layerscope.collect.observer.Observer instance")
    return tuple(observers)


def check_flop_formulas(formulas: object) -> dict[Any, Formula] | None:
    """``flop_formulas=``: a mapping from ops (``OpOverload``/``OpOverloadPacket``) to
    formula callables."""
    if formulas is None:
        return None
    if not isinstance(formulas, Mapping):
        refuse(
            "flop_formulas",
            formulas,
            "a mapping {op: formula}, such as {torch.ops.aten.mm: my_formula}",
        )
    for op, formula in formulas.items():
        if not isinstance(op, OpOverload | OpOverloadPacket):
            raise InvalidInputError(f"flop_formulas key {op_key_problem(op)}")
        check_callable(
            f"flop_formulas[{op}]",
            formula,
            "a callable formula(*args, out=..., **kwargs) -> Cost",
            none=False,
        )
    return dict(formulas)


def check_numerics(numerics: object, **defaults: Any) -> dict[str, Any] | None:
    """``numerics=`` as ``NumericsObserver`` keyword arguments over ``defaults``."""
    if numerics is None:
        return None
    if isinstance(numerics, str):
        options: dict[str, Any] = {"nonfinite": numerics}
    elif isinstance(numerics, Mapping):
        options = dict(check_keys("numerics", numerics, NUMERICS_OPTIONS, noun="option"))
    else:
        modes = ", ".join(map(repr, NONFINITE_MODES))
        refuse("numerics", numerics, f"{modes}, None or a mapping of options")
    where = "numerics" if isinstance(numerics, str) else "numerics['nonfinite']"
    check_choice(where, options.get("nonfinite", "record"), NONFINITE_MODES)
    for key in ("stats", "grads", "underflow"):
        if key in options:
            options[key] = check_bool(f"numerics[{key!r}]", options[key])
    return {**defaults, **options}


def check_timing(
    timing: object,
    *,
    loop: bool = False,
    backward: bool = False,
    loss_fn: Callable[[Any], Any] | None = None,
) -> TimingOptions | None:
    """``timing=``: off (None), or the checked options of ``ls.profile``'s timing pass
    (with the run's backward settings) or, with ``loop``, of a ``Profiler``'s timers.

    Every option is checked here, so that a bad one fails before the analysis pass
    instead of after it.
    """
    known = LOOP_TIMING_OPTIONS if loop else TIMING_OPTIONS
    if is_bool(timing):
        if not timing:
            return None
        given: dict[str, Any] = {}
    elif isinstance(timing, Mapping):
        unknown = [k for k in timing if k not in known]
        if unknown:
            others = " (the others belong to ls.profile's timing pass, which runs the model itself)"
            refuse_keys("timing", unknown, known, noun="option", more=others if loop else "")
        given = dict(timing)
    else:
        refuse(
            "timing",
            timing,
            f"True, False or a mapping of options ({', '.join(known)})",
        )
    return TimingOptions(**given, backward=backward, loss_fn=loss_fn)


def check_timing_device(model: nn.Module, inputs: Any) -> None:
    """Refuse to time a model or inputs on the meta device (nothing runs there)."""
    where = None
    for kind, named in (("parameter", model.named_parameters()), ("buffer", model.named_buffers())):
        for name, t in named:
            if not is_lazy(t) and t.is_meta:
                where = f"the model's {kind} {name!r} is on the meta device"
                break
        if where is not None:
            break
    else:
        if any(t.is_meta for t in iter_tensors(inputs)):
            where = "an input tensor is on the meta device"
    if where is not None:
        raise InvalidInputError(
            f"timing needs real tensors, but {where}: meta tensors hold no data and run no "
            "kernels, so there is no time to measure; analyse on meta without timing, or "
            "time the model on cpu or cuda"
        )


__all__ = [
    "LOOP_TIMING_OPTIONS",
    "MODES",
    "NONFINITE_MODES",
    "NUMERICS_OPTIONS",
    "TIMING_OPTIONS",
    "Mode",
    "SessionOptions",
    "check_callable",
    "check_dtype",
    "check_flop_formulas",
    "check_input_shape",
    "check_mode",
    "check_numerics",
    "check_observers",
    "check_session",
    "check_timing",
    "check_timing_device",
]
