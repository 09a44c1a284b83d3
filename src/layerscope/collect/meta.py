"""``to_meta``: a copy of a model on the meta device that keeps tied weights tied.

``model.to("meta")`` replaces every parameter one by one, so two modules that shared one
``nn.Parameter`` (GPT-2's LM head and token embedding) end up with two, and the copy
counts the shared weight twice. A ``copy.deepcopy`` whose memo already maps each original
tensor to its meta twin keeps every sharing as it was and copies no real data.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn
from torch.nn.parameter import is_lazy

from layerscope.validate import check_instance


def to_meta(model: nn.Module) -> nn.Module:
    """A copy of ``model`` on the meta device; ``model`` itself is left untouched.

    - Each distinct parameter (by identity) becomes one meta ``nn.Parameter`` of the same
      class, shape, dtype and ``requires_grad``, so a parameter shared by several modules
      (tied weights) is still one object in the copy, held by the same modules. Attributes
      set on a parameter (``p.__dict__``) are deep-copied onto its twin; ``.grad`` is not
      copied (the copy has no gradients).
    - Each buffer becomes a meta tensor of the same shape and dtype (shared buffers stay
      shared); a ``None`` buffer stays ``None``.
    - Tensors held directly as plain (unregistered) attributes of a module, such as a cached
      rotary table, become meta tensors too; tensors nested inside lists or dicts are copied
      as ``copy.deepcopy`` copies them, with their data.
    - Everything else (train/eval flags, hooks, other attributes) is copied by
      ``copy.deepcopy``, so a model that cannot be deep-copied cannot be copied here either.
      Lazy modules' uninitialized parameters are left to ``deepcopy``.

    No real weight is read or copied, so this is cheap even for a large model.
    """
    check_instance("model", model, nn.Module, "an nn.Module")
    memo: dict[int, Any] = {}
    keep: list[object] = []  # the originals, alive while memo refers to them by id
    for module in model.modules():
        for p in module._parameters.values():
            if p is None or id(p) in memo or is_lazy(p):
                continue
            memo[id(p)] = _meta_parameter(p, memo)
            keep.append(p)
        for b in module._buffers.values():
            if b is None or id(b) in memo or is_lazy(b):
                continue
            memo[id(b)] = _meta_tensor(b)
            keep.append(b)
        for value in vars(module).values():
            if isinstance(value, torch.Tensor) and id(value) not in memo:
                if isinstance(value, nn.Parameter):
                    memo[id(value)] = _meta_parameter(value, memo)
                elif not is_lazy(value):
                    memo[id(value)] = _meta_tensor(value)
                keep.append(value)
    copied = copy.deepcopy(model, memo)
    del keep
    return copied


def _meta_tensor(t: torch.Tensor) -> torch.Tensor:
    """An uninitialised meta tensor like ``t`` (shape, dtype, strides, requires_grad)."""
    out = torch.empty_like(t, device="meta")
    if t.requires_grad and (out.is_floating_point() or out.is_complex()):
        out.requires_grad_(True)
    return out


def _meta_parameter(p: nn.Parameter, memo: dict[int, Any]) -> nn.Parameter:
    """A meta parameter of ``p``'s class, as ``Parameter.__deepcopy__`` builds one."""
    data = torch.empty_like(p.detach(), device="meta")
    new = type(p)(data, p.requires_grad)
    extra = getattr(p, "__dict__", None)
    if extra:
        new.__dict__.update(copy.deepcopy(extra, memo))
    return new


__all__ = ["to_meta"]
