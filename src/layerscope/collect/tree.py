"""The module tree of a model, as Nodes, with the side tables the collectors need.

A module instance registered under several paths (shared submodules) gets one Node per
path; ``nodes_of`` lists them so a call can be attributed to the path it was reached by.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from layerscope.profile import Node, new_node


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
        # One pass, everything inlined: this runs on every profile call. The order of
        # the nodes in every table is that of a depth-first walk popping the last child
        # first, with each node's children all made before any grandchild.
        tname = type(model).__name__
        root = new_node("", tname, tname, 0, module_repr(model))
        by_path = {"": root}
        parent: dict[int, Node | None] = {id(root): None}
        module_of: dict[int, nn.Module] = {id(root): model}
        nodes_of = {id(model): [root]}
        stack: list[tuple[Node, nn.Module, tuple[int, ...]]] = [(root, model, (id(model),))]
        pop, push = stack.pop, stack.append
        while stack:
            node, module, ancestry = pop()
            prefix = f"{node.path}." if node.path else ""
            depth = node.depth + 1
            append = node.children.append
            for name, child in module._modules.items():
                if child is None:
                    continue
                mid = id(child)
                if mid in ancestry:
                    continue
                path = f"{prefix}{name}"
                tname = type(child).__name__
                try:
                    extra = child.extra_repr()
                except Exception:  # a user's extra_repr that fails must not stop profiling
                    extra = ""
                child_node = new_node(path, name or tname, tname, depth, f"{tname}({extra})")
                append(child_node)
                by_path[path] = child_node
                nid = id(child_node)
                parent[nid] = node
                module_of[nid] = child
                held = nodes_of.get(mid)
                if held is None:
                    nodes_of[mid] = [child_node]
                else:
                    held.append(child_node)
                if child._modules:  # a leaf has nothing to walk
                    push((child_node, child, (*ancestry, mid)))
        return cls(model, root, by_path, parent, module_of, nodes_of)

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

    def under(self, nodes: list[Node], running: Node) -> list[Node]:
        """Those of ``nodes`` inside ``running`` (at any depth), in order."""
        parent_of, out = self.parent, []
        for n in nodes:
            up = parent_of[id(n)]
            while up is not None and up is not running:
                up = parent_of[id(up)]
            if up is running:
                out.append(n)
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
