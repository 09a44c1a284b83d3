"""What the memory observer's saved-tensor hooks store, and what a checkpoint keeps.

The pack hook stores a ``Saved`` (the tensor detached, and its version) or, under a
caller's own hooks, an ``Outer``; ``unpack_saved`` gives autograd the tensor back.

Non-reentrant activation checkpointing keeps, for each checkpointed call, the inputs its
recomputation needs: the positional ones saved through the saved-tensor hooks in force,
the keyword ones (and what a ``functools.partial`` binds) held by reference. Both are
memory the graph holds until the backward, as any saved tensor; ``held_inputs`` finds
the module checkpointed and the tensors held beside the positional ones.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from layerscope.collect.signature import iter_tensors
from layerscope.torchapi import checkpointed_call, reentrant_checkpointed

if TYPE_CHECKING:
    from layerscope.collect.scopes import ScopeTracker
    from layerscope.profile import Node


class Saved:
    """What the pack hook stores: the tensor without its autograd history, and its version.

    Detached, so that a saved *output* does not hold its own ``grad_fn`` (a reference
    cycle that only the cyclic GC could free; torch's docs ask pack hooks for exactly
    this). The version is kept because autograd skips its own "modified by an inplace
    operation" check for hooked tensors; ``unpack`` repeats it.
    """

    __slots__ = ("tensor", "version")

    def __init__(self, tensor: Tensor, version: int) -> None:
        self.tensor = tensor
        self.version = version


class Outer:
    """What the caller's own (outer) pack hook made of a saved tensor, and their unpack."""

    __slots__ = ("inner", "unpack")

    def __init__(self, inner: Any, unpack: Callable[[Any], Tensor]) -> None:
        self.inner = inner
        self.unpack = unpack


def unpack_saved(saved: Saved | Outer) -> Tensor:
    """Give autograd back a saved tensor; module-level, so the graph holds no observer."""
    if isinstance(saved, Outer):
        return saved.unpack(saved.inner)
    t = saved.tensor
    if t._version != saved.version:
        raise RuntimeError(
            "one of the variables needed for gradient computation has been modified by an "
            f"inplace operation: [{t.type()} {list(t.shape)}] is at version {t._version}; "
            f"expected version {saved.version} instead. (checked by layerscope's memory "
            "observer, which saves tensors through saved_tensors_hooks)"
        )
    return t


def remove_saved_hooks(pack: Callable[[Tensor], Any]) -> None:
    """Take the saved-tensor hooks whose pack hook is ``pack`` off this thread's stack,
    wherever they are in it; the hooks above go back in their order."""
    top = torch._C._autograd._top_saved_tensors_default_hooks
    pop = torch._C._autograd._pop_saved_tensors_default_hooks
    push = torch._C._autograd._push_saved_tensors_default_hooks
    above: list[tuple[Any, Any]] = []
    while True:
        hooks = top(False)
        if hooks is None:  # not on the stack (any more): everything goes back
            break
        pop()
        if hooks[0] == pack:
            break
        above.append(hooks)
    for hooks in reversed(above):
        push(*hooks)


def checkpointed_module(fn: Any) -> tuple[nn.Module | None, list[Any]]:
    """The module a checkpoint runs, from the function handed to it: the module itself,
    a bound method of it (``block.__call__``), or either under ``functools.partial``
    (also ``partial(forward, block)``, its first bound argument); None for any other
    function. With it, the values the partials bind (the checkpoint holds them too)."""
    module: nn.Module | None = None
    held: list[Any] = []
    while isinstance(fn, functools.partial):
        if module is None and fn.args and isinstance(fn.args[0], nn.Module):
            module = fn.args[0]
        held += [a for a in fn.args if not isinstance(a, nn.Module)]
        held.append(fn.keywords)
        fn = fn.func
    if module is None:
        owner = fn if isinstance(fn, nn.Module) else getattr(fn, "__self__", None)
        module = owner if isinstance(owner, nn.Module) else None
    return module, held


def saving_node(frame: FrameType | None, tracker: ScopeTracker) -> Node:
    """Where a tensor saved now (not a checkpoint's positional input) counts: at the
    module a reentrant checkpoint runs, if ``frame`` is its ``CheckpointFunction`` saving
    its inputs (``reentrant_checkpointed``), else at the running module."""
    fn = reentrant_checkpointed(frame)
    if fn is None:
        return tracker.current
    return checkpoint_node(checkpointed_module(fn)[0], tracker)


def checkpoint_node(module: nn.Module | None, tracker: ScopeTracker) -> Node:
    """Where the inputs a checkpoint of ``module`` keeps count: at the module's node, or
    at the running module's for a function of no module (or of one not in the model)."""
    found = tracker.node_of(module) if module is not None else None
    return found if found is not None else tracker.current


def held_inputs(checkpoint: Any) -> tuple[nn.Module | None, list[Tensor]]:
    """For a checkpoint frame (``_CheckpointFrame``): the module it checkpoints (None
    for a function of no module) and the tensors it holds by reference for the
    recomputation: its keyword arguments and the values partials bind."""
    fn, kwargs = checkpointed_call(checkpoint)
    module, held = checkpointed_module(fn)
    return module, iter_tensors([held, kwargs])
