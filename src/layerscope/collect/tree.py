"""The module tree of a model, as Nodes, with the side tables the collectors need.

A module instance registered under several paths (shared submodules) gets one Node per
path; ``nodes_of`` lists them so a call can be attributed to the path it was reached by.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from layerscope.profile import Node


@dataclass
class ModelTree:
    """Nodes of every registered module path, in definition order, and how they relate."""

    model: nn.Module
    root: Node
    by_path: dict[str, Node] = field(default_factory=dict)
    parent: dict[int, Node | None] = field(default_factory=dict)  # id(node) -> parent node
    module: dict[int, nn.Module] = field(default_factory=dict)  # id(node) -> module
    nodes_of: dict[int, list[Node]] = field(default_factory=dict)  # id(module) -> its nodes

    @classmethod
    def build(cls, model: nn.Module) -> ModelTree:
        root = _make_node(model, "", "", 0)
        tree = cls(model=model, root=root)
        tree._add(root, model, None)
        stack: list[tuple[Node, nn.Module, tuple[int, ...]]] = [(root, model, (id(model),))]
        while stack:
            node, module, ancestry = stack.pop()
            for name, child in module._modules.items():
                if child is None or id(child) in ancestry:
                    continue
                path = f"{node.path}.{name}" if node.path else name
                child_node = _make_node(child, path, name, node.depth + 1)
                node.children.append(child_node)
                tree._add(child_node, child, node)
                stack.append((child_node, child, (*ancestry, id(child))))
        return tree

    def _add(self, node: Node, module: nn.Module, parent: Node | None) -> None:
        self.by_path[node.path] = node
        self.parent[id(node)] = parent
        self.module[id(node)] = module
        self.nodes_of.setdefault(id(module), []).append(node)

    def modules(self) -> list[nn.Module]:
        """Each distinct module instance once, in definition order."""
        seen: set[int] = set()
        out: list[nn.Module] = []
        for node in self.root.walk():
            m = self.module[id(node)]
            if id(m) not in seen:
                seen.add(id(m))
                out.append(m)
        return out

    def lowest_common_ancestor(self, nodes: list[Node]) -> Node:
        chains = []
        for n in nodes:
            chain: list[Node] = []
            cur: Node | None = n
            while cur is not None:
                chain.append(cur)
                cur = self.parent[id(cur)]
            chains.append(list(reversed(chain)))
        lca = self.root
        for level in zip(*chains, strict=False):
            if all(x is level[0] for x in level):
                lca = level[0]
            else:
                break
        return lca


def _make_node(module: nn.Module, path: str, name: str, depth: int) -> Node:
    return Node(
        path=path,
        name=name or type(module).__name__,
        type=type(module).__name__,
        depth=depth,
        repr=module_repr(module),
    )


def module_repr(module: nn.Module) -> str:
    """``Type(hyperparameters)``: the one-line repr of a module, without its children."""
    try:
        extra = module.extra_repr()
    except Exception:  # a user's extra_repr that fails must not stop profiling
        extra = ""
    return f"{type(module).__name__}({extra})"


def is_lazy(module: nn.Module) -> bool:
    return any(
        torch.nn.parameter.is_lazy(t)
        for t in (*module._parameters.values(), *module._buffers.values())
        if t is not None
    )
