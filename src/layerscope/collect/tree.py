"""The module tree of a model, as Nodes, with the side tables the collectors need.

A module instance registered under several paths (shared submodules) gets one Node per
path; ``nodes_of`` lists them so a call can be attributed to the path it was reached by.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import MethodType
from typing import Any

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
                text = module_repr(child)
                child_node = new_node(path, name or tname, tname, depth, text)
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
        extra: Any = module.extra_repr
        fast = _FAST.get(extra.__func__) if type(extra) is MethodType else None
        text = extra() if fast is None else fast(extra.__self__)
    except Exception:  # a user's extra_repr that fails must not stop profiling
        text = ""
    return f"{type(module).__name__}({text})"


# ---- extra_repr of torch's convolutions and norms, without str.format(**__dict__) -------
# A profile builds every module's repr. The extra_repr of torch's convolutions and norms
# expand the module's __dict__ (some twenty entries) into str.format, which is most of
# the tree's build time on a CNN. The functions below return what those extra_repr
# return, reading the same attributes: each is used for modules whose extra_repr is that
# torch function, and only while that function's code uses the constants and names it
# was copied from, so other torch (or Python) versions call extra_repr itself.


def _conv_extra(m: Any) -> str:
    """``torch.nn.modules.conv._ConvNd.extra_repr``."""
    d = m.__dict__
    s = (
        f"{d['in_channels']}, {d['out_channels']}, kernel_size={d['kernel_size']}, "
        f"stride={d['stride']}"
    )
    if m.padding != (0,) * len(m.padding):
        s += f", padding={d['padding']}"
    if m.dilation != (1,) * len(m.dilation):
        s += f", dilation={d['dilation']}"
    if m.output_padding != (0,) * len(m.output_padding):
        s += f", output_padding={d['output_padding']}"
    if m.groups != 1:
        s += f", groups={d['groups']}"
    if m.bias is None:
        s += ", bias=False"
    if m.padding_mode != "zeros":
        s += f", padding_mode={d['padding_mode']}"
    return s


def _norm_extra(m: Any) -> str:
    """``torch.nn.modules.batchnorm._NormBase.extra_repr`` (batch and instance norms)."""
    d = m.__dict__
    use_bias = m.bias is not None
    if "use_bias" in d:  # str.format(**d, use_bias=...) would get it twice
        raise TypeError("use_bias given twice")
    return (
        f"{d['num_features']}, eps={d['eps']}, momentum={d['momentum']}, "
        f"affine={d['affine']}, bias={use_bias}, track_running_stats={d['track_running_stats']}"
    )


def _layer_norm_extra(m: Any) -> str:
    """``torch.nn.LayerNorm.extra_repr``."""
    d = m.__dict__
    use_bias = m.bias is not None
    if "use_bias" in d:
        raise TypeError("use_bias given twice")
    return (
        f"{d['normalized_shape']}, eps={d['eps']}, "
        f"elementwise_affine={d['elementwise_affine']}, bias={use_bias}"
    )


def _copied_from(owner: object, consts: tuple[object, ...], names: tuple[str, ...]) -> Any:
    """``owner.extra_repr`` if its code is the one a function here copies, else None."""
    func = getattr(owner, "extra_repr", None)
    code = getattr(func, "__code__", None)
    if code is None or code.co_names != names:
        return None
    used = tuple(c for c in code.co_consts if c is not None and c != ())
    return func if used == consts else None


def _copies() -> dict[object, Callable[[Any], str]]:
    """torch's extra_repr -> the copy here, for those whose code is the one copied."""
    copies: tuple[tuple[object, Callable[[Any], str], tuple[object, ...], tuple[str, ...]], ...]
    copies = (
        (
            getattr(nn.modules.conv, "_ConvNd", None),
            _conv_extra,
            (
                "{in_channels}, {out_channels}, kernel_size={kernel_size}, stride={stride}",
                (0,),
                ", padding={padding}",
                (1,),
                ", dilation={dilation}",
                ", output_padding={output_padding}",
                1,
                ", groups={groups}",
                ", bias=False",
                "zeros",
                ", padding_mode={padding_mode}",
            ),
            (
                "padding",
                "len",
                "dilation",
                "output_padding",
                "groups",
                "bias",
                "padding_mode",
                "format",
                "__dict__",
            ),
        ),
        (
            getattr(nn.modules.batchnorm, "_NormBase", None),
            _norm_extra,
            (
                "{num_features}, eps={eps}, momentum={momentum}, affine={affine}, "
                "bias={use_bias}, track_running_stats={track_running_stats}",
                "use_bias",
            ),
            ("format", "__dict__", "bias"),
        ),
        (
            nn.LayerNorm,
            _layer_norm_extra,
            (
                "{normalized_shape}, eps={eps}, elementwise_affine={elementwise_affine}, "
                "bias={use_bias}",
                "use_bias",
            ),
            ("format", "__dict__", "bias"),
        ),
    )
    out: dict[object, Callable[[Any], str]] = {}
    for owner, copy, consts, names in copies:
        func = _copied_from(owner, consts, names)
        if func is not None:
            out[func] = copy
    return out


_FAST = _copies()


def is_lazy(module: nn.Module) -> bool:
    return any(
        torch.nn.parameter.is_lazy(t)
        for t in (*module._parameters.values(), *module._buffers.values())
        if t is not None
    )
