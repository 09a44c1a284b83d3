"""Capture and restore what running a model may change, so profiling leaves no trace.

Covers the global RNG streams (CPU and initialised CUDA devices); every module's class and
``__dict__`` one level deep (attributes added or rebound by forward, train/eval flags, the
parameter/buffer/submodule/hook tables); every buffer's values (BatchNorm running stats,
counters); ``requires_grad``, ``.grad`` and gradient values of every parameter; and lazy
parameters, which a first forward materialises in place. Buffers and gradients are cloned
up front but written back only where their values changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from torch._subclasses.fake_tensor import is_fake
from torch.nn.parameter import is_lazy


@dataclass
class _ModuleState:
    module: nn.Module
    cls: type[nn.Module]
    attrs: dict[str, Any]
    #: Shallow copies of the containers held in ``__dict__`` (dicts, sets, lists).
    contents: dict[str, Any]


@dataclass
class ModelState:
    cpu_rng: Tensor
    cuda_rng: list[Tensor] | None
    modules: list[_ModuleState] = field(default_factory=list)
    params: list[tuple[str, nn.Parameter, bool, Tensor | None, int]] = field(default_factory=list)
    grads: list[tuple[Tensor, Tensor]] = field(default_factory=list)  # (grad, saved values)
    buffers: list[tuple[Tensor, Tensor]] = field(default_factory=list)
    lazy: list[tuple[Tensor, type[Tensor], Tensor]] = field(default_factory=list)

    @classmethod
    def capture(cls, model: nn.Module) -> ModelState:
        cuda_rng = None
        if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
            cuda_rng = torch.cuda.get_rng_state_all()
        state = cls(cpu_rng=torch.get_rng_state(), cuda_rng=cuda_rng)
        for m in model.modules():
            attrs = dict(m.__dict__)
            contents = {k: v.copy() for k, v in attrs.items() if isinstance(v, dict | set | list)}
            state.modules.append(_ModuleState(m, type(m), attrs, contents))
        seen: set[int] = set()
        for name, p in model.named_parameters(remove_duplicate=True):
            if is_lazy(p):
                state.lazy.append((p, type(p), p.data))
                continue
            state.params.append((name, p, p.requires_grad, p.grad, p._version))
            if p.grad is not None:  # a backward pass accumulates into it in place
                state.grads.append((p.grad, p.grad.detach().clone()))
        with torch.no_grad():
            for b in model.buffers():
                if id(b) in seen:
                    continue
                seen.add(id(b))
                if is_lazy(b):
                    state.lazy.append((b, type(b), b.data))
                else:
                    state.buffers.append((b, b.detach().clone()))
        return state

    def restore(self) -> list[str]:
        """Put everything back; return notices for changes that could not be undone."""
        notices: list[str] = []
        torch.set_rng_state(self.cpu_rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)
        for t, lazy_cls, data in self.lazy:
            if type(t) is not lazy_cls:  # materialised by a lazy module's first forward
                t.data = data
                t.__class__ = lazy_cls
        for ms in self.modules:
            _restore_module(ms)
        with torch.no_grad():
            # Kernels such as batch_norm update running stats without bumping the version
            # counter, so compare values; write back only what differs.
            for b, saved in [*self.buffers, *self.grads]:
                if _has_values(b) and not torch.equal(b, saved):
                    b.copy_(saved)
        for name, p, requires_grad, grad, version in self.params:
            if p.requires_grad != requires_grad:
                p.requires_grad_(requires_grad)
            if p.grad is not grad:
                p.grad = grad
            if p._version != version:
                notices.append(
                    f"the model changed parameter {name} in place during forward; "
                    "layerscope cannot undo that"
                )
        return notices


def _has_values(t: Tensor) -> bool:
    """False for meta and fake tensors, which carry shapes only."""
    return t.device.type != "meta" and not is_fake(t)


def _restore_module(ms: _ModuleState) -> None:
    m = ms.module
    if type(m) is not ms.cls:
        m.__class__ = ms.cls
    current = m.__dict__
    for key in [k for k in current if k not in ms.attrs]:
        del current[key]
    for key, value in ms.attrs.items():
        if current.get(key, ms) is not value:
            current[key] = value
        saved = ms.contents.get(key)
        if saved is not None and not _same_contents(value, saved):
            value.clear()
            if isinstance(value, list):
                value.extend(saved)
            else:
                value.update(saved)


def _same_contents(a: Any, b: Any) -> bool:
    """Identity-wise equality of two containers (tensors must not be compared by value)."""
    if isinstance(a, dict):
        return list(a) == list(b) and all(a[k] is b[k] for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))
    return bool(a == b)
