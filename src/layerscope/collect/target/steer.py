"""``steer``: run a meta analysis through the kernels the target device would run."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import (
    TorchDispatchMode,
    _get_current_dispatch_mode_stack,
    _pop_mode,
    _push_mode,
)

from layerscope.collect.dispatch import remove_function_mode, remove_mode
from layerscope.collect.target.composite import (
    CALLERS,
    DROPOUTS,
    RMS_NORMS,
    fused_dropout,
    fused_rms_norm,
    rebound,
)
from layerscope.collect.target.rnn import batch_sizes_known, cpu_rnn, uses_onednn
from layerscope.collect.target.sdpa import SdpaCall, kernel_name, run_sdpa, sdpa_backend
from layerscope.collect.target.spec import Target
from layerscope.errors import InvalidInputError
from layerscope.torchapi import DisableTorchDispatch

_aten = torch.ops.aten
_SDPA = F.scaled_dot_product_attention
_DROPOUT = F.dropout  # the original: ``_inside`` rebinds the name in F
_VF = torch._C._VariableFunctions
#: the RNN entry points ``nn.LSTM``/``nn.GRU``/``nn.RNN`` call (``torch._VF.<name>``)
_RNNS: dict[Any, str] = {
    _VF.lstm: "lstm",
    _VF.gru: "gru",
    _VF.rnn_tanh: "rnn_tanh",
    _VF.rnn_relu: "rnn_relu",
}
#: the calls that move a tensor to another tensor's device (``.to(x.device)``, ``type_as``)
_MOVES = (torch.Tensor.to, torch.Tensor.type_as)
_NATIVE_BATCH_NORM = _aten.native_batch_norm.default
_NATIVE_LAYER_NORM = _aten.native_layer_norm.default
_HALF = (torch.bfloat16, torch.float16)
#: The torch release whose C++ rules this package ports (``sdpa.py``: the CUDA backend
#: choice and the ops ``at::scaled_dot_product_attention`` runs; ``rnn.py``: the CPU's
#: RNN paths; ``composite.py``: CUDA's fused dropout and RMSNorm; here: the CPU's
#: BatchNorm and LayerNorm statistics). Another release may choose or run differently; a
#: profile that used a port on another release says so.
PORTED_FROM = (2, 13)
_MKLDNN_RNN_LAYER_BACKWARD = _aten.mkldnn_rnn_layer_backward.default
_GROUPED_MM = _aten._grouped_mm.default
CPU = Target("cpu")


class KernelLog(dict[str, dict[str, int]]):
    """The kernels steering chose: ``{op: {kernel: calls}}``, e.g.
    ``{"scaled_dot_product_attention": {"flash_attention_cpu": 12},
    "batch_norm": {"cpu_eval": 3}, "lstm": {"onednn": 1}}``.

    Kernel names: SDPA ``flash_attention_cpu``, ``flash_attention``,
    ``efficient_attention``, ``cudnn_attention``, ``math``; ``batch_norm`` ``cpu_eval``
    (eval-mode BatchNorm with the CPU kernel's empty saved statistics); ``dropout`` and
    ``rms_norm``: ``fused`` (a CUDA target's one kernel: ``native_dropout`` with a bool
    mask, ``_fused_rms_norm``); ``batch_norm`` ``cpu_train_16bit`` and ``layer_norm``
    ``cpu_16bit`` (the CPU's statistics of a bf16/fp16 input's dtype); ``lstm``,
    ``gru``, ``rnn_tanh``, ``rnn_relu``: ``onednn`` (``mkldnn_rnn_layer`` per layer and
    direction), ``cpu_cells`` (the generic cells with the whole-sequence input
    projection), or ``not_steered`` (a CUDA target: cuDNN RNNs are not ported, meta's
    cells ran); ``grouped_mm`` ``cpu_any_dtype`` (a float32 or float16 ``_grouped_mm``,
    which the CPU runs and meta's kernel refuses)."""

    def add(self, op: str, kernel: str, n: int = 1) -> None:
        per_op = self.setdefault(op, {})
        per_op[kernel] = per_op.get(kernel, 0) + n

    def as_dict(self) -> dict[str, dict[str, int]]:
        """A plain copy (JSON-ready)."""
        return {op: dict(kernels) for op, kernels in self.items()}

    def version_notice(self, version: str = torch.__version__) -> str | None:
        """A notice when a ported rule was used under a torch other than the one it was
        ported from (``version`` is ``torch.__version__``: "2.14.1+cu130"); else None."""
        ported = sorted(op for op, kernels in self.items() if set(kernels) - {"not_steered"})
        running = torch_release(version)
        if not ported or running == PORTED_FROM:
            return None
        was = ".".join(map(str, PORTED_FROM))
        now = ".".join(map(str, running)) if running else version
        return (
            f"the kernels of {', '.join(ported)} followed rules ported from torch {was}; "
            f"this is torch {now}, whose choices may differ (compare one module with a run "
            f"on the device, or analyse with torch {was})"
        )


def torch_release(version: str) -> tuple[int, int] | None:
    """(major, minor) of a torch version string ("2.14.1+cu130" gives (2, 14)), or None
    for one that does not start with two numbers."""
    parts = version.split("+")[0].split(".")
    if len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit()):
        return None
    return int(parts[0]), int(parts[1])


class _Active(threading.local):
    depth = 0


_active = _Active()


def steering_active() -> bool:
    """Whether a ``steer`` context is active in this thread."""
    return _active.depth > 0


class _FunctionSteering(TorchFunctionMode):
    """Replaces SDPA, dropout, RMSNorm and RNN calls on meta tensors by the target's ops.

    A function mode runs before the dispatcher: the aten ops its handlers call go
    through autograd and every dispatch mode as any op does, so a session's dispatch
    mode sees them (and not meta's decomposition) wherever this mode sits among the
    function modes."""

    def __init__(self, target: Target, log: KernelLog, *, rnns: bool = True) -> None:
        super().__init__()
        self.target = target
        self.log = log
        self.rnns = rnns

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func is _SDPA:
            return self._sdpa(args, kwargs)
        if func in CALLERS:
            return self._inside(func, args, kwargs)
        if self.target.device_type == "cuda":
            if func in DROPOUTS:
                return self._fused("dropout", fused_dropout, func, args, kwargs)
            if func in RMS_NORMS:
                return self._fused("rms_norm", fused_rms_norm, func, args, kwargs)
        if func in _MOVES and self.target.device_type == "cpu":
            return _moved_unseen(func, args, kwargs)
        if self.rnns:
            name = _RNNS.get(func)
            if name is not None:
                return self._rnn(func, name, args, kwargs)
        return func(*args, **kwargs)

    def _sdpa(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        call = SdpaCall.from_args(args, kwargs)
        if not call.query.is_meta or not call.dense:
            return _SDPA(*args, **kwargs)  # real tensors, or nested ones: as they are
        backend = sdpa_backend(self.target, call)
        self.log.add("scaled_dot_product_attention", kernel_name(self.target, backend))
        return run_sdpa(self.target, call, backend, _SDPA)

    def _fused(
        self, op: str, steered: Any, func: Callable[..., Any], args: Any, kwargs: Any
    ) -> Any:
        out = steered(func, args, kwargs)
        if out is None:
            return func(*args, **kwargs)
        self.log.add(op, "fused")
        return out

    def _inside(self, func: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        """A function of ``torch.nn.functional`` that calls SDPA or dropout itself: run
        with the steered versions bound (this mode is off while it handles a call)."""

        def sdpa(*a: Any, **k: Any) -> Any:
            return self._sdpa(a, k)

        def dropout(*a: Any, **k: Any) -> Any:
            return self.__torch_function__(_DROPOUT, (), a, k)

        with rebound({"scaled_dot_product_attention": sdpa, "dropout": dropout}):
            return func(*args, **kwargs)

    def _rnn(
        self, func: Callable[..., Any], name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        first = args[0] if args else kwargs.get("input", kwargs.get("data"))
        if not (isinstance(first, torch.Tensor) and first.is_meta):
            return func(*args, **kwargs)
        if self.target.device_type != "cpu":
            self.log.add(name, "not_steered")
            return func(*args, **kwargs)
        if not batch_sizes_known(name, args, kwargs):
            self.log.add(name, "not_steered")
            return func(*args, **kwargs)
        kernel = "onednn" if uses_onednn(name, args, kwargs) else "cpu_cells"
        self.log.add(name, kernel)
        return cpu_rnn(name, args, kwargs)


def _moved_unseen(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``cpu_tensor.to(meta)`` (or ``.type_as(meta_tensor)``) with the meta device standing
    for the CPU: there the call returns the tensor itself and runs no op, so the copy onto
    meta runs unseen by the dispatch modes (a session's included). A conversion (another
    dtype) runs an op on the CPU too: it runs again, seen."""
    t = args[0] if args else None
    if type(t) is not torch.Tensor or t.device.type != "cpu":
        return func(*args, **kwargs)
    with DisableTorchDispatch():
        out = func(*args, **kwargs)
    if isinstance(out, torch.Tensor) and out.is_meta and out.dtype == t.dtype:
        return out
    return func(*args, **kwargs)


def _cpu_statistics(x: torch.Tensor, params: tuple[Any, ...], out: Any) -> Any:
    """The CPU's normalization statistics: of the input's dtype for a bf16/fp16 input
    unless its parameters are float32 (``is_mixed_type``), where meta (like CUDA) gives
    float32; None where meta's are the CPU's."""
    if x.dtype not in _HALF or any(
        isinstance(p, torch.Tensor) and p.dtype == torch.float32 for p in params
    ):
        return None
    return (out[0], *(s.new_empty(s.shape, dtype=x.dtype) for s in out[1:3]))


def _cpu_eval_batch_norm(args: tuple[Any, ...], out: Any) -> tuple[Any, Any, Any]:
    """``batch_norm_cpu`` in eval: the output, and empty saved statistics of the
    parameters' dtype when it differs from the input's (``is_mixed_type``: bf16/fp16
    input with float32 weight, bias and running statistics), else of the input's."""
    x = args[0]
    first = next((a for a in args[1:5] if isinstance(a, torch.Tensor)), None)
    dtype = first.dtype if first is not None and first.dtype != x.dtype else x.dtype
    return out[0], x.new_empty(0, dtype=dtype), x.new_empty(0, dtype=dtype)


def _cpu_grouped_mm(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``_grouped_mm`` as the CPU runs it, in any float dtype: meta's kernel repeats
    CUDA's bfloat16-only check, so the output's shape comes from bfloat16 stand-ins and
    its dtype is the inputs' (or ``out_dtype``)."""
    low = [a.to(torch.bfloat16) if isinstance(a, torch.Tensor) and a.is_floating_point()
           else a for a in args]  # fmt: skip
    given = {k: v for k, v in kwargs.items() if k != "out_dtype"}
    out = _GROUPED_MM(*low, **given)
    return out.to(kwargs.get("out_dtype") or args[0].dtype)


class _CpuOutputs(TorchDispatchMode):
    """Gives ops on meta the CPU kernel's outputs: eval-mode ``native_batch_norm``
    empty saved mean and inverse std (the CPU saves nothing in eval; meta returns
    C-sized ones, which autograd would save); training ``native_batch_norm`` and
    ``native_layer_norm`` with a bf16/fp16 input and parameters statistics of the
    input's dtype (meta's are float32); ``mkldnn_rnn_layer_backward`` two distinct bias
    gradients; ``_grouped_mm`` of float32 or float16 operands, which the CPU runs and
    meta's kernel refuses (CUDA's check).

    It must run below the session's dispatch mode (closer to the kernel), so that the
    session sees the adjusted outputs: ``steer`` inserts it at the bottom of the stack."""

    def __init__(self, log: KernelLog) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.log = log

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        if func is _GROUPED_MM and args[0].is_meta and args[0].dtype != torch.bfloat16:
            self.log.add("grouped_mm", "cpu_any_dtype")
            return _cpu_grouped_mm(args, kwargs or {})
        out = func(*args, **(kwargs or {}))
        if func is _NATIVE_BATCH_NORM and args[0].is_meta:
            if not args[5]:
                self.log.add("batch_norm", "cpu_eval")
                return _cpu_eval_batch_norm(args, out)
            fixed = _cpu_statistics(args[0], args[1:5], out)
            if fixed is not None:
                self.log.add("batch_norm", "cpu_train_16bit")
                return fixed
        if func is _NATIVE_LAYER_NORM and args[0].is_meta:
            fixed = _cpu_statistics(args[0], args[2:4], out)
            if fixed is not None:
                self.log.add("layer_norm", "cpu_16bit")
                return fixed
        if func is _MKLDNN_RNN_LAYER_BACKWARD and out[3] is out[4] and out[3].is_meta:
            # meta returns one bias gradient twice; the CPU a copy (diff_b2_ =
            # clone(diff_b_)), which autograd can keep without copying it again
            return (*out[:4], torch.empty_like(out[3]), *out[5:])
        return out


_FLAG_DEQUES = (
    "old_dispatch_mode_flags",
    "old_non_infra_dispatch_mode_flags",
    "old_without_ignore_compile_internals_dispatch_mode_flags",
)


def _entered_by_base(mode: TorchDispatchMode) -> bool:
    return all(getattr(mode, name, None) for name in _FLAG_DEQUES)


def _enter_at_bottom(mode: TorchDispatchMode) -> None:
    """Enter ``mode`` below every dispatch mode of this thread (the session's included),
    taking the others off and putting them back in their order, as ``remove_mode``
    does."""
    stack = _get_current_dispatch_mode_stack()
    by_base = [_entered_by_base(m) for m in stack]
    for m, base in zip(reversed(stack), reversed(by_base), strict=True):
        if base:
            TorchDispatchMode.__exit__(m, None, None, None)  # type: ignore[no-untyped-call]
        else:
            _pop_mode()
    try:
        mode.__enter__()  # type: ignore[no-untyped-call]
    finally:
        for m, base in zip(stack, by_base, strict=True):
            if base:
                TorchDispatchMode.__enter__(m)  # type: ignore[no-untyped-call]
            else:
                _push_mode(m)


@contextmanager
def steer(target: Target, tensors_device: torch.device | str) -> Iterator[KernelLog]:
    """Run the ops inside through the kernels ``target`` would run; yields the
    ``KernelLog`` of the choices made.

    With ``tensors_device`` of the target's type the real kernels run: nothing is
    installed and the log stays empty; likewise inside another ``steer`` context of this
    thread, which does the steering. With meta tensors:

    - ``F.scaled_dot_product_attention``: the target's backend choice and input
      preparation, then its kernel (``_scaled_dot_product_flash_attention_for_cpu``;
      on CUDA ``_scaled_dot_product_{cudnn,flash,efficient}_attention``) or the math
      path;
    - CUDA target: ``F.dropout`` in training through the fused ``native_dropout``
      (a bool mask) rather than meta's noise tensor of the input's dtype, and
      ``F.rms_norm`` through ``_fused_rms_norm`` rather than its composite;
    - SDPA and dropout called by ``F.multi_head_attention_forward`` (``nn.MultiheadAttention``,
      ``nn.Transformer*``) are steered too;
    - CPU target: ``nn.LSTM``/``nn.GRU``/``nn.RNN`` (``torch._VF`` calls) through
      oneDNN's ``mkldnn_rnn_layer`` or the CPU's cells; eval-mode BatchNorm with the
      CPU kernel's empty saved statistics, and BatchNorm and LayerNorm statistics of a
      16-bit input's dtype; a CPU tensor moved to meta (the model's
      device) with ``.to`` or ``.type_as``, which on the CPU run no op, copied unseen.

    Enter it before the session's dispatch mode or inside it: the function mode's ops
    reach any dispatch mode, and the dispatch mode that fixes outputs goes to the bottom
    of the stack.
    """
    device = torch.device(tensors_device)
    log = KernelLog()
    if device.type == target.device_type or steering_active():
        yield log  # real kernels run, or an outer steer context does the steering
        return
    if device.type != "meta":
        raise InvalidInputError(
            f"steering to {target.describe()} kernels needs meta tensors; tensors on "
            f"{device.type} run {device.type} kernels"
        )
    functions = _FunctionSteering(target, log)
    cpu_outputs = _CpuOutputs(log) if target.device_type == "cpu" else None
    if cpu_outputs is not None:
        _enter_at_bottom(cpu_outputs)
    _active.depth += 1
    functions.__enter__()  # type: ignore[no-untyped-call]
    try:
        yield log
    finally:
        # not __exit__: a mode that an interrupted forward left above it stays there
        remove_function_mode(functions)
        _active.depth -= 1
        if cpu_outputs is not None:
            remove_mode(cpu_outputs)


__all__ = ["KernelLog", "steer", "steering_active"]
