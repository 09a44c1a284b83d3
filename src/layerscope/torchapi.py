"""torch's private functions that layerscope relies on, bound once for every module.

torch keeps these under ``torch._C`` with no promise that they stay. Binding them here
puts every use in one place; a torch that lacks one still imports layerscope, and the
first call fails with a ``LayerscopeError`` naming the function and the torch version
instead of an ``AttributeError`` deep inside a session.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from types import CodeType, FrameType
from typing import Any, NoReturn, cast

import torch
import torch.utils.checkpoint

from layerscope.errors import LayerscopeError

#: The sequence number autograd gives nodes outside the sequence (AccumulateGrad).
NO_SEQUENCE = 2**64 - 1


def private(path: str) -> Any:
    """``torch.<path>`` (e.g. ``"_C._current_autograd_node"``), or, where this torch has
    none, a stand-in that raises a ``LayerscopeError`` naming it when called."""
    value: Any = torch
    for part in path.split("."):
        value = getattr(value, part, None)
        if value is None:
            return _missing(path)
    return value


def _missing(path: str) -> Callable[..., NoReturn]:
    def missing(*args: object, **kwargs: object) -> NoReturn:
        raise LayerscopeError(
            f"layerscope needs torch.{path}, which torch {torch.__version__} does not "
            "have; install a torch release layerscope supports"
        )

    return missing


#: The sequence number the next autograd node created in this thread gets.
get_sequence_nr = cast(Callable[[], int], private("_C._autograd._get_sequence_nr"))
#: The autograd node whose backward runs now in this thread, or None outside backward.
current_autograd_node = cast(Callable[[], Any], private("_C._current_autograd_node"))
#: How many Python dispatch modes are on the stack.
len_torch_dispatch_stack = cast(Callable[[], int], private("_C._len_torch_dispatch_stack"))
#: The dispatch mode at a position of the stack (0 is the outermost).
get_dispatch_stack_at = cast(Callable[[int], Any], private("_C._get_dispatch_stack_at"))
#: How many torch-function modes are on the stack.
len_torch_function_stack = cast(Callable[[], int], private("_C._len_torch_function_stack"))
#: The torch-function mode at a position of the stack (0 is the outermost).
get_function_stack_at = cast(Callable[[int], Any], private("_C._get_function_stack_at"))
#: Take the top torch-function mode off the stack (returned); push one on top.
pop_torch_function_stack = cast(Callable[[], Any], private("_C._pop_torch_function_stack"))
push_on_torch_function_stack = cast(
    Callable[[Any], None], private("_C._push_on_torch_function_stack")
)
#: Whether an op (by qualified name) has a kernel for a dispatch key.
dispatch_has_kernel = cast(
    Callable[[str, Any], bool], private("_C._dispatch_has_kernel_for_dispatch_key")
)
#: A context that turns Python dispatch (modes and subclasses) off inside it.
DisableTorchDispatch = cast(Callable[[], Any], private("_C._DisableTorchDispatch"))
#: Set the version counters of tensors (restoring state without breaking saved graphs).
set_version_counters = cast(
    Callable[[Sequence[Any], Sequence[int]], None],
    private("_C._autograd._unsafe_set_version_counter"),
)
#: The global SDPA backend priority order (``sdpa_kernel(set_priority=True)`` sets it).
sdp_priority_order = cast(Callable[[], Sequence[Any]], private("_C._get_sdp_priority_order"))
#: Whether FlashAttention-3 may be chosen on sm90 and newer.
fa3_sdp_enabled = cast(Callable[[], bool], private("_C._get_fa3_sdp_enabled"))

#: The saved-tensor hooks (pack, unpack) on top of this thread's stack, or None.
top_saved_tensors_hooks = cast(
    Callable[[bool], "tuple[Any, Any] | None"],
    private("_C._autograd._top_saved_tensors_default_hooks"),
)

# ---- non-reentrant activation checkpointing (torch.utils.checkpoint) ------------------
# It saves the positional inputs in ``_CheckpointFrame.save_inputs`` (through the
# saved-tensor hooks in force), keeps the call's ``fn`` and keyword arguments in the
# frame's ``recompute_fn`` closure, pushes a ``_checkpoint_hook`` (whose pack hook holds
# the frame) around the forward, and runs the forward again in the backward pass under a
# ``_recomputation_hook``. Each name below is None on a torch without it: then
# checkpointed calls are measured as any other.
_checkpointing: Any = torch.utils.checkpoint

#: The exception non-reentrant checkpointing raises inside a recomputation to end it once
#: every tensor the backward needs is back, and catches at once.
STOP_RECOMPUTATION: type[BaseException] | None = getattr(
    _checkpointing, "_StopRecomputationError", None
)


def _local_code(owner: Any, name: str) -> CodeType | None:
    """The code object of the function ``name`` defined in ``owner.__init__``."""
    init = getattr(getattr(owner, "__init__", None), "__code__", None)
    if init is None:
        return None
    for const in init.co_consts:
        if isinstance(const, CodeType) and const.co_name == name:
            return const
    return None


_RECOMPUTE_UNPACK = _local_code(getattr(_checkpointing, "_recomputation_hook", None), "unpack_hook")
_CHECKPOINT_PACK = _local_code(getattr(_checkpointing, "_checkpoint_hook", None), "pack_hook")
_save_inputs = getattr(getattr(_checkpointing, "_CheckpointFrame", None), "save_inputs", None)
#: ``save_inputs``'s code and that of the comprehensions in it (frames of their own
#: before Python 3.12).
_SAVE_INPUTS: frozenset[CodeType] = (
    frozenset(
        {
            _save_inputs.__code__,
            *(c for c in _save_inputs.__code__.co_consts if isinstance(c, CodeType)),
        }
    )
    if _save_inputs is not None
    else frozenset()
)


def in_recomputation() -> bool:
    """Whether non-reentrant checkpointing is running a forward again now (in a backward
    pass): its recomputation hooks are the innermost saved-tensor hooks."""
    hooks = top_saved_tensors_hooks(False)
    return hooks is not None and getattr(hooks[1], "__code__", None) is _RECOMPUTE_UNPACK


def checkpoint_of_pack_hook(pack: Any) -> Any | None:
    """The checkpoint frame (``_CheckpointFrame``) whose forward a pack hook serves, if
    ``pack`` is non-reentrant checkpointing's own, else None."""
    if _CHECKPOINT_PACK is None or getattr(pack, "__code__", None) is not _CHECKPOINT_PACK:
        return None
    for name, cell in zip(pack.__code__.co_freevars, pack.__closure__ or (), strict=False):
        if name == "frame":
            return cell.cell_contents
    return None


def checkpoint_saving_inputs(frame: FrameType | None) -> Any | None:
    """The checkpoint frame whose positional inputs are being saved, if ``frame`` (or the
    one that called it) is ``_CheckpointFrame.save_inputs`` (or a comprehension in it)."""
    for _ in range(2):
        if frame is None or frame.f_code not in _SAVE_INPUTS:
            return None
        if frame.f_code is _save_inputs.__code__:  # type: ignore[union-attr]
            return frame.f_locals.get("self")
        frame = frame.f_back
    return None


_APPLY = torch.autograd.Function.apply.__code__
_REENTRANT = getattr(_checkpointing, "CheckpointFunction", None)


def reentrant_checkpointed(frame: FrameType | None) -> Any | None:
    """The function a reentrant checkpoint runs, if ``frame`` is ``Function.apply`` of
    its ``CheckpointFunction`` (whose ``save_for_backward`` of the inputs is being
    packed), else None."""
    if frame is None or frame.f_code is not _APPLY or _REENTRANT is None:
        return None
    local = frame.f_locals
    args = local.get("args")
    return args[0] if local.get("cls") is _REENTRANT and args else None


def checkpointed_call(checkpoint: Any) -> tuple[Any, dict[str, Any]]:
    """The function a checkpoint frame runs (and runs again) and the keyword arguments it
    holds for it (None and ``{}`` where they cannot be found)."""
    recompute: Any = getattr(checkpoint, "recompute_fn", None)
    code = getattr(recompute, "__code__", None)
    found: dict[str, Any] = {}
    if code is not None:
        for name, cell in zip(code.co_freevars, recompute.__closure__ or (), strict=False):
            if name in ("fn", "kwargs"):
                with contextlib.suppress(ValueError):  # an empty cell
                    found[name] = cell.cell_contents
    kwargs = found.get("kwargs")
    return found.get("fn"), kwargs if isinstance(kwargs, dict) else {}


__all__ = [
    "NO_SEQUENCE",
    "STOP_RECOMPUTATION",
    "DisableTorchDispatch",
    "checkpoint_of_pack_hook",
    "checkpoint_saving_inputs",
    "checkpointed_call",
    "current_autograd_node",
    "dispatch_has_kernel",
    "fa3_sdp_enabled",
    "get_dispatch_stack_at",
    "get_sequence_nr",
    "in_recomputation",
    "len_torch_dispatch_stack",
    "private",
    "reentrant_checkpointed",
    "sdp_priority_order",
    "set_version_counters",
    "top_saved_tensors_hooks",
]
