"""Memory accounting: saved activations, outputs, peaks, gradients, training footprint.

``MemoryObserver`` measures per module during a session (pass it in ``observers=[...]``);
``training_footprint`` turns a measured profile into the memory a training step needs
(``ls.max_batch_size`` builds on it). See ``docs/memory.md``.
"""

from __future__ import annotations

from layerscope.metrics.memory.observer import METRIC_KEYS, MemoryObserver
from layerscope.metrics.memory.training import (
    OPTIMIZER_STATES,
    OptimizerName,
    record_training_footprint,
    training_footprint,
)

__all__ = [
    "METRIC_KEYS",
    "OPTIMIZER_STATES",
    "MemoryObserver",
    "OptimizerName",
    "record_training_footprint",
    "training_footprint",
]
