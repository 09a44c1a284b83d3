"""Parameter and buffer counts and bytes per module, each tensor counted once.

A tensor held by one module counts in that module's self metrics. A tensor held by
several modules (tied weights, a shared submodule registered twice) counts once, at the
lowest common ancestor of its holders; the holders list it in ``Node.shared``.
"""

from __future__ import annotations

from torch import Tensor
from torch.nn.parameter import is_lazy

from layerscope.collect.tree import ModelTree
from layerscope.profile import DTYPE_KEYS, Node


def dtype_name(t: Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def tensor_bytes(t: Tensor) -> int:
    return t.numel() * t.element_size()


def fill_parameters(tree: ModelTree) -> list[str]:
    """Write params/buffers metrics into the self metrics of the tree's nodes.

    Returns notices (e.g. uninitialised lazy parameters that could not be counted).
    """
    holders: dict[int, list[tuple[Node, str]]] = {}
    tensors: dict[int, tuple[Tensor, bool]] = {}  # id -> (tensor, is_param)
    notices: list[str] = []
    for node in tree.root.walk():
        module = tree.module[id(node)]
        for kind_is_param, table in ((True, module._parameters), (False, module._buffers)):
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
                holders.setdefault(id(t), []).append((node, qualified))
                tensors[id(t)] = (t, kind_is_param)

    for node in tree.root.walk():
        for key in ("params", "trainable_params", "buffers", "param_bytes", "buffer_bytes"):
            node.self_metrics[key] = 0
        node.self_by_dtype = {}
        node.shared = []

    for tid, owners in holders.items():
        t, is_param = tensors[tid]
        distinct = list({id(n): n for n, _ in owners}.values())
        owner = distinct[0] if len(distinct) == 1 else tree.lowest_common_ancestor(distinct)
        if len(owners) > 1:
            where = owner.path or "<root>"
            for n, qualified in owners:
                n.shared.append(f"{qualified} (counted at {where})")
        numel = t.numel()
        nbytes = tensor_bytes(t)
        row = owner.self_by_dtype.setdefault(dtype_name(t), dict.fromkeys(DTYPE_KEYS, 0))
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
