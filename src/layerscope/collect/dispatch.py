"""The one dispatch mode of a session: every aten op, attributed to a module, to observers.

It runs only when some observer overrides ``Observer.on_op``.

Forward ops belong to the innermost running module (``ScopeTracker.current``). Backward
ops belong to the module whose forward created the autograd node being executed:
``torch._C._current_autograd_node()`` names that node and ``ScopeTracker.grad_owner``
maps it to its module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch._ops import OpOverload
from torch.utils._python_dispatch import TorchDispatchMode

from layerscope.collect.scopes import ScopeTracker
from layerscope.profile import Node

#: ``Observer.on_op``: (func, args, kwargs, out, node, backward) -> None
OpCallback = Callable[[OpOverload, tuple[Any, ...], dict[str, Any], Any, Node, bool], None]


class SessionMode(TorchDispatchMode):
    """Runs each op, then hands it to the observers with its owner and phase."""

    def __init__(self, tracker: ScopeTracker, callbacks: Sequence[OpCallback]) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.tracker = tracker
        self.callbacks = callbacks

    def __torch_dispatch__(
        self,
        func: OpOverload,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        grad_node = torch._C._current_autograd_node()
        if grad_node is None:
            node, backward = self.tracker.current, False
        else:
            node, backward = self.tracker.grad_owner(grad_node), True
        for callback in self.callbacks:
            callback(func, args, kwargs, out, node, backward)
        return out
