"""The model calls ``generate()`` makes, recorded as it makes them, for
``ls.profile_generate`` to replay one at a time (``generation.run``).

A forward pre-hook on the model (``with_kwargs=True``, ahead of any other) sees each of
``generate()``'s calls with the arguments ``generate()`` passes: the token ids, the
position ids, the attention mask (or none, when ``generate()`` drops an all-ones one),
the cache, ``logits_to_keep``, ``use_cache``, ``return_dict`` and whatever else that
version of transformers sends. Nothing here chooses them, so the replay makes the calls
``generate()`` made, in any version.

What is kept of each call:

- a cache (a transformers ``Cache``) as a copy of the cache the first time a call is
  given it (``generate()`` makes it empty before the prefill): the replay fills its own
  copy, of the kind and length ``generate()`` chose (a static cache's length included);
- a tensor argument as a copy, but as the same argument's tensor in the call before when
  it is equal to it, or that tensor with columns appended when it grew by them (a
  growing attention mask, or ``use_cache=False``'s growing ids): a run of ``n`` calls
  keeps ``n`` tails, not ``n`` whole masks;
- anything else as given.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

#: An argument's key: its keyword, or its position.
Key = str | int


def is_cache(value: Any) -> bool:
    """Whether ``value`` is a transformers ``Cache`` (False without transformers)."""
    try:
        from transformers.cache_utils import Cache
    except ImportError:  # pragma: no cover - the generation wing runs with transformers
        return False
    return isinstance(value, Cache)


@dataclass(frozen=True)
class _CacheRef:
    """The cache ``CallLog.caches[index]`` stands here."""

    index: int


@dataclass(frozen=True)
class _Same:
    """The same argument's tensor in the call before, again."""


@dataclass(frozen=True)
class _Grown:
    """The same argument's tensor in the call before with ``tail`` appended on its last
    dimension."""

    tail: torch.Tensor


def _grew(last: torch.Tensor, value: torch.Tensor) -> bool:
    """Whether ``value`` is ``last`` with columns appended on its last dimension."""
    return (
        value.dim() == last.dim() >= 1
        and value.shape[:-1] == last.shape[:-1]
        and value.shape[-1] > last.shape[-1]
        and value.dtype == last.dtype
        and value.device == last.device
        and torch.equal(value[..., : last.shape[-1]], last)
    )


def _same(last: torch.Tensor, value: torch.Tensor) -> bool:
    return (
        value.shape == last.shape
        and value.dtype == last.dtype
        and value.device == last.device
        and torch.equal(value, last)
    )


class CallLog:
    """The calls of one ``generate()`` (module doc), in order."""

    def __init__(self) -> None:
        #: each call's positional and keyword arguments, as kept
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        #: a copy of each cache the calls were given, as it was when first given
        self.caches: list[Any] = []
        self._given: list[Any] = []  # generate()'s own caches, in the order of ``caches``
        self._last: dict[Key, torch.Tensor] = {}  # each argument's tensor, last kept

    def hook(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """The forward pre-hook: keep the call (the call itself is left as it is)."""
        kept_args = tuple(self._keep(i, v) for i, v in enumerate(args))
        self.calls.append((kept_args, {k: self._keep(k, v) for k, v in kwargs.items()}))

    def close(self) -> None:
        """Let ``generate()``'s own objects go (the kept calls stay)."""
        self._given.clear()
        self._last.clear()

    def _keep(self, key: Key, value: Any) -> Any:
        if is_cache(value):
            for i, given in enumerate(self._given):
                if given is value:
                    return _CacheRef(i)
            self._given.append(value)
            self.caches.append(copy.deepcopy(value))
            return _CacheRef(len(self.caches) - 1)
        if not isinstance(value, torch.Tensor):
            return value
        last = self._last.get(key)
        if last is not None and _same(last, value):
            return _Same()
        kept: Any = None
        if last is not None and _grew(last, value):
            kept = _Grown(value[..., last.shape[-1] :].clone())
            self._last[key] = torch.cat([last, kept.tail], dim=-1)
        else:
            kept = self._last[key] = value.detach().clone()
        return kept

    def replayed(self) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
        """Each call's arguments, rebuilt: the tensors as ``generate()`` passed them, and
        in place of each of ``generate()``'s caches the copy in ``caches``, which the
        calls, made in this order, fill as ``generate()``'s calls filled its own."""
        last: dict[Key, torch.Tensor] = {}
        for args, kwargs in self.calls:
            rebuilt_args = tuple(self._rebuilt(i, v, last) for i, v in enumerate(args))
            yield rebuilt_args, {k: self._rebuilt(k, v, last) for k, v in kwargs.items()}

    def _rebuilt(self, key: Key, value: Any, last: dict[Key, torch.Tensor]) -> Any:
        if isinstance(value, _CacheRef):
            return self.caches[value.index]
        if isinstance(value, _Same):
            return last[key]
        if isinstance(value, _Grown):
            value = torch.cat([last[key], value.tail], dim=-1)
        if isinstance(value, torch.Tensor):
            last[key] = value
        return value


@contextmanager
def recording(model: nn.Module) -> Iterator[CallLog]:
    """Record every call of ``model`` in the block (module doc); the hook is removed
    after it, also when the block raises."""
    log = CallLog()
    handle = model.register_forward_pre_hook(log.hook, with_kwargs=True, prepend=True)
    try:
        yield log
    finally:
        handle.remove()
        log.close()


__all__ = ["CallLog", "is_cache", "recording"]
