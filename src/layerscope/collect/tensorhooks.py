"""Tensor hooks registered while a session runs name their node when they raise.

A tensor hook (``y.register_hook(fn)``) is called by the autograd engine with no frame
of torch's around it, so an error it raises carries nothing that names the autograd
node it ran for. While any session is installed, ``torch.Tensor.register_hook`` is
replaced by a version that, for calls from a thread with a session, registers ``fn``
inside a pass-through wrapper: when ``fn`` raises, the wrapper tells each of those
sessions the module whose forward created the tensor's autograd node (for a leaf such
as a parameter, the module running when the hook was registered), then re-raises. The
original method is put back when the last session ends. Hooks registered outside a
session, or from a thread without one, are registered as they are.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from layerscope.collect.active import active

if TYPE_CHECKING:
    from layerscope.collect.scopes import ScopeTracker

_lock = threading.Lock()
_sessions = 0
_original: Callable[..., Any] = torch.Tensor.register_hook


def _register_hook(self: torch.Tensor, hook: Callable[..., Any]) -> Any:
    trackers = active.trackers
    if not trackers or not callable(hook):
        return _original(self, hook)
    grad_fn = self.grad_fn
    sites = [(weakref.ref(t), t.current) for t in trackers]

    @functools.wraps(hook)
    def checked(grad: Any) -> Any:
        try:
            return hook(grad)
        except BaseException as e:
            for ref, current in sites:
                tracker = ref()
                if tracker is not None and tracker.installed:
                    owner = tracker.grad_owner(grad_fn) if grad_fn is not None else current
                    tracker.mark_backward_site(e, owner)
            raise

    return _original(self, checked)


def acquire(tracker: ScopeTracker) -> None:
    """A session starts: tensor hooks registered in its thread are checked."""
    global _sessions
    with _lock:
        if _sessions == 0:
            torch.Tensor.register_hook = _register_hook  # type: ignore[method-assign]
        _sessions += 1


def release(tracker: ScopeTracker) -> None:
    """A session ends; the last one puts ``register_hook`` back."""
    global _sessions
    with _lock:
        _sessions = max(_sessions - 1, 0)
        if _sessions == 0:
            torch.Tensor.register_hook = _original  # type: ignore[method-assign]
