"""transformers on ``meta``: the helpers that read a tensor's value to choose a path,
answered as a real run of such input would answer them.

In training mode (no KV cache, no attention mask) transformers' mask code asks
``find_packed_sequence_indices(position_ids)`` whether a row packs several sequences;
it reads the answer with ``.all()``, which a meta tensor cannot give. ``meta_values()``
makes it answer None (no packed sequences: what it finds for position ids that count up
by one, transformers' default) for meta position ids only, while the block runs, and
restores it after. Nothing is touched unless transformers is already imported. It sits
beside ``to_meta`` (``collect.meta``): applied once per analysis, around ``ls.profile``'s
analysis pass and each call a ``Profiler(stages=...)`` analyses; a plain forward on meta
(``estimate_generate`` filling a cache) can use it too.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_NAME = "find_packed_sequence_indices"


@contextmanager
def meta_values() -> Iterator[None]:
    """While the block runs, transformers' value-reading helpers accept meta tensors."""
    masking = sys.modules.get("transformers.masking_utils")
    original = getattr(masking, _NAME, None)
    if masking is None or original is None:
        yield
        return

    def find_packed_sequence_indices(position_ids: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(position_ids, "is_meta", False):
            return None
        return original(position_ids, *args, **kwargs)

    setattr(masking, _NAME, find_packed_sequence_indices)
    try:
        yield
    finally:
        setattr(masking, _NAME, original)


__all__ = ["meta_values"]
