"""Building a session's Profile from the tree its tracker filled: modules ordered by
first call and numbered, signatures kept, observers finished, the tree rolled up, the
notices, the model and the environment."""

from __future__ import annotations

import platform
from collections.abc import Sequence
from typing import Any

import torch

from layerscope.collect.inputs import model_device_dtype
from layerscope.collect.observer import Observer, observer_error
from layerscope.collect.regions import attach_regions
from layerscope.collect.scopes import MAX_SIGNATURES, ScopeTracker
from layerscope.collect.signature import dtype_name
from layerscope.collect.tree import ModelTree
from layerscope.errors import LayerscopeError
from layerscope.metrics.params import fill_parameters
from layerscope.profile import Node, Profile
from layerscope.version import __version__


def build_profile(
    tracker: ScopeTracker,
    *,
    ran: bool,
    notices: list[str],
    observers: Sequence[Observer],
    run: dict[str, Any] | None = None,
) -> Profile:
    """Order, number and roll up the tree the tracker filled, and wrap it in a Profile."""
    tree = tracker.tree
    notices = list(notices)
    tracker.record_signatures()
    lazy = fill_parameters(tree)  # a notice per lazy tensor, so empty if no module is lazy
    notices.extend(lazy)
    if lazy and ran:
        notices.append("the model has lazy modules that were not initialised by this run")
    _order_and_number(tree, tracker.called)
    notices.extend(_dropped_signatures(tracker))
    prof = Profile(root=tree.root, notices=notices)
    for observer in observers:
        call_observer(observer, "finish", prof)
    prof.outside = {k: v for k, v in tracker.outside.self_metrics.items() if v}
    attach_regions(prof, tracker)
    prof.rollup()
    device, dtype = model_device_dtype(tree.model)
    prof.model = {
        "name": type(tree.model).__name__,
        "class": f"{type(tree.model).__module__}.{type(tree.model).__qualname__}",
        "ran": ran,
        "training": tree.model.training,
        **(run or {}),
        "device": str(device),
        **_gpu(device),
        "dtype": dtype_name(dtype),
    }
    prof.env = environment()
    return prof


def _order_and_number(tree: ModelTree, called: Sequence[Node]) -> None:
    """Put each node's children in order of first call and give every node its id
    (``"0"``, ``"1"``, ``"1.2"``, ...) and depth.

    A subtree's place is its earliest call anywhere inside it: a ModuleList is never
    called itself but goes where its first block ran. Subtrees that never ran keep
    definition order after those that did.
    """
    # Nodes are hashed by identity. Calls come in order, so the first to reach an
    # ancestor is its earliest.
    first: dict[Node, int] = {}
    parent = tree.parent
    for i, node in enumerate(called):
        up: Node | None = node
        while up is not None and up not in first:
            first[up] = i
            up = parent[id(up)]
    tree.root.node_id, tree.root.depth = "0", 0
    stack = [tree.root]
    while stack:
        node = stack.pop()
        children = node.children
        if not children:
            continue
        ordered = sorted((c for c in children if c in first), key=first.__getitem__)
        if len(ordered) < len(children):
            ordered += [c for c in children if c not in first]
        node.children = children = ordered
        prefix = "" if node.node_id == "0" else f"{node.node_id}."
        depth = node.depth + 1
        for i, child in enumerate(children, start=1):
            child.node_id = f"{prefix}{i}"
            child.depth = depth
        stack.extend(children)


def _dropped_signatures(tracker: ScopeTracker) -> list[str]:
    """A notice per module that had more distinct signatures than are kept."""
    notices: list[str] = []
    if tracker.extra_signatures:
        for node in tracker.tree.root.walk():
            extra = tracker.extra_signatures.get(id(node))
            if extra:
                counts = " and ".join(
                    f"{n} more distinct {kind}" for kind, n in sorted(extra.items())
                )
                notices.append(
                    f"{node.path or '<root>'}: {counts} not kept (the first {MAX_SIGNATURES} "
                    "of each are)"
                )
    return notices


def call_observer(observer: Observer, name: str, *args: Any) -> None:
    """Call an observer's lifecycle method ``name``; what it raises is an ``ObserverError``."""
    method = getattr(observer, name)
    try:
        method(*args)
    except LayerscopeError:
        raise
    except Exception as e:
        raise observer_error(method, name, e) from e


def _gpu(device: Any) -> dict[str, str]:
    """``{"gpu": name}`` of the CUDA device the model ran on (``torch.cuda.
    get_device_name``: the roofline's default spec where a built-in one matches)."""
    if not isinstance(device, torch.device) or device.type != "cuda":
        return {}
    try:
        return {"gpu": torch.cuda.get_device_name(device)}
    except (RuntimeError, AssertionError, ValueError):  # no driver, or not initialised
        return {}


def environment() -> dict[str, Any]:
    """The versions and platform a Profile was measured with (``Profile.env``)."""
    return {
        "layerscope": __version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cuda": torch.version.cuda,
    }


__all__ = ["build_profile", "call_observer", "environment"]
