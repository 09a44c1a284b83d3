"""Hand-built Profiles for view tests: no model is run, every number is chosen.

``small()`` is the tree below (self FLOPs / params; calls 1 unless noted)::

    Net          self flops 20, params 2
    ├─ enc Encoder               (nothing of its own)
    │  ├─ attn Attention         flops 400, params 40
    │  └─ mlp MLP                flops 500, params 50
    ├─ head Linear               flops 80, params 8
    └─ drop Dropout              calls 0

Totals: flops 20 + 400 + 500 + 80 = 1000, params 2 + 40 + 50 + 8 = 100, so a module's
% of FLOPs is flops / 10 and its % of params is its params.
"""

from __future__ import annotations

from typing import Any

from layerscope.profile import Node, Number, Profile

RUN = {
    "name": "Net",
    "ran": True,
    "training": False,
    "grad_mode": "enabled",
    "device": "cpu",
    "dtype": "float32",
}


def node(name: str, type_: str, *children: Node, calls: int = 1, **own: Number) -> Node:
    return Node(
        path=name,
        name=name,
        type=type_,
        calls=calls,
        self_metrics=dict(own),
        children=list(children),
    )


def build(root: Node, **model: Any) -> Profile:
    """Paths, names, ids and depths from the tree's shape; inclusive metrics rolled up."""

    def visit(n: Node, path: str, node_id: str, depth: int) -> None:
        n.path, n.node_id, n.depth = path, node_id, depth
        for i, child in enumerate(n.children, start=1):
            child_path = f"{path}.{child.name}" if path else child.name
            visit(child, child_path, f"{i}" if node_id == "0" else f"{node_id}.{i}", depth + 1)

    visit(root, "", "0", 0)
    root.name = root.type
    prof = Profile(root=root, model={**RUN, **model})
    prof.rollup()
    return prof


def small() -> Profile:
    return build(
        node(
            "Net",
            "Net",
            node(
                "enc",
                "Encoder",
                node("attn", "Attention", flops=400, params=40),
                node("mlp", "MLP", flops=500, params=50),
            ),
            node("head", "Linear", flops=80, params=8),
            node("drop", "Dropout", calls=0, flops=0, params=0),
            flops=20,
            params=2,
        )
    )
