"""Parameter and buffer counts and bytes per module, each tensor counted once.

A tensor held by one module counts in that module's self metrics. A tensor held by
several modules (tied weights, a shared submodule registered twice) counts once, at the
lowest common ancestor of its holders; the holders list it in ``Node.shared``.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor
from torch.nn.parameter import is_lazy

from layerscope.collect.signature import dtype_name
from layerscope.collect.tree import ModelTree
from layerscope.profile import DTYPE_KEYS, Node

#: The self metrics this module writes, each reset to 0 before counting.
_ZERO = dict.fromkeys(("params", "trainable_params", "buffers", "param_bytes", "buffer_bytes"), 0)


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


#: (tensor, is_param, owner, holders as (node, name in the node's module)).
_Found = tuple[Tensor, bool, Node, list[tuple[Node, str]]]


def _find_tensors(tree: ModelTree, *, reset: bool) -> tuple[list[_Found], list[str]]:
    """Each distinct initialised parameter and buffer once, in walk order, with the node
    it counts at, and notices for the uninitialised lazy tensors that were skipped.

    ``reset``: also zero the parameter metrics of every node on the way.
    """
    found: dict[int, tuple[Tensor, bool, list[tuple[Node, str]]]] = {}
    notices: list[str] = []
    module_of = tree.module
    for node in tree.root.walk():
        if reset:
            node.self_metrics.update(_ZERO)
            node.self_by_dtype = {}
            node.shared = []
        module = module_of[id(node)]
        for is_param, table in ((True, module._parameters), (False, module._buffers)):
            for key, t in table.items():
                if t is None:
                    continue
                if is_lazy(t):
                    notices.append(
                        f"{_qualified(node, key)} is an uninitialised lazy tensor; run the "
                        "model on an input to count it"
                    )
                    continue
                entry = found.get(id(t))
                if entry is None:
                    found[id(t)] = (t, is_param, [(node, key)])
                else:
                    entry[2].append((node, key))
    out: list[_Found] = []
    for t, is_param, holders in found.values():
        if len(holders) == 1:
            owner = holders[0][0]
        else:
            nodes = list({id(n): n for n, _ in holders}.values())
            owner = nodes[0] if len(nodes) == 1 else tree.lowest_common_ancestor(nodes)
        out.append((t, is_param, owner, holders))
    return out, notices


def owned_tensors(tree: ModelTree) -> tuple[list[Owned], list[str]]:
    """Each distinct initialised parameter and buffer once, with the node it counts at
    (its holder, or the lowest common ancestor of its holders), and notices for the
    uninitialised lazy tensors that were skipped."""
    found, notices = _find_tensors(tree, reset=False)
    owned = [Owned(t, is_param, owner, tuple(held)) for t, is_param, owner, held in found]
    return owned, notices


def fill_parameters(tree: ModelTree) -> list[str]:
    """Write params/buffers metrics into the self metrics of the tree's nodes.

    Returns a notice per uninitialised lazy parameter or buffer (which cannot be counted),
    and nothing else: no notices means no module of the tree is lazy.
    """
    found, notices = _find_tensors(tree, reset=True)
    for t, is_param, owner, holders in found:
        if len(holders) > 1:
            where = owner.path or "<root>"
            for holder, key in holders:
                holder.shared.append(f"{_qualified(holder, key)} (counted at {where})")
        numel = t.numel()
        nbytes = numel * t.element_size()
        dtype = dtype_name(t.dtype)
        row = owner.self_by_dtype.get(dtype)
        if row is None:
            row = owner.self_by_dtype[dtype] = dict.fromkeys(DTYPE_KEYS, 0)
        m = owner.self_metrics
        if is_param:
            m["params"] += numel
            m["param_bytes"] += nbytes
            if t.requires_grad:
                m["trainable_params"] += numel
            row["params"] += numel
            row["param_bytes"] += nbytes
        else:
            m["buffers"] += numel
            m["buffer_bytes"] += nbytes
            row["buffers"] += numel
            row["buffer_bytes"] += nbytes
    return notices
