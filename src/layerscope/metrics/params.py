"""Parameter and buffer counts and bytes per module, each tensor counted once.

A tensor held by one module counts in that module's self metrics. A tensor held by
several modules (tied weights, a shared submodule registered twice) counts once, at the
lowest common ancestor of its holders; the holders list it in ``Node.shared``.

A DTensor (FSDP2, tensor parallel) counts at its logical size in ``params`` and
``param_bytes`` (the model as written, the same on every rank); when the model holds one,
every node also gets ``local_params`` and ``local_param_bytes`` (parameters) and
``local_buffer_bytes`` (buffers): what this rank stores, its shards' sizes and plain
tensors whole.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.nn import Parameter
from torch.nn.parameter import is_lazy

import layerscope.metricspec as ms
from layerscope.collect.signature import dtype_name
from layerscope.collect.tree import ModelTree
from layerscope.profile import DTYPE_KEYS, Node

#: The self metrics this module writes, each reset to 0 before counting.
_ZERO = dict.fromkeys(
    (ms.PARAMS, ms.TRAINABLE_PARAMS, ms.BUFFERS, ms.PARAM_BYTES, ms.BUFFER_BYTES), 0
)


#: The self metrics written when the model holds a DTensor (see the module docstring).
LOCAL_KEYS = (ms.LOCAL_PARAMS, ms.LOCAL_PARAM_BYTES, ms.LOCAL_BUFFER_BYTES)


@functools.cache
def _dtensor_type() -> type | None:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # a torch built without distributed
        return None
    return DTensor


def tensor_bytes(t: Tensor) -> int:
    return t.numel() * t.element_size()


@dataclass(frozen=True, slots=True)
class Owned:
    """A parameter or buffer, the node it is counted at, and every (node, name in the
    node's module) it is held under."""

    tensor: Tensor
    is_param: bool
    owner: Node
    held: tuple[tuple[Node, str], ...]

    @property
    def holders(self) -> tuple[tuple[Node, str], ...]:
        """Every (node, qualified name) the tensor is held under."""
        return tuple((node, _qualified(node, key)) for node, key in self.held)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(_qualified(node, key) for node, key in self.held)


def _qualified(node: Node, key: str) -> str:
    return f"{node.path}.{key}" if node.path else key


#: (tensor, is_param, first holder, its name in the holder's module).
_Held = tuple[Tensor, bool, Node, str]
#: id(tensor) -> the (node, name in the node's module) holding it after the first.
_More = dict[int, list[tuple[Node, str]]]


def _find_tensors(tree: ModelTree, *, reset: bool) -> tuple[Iterable[_Held], _More, list[str]]:
    """Each distinct initialised parameter and buffer once, in walk order, with its first
    holder, the holders after the first of those held more than once, and notices for
    the uninitialised lazy tensors that were skipped.

    ``reset``: also zero the parameter metrics of every node on the way.
    """
    # Runs on every profile call: the common tensor types skip the lazy check, and a
    # tensor held once (almost all) is one tuple.
    found: dict[int, _Held] = {}
    more: _More = {}
    notices: list[str] = []
    module_of = tree.module
    for node in tree.root.walk():
        if reset:
            node.self_metrics.update(_ZERO)
            if node.self_by_dtype:  # an empty one stays: nodes are made with their own
                node.self_by_dtype = {}
            if node.shared:
                node.shared = []
        module = module_of[id(node)]
        if module._parameters:
            _scan(module._parameters, True, Parameter, node, found, more, notices)
        if module._buffers:
            _scan(module._buffers, False, Tensor, node, found, more, notices)
    return found.values(), more, notices


def _scan(
    table: Mapping[str, Tensor | None],
    is_param: bool,
    usual: type,
    node: Node,
    found: dict[int, _Held],
    more: _More,
    notices: list[str],
) -> None:
    """Add the tensors of one parameter or buffer table (``usual``: the type that cannot
    be lazy, so skips the check)."""
    for key, t in table.items():
        if t is None:
            continue
        if type(t) is not usual and is_lazy(t):
            notices.append(_lazy_notice(node, key))
            continue
        tid = id(t)
        if tid not in found:
            found[tid] = (t, is_param, node, key)
        else:
            more.setdefault(tid, []).append((node, key))


def _lazy_notice(node: Node, key: str) -> str:
    return (
        f"{_qualified(node, key)} is an uninitialised lazy tensor; run the model on an "
        "input to count it"
    )


def _holders(
    t: Tensor, node: Node, key: str, more: _More, tree: ModelTree
) -> tuple[Node, list[tuple[Node, str]]]:
    """A tensor's owner, its holder or the lowest common ancestor of its holders, and
    every (node, name in the node's module) it is held under."""
    held = [(node, key), *more.get(id(t), ())]
    nodes = list({id(n): n for n, _ in held}.values())
    owner = nodes[0] if len(nodes) == 1 else tree.lowest_common_ancestor(nodes)
    return owner, held


def owned_tensors(tree: ModelTree) -> tuple[list[Owned], list[str]]:
    """Each distinct initialised parameter and buffer once, with the node it counts at
    (its holder, or the lowest common ancestor of its holders), and notices for the
    uninitialised lazy tensors that were skipped."""
    found, more, notices = _find_tensors(tree, reset=False)
    owned = []
    for t, is_param, node, key in found:
        owner, held = _holders(t, node, key, more, tree)
        owned.append(Owned(t, is_param, owner, tuple(held)))
    return owned, notices


def fill_parameters(tree: ModelTree) -> list[str]:
    """Write params/buffers metrics into the self metrics of the tree's nodes.

    Returns a notice per uninitialised lazy parameter or buffer (which cannot be counted),
    and nothing else: no notices means no module of the tree is lazy.
    """
    found, more, notices = _find_tensors(tree, reset=True)
    names: dict[torch.dtype, str] = {}
    sharded = False
    for t, is_param, owner, key in found:
        if type(t) is not Parameter and type(t) is not Tensor:
            sharded = sharded or _is_dtensor(t)
        if more and id(t) in more:
            owner, holders = _holders(t, owner, key, more, tree)
            where = owner.path or "<root>"
            for holder, held_as in holders:
                holder.shared.append(f"{_qualified(holder, held_as)} (counted at {where})")
        numel = t.numel()
        nbytes = numel * t.element_size()
        dtype = t.dtype
        name = names.get(dtype)
        if name is None:
            name = names[dtype] = dtype_name(dtype)
        by_dtype = owner.self_by_dtype
        row = by_dtype.get(name)
        if row is None:
            row = by_dtype[name] = dict.fromkeys(DTYPE_KEYS, 0)
        m = owner.self_metrics
        if is_param:
            m[ms.PARAMS] += numel
            m[ms.PARAM_BYTES] += nbytes
            if t.requires_grad:
                m[ms.TRAINABLE_PARAMS] += numel
            row[ms.PARAMS] += numel
            row[ms.PARAM_BYTES] += nbytes
        else:
            m[ms.BUFFERS] += numel
            m[ms.BUFFER_BYTES] += nbytes
            row[ms.BUFFERS] += numel
            row[ms.BUFFER_BYTES] += nbytes
    if sharded:
        _fill_local(tree, found, more)
    return notices


def _is_dtensor(t: Tensor) -> bool:
    cls = _dtensor_type()
    return cls is not None and isinstance(t, cls)


def local(t: Tensor) -> Tensor:
    """What this rank stores of ``t``: a DTensor's local shard, any other tensor itself."""
    if _is_dtensor(t):
        with torch.no_grad():
            return t.to_local()  # type: ignore[attr-defined,no-any-return]
    return t


def _fill_local(tree: ModelTree, found: Iterable[_Held], more: _More) -> None:
    """``LOCAL_KEYS`` of every node: bytes and elements this rank stores (a DTensor's
    local shard, a plain tensor whole), at the node its logical size counts at."""
    for node in tree.root.walk():
        node.self_metrics.update(dict.fromkeys(LOCAL_KEYS, 0))
    for t, is_param, owner, key in found:
        if more and id(t) in more:
            owner = _holders(t, owner, key, more, tree)[0]
        shard = local(t)
        m = owner.self_metrics
        if is_param:
            m[ms.LOCAL_PARAMS] += shard.numel()
            m[ms.LOCAL_PARAM_BYTES] += shard.numel() * shard.element_size()
        else:
            m[ms.LOCAL_BUFFER_BYTES] += shard.numel() * shard.element_size()
