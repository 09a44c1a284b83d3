"""transformers on ``meta``: the helpers that read a tensor's value to choose a path,
answered as a real run of an unpadded batch would answer them.

transformers' mask code asks whether a row packs several sequences
(``find_packed_sequence_indices(position_ids)``), and whether an attention mask pads
anything (``_ignore_causal_mask_sdpa``, ``_ignore_bidirectional_mask_sdpa``,
``flash_attention_mask``, ``create_recurrent_attention_mask``); each reads its answer
with ``.all()`` or ``bool()``, which a meta tensor cannot give. ``meta_values()`` runs
those helpers whole, their ops counted as a real run's are, with every boolean value
read of a meta tensor inside them answered True: position ids that count up by one
(transformers' default) pack nothing, and an attention mask is read as all ones (no
padding, the keys a real run of such a mask attends). Only meta tensors are answered,
only inside an analysis of this thread; the helpers are restored after. Nothing is
touched unless transformers is already imported. It sits beside ``to_meta``
(``collect.meta``): applied once per analysis, around ``ls.profile``'s analysis pass,
each analysed step of a ``Profiler`` and each call a ``Profiler(stages=...)`` analyses;
a plain forward on meta (``estimate_generate`` filling a cache) can use it too.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

#: transformers.masking_utils' helpers that read values, and whether what they read is
#: an attention mask (the user's padding: a notice says how it was read) or position ids
_HELPERS = {
    "find_packed_sequence_indices": False,
    "_ignore_causal_mask_sdpa": True,
    "_ignore_bidirectional_mask_sdpa": True,
    "flash_attention_mask": True,
    "create_recurrent_attention_mask": True,
}
_ITEM = torch.ops.aten._local_scalar_dense.default
#: what a read answered True reads: a real one-byte True, so the session below counts the
#: read as a real run's (made at import, outside any mode)
_TRUE = torch.ones((), dtype=torch.bool)

#: Guards the patch: installed when the first analysis of the process starts, put back
#: when the last one ends, whatever the threads.
_lock = threading.Lock()
#: (module, {name: (original, wrapper)}) while the patch is in place.
_installed: list[Any] = []
_users = 0


class _Here(threading.local):
    #: how many analyses run in this thread; the wrappers answer only inside one
    depth = 0
    #: the innermost analysis's record of the attention masks read as all ones
    masks: list[str] | None = None


_here = _Here()


class _AllTrue(TorchDispatchMode):
    """Answers a value read of a meta boolean tensor with True; every other op runs."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.reads = 0

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        if func is _ITEM and args[0].is_meta and args[0].dtype is torch.bool:
            self.reads += 1
            return func(_TRUE)
        return func(*args, **(kwargs or {}))


def _wrap(name: str, original: Any, mask: bool) -> Any:
    def helper(*args: Any, **kwargs: Any) -> Any:
        if _here.depth <= 0 or not any(
            getattr(t, "is_meta", False) for t in tree_leaves((args, kwargs))
        ):
            return original(*args, **kwargs)
        answers = _AllTrue()
        with answers:
            out = original(*args, **kwargs)
        if mask and answers.reads and _here.masks is not None and name not in _here.masks:
            _here.masks.append(name)
        return out

    helper.__name__ = helper.__qualname__ = name
    helper.__doc__ = original.__doc__
    return helper


def masks_note(masks: list[str]) -> list[str]:
    """The notice for an analysis whose attention masks were read as all ones (none if
    none was)."""
    if not masks:
        return []
    return [
        f"on meta, transformers' padding checks ({', '.join(masks)}) read the attention "
        "mask as all ones (no padding), as a meta tensor has no values; a padded batch "
        "would build a mask and attend over every key"
    ]


@contextmanager
def meta_values() -> Iterator[list[str]]:
    """While the block runs, transformers' value-reading helpers accept meta tensors in
    this thread; yields the list of the helpers that read an attention mask as all ones
    (for ``masks_note``). The module's functions are replaced once for all threads
    (under a lock) and put back when the last block ends, so concurrent analyses
    neither chain wrappers nor take the helpers away from each other; other threads'
    own calls, and calls outside any block, reach the originals."""
    global _users
    masks: list[str] = []
    masking = sys.modules.get("transformers.masking_utils")
    if masking is None:
        yield masks
        return
    with _lock:
        if not _users:
            patched = {}
            for name, is_mask in _HELPERS.items():
                original = getattr(masking, name, None)
                if original is not None:
                    wrapper = _wrap(name, original, is_mask)
                    setattr(masking, name, wrapper)
                    patched[name] = (original, wrapper)
            _installed[:] = [masking, patched]
        _users += 1
    outer = _here.masks
    _here.depth += 1
    _here.masks = masks
    try:
        yield masks
    finally:
        _here.depth -= 1
        _here.masks = outer
        with _lock:
            _users -= 1
            if not _users:
                module, patched = _installed
                for name, (original, wrapper) in patched.items():
                    if getattr(module, name, None) is wrapper:  # not replaced since
                        setattr(module, name, original)
                _installed.clear()


__all__ = ["masks_note", "meta_values"]
