"""The one dispatch mode of a session: every aten op, attributed to a module, to observers.

It runs only when some observer overrides ``Observer.on_op``.

Forward ops belong to the innermost running module (``ScopeTracker.current``). Backward
ops belong to the module whose forward created the autograd node being executed:
``torch._C._current_autograd_node()`` names that node and ``ScopeTracker.grad_owner``
maps it to its module; a forward that the backward pass runs (a recomputation under
activation checkpointing) keeps its ops, as backward work (``backward_owner``). While
``ScopeTracker.charged`` is set, every op goes to the module it names instead (FSDP2's
communication for a unit, ``metrics.fsdpunits``).

Observers see the ops that run, whatever the autograd mode. Ops implemented only as a
composition of other ops (``CompositeImplicitAutograd``: ``linear``, ``layer_norm``,
``scaled_dot_product_attention``, ``conv2d``, ``lstm``, ...) are decomposed above a
dispatch mode when autograd is on, but reach it whole under ``torch.inference_mode``,
where tensors skip autograd. The mode then runs the same decomposition itself, with
itself active, so the ops inside reach the observers as they do with autograd on. On
nested tensors it picks the kernel torch picks for them (their own ``matmul``, a nested
composite). A decomposition that asks for its own op again (a jagged nested tensor's
``is_contiguous``) gets the op run through the tensor's own kernel, as torch runs it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from torch import Tensor
from torch._C import DispatchKey
from torch._ops import OpOverload
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import (
    TorchDispatchMode,
    _get_current_dispatch_mode_stack,
    _pop_mode,
    _push_mode,
)

from layerscope.collect.dtensors import state as shards
from layerscope.collect.labels import ENTER_OP, EXIT_OP
from layerscope.collect.observer import observer_error
from layerscope.collect.scopes import ScopeTracker
from layerscope.errors import LayerscopeError
from layerscope.profile import Node
from layerscope.torchapi import (
    current_autograd_node,
    dispatch_has_kernel,
    get_dispatch_stack_at,
    get_function_stack_at,
    len_torch_dispatch_stack,
    len_torch_function_stack,
    pop_torch_function_stack,
    push_on_torch_function_stack,
)

_COMPOSITE = DispatchKey.CompositeImplicitAutograd
_NESTED_COMPOSITE = DispatchKey.CompositeImplicitAutogradNestedTensor
#: Kernels that run instead of an op's composite one on dense tensors.
_OWN_KERNELS = (
    DispatchKey.CPU,
    DispatchKey.CUDA,
    DispatchKey.MPS,
    DispatchKey.XPU,
    DispatchKey.Meta,
    DispatchKey.CompositeExplicitAutograd,
    DispatchKey.CompositeExplicitAutogradNonFunctional,
)
#: Kernels that run instead of an op's composite one on nested tensors.
_OWN_NESTED_KERNELS = (
    DispatchKey.NestedTensorCPU,
    DispatchKey.NestedTensorCUDA,
    DispatchKey.NestedTensorMPS,
    DispatchKey.NestedTensorXPU,
    DispatchKey.NestedTensorMeta,
    DispatchKey.CompositeExplicitAutograd,
    DispatchKey.CompositeExplicitAutogradNonFunctional,
)


def decomposition_keys(func: Any) -> tuple[DispatchKey | None, DispatchKey | None]:
    """The composite kernel ``func`` runs as, a composition of other ops, on dense and on
    nested tensors: None where a kernel of its own runs instead. On nested tensors torch
    prefers a ``CompositeImplicitAutogradNestedTensor`` kernel, then a nested backend's
    (``matmul`` has one: its dense composite would ask a nested tensor for sizes)."""
    if not isinstance(func, OpOverload):
        return None, None
    name = func.name()  # type: ignore[no-untyped-call]
    try:
        composite = dispatch_has_kernel(name, _COMPOSITE)
    except RuntimeError:  # not a dispatcher op (prim::device, which fake tensors call)
        return None, None
    dense = composite and not any(dispatch_has_kernel(name, k) for k in _OWN_KERNELS)
    if dispatch_has_kernel(name, _NESTED_COMPOSITE):
        nested: DispatchKey | None = _NESTED_COMPOSITE
    elif composite and not any(dispatch_has_kernel(name, k) for k in _OWN_NESTED_KERNELS):
        nested = _COMPOSITE
    else:
        nested = None
    return (_COMPOSITE if dense else None), nested


class _Whole(threading.local):
    ops: frozenset[int] = frozenset()


_whole = _Whole()


@contextmanager
def run_whole(func: OpOverload) -> Iterator[None]:
    """Inside (in this thread), ``func`` reaching a session runs as one op although it
    has a composite kernel and no kernel of its own on this build: the fused kernel of a
    steered device (``_fused_rms_norm``, whose CUDA kernel a CPU build lacks)."""
    before = _whole.ops
    _whole.ops = before | {id(func)}
    try:
        yield
    finally:
        _whole.ops = before


def _has_nested(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a tensor argument (or one in a list argument) is a nested tensor."""
    for a in (*args, *kwargs.values()):
        if isinstance(a, Tensor):
            if a.is_nested:
                return True
        elif isinstance(a, (list, tuple)) and any(isinstance(t, Tensor) and t.is_nested for t in a):
            return True
    return False


#: ``Observer.on_op``: (func, args, kwargs, out, node, backward) -> None
OpCallback = Callable[[OpOverload, tuple[Any, ...], dict[str, Any], Any, Node, bool], None]


def _skip_dynamo_by_code() -> Callable[[Any], None] | None:
    """A setter that makes Dynamo run a code object and everything it calls eagerly, if
    this torch has one (it is set on the code object, so it costs nothing per call)."""
    try:
        from torch._C._dynamo.eval_frame import (
            _FrameAction,
            _FrameExecStrategy,
            set_code_exec_strategy,
        )
    except ImportError:
        return None
    strategy = _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP)
    return lambda code: set_code_exec_strategy(code, strategy)


_set_skip = _skip_dynamo_by_code()


class SessionMode(TorchDispatchMode):
    """Runs each op, then hands it to the observers with its owner and phase."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Dynamo must never trace __torch_dispatch__ (nor the observers it calls) when a
        # compiled function runs inside the session. torch does that by wrapping it in
        # ``torch._dynamo.disable``, a Python wrapper on every op; where the code object
        # can carry the same "skip, recursively" strategy (set below), it is not needed.
        return _set_skip is None

    def __init__(
        self,
        tracker: ScopeTracker,
        callbacks: Sequence[OpCallback],
        on_label: Callable[[Any, tuple[Any, ...], Any], None] | None = None,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.tracker = tracker
        self.callbacks = callbacks
        #: called with (func, args, out) for the ops that open and close a
        #: ``record_function`` range (``collect.labels``), before the observers
        self.on_label = on_label
        # id(func) -> (func, its composite kernel on dense, on nested tensors); once per op
        self._plans: dict[int, tuple[OpOverload, DispatchKey | None, DispatchKey | None]] = {}
        # ids of the ops whose decomposition is running (see __torch_dispatch__)
        self._decomposing: set[int] = set()

    def __torch_dispatch__(
        self,
        func: OpOverload,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        if kwargs is None:
            kwargs = {}
        plan = self._plans.get(id(func))
        if plan is None:
            plan = self._plans[id(func)] = (func, *decomposition_keys(func))
        key = plan[1]
        if plan[2] != key and _has_nested(args, kwargs):
            key = plan[2]
        # A decomposition that asks for its own op again (``sym_is_contiguous`` of a
        # jagged nested tensor asks the tensor, whose Python subclass sends it back here)
        # runs it as torch does, through the tensor's own kernel, as any other op.
        if key is not None and id(func) not in self._decomposing and id(func) not in _whole.ops:
            self._decomposing.add(id(func))
            try:
                with self:
                    return func._op_dk(key, *args, **kwargs)
            finally:
                self._decomposing.discard(id(func))
        out = func(*args, **kwargs)
        if (func is ENTER_OP or func is EXIT_OP) and self.on_label is not None:
            self.on_label(func, args, out)
        grad_node = current_autograd_node()
        if grad_node is None:
            node, backward = self.tracker.current, False
        else:
            node, backward = self.tracker.backward_owner(grad_node), True
        charged = self.tracker.charged
        if charged is not None:  # work done for a module away from its calls
            node = charged[0]
            if charged[1] is not None:
                backward = charged[1]
        for callback in self.callbacks:
            try:
                callback(func, args, kwargs, out, node, backward)
            except LayerscopeError:
                raise
            except Exception as e:  # the observer's fault, not the model's
                raise observer_error(callback, "on_op", e) from e
        return out


class LocalSessionMode(SessionMode):  # type: ignore[no-untyped-call]
    """A session's mode that observes one rank's work inside DTensor ops
    (``collect.dtensors``, active while ``local_shards`` is): it declines an op on
    DTensors, which DTensor then runs as local ops and collectives that reach it, and
    runs DTensor's sharding propagation unobserved."""

    def __torch_dispatch__(
        self,
        func: OpOverload,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        if shards.quiet:  # DTensor's sharding propagation, on fake tensors
            return func(*args, **(kwargs or {}))
        dtensor = shards.dtensor
        if dtensor is not None and any(issubclass(t, dtensor) for t in types):
            return NotImplemented
        return super().__torch_dispatch__(func, types, args, kwargs)


if _set_skip is not None:
    _set_skip(SessionMode.__torch_dispatch__.__code__)
    _set_skip(LocalSessionMode.__torch_dispatch__.__code__)

#: The per-mode bookkeeping ``TorchDispatchMode.__enter__`` pushes and ``__exit__`` pops.
_FLAG_DEQUES = (
    "old_dispatch_mode_flags",
    "old_non_infra_dispatch_mode_flags",
    "old_without_ignore_compile_internals_dispatch_mode_flags",
)


def _entered_by_base(mode: TorchDispatchMode) -> bool:
    """Whether ``TorchDispatchMode.__exit__`` can take ``mode`` off (it was pushed by the base
    class's ``__enter__``, which left its flags to pop), not only by a bare push."""
    return all(getattr(mode, name, None) for name in _FLAG_DEQUES)


def remove_function_mode(mode: TorchFunctionMode) -> bool:
    """Take ``mode`` off this thread's torch-function mode stack, wherever it is in it;
    False if it is not there.

    ``TorchFunctionMode.__exit__`` pops whichever mode is on top. A mode entered in a
    forward pre-hook and left in an ``always_call`` forward hook stays on the stack when
    the forward raises a ``BaseException`` that is not an ``Exception`` (torch runs
    those hooks for ``Exception`` only): the next ``__exit__`` would then pop it instead
    of its own. Here the modes above ``mode`` come off and go back in their order.
    """
    depth = len_torch_function_stack()
    at = next((i for i in range(depth - 1, -1, -1) if get_function_stack_at(i) is mode), None)
    if at is None:
        return False
    above = [pop_torch_function_stack() for _ in range(depth - 1 - at)]
    try:
        pop_torch_function_stack()
    finally:
        for m in reversed(above):
            push_on_torch_function_stack(m)
    return True


def remove_mode(mode: TorchDispatchMode) -> None:
    """Take ``mode`` off this thread's dispatch mode stack, wherever it is in it.

    ``TorchDispatchMode.__exit__`` pops whichever mode is on top: when sessions end in
    another order than they began (``p1`` entered, ``p2`` entered, ``p1`` exited), that
    is another session's (or the user's) mode. Here the modes above ``mode`` come off,
    ``mode`` comes off, and they go back in their order. They come off and go back through
    ``TorchDispatchMode``'s own ``__exit__``/``__enter__``, which keep torch's "a mode is
    active" flags right, and not through their subclasses' (a user's mode must not see
    itself end and start again). A mode not on this thread's stack is left alone.
    """
    depth = len_torch_dispatch_stack()
    if depth and get_dispatch_stack_at(depth - 1) is mode:  # on top, as when sessions nest
        TorchDispatchMode.__exit__(mode, None, None, None)  # type: ignore[no-untyped-call]
        return
    stack = _get_current_dispatch_mode_stack()
    at = next((i for i in range(len(stack) - 1, -1, -1) if stack[i] is mode), None)
    if at is None:
        return
    above = stack[at + 1 :]
    by_base = [_entered_by_base(m) for m in above]
    for m, base in zip(reversed(above), reversed(by_base), strict=True):
        if base:
            TorchDispatchMode.__exit__(m, None, None, None)  # type: ignore[no-untyped-call]
        else:
            _pop_mode()
    try:
        TorchDispatchMode.__exit__(mode, None, None, None)  # type: ignore[no-untyped-call]
    finally:
        for m, base in zip(above, by_base, strict=True):
            if base:
                TorchDispatchMode.__enter__(m)  # type: ignore[no-untyped-call]
            else:
                _push_mode(m)
