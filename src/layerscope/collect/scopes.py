"""The module scope stack: which module is running now, fed by forward pre/post hooks.

``ScopeTracker.current`` answers "which module is running" for any per-op observer (the
innermost module on the stack, the root when none is). Every module instance of the
model is instrumented, and put back in ``uninstall`` (called from ``finally``):

- a module without hooks of its own gets a ``forward`` instance attribute, a method
  wrapping its class's forward (``__wrapped__`` keeps ``inspect.signature`` right).
  nn.Module's call skips all hook machinery for a module without hooks, and that
  machinery costs more per call than this wrapper, so the common case stays on torch's
  fast path;
- a module that has hooks (the user's forward or backward hooks, a lazy module's
  initialiser) or a ``forward`` of its own on the instance gets a forward pre hook
  (prepended, with kwargs) and a forward hook (``always_call=True``) instead, so the
  user's pre hooks run inside its scope as before.

Either way the stack stays balanced when a module raises, and the innermost module on an
exception's way out is remembered so the error can name where it happened.

Backward attribution: autograd numbers every node it creates with a thread-local
sequence number. Each hook records "from this sequence number on, new autograd nodes
belong to this module", a step function over sequence numbers; a backward op is then
attributed by looking up its autograd node's number (``grad_owner``), O(log n), with no
graph walks and no references kept to the user's graph.
"""

from __future__ import annotations

import sys
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from types import MethodType
from typing import Any, Literal

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from layerscope.collect.common import install_hook_pairs, remove_hooks
from layerscope.collect.observer import Observer
from layerscope.collect.signature import flatten, flatten_call
from layerscope.collect.tree import ModelTree
from layerscope.profile import Node, Signature

#: Distinct input/output signatures kept per module; later distinct ones are only counted.
MAX_SIGNATURES = 16
#: The sequence number autograd gives nodes outside the sequence (AccumulateGrad).
_NO_SEQUENCE = 2**64 - 1
_next_sequence_nr = torch._C._autograd._get_sequence_nr


def _tensor_key(values: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """``(shape, dtype, device)`` of each value if every one is a plain dense tensor, else
    None: what their Signature is made of, at a fraction of the cost of building it."""
    key = []
    for v in values:
        if type(v) is not torch.Tensor or v.is_nested:
            return None
        key.append((v.shape, v.dtype, v.device))
    return tuple(key)


@dataclass(slots=True)
class Frame:
    node: Node
    module: nn.Module
    exc_at_entry: BaseException | None


class ScopeTracker:
    """Keeps the stack of running modules and records calls and shapes per node."""

    def __init__(
        self, tree: ModelTree, record_shapes: bool = True, observers: Sequence[Observer] = ()
    ) -> None:
        self.tree = tree
        self.record_shapes = record_shapes
        self._enter = [o.on_enter for o in observers if o.overrides("on_enter")]
        self._exit = [o.on_exit for o in observers if o.overrides("on_exit")]
        self.stack: list[Frame] = []
        self.first_call: dict[int, int] = {}  # id(node) -> sequence number of first call
        # id(node) -> {"inputs"/"outputs": distinct signatures seen but not kept}
        self.extra_signatures: dict[int, dict[str, int]] = {}
        self.error_site: dict[int, tuple[BaseException, Node]] = {}  # id(exc) -> (exc, node)
        self._seen_in: dict[int, set[Signature]] = {}
        self._seen_out: dict[int, set[Signature]] = {}
        # id(node) -> _tensor_key of the calls already recorded (a fast path of the above)
        self._keys_in: dict[int, set[tuple[Any, ...]]] = {}
        self._keys_out: dict[int, set[tuple[Any, ...]]] = {}
        self._seq = 0
        self._handles: list[RemovableHandle] = []
        # (module, the forward method set on it); empty once uninstalled
        self._wrapped: list[tuple[nn.Module, MethodType]] = []
        self._grad_starts: list[int] = []  # sequence numbers where ownership changes
        self._grad_owners: list[Node] = []

    # ---- queries used by observers -------------------------------------------------
    @property
    def current(self) -> Node:
        """The innermost running module's node; the root outside any module."""
        return self.stack[-1].node if self.stack else self.tree.root

    def grad_owner(self, grad_node: Any) -> Node:
        """The module whose forward created this autograd node (the root if none did)."""
        seq = grad_node._sequence_nr()
        i = bisect_right(self._grad_starts, seq) - 1
        if i < 0 or seq == _NO_SEQUENCE:
            return self.tree.root
        return self._grad_owners[i]

    def _owns_new_grad_nodes(self, node: Node) -> None:
        seq = _next_sequence_nr()
        if self._grad_starts and self._grad_starts[-1] == seq:
            self._grad_owners[-1] = node
        else:
            self._grad_starts.append(seq)
            self._grad_owners.append(node)

    # ---- installation --------------------------------------------------------------
    def install(self) -> None:
        self._owns_new_grad_nodes(self.tree.root)
        hooked: list[nn.Module] = []
        for m in self.tree.modules():
            if (
                m._forward_pre_hooks
                or m._forward_hooks
                or m._backward_hooks
                or m._backward_pre_hooks
                or "forward" in m.__dict__  # the user's own per-instance forward
            ):
                hooked.append(m)
            else:
                self._wrap_forward(m)
        self._handles = install_hook_pairs(
            ((m, self._pre, self._post) for m in hooked), with_kwargs=True, prepend_pre=True
        )

    def uninstall(self) -> None:
        remove_hooks(self._handles)
        for module, wrapper in self._wrapped:
            if module.__dict__.get("forward") is wrapper:
                del module.__dict__["forward"]
        self._wrapped.clear()

    def _wrap_forward(self, module: nn.Module) -> None:
        """Set ``module.forward`` to a method that runs the class's forward in scope.

        A bound method (not a closure over ``module``) so that a copy made while it is set
        (``copy.deepcopy`` copies ``__dict__``) is bound to the copy: the copy runs its
        own forward, untracked, then and after the session.
        """
        forward_fn = type(module).forward
        pre, post, wrapped = self._pre, self._post, self._wrapped

        def forward(this: nn.Module, *args: Any, **kwargs: Any) -> Any:
            if this is not module or not wrapped:  # a copy, or the session is over
                return forward_fn(this, *args, **kwargs)
            pre(module, args, kwargs)
            try:
                out = forward_fn(module, *args, **kwargs)
            except BaseException:
                post(module, args, kwargs, None)  # sees the exception in sys.exc_info()
                raise
            post(module, args, kwargs, out)
            return out

        forward.__wrapped__ = forward_fn  # type: ignore[attr-defined]
        method = MethodType(forward, module)
        self._wrapped.append((module, method))
        module.__dict__["forward"] = method

    # ---- hooks ---------------------------------------------------------------------
    def _resolve(self, module: nn.Module) -> Node:
        nodes = self.tree.nodes_of[id(module)]
        if len(nodes) == 1:
            return nodes[0]
        # A module registered under several paths: pick the path whose parent is running.
        parent_of = self.tree.parent
        for frame in reversed(self.stack):
            for n in nodes:
                if parent_of[id(n)] is frame.node:
                    return n
        return nodes[0]

    def _pre(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        node = self._resolve(module)
        node.calls += 1
        if id(node) not in self.first_call:
            self.first_call[id(node)] = self._seq
        self._seq += 1
        if self.record_shapes:
            key = None if kwargs else _tensor_key(args)
            if key is None or key not in self._keys_in.setdefault(id(node), set()):
                self._remember(node, "inputs", self._seen_in, flatten_call(args, kwargs))
                self._key_seen(self._keys_in, node, key)
        self.stack.append(Frame(node, module, sys.exc_info()[1]))
        self._owns_new_grad_nodes(node)
        for on_enter in self._enter:
            on_enter(node, module, args, kwargs)

    def _post(
        self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any
    ) -> None:
        # Find this module's frame; normally the top, unless a pre hook of the user's that
        # runs before ours raised (then it was never pushed).
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i].module is module:
                break
        else:
            return
        frame = self.stack[i]
        del self.stack[i:]
        self._owns_new_grad_nodes(self.current)
        exc = sys.exc_info()[1]
        if exc is not None and exc is not frame.exc_at_entry:
            self.mark_error_site(exc, frame.node)
            for on_exit in self._exit:
                on_exit(frame.node, module, None, True)
            return
        if self.record_shapes:
            node = frame.node
            key = _tensor_key((output,))
            if key is None or key not in self._keys_out.setdefault(id(node), set()):
                self._remember(node, "outputs", self._seen_out, flatten(output))
                self._key_seen(self._keys_out, node, key)
        for on_exit in self._exit:
            on_exit(frame.node, module, output, False)

    def _remember(
        self,
        node: Node,
        kind: Literal["inputs", "outputs"],
        seen: dict[int, set[Signature]],
        sig: Signature,
    ) -> None:
        known = seen.setdefault(id(node), set())
        if sig in known:
            return
        known.add(sig)
        if len(known) > MAX_SIGNATURES:  # distinct, but only counted
            self.extra_signatures.setdefault(id(node), {})[kind] = len(known) - MAX_SIGNATURES
            return
        getattr(node, kind).append(sig)

    @staticmethod
    def _key_seen(
        keys: dict[int, set[tuple[Any, ...]]], node: Node, key: tuple[Any, ...] | None
    ) -> None:
        """Remember the cheap key of a recorded signature (up to a bound), so that the
        next call with the same plain tensors skips building it."""
        if key is not None:
            known = keys[id(node)]
            if len(known) < 4 * MAX_SIGNATURES:
                known.add(key)

    def mark_error_site(self, exc: BaseException, node: Node) -> None:
        """Record that ``exc`` was raised in ``node``; the first (innermost) mark wins."""
        self.error_site.setdefault(id(exc), (exc, node))

    def site_of(self, exc: BaseException) -> Node | None:
        """The innermost module that was running when ``exc`` was raised, if any."""
        entry = self.error_site.get(id(exc))
        return entry[1] if entry is not None and entry[0] is exc else None
