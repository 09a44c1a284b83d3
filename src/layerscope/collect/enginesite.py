"""Where in the model an error the autograd engine raised happened, when no frame of the
error names it: the autograd node that failed, and the module whose forward created it.

A tensor that backward needs, modified in place since it was saved, fails the engine's
check before the node runs: that node is found by unpacking the saved tensors of the
graph under the backward's roots (held by torch's frame in the error's traceback) and
comparing the error. An op that fails inside a node is placed at the node whose op the
session's dispatch mode saw last.
"""

from __future__ import annotations

from types import FrameType
from typing import TYPE_CHECKING, Any

import torch
from torch.autograd.graph import Node as GraphNode

from layerscope.profile import Node

if TYPE_CHECKING:
    from layerscope.collect.scopes import ScopeTracker


def engine_site(tracker: ScopeTracker, exc: BaseException, frames: list[FrameType]) -> Node | None:
    """For ``exc`` raised in a backward pass run by the autograd engine: for a tensor
    that backward needs modified in place (the engine checks before it runs the
    node), the owner of the node whose saved tensor fails to unpack with the same
    message; for an op that raised under the session's dispatch mode, the owner of
    the node whose op the mode saw last (``ScopeTracker.last_backward``)."""
    if any(
        f.f_code.co_name == "__torch_dispatch__"
        and getattr(f.f_locals.get("self"), "tracker", None) is tracker
        for f in frames
    ):
        owner = tracker.last_backward
    else:
        roots = next(
            (f.f_locals.get("t_outputs") for f in frames if f.f_code.co_name == _ENGINE_RUN),
            None,
        )
        if roots is None or _MODIFIED not in str(exc):
            return None
        failed = _failing_node(roots, str(exc))
        owner = tracker.grad_owner(failed) if failed is not None else None
    return owner if owner is not tracker.outside else None


#: The name of torch's function that hands a backward pass to the autograd engine; its
#: frame holds the pass's roots (``t_outputs``).
_ENGINE_RUN = "_engine_run_backward"
#: Words of the engine's error for a saved tensor modified in place since it was saved.
_MODIFIED = "modified by an inplace operation"
#: How many autograd nodes ``_failing_node`` looks at, at most.
_MAX_NODES = 1_000_000


def _failing_node(roots: Any, message: str) -> GraphNode | None:
    """The autograd node under ``roots`` (tensors) a saved tensor of which fails to unpack
    with ``message``, the error the engine raised for it; None if none does."""
    todo: list[GraphNode | None] = [t.grad_fn for t in roots if isinstance(t, torch.Tensor)]
    seen: set[GraphNode] = set()
    while todo and len(seen) < _MAX_NODES:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for name in dir(node):
            if name.startswith("_saved_") or name == "saved_tensors":
                try:
                    getattr(node, name)
                except Exception as e:  # released (the node ran), or the error
                    if str(e) == message:
                        return node
        todo.extend(n for n, _ in node.next_functions)
    return None
