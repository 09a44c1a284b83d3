"""The stage of one model call in a decoding loop, read from the call's arguments: the
default rule of ``ls.Profiler(model, stages=True)`` (``cache_stage``) and what it reads
(``call_facts``). See ``docs/generate.md`` ("Other decoding loops").

A call is read as a Hugging Face model's forward takes it: the cache under the keyword
the forward takes (``cache`` in transformers 5, ``past_key_values`` before it; either
is looked for), ``use_cache``, and the tokens fed (``input_ids`` or ``inputs_embeds``;
for an encoder-decoder, ``decoder_input_ids`` or ``decoder_inputs_embeds``). Positional
arguments are named from the forward's signature when the model is known, else the
first is taken as ``input_ids``. Nothing here imports transformers.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from layerscope.generation.cache import seq_length

#: The cache's keyword: transformers 5's, then the one before it.
CACHE_KEYWORDS = ("cache", "past_key_values")


@dataclass(frozen=True)
class CallFacts:
    """What one model call is given, read from its arguments."""

    #: the cache object given (None: no cache; the call may make one)
    cache: Any
    #: tokens the cache holds before the call (0 without a cache)
    cache_tokens: int
    #: tokens fed per row (0 when no token input is found)
    fed: int
    #: rows fed (0 when no token input is found)
    rows: int
    #: ``use_cache`` as given; without it and without a cache, the model's config's
    #: (None when neither says)
    use_cache: bool | None


def _positional_names(model: nn.Module | None) -> list[str]:
    if model is None:
        return ["input_ids"]
    try:
        params = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):
        return ["input_ids"]
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in params if p.kind in kinds]


def _tokens_of(named: dict[str, Any], encdec: bool) -> tuple[int, int]:
    """(rows, tokens per row) of the token input, (0, 0) if none is found."""
    prefix = "decoder_" if encdec else ""
    ids, embeds = named.get(f"{prefix}input_ids"), named.get(f"{prefix}inputs_embeds")
    if isinstance(ids, torch.Tensor) and ids.dim() >= 1:
        return (int(ids.shape[0]) if ids.dim() > 1 else 1), int(ids.shape[-1])
    if isinstance(embeds, torch.Tensor) and embeds.dim() >= 2:
        return (int(embeds.shape[0]) if embeds.dim() > 2 else 1), int(embeds.shape[-2])
    return 0, 0


def cache_tokens(cache: Any) -> int:
    """Tokens in ``cache``: a transformers ``Cache``'s ``get_seq_length``, or a legacy
    tuple of per-layer ``(keys, values)`` tensors' length."""
    if isinstance(cache, tuple | list):
        first = cache[0] if cache else None
        keys = first[0] if isinstance(first, tuple | list) and first else None
        return int(keys.shape[-2]) if isinstance(keys, torch.Tensor) and keys.dim() >= 2 else 0
    return seq_length(cache)


def call_facts(
    args: tuple[Any, ...], kwargs: dict[str, Any], model: nn.Module | None = None
) -> CallFacts:
    """What a call ``model(*args, **kwargs)`` is given (module doc); ``model`` names the
    positional arguments and gives its config's ``use_cache`` and encoder-decoder flag."""
    named = dict(zip(_positional_names(model), args, strict=False))
    named.update(kwargs)
    cache = next((named[k] for k in CACHE_KEYWORDS if named.get(k) is not None), None)
    config = getattr(model, "config", None)
    encdec = bool(getattr(config, "is_encoder_decoder", False)) or any(
        named.get(k) is not None for k in ("decoder_input_ids", "decoder_inputs_embeds")
    )
    rows, fed = _tokens_of(named, encdec)
    use_cache = named.get("use_cache")
    if use_cache is None and cache is None:
        use_cache = getattr(config, "use_cache", None)
    return CallFacts(
        cache=cache,
        cache_tokens=cache_tokens(cache) if cache is not None else 0,
        fed=fed,
        rows=rows,
        use_cache=None if use_cache is None else bool(use_cache),
    )


def cache_stage(
    args: tuple[Any, ...], kwargs: dict[str, Any], model: nn.Module | None = None
) -> str:
    """The stage of a call ``model(*args, **kwargs)`` of a decoder (the default rule of
    ``ls.Profiler(model, stages=True)``, which passes ``model``):

    - ``"full"``: ``use_cache=False`` (or no cache given and the model's config says
      ``use_cache`` False): a forward over the whole sequence, nothing kept;
    - ``"prefill"``: no cache given (the call makes one), or a cache holding 0 tokens;
    - ``"decode"``: a cache holding tokens, one token fed per row;
    - ``"extend"``: a cache holding tokens, more than one token fed per row (a chunked
      prefill's later chunks, speculative decoding's verification).

    To name stages of your own, wrap it: ``stages=lambda a, k: "verify" if
    k.get("verify") else ls.cache_stage(a, k, model)``.
    """
    facts = call_facts(args, kwargs, model)
    if facts.use_cache is False:
        return "full"
    if facts.cache is None or facts.cache_tokens == 0:
        return "prefill"
    return "decode" if facts.fed <= 1 else "extend"


__all__ = [
    "CACHE_KEYWORDS",
    "CallFacts",
    "cache_stage",
    "cache_tokens",
    "call_facts",
]
