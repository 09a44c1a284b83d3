"""Memory accounting: saved activations, outputs, peaks, gradients.

``MemoryObserver`` measures per module during a session (pass it in ``observers=[...]``);
the memory a training step needs is the plan's arithmetic (``layerscope.planning``:
``training_footprint``, ``ls.max_batch_size``, ``ls.plan``). See ``docs/memory.md``.
"""

from __future__ import annotations

from layerscope.metrics.memory.observer import METRIC_KEYS, MemoryObserver

__all__ = ["METRIC_KEYS", "MemoryObserver"]
