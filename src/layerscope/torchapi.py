"""torch's private functions that layerscope relies on, bound once for every module.

torch keeps these under ``torch._C`` with no promise that they stay. Binding them here
puts every use in one place; a torch that lacks one still imports layerscope, and the
first call fails with a ``LayerscopeError`` naming the function and the torch version
instead of an ``AttributeError`` deep inside a session.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NoReturn, cast

import torch

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

__all__ = [
    "NO_SEQUENCE",
    "DisableTorchDispatch",
    "current_autograd_node",
    "dispatch_has_kernel",
    "fa3_sdp_enabled",
    "get_dispatch_stack_at",
    "get_sequence_nr",
    "len_torch_dispatch_stack",
    "private",
    "sdp_priority_order",
    "set_version_counters",
]
