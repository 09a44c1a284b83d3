"""Deterministic construction that leaves the caller's global RNG state untouched."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed the CPU generator for the block, then put the caller's RNG state back.

    Only the CPU default generator is seeded (``torch.manual_seed`` would also reseed
    CUDA generators, which ``fork_rng(devices=[])`` would not restore); the examples are
    built on the CPU, so that is the only stream their initialisers draw from.
    """
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        yield
