"""The one dispatch mode of a session: every aten op, attributed to a module, to observers.

Forward ops belong to the innermost running module (``ScopeTracker.current``). Backward
ops belong to the module whose forward created the autograd node being executed:
``torch._C._current_autograd_node()`` names that node and ``ScopeTracker.grad_owner``
maps it to its module.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch._ops import OpOverload
from torch.utils._python_dispatch import TorchDispatchMode

from layerscope.collect.scopes import ScopeTracker
from layerscope.profile import Node


class OpObserver(Protocol):
    """Receives each aten op once, after it ran, with the module it is attributed to."""

    def on_op(
        self,
        func: OpOverload,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        out: Any,
        node: Node,
        backward: bool,
    ) -> None: ...


class SessionMode(TorchDispatchMode):
    """Runs each op, then hands it to the observers with its owner and phase."""

    def __init__(self, tracker: ScopeTracker, observers: list[OpObserver]) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.tracker = tracker
        self.observers = observers

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
        for observer in self.observers:
            observer.on_op(func, args, kwargs, out, node, backward)
        return out
