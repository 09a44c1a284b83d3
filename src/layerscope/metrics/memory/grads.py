"""Gradient bytes per module, the frozen parameters and trainable-parameter counts by
dtype, each tensor once.

A parameter held by several modules (tied weights) has one ``.grad``; it counts once, at
the lowest common ancestor of its holders, exactly as ``metrics.params`` counts the
parameter itself, so ``grad_bytes`` and ``param_bytes`` sit on the same nodes.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

import layerscope.metricspec as ms
from layerscope.collect.signature import dtype_name
from layerscope.collect.tree import ModelTree
from layerscope.metrics.params import Owned, local, owned_tensors
from layerscope.profile import Profile


def owned_parameters(tree: ModelTree) -> list[Owned]:
    """Each distinct initialised parameter once, with the node it counts at."""
    return [o for o in owned_tensors(tree)[0] if o.is_param]


def grad_nbytes(g: Tensor) -> int:
    """Bytes a gradient occupies: dense numel x element size; a sparse one's indices+values."""
    if g.is_sparse:
        return grad_nbytes(g._values()) + grad_nbytes(g._indices())
    return g.numel() * g.element_size()


def fill_gradients(profile: Profile, owned: list[Owned], *, force: bool) -> None:
    """Write self ``grad_bytes`` and ``profile.memory["grads"]`` from the ``.grad`` present now.

    ``owned``: from ``owned_parameters``. ``memory["grads"]`` maps a parameter's first
    qualified name to ``{"shape", "dtype", "bytes", "module"}`` (``module``: path of the
    node it is counted at). Nothing is written when no gradient exists and ``force`` (a
    backward ran) is false.

    A DTensor gradient (FSDP2, tensor parallel) has its logical shape and bytes there,
    and ``local_shape`` and ``local_bytes``: this rank's shard (and ``param_local_shape``,
    the parameter's, where DTensor gives the gradient another layout: a vocabulary-
    parallel embedding's is replicated); every node then also gets ``local_grad_bytes``
    (a plain gradient counts whole in it).
    """
    present = [o for o in owned if o.tensor.grad is not None]
    if not present and not force:
        return
    sharded = any(local(g) is not g for g in (o.tensor.grad for o in present) if g is not None)
    for node in profile.root.walk():
        node.self_metrics[ms.GRAD_BYTES] = 0
        if sharded:
            node.self_metrics[ms.LOCAL_GRAD_BYTES] = 0
    grads: dict[str, dict[str, Any]] = {}
    for o in present:
        g = o.tensor.grad
        assert g is not None
        n = grad_nbytes(g)
        o.owner.self_metrics[ms.GRAD_BYTES] += n
        grads[o.names[0]] = entry = {
            "shape": list(g.shape),
            "dtype": dtype_name(g.dtype),
            "bytes": n,
            "module": o.owner.path,
        }
        if sharded:
            shard = local(g)
            n_local = grad_nbytes(shard)
            o.owner.self_metrics[ms.LOCAL_GRAD_BYTES] += n_local
            if shard is not g:
                entry["local_shape"] = list(shard.shape)
                entry["local_bytes"] = n_local
                held = local(o.tensor).shape
                if held != shard.shape:  # a gradient in another layout than its parameter
                    entry["param_local_shape"] = list(held)
    profile.memory["grads"] = grads


def frozen_parameters(owned: list[Owned]) -> dict[str, dict[str, Any]]:
    """``profile.memory["frozen"]``: each parameter without ``requires_grad`` by its first
    qualified name, ``{"shape", "dtype", "bytes", "module"}`` as ``memory["grads"]``
    has them (a DTensor's ``local_shape`` and ``local_bytes`` too). A plan shards these
    under FSDP2 (which needs each tensor's shape) and gives them no gradient or optimizer
    state."""
    out: dict[str, dict[str, Any]] = {}
    for o in owned:
        p = o.tensor
        if not p.requires_grad:
            out[o.names[0]] = entry = {
                "shape": list(p.shape),
                "dtype": dtype_name(p.dtype),
                "bytes": p.numel() * p.element_size(),
                "module": o.owner.path,
            }
            shard = local(p)
            if shard is not p:
                entry["local_shape"] = list(shard.shape)
                entry["local_bytes"] = shard.numel() * shard.element_size()
    return out


def record_parameters(memory: dict[str, Any], owned: list[Owned]) -> None:
    """``memory["params_by_dtype"]``, and ``memory["frozen"]`` when a parameter is."""
    memory["params_by_dtype"] = params_by_dtype(owned)
    if frozen := frozen_parameters(owned):
        memory["frozen"] = frozen


def params_by_dtype(owned: list[Owned]) -> dict[str, dict[str, int]]:
    """Per parameter dtype: element and tensor counts, all and trainable, each tensor once.

    What ``training.training_footprint`` needs to size gradients and optimizer state.
    """
    out: dict[str, dict[str, int]] = {}
    for o in owned:
        p = o.tensor
        row = out.setdefault(
            dtype_name(p.dtype),
            {ms.PARAMS: 0, "tensors": 0, ms.TRAINABLE_PARAMS: 0, "trainable_tensors": 0},
        )
        row[ms.PARAMS] += p.numel()
        row["tensors"] += 1
        if p.requires_grad:
            row[ms.TRAINABLE_PARAMS] += p.numel()
            row["trainable_tensors"] += 1
    return dict(sorted(out.items()))
