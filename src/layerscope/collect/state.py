"""Capture and restore what running a model may change, so profiling leaves no trace.

Covers the global RNG streams (CPU and initialised CUDA devices); every module's class and
``__dict__`` one level deep (attributes added or rebound by forward, train/eval flags, the
parameter/buffer/submodule/hook tables); every buffer's values (BatchNorm running stats,
counters); ``requires_grad``, ``.grad`` and gradient values of every parameter; and lazy
parameters, which a first forward materialises in place. Buffers and gradients are cloned
up front but written back only where their values changed.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from torch._C._functorch import is_functorch_wrapped_tensor
from torch._subclasses.fake_tensor import is_fake
from torch.nn.parameter import is_lazy
from torch.utils._python_dispatch import _disable_current_modes

from layerscope.errors import LayerscopeError

_CONTAINERS = (dict, set, list)


@dataclass
class ModelState:
    cpu_rng: Tensor
    cuda_rng: list[Tensor] | None
    #: Every module once, with its class and a shallow copy of its ``__dict__``.
    modules: list[tuple[nn.Module, type[nn.Module], dict[str, Any]]] = field(default_factory=list)
    #: The non-empty containers (dicts, sets, lists) held in the modules' ``__dict__``,
    #: each with a shallow copy of its contents.
    contents: list[tuple[Any, Any]] = field(default_factory=list)
    #: The empty containers (most hook tables), which only need to stay empty.
    empty: list[Any] = field(default_factory=list)
    #: (module path, name in its table, tensor, requires_grad, grad, version) of every
    #: parameter, and of input leaves (path "", name "<input>").
    params: list[tuple[str, str, Tensor, bool, Tensor | None, int]] = field(default_factory=list)
    grads: list[tuple[Tensor, Tensor]] = field(default_factory=list)  # (grad, saved values)
    buffers: list[tuple[Tensor, Tensor]] = field(default_factory=list)
    lazy: list[tuple[Tensor, type[Tensor], Tensor]] = field(default_factory=list)
    restored: bool = False

    @classmethod
    def capture(cls, model: nn.Module) -> ModelState:
        # Outside any active dispatch mode (a user's FakeTensorMode would fake the copies).
        with _disable_current_modes():
            return cls._capture(model)

    @classmethod
    def _capture(cls, model: nn.Module) -> ModelState:
        cuda_rng = None
        if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
            cuda_rng = torch.cuda.get_rng_state_all()
        state = cls(cpu_rng=torch.get_rng_state(), cuda_rng=cuda_rng)
        modules, contents, empty = state.modules, state.contents, state.empty
        params, grads, buffers, lazy = state.params, state.grads, state.buffers, state.lazy
        # Each distinct parameter and buffer once, in the order of named_parameters() and
        # buffers(); the walk over named_modules() collects them as it goes.
        seen_params: set[int] = set()
        seen_buffers: set[int] = set()
        with torch.no_grad():
            for prefix, m in model.named_modules():
                attrs = m.__dict__.copy()
                modules.append((m, type(m), attrs))
                for v in attrs.values():
                    if isinstance(v, _CONTAINERS):
                        if v:
                            contents.append((v, v.copy()))
                        else:
                            empty.append(v)
                for key, p in m._parameters.items():
                    if p is None or id(p) in seen_params:
                        continue
                    seen_params.add(id(p))
                    if is_lazy(p):
                        lazy.append((p, type(p), p.data))
                        continue
                    grad = p.grad
                    params.append((prefix, key, p, p.requires_grad, grad, p._version))
                    if grad is not None:  # a backward pass accumulates into it in place
                        grads.append((grad, grad.clone()))
                for b in m._buffers.values():
                    if b is None or id(b) in seen_buffers:
                        continue
                    seen_buffers.add(id(b))
                    if is_lazy(b):
                        lazy.append((b, type(b), b.data))
                    else:
                        buffers.append((b, b.clone()))
        return state

    def add_inputs(self, tensors: list[Tensor]) -> None:
        """Also put back the ``.grad`` of these input tensors (leaves that require grad),
        which a backward pass sets or accumulates into."""
        with _disable_current_modes():
            for t in tensors:
                if t.is_leaf and t.requires_grad:
                    self.params.append(("", "<input>", t, True, t.grad, t._version))
                    if t.grad is not None:
                        self.grads.append((t.grad, t.grad.detach().clone()))

    def restore(self) -> list[str]:
        """Put everything back; return notices for changes that could not be undone.

        Once only: the copies are dropped afterwards, so a caller that keeps the state
        until it returns (with a profile's many new objects) keeps none of them alive
        for the garbage collector to traverse.
        """
        if self.restored:
            raise LayerscopeError("a ModelState is restored once")
        with _disable_current_modes():
            notices = self._restore()
        self.restored = True
        for copies in (
            self.modules,
            self.contents,
            self.empty,
            self.params,
            self.grads,
            self.buffers,
            self.lazy,
        ):
            copies.clear()
        return notices

    def _restore(self) -> list[str]:
        notices: list[str] = []
        torch.set_rng_state(self.cpu_rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)
        for t, lazy_cls, data in self.lazy:
            if type(t) is not lazy_cls:  # materialised by a lazy module's first forward
                t.data = data
                t.__class__ = lazy_cls
        for m, cls, attrs in self.modules:
            _restore_module(m, cls, attrs)
        if any(self.empty):
            for value in self.empty:
                if value:
                    value.clear()
        for value, saved in self.contents:
            if not _same_contents(value, saved):
                value.clear()
                if isinstance(value, list):
                    value.extend(saved)
                else:
                    value.update(saved)
        with torch.no_grad():
            # Kernels such as batch_norm update running stats without bumping the version
            # counter, so compare values; write back only what differs.
            for b, saved in [*self.buffers, *self.grads]:
                if _has_values(b) and not torch.equal(b, saved):
                    b.copy_(saved)
        for prefix, key, p, requires_grad, grad, version in self.params:
            if p.requires_grad != requires_grad:
                p.requires_grad_(requires_grad)
            if p.grad is not grad:
                p.grad = grad
            if p._version != version:
                name = f"{prefix}.{key}" if prefix else key
                notices.append(
                    f"the model changed parameter {name} in place during forward; "
                    "layerscope cannot undo that"
                )
        return notices


def _has_values(t: Tensor) -> bool:
    """False for meta and fake tensors, which carry shapes only."""
    if (
        type(t) is Tensor
        and not torch._is_functional_tensor(t)
        and not is_functorch_wrapped_tensor(t)
    ):
        # A plain tensor that wraps no other (the usual buffer or gradient) cannot be fake;
        # is_fake reaches the same answer at several times the cost of these checks.
        return not t.is_meta
    return t.device.type != "meta" and not is_fake(t)


def _restore_module(m: nn.Module, cls: type[nn.Module], attrs: dict[str, Any]) -> None:
    if type(m) is not cls:
        m.__class__ = cls
    current = m.__dict__
    if current.keys() != attrs.keys() or not all(
        map(operator.is_, current.values(), attrs.values())
    ):  # (same keys, so the same order unless deleted and re-added: then a full restore)
        for key in [k for k in current if k not in attrs]:
            del current[key]
        current.update(attrs)


def _same_contents(a: Any, b: Any) -> bool:
    """Identity-wise equality of two containers (tensors must not be compared by value)."""
    if len(a) != len(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(map(operator.is_, a.values(), b.values()))
    if isinstance(a, list):
        return all(map(operator.is_, a, b))
    return bool(a == b)
