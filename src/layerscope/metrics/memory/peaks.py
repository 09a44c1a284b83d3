"""Peaks of many overlapping scopes from one allocator whose peak counter is global.

An allocator (CUDA's caching allocator, or the simulated one in ``storages``) offers three
statistics: bytes allocated now, the highest value since the last reset, and a reset. A
module's peak needs the counter reset at its entry, but a reset inside a child would lose
what its parent had already reached. So, before every reset, the counter's value is folded
into the running maximum of *every* open scope; a scope's peak is then the larger of its
folded maximum and the counter at its close. Scopes need not close in LIFO order (a
backward pass may start inside one module's forward and end inside another's).
"""

from __future__ import annotations

from typing import Protocol

import torch


class PeakSource(Protocol):
    """The allocator statistics a ``NestedPeaks`` reads."""

    def read(self) -> tuple[int, int]:
        """Bytes allocated now, and the highest that value was since the last reset."""
        ...

    def reset_peak(self) -> None:
        """Restart the peak counter at the bytes allocated now."""
        ...


class CudaAllocator:
    """``PeakSource`` over CUDA's caching allocator for one device.

    Reads ``allocated_bytes.all.current`` / ``.peak`` (bytes in live blocks; the allocator
    rounds every block up to a multiple of 512 bytes) in one call, and resets with
    ``torch.cuda.reset_peak_memory_stats``, which also restarts the device's other peak
    counters (reserved, active).
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.index = device.index if device.index is not None else torch.cuda.current_device()

    def read(self) -> tuple[int, int]:
        # The nested stats: one C++ call, no flattening (``memory_stats`` flattens them).
        stats = torch.cuda.memory_stats_as_nested_dict(self.index)
        allocated = stats.get("allocated_bytes", {}).get("all", {})
        return int(allocated.get("current", 0)), int(allocated.get("peak", 0))

    def reset_peak(self) -> None:
        torch.cuda.reset_peak_memory_stats(self.index)


class Scope:
    """One open measurement window: the level at entry and the highest level folded in."""

    __slots__ = ("entry", "high")

    def __init__(self, entry: int) -> None:
        self.entry = entry
        self.high = entry


class NestedPeaks:
    """Peak above entry for every scope, however they nest, from one resettable counter."""

    def __init__(self, source: PeakSource) -> None:
        self.source = source
        self._open: list[Scope] = []
        #: Bytes allocated at the latest read (by ``open``, ``close`` or ``level``).
        self.last = 0

    def open(self) -> Scope:
        """Start a scope now: fold the counter into the open scopes, reset, record the level."""
        allocated, peak = self.source.read()
        self.last = allocated
        for s in self._open:
            if peak > s.high:
                s.high = peak
        self.source.reset_peak()
        scope = Scope(allocated)
        self._open.append(scope)
        return scope

    def close(self, scope: Scope) -> int:
        """End ``scope``; its peak above entry (the counter keeps running for the others)."""
        allocated, peak = self.source.read()
        self.last = allocated
        peak = max(scope.high, peak)
        for i in range(len(self._open) - 1, -1, -1):
            if self._open[i] is scope:
                del self._open[i]
                break
        return peak - scope.entry

    def level(self, scope: Scope) -> int:
        """Bytes allocated now above the level at ``scope``'s entry (may be negative)."""
        self.last = self.source.read()[0]
        return self.last - scope.entry
