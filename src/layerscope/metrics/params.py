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


def tensor_bytes(t: Tensor) -> int:
    return t.numel() * t.element_size()


@dataclass(frozen=True, slots=True)
class Owned:
    """A parameter or buffer, the node it is counted at, and every (node, qualified name)
    it is held under."""

    tensor: Tensor
    is_param: bool
    owner: Node
    holders: tuple[tuple[Node, str], ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for _, name in self.holders)


def owned_tensors(tree: ModelTree) -> tuple[list[Owned], list[str]]:
    """Each distinct initialised parameter and buffer once, with the node it counts at
    (its holder, or the lowest common ancestor of its holders), and notices for the
    uninitialised lazy tensors that were skipped."""
    found: dict[int, tuple[Tensor, bool, list[tuple[Node, str]]]] = {}
    notices: list[str] = []
    for node in tree.root.walk():
        module = tree.module[id(node)]
        for is_param, table in ((True, module._parameters), (False, module._buffers)):
            for name, t in table.items():
                if t is None:
                    continue
                qualified = f"{node.path}.{name}" if node.path else name
                if is_lazy(t):
                    notices.append(
                        f"{qualified} is an uninitialised lazy tensor; run the model on an "
                        "input to count it"
                    )
                    continue
                found.setdefault(id(t), (t, is_param, []))[2].append((node, qualified))
    owned = []
    for t, is_param, holders in found.values():
        nodes = list({id(n): n for n, _ in holders}.values())
        owner = nodes[0] if len(nodes) == 1 else tree.lowest_common_ancestor(nodes)
        owned.append(Owned(t, is_param, owner, tuple(holders)))
    return owned, notices


def fill_parameters(tree: ModelTree) -> list[str]:
    """Write params/buffers metrics into the self metrics of the tree's nodes.

    Returns notices (e.g. uninitialised lazy parameters that could not be counted).
    """
    owned, notices = owned_tensors(tree)
    for node in tree.root.walk():
        for key in ("params", "trainable_params", "buffers", "param_bytes", "buffer_bytes"):
            node.self_metrics[key] = 0
        node.self_by_dtype = {}
        node.shared = []

    for o in owned:
        t, owner = o.tensor, o.owner
        if len(o.holders) > 1:
            where = owner.path or "<root>"
            for holder, qualified in o.holders:
                holder.shared.append(f"{qualified} (counted at {where})")
        numel = t.numel()
        nbytes = tensor_bytes(t)
        row = owner.self_by_dtype.setdefault(dtype_name(t.dtype), dict.fromkeys(DTYPE_KEYS, 0))
        m = owner.self_metrics
        if o.is_param:
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
