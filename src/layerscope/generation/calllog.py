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

What ``generate()`` does to a cache between calls is kept too: each ``crop()`` it makes
(assisted and prompt-lookup decoding drop the draft tokens the model rejected), with
the number of calls made before it, so that the replay crops its copy at the same
point (``crops``, ``crop_before``); and the state of each cache as each call is given it
and at the end (tokens seen, tokens and bytes per layer: ``states``, ``final``), which
the replay's own must match (``mismatch``). The crops are seen through a ``crop`` bound on
the cache object for the block, taken off after it.
"""

from __future__ import annotations

import copy
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from layerscope.generation.cache import cache_facts, seq_length

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


@dataclass(frozen=True)
class Crop:
    """A ``crop()`` ``generate()`` made on the cache ``CallLog.caches[index]`` after
    ``calls`` calls, with its arguments."""

    calls: int
    index: int
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


#: What a cache holds, as compared: tokens seen, then tokens and bytes per layer
#: (self-attention, then cross-attention).
State = tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]


def cache_state(cache: Any) -> State:
    """``cache``'s ``State``: what the replay's copy must hold where generate()'s did."""
    facts = cache_facts(cache)
    return (
        seq_length(cache),
        tuple(facts.self_tokens),
        tuple(facts.self_bytes),
        tuple(facts.cross_tokens),
        tuple(facts.cross_bytes),
    )


def _cropping(log: CallLog) -> Any:
    """The ``crop`` bound on a cache ``log`` watches: it notes the crop when made on one
    of ``generate()``'s caches (not on a copy, which ``copy.deepcopy`` binds it to), then
    crops as the cache's class does."""

    def crop(this: Any, *args: Any, **kwargs: Any) -> Any:
        index = next((i for i, given in enumerate(log._given) if given is this), None)
        if index is not None:
            log.crops.append(Crop(len(log.calls), index, args, dict(kwargs)))
        return type(this).crop(this, *args, **kwargs)

    return crop


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
        #: the ``crop()`` calls generate() made on those caches, in order
        self.crops: list[Crop] = []
        #: per call, the state of each cache it was given (by index), before the call
        self.states: list[dict[int, State]] = []
        #: each cache's state when generate() returned (by index)
        self.final: dict[int, State] = {}
        self._given: list[Any] = []  # generate()'s own caches, in the order of ``caches``
        self._watched: list[Any] = []  # those of them a ``crop`` is bound on
        self._last: dict[Key, torch.Tensor] = {}  # each argument's tensor, last kept

    def hook(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """The forward pre-hook: keep the call (the call itself is left as it is)."""
        kept_args = tuple(self._keep(i, v) for i, v in enumerate(args))
        kept = {k: self._keep(k, v) for k, v in kwargs.items()}
        refs = [v.index for v in (*kept_args, *kept.values()) if isinstance(v, _CacheRef)]
        self.states.append({i: cache_state(self._given[i]) for i in refs})
        self.calls.append((kept_args, kept))

    def close(self) -> None:
        """Note each cache's final state, take the watching ``crop`` off it and let
        ``generate()``'s own objects go (the kept calls stay)."""
        for i, given in enumerate(self._given):
            self.final[i] = cache_state(given)
        for watched in self._watched:
            vars(watched).pop("crop", None)
        self._watched.clear()
        self._given.clear()
        self._last.clear()

    def crop_before(self, call: int) -> list[Crop]:
        """The crops generate() made after ``call`` calls (0: before the first; the
        number of calls: after the last)."""
        return [c for c in self.crops if c.calls == call]

    def mismatch(self, index: int, state: State, call: int | None) -> str | None:
        """Where the replay's copy of cache ``index``, in ``state``, differs from what
        generate()'s held before call ``call`` (None: at the end), in words; None if it
        does not."""
        held = self.final.get(index) if call is None else self.states[call].get(index)
        if held is None or held == state:
            return None
        where = "at the end" if call is None else f"before its call {call + 1}"
        return (
            f"{where}, generate()'s cache had seen {held[0]} tokens and held "
            f"{sum(held[2]) + sum(held[4])} B ({list(held[1])} tokens per layer), the "
            f"replay's {state[0]} tokens and {sum(state[2]) + sum(state[4])} B "
            f"({list(state[1])})"
        )

    def _keep(self, key: Key, value: Any) -> Any:
        if is_cache(value):
            for i, given in enumerate(self._given):
                if given is value:
                    return _CacheRef(i)
            self._given.append(value)
            self.caches.append(copy.deepcopy(value))
            if "crop" not in vars(value):  # else it is the user's own, left as it is
                value.crop = types.MethodType(_cropping(self), value)
                self._watched.append(value)
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


__all__ = ["CallLog", "Crop", "State", "cache_state", "is_cache", "recording"]
