"""``ModuleIndex``: the model's tree nodes and module instances as small ints, so the
hot-path logs stay cheap and replays can resolve calls and roll up values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from torch import nn

from layerscope.collect.tree import ModelTree


@dataclass
class ModuleIndex:
    """Tree nodes and module instances as small ints, for cheap logs and replays.

    Node 0 is the root; nodes are in pre-order. A module registered under several paths
    has several nodes; a call is resolved to the one whose parent is running.
    """

    paths: list[str]
    parent: list[int]
    children: list[list[int]]
    modules: list[nn.Module]
    nodes_of: list[list[int]]
    by_path: dict[str, int]
    module_of: list[int]
    root: int = 0

    @classmethod
    def build(cls, model: nn.Module) -> ModuleIndex:
        tree = ModelTree.build(model)
        nodes = list(tree.root.walk())
        pos = {id(n): i for i, n in enumerate(nodes)}
        parent: list[int] = []
        for n in nodes:
            up = tree.parent[id(n)]
            parent.append(-1 if up is None else pos[id(up)])
        children: list[list[int]] = [[] for _ in nodes]
        for i, up_i in enumerate(parent):
            if up_i >= 0:
                children[up_i].append(i)
        modules: list[nn.Module] = []
        nodes_of: list[list[int]] = []
        mid_of: dict[int, int] = {}
        for i, n in enumerate(nodes):
            m = tree.module[id(n)]
            if id(m) not in mid_of:
                mid_of[id(m)] = len(modules)
                modules.append(m)
                nodes_of.append([])
            nodes_of[mid_of[id(m)]].append(i)
        paths = [n.path for n in nodes]
        module_of = [0] * len(nodes)
        for mid, ns in enumerate(nodes_of):
            for i in ns:
                module_of[i] = mid
        by_path = {p: i for i, p in enumerate(paths)}
        return cls(paths, parent, children, modules, nodes_of, by_path, module_of)

    def __len__(self) -> int:
        return len(self.paths)

    def module_at(self, node: int) -> nn.Module:
        return self.modules[self.module_of[node]]

    def resolve(self, mid: int, running: Sequence[int]) -> int:
        """The node of module ``mid`` for this call: the one whose parent is running."""
        nodes = self.nodes_of[mid]
        if len(nodes) == 1:
            return nodes[0]
        for frame in reversed(running):
            for n in nodes:
                if self.parent[n] == frame:
                    return n
        return nodes[0]

    def rollup(self, values: list[float]) -> list[float]:
        """Inclusive sums over the tree of per-node self values."""
        out = list(values)
        for i in range(len(out) - 1, -1, -1):  # pre-order reversed: children first
            p = self.parent[i]
            if p >= 0:
                out[p] += out[i]
        return out

    def site(self, exc: BaseException) -> int | None:
        """The innermost module of this model running when ``exc`` was raised, if any."""
        mids = {id(m): i for i, m in enumerate(self.modules)}
        running: list[int] = []
        tb = exc.__traceback__
        while tb is not None:
            frame = tb.tb_frame
            if frame.f_code.co_name == "_call_impl":
                mid = mids.get(id(frame.f_locals.get("self")))
                if mid is not None:
                    running.append(self.resolve(mid, running))
            tb = tb.tb_next
        return running[-1] if running else None

    def where(self, exc: BaseException) -> str:
        """The words naming the module ``exc`` was raised in (" in module 'a' (Linear)",
        " in the root module (Net)"), or "" if in none."""
        site = self.site(exc)
        if site is None:
            return ""
        typ = type(self.module_at(site)).__name__
        path = self.paths[site]
        return f" in module {path!r} ({typ})" if path else f" in the root module ({typ})"

    def add_note(self, exc: BaseException, during: str = "") -> None:
        """Give ``exc`` (an interrupt, or an error of the user's code around a timed step)
        the note naming the module it was raised in, as an analysed step's error gets."""
        where = self.where(exc)
        if where:
            exc.add_note(f"layerscope: raised{where}{during}")
