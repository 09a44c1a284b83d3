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
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_NAME = "find_packed_sequence_indices"

#: Guards the patch: installed when the first analysis of the process starts, put back
#: when the last one ends, whatever the threads.
_lock = threading.Lock()
#: (module, original, wrapper) while the patch is in place.
_installed: list[Any] = []
_users = 0
#: Per thread: how many analyses run here; the wrapper answers only inside one.
_here = threading.local()


def _inside() -> bool:
    return getattr(_here, "depth", 0) > 0


def _wrap(original: Any) -> Any:
    def find_packed_sequence_indices(position_ids: Any, *args: Any, **kwargs: Any) -> Any:
        if _inside() and getattr(position_ids, "is_meta", False):
            return None
        return original(position_ids, *args, **kwargs)

    return find_packed_sequence_indices


@contextmanager
def meta_values() -> Iterator[None]:
    """While the block runs, transformers' value-reading helpers accept meta tensors in
    this thread. The module's function is replaced once for all threads (under a lock)
    and put back when the last block ends, so concurrent analyses neither chain
    wrappers nor take the helper away from each other; other threads' own calls, and
    calls outside any block, reach the original."""
    global _users
    masking = sys.modules.get("transformers.masking_utils")
    if masking is None or getattr(masking, _NAME, None) is None:
        yield
        return
    with _lock:
        if not _users:
            original = getattr(masking, _NAME)
            wrapper = _wrap(original)
            setattr(masking, _NAME, wrapper)
            _installed[:] = [masking, original, wrapper]
        _users += 1
    _here.depth = getattr(_here, "depth", 0) + 1
    try:
        yield
    finally:
        _here.depth -= 1
        with _lock:
            _users -= 1
            if not _users:
                module, original, wrapper = _installed
                if getattr(module, _NAME, None) is wrapper:  # not replaced since
                    setattr(module, _NAME, original)
                _installed.clear()


__all__ = ["meta_values"]
