"""What a measurement plugs into a session: module enter/exit, aten ops, and a finish step.

The session owns the hooks and the one dispatch mode; an ``Observer`` only receives
events. Override what you need; the session calls only the methods an observer
overrides (``on_op`` needs the dispatch mode, which runs only if some observer wants it).

An exception an observer raises in any of these methods is the measurement's fault, not
the model's: the session re-raises it as ``ObserverError`` (``observer_error``), the
original chained, unless it is a ``LayerscopeError`` already (``NonFiniteError``, a user's
``FlopFormulaError``), which goes through as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torch import nn
from torch._ops import OpOverload

from layerscope.errors import ObserverError
from layerscope.profile import Node, Profile

if TYPE_CHECKING:
    from layerscope.collect.scopes import ScopeTracker


class Observer:
    """Base class of the measurements a session feeds (FLOPs, memory, numerics, ...)."""

    def install(self, tracker: ScopeTracker) -> None:
        """Called when the session starts, after the module hooks are in place."""

    def uninstall(self) -> None:
        """Called when the session ends, also when the model raised (from ``finally``)."""

    def on_enter(
        self, node: Node, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """A module's forward starts (after ``node`` was pushed on the scope stack)."""

    def on_exit(self, node: Node, module: nn.Module, output: Any, raised: bool) -> None:
        """A module's forward ended; ``raised`` when it ended with an exception."""

    def on_op(
        self,
        func: OpOverload,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        out: Any,
        node: Node,
        backward: bool,
    ) -> None:
        """One aten op ran, attributed to ``node``; ``backward`` in the backward pass."""

    def finish(self, profile: Profile) -> None:
        """Write results into the profile's nodes (self metrics) before it is rolled up."""

    @classmethod
    def overrides(cls, name: str) -> bool:
        """Whether this observer's class implements ``name`` (so the session must call it)."""
        return getattr(cls, name) is not getattr(Observer, name)


def observer_error(callback: Callable[..., Any], name: str, error: BaseException) -> ObserverError:
    """The ``ObserverError`` for ``error``, raised by ``callback``, an observer's bound
    method ``name``; raise it ``from error``."""
    owner = getattr(callback, "__self__", None)
    cls = type(owner).__qualname__ if owner is not None else "<unknown>"
    return ObserverError(
        f"observer {cls} raised {type(error).__name__} in {name}: {error}",
        observer=cls,
        callback=name,
    )
