"""Gradient shapes per module: the gradients that reach a module's inputs and outputs in
a backward pass (``Node.grad_inputs``, ``Node.grad_outputs``), as torch_inspector shows.

A tensor hook on each input and output leaf that requires grad, registered when the
module's call starts and ends, notes the gradient's spec when autograd computes it. The
hooks only read the gradient (they return None, so autograd uses it unchanged) and are
removed when the session ends, so the user's tensors keep no hook of layerscope's.

A forward that non-reentrant activation checkpointing runs again in the backward pass
gets no hooks: its output reaches no loss (the backward uses only the tensors it saves),
its inputs' gradients are those of the forward's call, and hooks on the recomputed
tensors would keep them alive after the backward. (Reentrant checkpointing runs the
forward under ``no_grad`` and its recomputation's backward is the real one: hooked there.)
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from layerscope.collect.observer import Observer
from layerscope.collect.signature import spec_of
from layerscope.profile import Node, Profile, Signature, Spec, ValueSpec
from layerscope.torchapi import current_autograd_node, in_recomputation

if TYPE_CHECKING:
    from layerscope.collect.scopes import ScopeTracker

#: Distinct gradient signatures kept per module and side (as for inputs and outputs).
MAX_GRAD_SIGNATURES = 16


def tensor_leaves(value: Any, path: str) -> Iterator[tuple[str, Tensor]]:
    """``(path, tensor)`` of every tensor in ``value`` (tuples, lists and dicts walked)."""
    if isinstance(value, Tensor):
        yield path, value
    elif isinstance(value, tuple | list):
        for i, v in enumerate(value):
            yield from tensor_leaves(v, f"{path}.{i}" if path else str(i))
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from tensor_leaves(v, f"{path}.{k}" if path else str(k))


def _recomputing() -> bool:
    """Whether a backward pass runs this call as non-reentrant checkpointing's
    recomputation (the cheap test first: outside backward it is not)."""
    return current_autograd_node() is not None and in_recomputation()


class _Call:
    """One module call's hooked leaves (one side) and the gradient specs that arrived."""

    __slots__ = ("node", "outputs", "paths", "specs")

    def __init__(self, node: Node, outputs: bool, paths: list[str]) -> None:
        self.node = node
        self.outputs = outputs
        self.paths = paths
        self.specs: list[Spec | None] = [None] * len(paths)

    def hook(self, i: int) -> Any:
        specs, path = self.specs, self.paths[i]

        def record(grad: Tensor | None) -> None:
            if grad is not None:
                specs[i] = spec_of(path, grad.shape, grad.dtype, grad.device)

        return record


class GradShapes(Observer):
    """Records the specs of the gradients reaching each module's inputs and outputs."""

    def __init__(self) -> None:
        self._calls: list[_Call] = []
        self._handles: list[RemovableHandle] = []
        # tensors that had no hook dict before ours: given back without one
        self._no_hooks_before: list[weakref.ref[Tensor]] = []

    def install(self, tracker: ScopeTracker) -> None:
        self._calls = []
        self._handles = []
        self._no_hooks_before = []

    def uninstall(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        for ref in self._no_hooks_before:
            t = ref()
            if t is not None and t._backward_hooks is not None and not t._backward_hooks:
                t._backward_hooks = None
        self._no_hooks_before = []

    def on_enter(
        self, node: Node, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        if torch.is_grad_enabled() and not _recomputing():
            self._hook(node, False, [*tensor_leaves(args, ""), *tensor_leaves(kwargs, "")])

    def on_exit(self, node: Node, module: nn.Module, output: Any, raised: bool) -> None:
        if not raised and torch.is_grad_enabled() and not _recomputing():
            self._hook(node, True, list(tensor_leaves(output, "")))

    def _hook(self, node: Node, outputs: bool, leaves: list[tuple[str, Tensor]]) -> None:
        leaves = [(p, t) for p, t in leaves if t.requires_grad]
        if not leaves:
            return
        call = _Call(node, outputs, [p for p, _ in leaves])
        self._calls.append(call)
        for i, (_, t) in enumerate(leaves):
            if t._backward_hooks is None:
                self._no_hooks_before.append(weakref.ref(t))
            self._handles.append(t.register_hook(call.hook(i)))  # type: ignore[no-untyped-call]

    def finish(self, profile: Profile) -> None:
        """Each call whose gradients arrived gives a signature; distinct ones are kept."""
        seen: set[tuple[int, bool, Signature]] = set()
        for call in self._calls:
            if all(s is None for s in call.specs):
                continue  # no backward reached this call
            sig: Signature = tuple(
                s if s is not None else ValueSpec(p, "None")
                for p, s in zip(call.paths, call.specs, strict=True)
            )
            key = (id(call.node), call.outputs, sig)
            if key in seen:
                continue
            seen.add(key)
            kept = call.node.grad_outputs if call.outputs else call.node.grad_inputs
            if len(kept) < MAX_GRAD_SIGNATURES:
                kept.append(sig)
        self._calls = []
