"""An analysis made to read fewer bytes than it ran with, as the options of an estimate
say: quantized weights (``weights``), a narrower KV cache (``cachekinds``), the experts a
step's tokens reach (``moe``). The bytes a module no longer moves come off its own
``bytes_accessed`` and off every enclosing module's total."""

from __future__ import annotations

import layerscope.metricspec as ms
from layerscope.profile import Node, Profile


def read_less(prof: Profile, path: str, saved: float) -> None:
    """The module at ``path`` moves ``saved`` bytes fewer (nothing when the analysis did
    not call it)."""
    try:
        node: Node | None = prof.node(path)
    except KeyError:
        return
    assert node is not None
    if ms.BYTES_ACCESSED in node.self_metrics:
        node.self_metrics[ms.BYTES_ACCESSED] -= saved
    while node is not None:
        if ms.BYTES_ACCESSED in node.metrics:
            node.metrics[ms.BYTES_ACCESSED] -= saved
        node = node.parent


__all__ = ["read_less"]
