"""Composite ops that a CUDA device runs as one kernel where meta runs their parts.

``at::dropout`` and ``at::rms_norm`` choose their kernel by the input's device: on CUDA
one fused kernel with its own backward, elsewhere (meta included) a sequence of
elementwise ops whose autograd saves other tensors. The rules here are ported from
torch 2.13 (``Dropout.cpp: is_fused_kernel_acceptable``, ``layer_norm.cpp:
rms_norm_symint``).

``F.multi_head_attention_forward`` calls ``F.scaled_dot_product_attention`` and
``F.dropout`` itself; a function mode is off while it handles a call, so ``inside``
runs such a function with the steered versions bound in ``torch.nn.functional``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F

from layerscope.collect.dispatch import run_whole

_aten = torch.ops.aten
_VF = torch._C._VariableFunctions

#: ``F.dropout`` and the ``torch.dropout`` it calls, with their argument names
DROPOUTS: dict[Any, tuple[str, ...]] = {
    F.dropout: ("input", "p", "training", "inplace"),
    _VF.dropout: ("input", "p", "train"),
}
#: ``F.rms_norm`` and ``torch.rms_norm``
RMS_NORMS: dict[Any, tuple[str, ...]] = {
    F.rms_norm: ("input", "normalized_shape", "weight", "eps"),
    _VF.rms_norm: ("input", "normalized_shape", "weight", "eps"),
}


def _given(names: tuple[str, ...], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    return dict(zip(names, args, strict=False)) | kwargs


def fused_dropout(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """CUDA's ``at::dropout``: in training, out of place, with 0 < p < 1 and a non-empty
    input, one ``native_dropout`` kernel that keeps a bool mask; None where it would not
    be fused (meta's ops, a noise tensor of the input's dtype, are then CUDA's too)."""
    given = _given(DROPOUTS[func], args, kwargs)
    x, p = given.get("input"), given.get("p", 0.5)
    train = given.get("training", given.get("train", True))
    if not (
        isinstance(x, torch.Tensor)
        and x.is_meta
        and bool(train)
        and not given.get("inplace", False)
        and isinstance(p, int | float)
        and 0 < p < 1
        and x.numel() > 0
    ):
        return None
    return torch.native_dropout(x, float(p), True)[0]


class _FusedRmsNorm(torch.autograd.Function):
    """``_fused_rms_norm`` as CUDA's autograd runs it: the output and the inverse RMS
    (float32 for 16-bit inputs) from one kernel, the input and the inverse RMS saved,
    ``_fused_rms_norm_backward`` in backward. Meta would decompose the op into its
    composite (an upcast copy, pow, mean, rsqrt, two muls, each saving its inputs), so
    it is called below autograd."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        shape: list[int],
        weight: torch.Tensor | None,
        eps: float | None,
    ) -> torch.Tensor:
        op = _aten._fused_rms_norm.default
        with torch._C._AutoDispatchBelowAutograd(), run_whole(op):
            out, rstd = op(x, shape, weight, eps)
        ctx.save_for_backward(x, rstd, weight)
        ctx.shape = shape
        return out  # type: ignore[no-any-return]

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        x, rstd, weight = ctx.saved_tensors
        mask = [ctx.needs_input_grad[0], ctx.needs_input_grad[2]]
        with torch._C._AutoDispatchBelowAutograd():
            gx, gw = _aten._fused_rms_norm_backward.default(grad, x, ctx.shape, rstd, weight, mask)
        return gx, None, gw, None


def fused_rms_norm(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """CUDA's ``at::rms_norm``: the fused kernel unless the input is channels-last or
    complex or the weight's dtype differs from the input's (then the composite, which
    meta runs too: None)."""
    given = _given(RMS_NORMS[func], args, kwargs)
    x, weight = given.get("input"), given.get("weight")
    shape = given.get("normalized_shape")
    if not (isinstance(x, torch.Tensor) and x.is_meta) or x.is_complex():
        return None
    if weight is not None and (not isinstance(weight, torch.Tensor) or weight.dtype != x.dtype):
        return None
    last = {4: torch.channels_last, 5: torch.channels_last_3d}.get(x.dim())
    if last is not None and not x.is_contiguous() and x.is_contiguous(memory_format=last):
        return None  # channels-last strides (``suggest_memory_format``)
    shape = [shape] if isinstance(shape, int) else list(shape or ())
    if not shape or list(x.shape[x.dim() - len(shape) :]) != shape:
        return None  # let torch raise its own error
    return _FusedRmsNorm.apply(x, shape, weight, given.get("eps"))  # type: ignore[no-untyped-call]


def _in_thread(
    owner: int, fn: Callable[..., Any], original: Callable[..., Any]
) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() == owner:
            return fn(*args, **kwargs)
        return original(*args, **kwargs)

    return call


#: functions of ``torch.nn.functional`` that call steered functions themselves
CALLERS = (F.multi_head_attention_forward,)
_REBIND = threading.RLock()


@contextmanager
def rebound(functions: dict[str, Callable[..., Any]]) -> Iterator[None]:
    """``torch.nn.functional``'s attributes ``functions`` replaced while inside, in this
    thread only: another thread that calls one meanwhile runs the original (one thread
    rebinds at a time)."""
    owner = threading.get_ident()
    with _REBIND:
        saved = {name: getattr(F, name) for name in functions}
        for name, fn in functions.items():
            setattr(F, name, _in_thread(owner, fn, saved[name]))
        try:
            yield
        finally:
            for name, fn in saved.items():
                setattr(F, name, fn)


__all__ = ["CALLERS", "DROPOUTS", "RMS_NORMS", "fused_dropout", "fused_rms_norm", "rebound"]
