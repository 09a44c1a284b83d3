"""The KV cache a step of ``ls.estimate_generate`` runs on (``cache=``) and the width it
is stored at (``kv_dtype=``), ``docs/generate.md`` "The cache model".

- **dynamic**: ``transformers.DynamicCache``, grown by ``torch.cat`` at every step (reads
  and writes the whole cache again besides attention's read).
- **static**: ``transformers.StaticCache`` of ``prompt + new_tokens`` tokens, attended over
  whole at every step.
- **paged**: a server's cache of fixed blocks, read in place once at the current length
  and written once. A call that leaves ``n`` tokens in the cache runs on a
  ``StaticCache`` of ``n`` rounded up to whole blocks (``block_size``): it writes its own
  tokens in place and attention reads the rounded length, once. A sliding-window layer
  is a ring of its window's tokens (vLLM frees the blocks that leave the window): once
  full, transformers' static layer rolls and copies its whole window at every step,
  which no paged server does, so before a decode step a full one is set one token short
  of full (``ring``), and the step writes its token in place and attention reads the
  window once. The cache it holds is the window rounded up to whole blocks
  (``paged_tokens``, ``paged_facts``: the rule ``ls.plan_serving`` sizes a sequence by).

``kv_dtype``: the cache held and moved at that width (``KV_WIDTHS``). A call's cache
traffic per layer, from the cache after the call (``generation.cache``): a dynamic
cache's three passes over it (attention's read, ``torch.cat``'s read and write), a
static or paged cache's read of its whole length and its write of the tokens fed. Those
bytes are scaled by the width's ratio to the model's, on the layer's attention module
(the module that owns the layer's ``layer_idx`` and calls the cache) and its parents.
Scales are not charged: vLLM's FP8 KV cache keeps per-tensor scales, one for a layer's
keys and one for its values (vLLM docs, "Quantized KV Cache"); INT8 is charged the same
way (an assumption, stated in the docs).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from torch import nn

from layerscope.generation.cache import CacheFacts
from layerscope.generation.narrowing import read_less
from layerscope.profile import Profile

#: The caches ``cache=`` names.
CACHES = ("dynamic", "static", "paged")
#: A paged cache's block in tokens when ``block_size`` is not given: vLLM's default
#: (``--block-size``, 16 on CUDA; vLLM's engine arguments).
BLOCK_SIZE = 16
#: Bytes an element of the KV cache takes at ``kv_dtype``.
KV_WIDTHS = {"fp8": 1, "int8": 1, "bf16": 2, "fp16": 2, "fp32": 4}


def rounded(tokens: int, block: int) -> int:
    """``tokens`` rounded up to whole blocks of ``block``."""
    return -(-tokens // block) * block


def paged_tokens(length: int, window: int | None, block: int) -> int:
    """The tokens a paged cache allocates to one sequence's layer that has seen
    ``length`` tokens: at most its sliding ``window`` (None: none), rounded up to whole
    blocks of ``block`` (a server allocates blocks, for a window too: vLLM's sliding-window
    layers free only the blocks wholly out of it). The window counts the step's own token
    with the ``window - 1`` before it that it attends to: the tokens a step needs held."""
    return rounded(length if window is None else min(length, window), block)


def windows(cache: Any) -> list[int | None]:
    """Each self-attention layer's sliding window as ``cache`` keeps it (None: a layer
    without one): a dynamic layer's ``sliding_window`` (it stores ``window - 1`` tokens
    between steps), a static one's length (``min(window, max_cache_len)``: it stores
    that many)."""
    cache = getattr(cache, "self_attention_cache", cache)
    out: list[int | None] = []
    for layer in getattr(cache, "layers", None) or ():
        window = getattr(layer, "sliding_window", None)
        if window is None:
            window = getattr(layer, "max_cache_len", None)
        sliding = getattr(layer, "is_sliding", False) and isinstance(window, int)
        out.append(window if sliding else None)
    return out


def paged_facts(facts: CacheFacts, cache: Any, length: int, block: int) -> CacheFacts:
    """A paged cache's ``facts`` after ``length`` tokens: each self-attention layer holding
    ``paged_tokens`` of them (the same bytes per token), as ``ls.plan_serving`` sizes one
    sequence's cache; the cross-attention layers as read."""
    held = replace(facts, self_bytes=[], self_tokens=[])
    for size, tokens, window in zip(
        facts.self_bytes, facts.self_tokens, windows(cache), strict=True
    ):
        count = paged_tokens(length, window, block) if tokens else 0
        held.self_bytes.append(size // tokens * count if tokens else size)
        held.self_tokens.append(count)
    return held


def new_cache(transformers: Any, config: Any, kind: str, total: int, held: int, block: int) -> Any:
    """A cache of ``kind`` for a call that leaves ``held`` tokens in it; ``total``:
    prompt + new tokens (a static cache's length)."""
    if kind == "static":
        return transformers.StaticCache(config=config, max_cache_len=total)
    if kind == "paged":
        return transformers.StaticCache(config=config, max_cache_len=rounded(held, block))
    return transformers.DynamicCache(config=config)


def ring(cache: Any) -> None:
    """Set each full sliding-window layer of a static ``cache`` one token short of full,
    so that the next step writes its token in place (module doc)."""
    for layer in getattr(cache, "layers", None) or ():
        full = getattr(layer, "max_cache_len", None)
        seen = getattr(layer, "cumulative_length_int", None)
        if not getattr(layer, "is_sliding", False) or not isinstance(full, int):
            continue
        if isinstance(seen, int) and seen >= full:
            layer.cumulative_length_int = full - 1
            length = getattr(layer, "cumulative_length", None)
            if isinstance(length, torch.Tensor):
                length.fill_(full - 1)


def attention_paths(model: nn.Module) -> dict[int, str]:
    """Each layer's attention module (the module that owns its ``layer_idx``), by layer."""
    out: dict[int, str] = {}
    for name, m in model.named_modules():
        index = getattr(m, "layer_idx", None)
        if isinstance(index, int) and not isinstance(index, bool):
            out[index] = name
    return out


def cache_traffic(facts: CacheFacts, kind: str, fed: int) -> list[float]:
    """Bytes each layer's cache moves in a call that fed ``fed`` tokens per row (module
    doc), from the cache after it."""
    out = []
    for size, tokens in zip(facts.self_bytes, facts.self_tokens, strict=True):
        if not tokens:
            out.append(0.0)
        elif kind == "dynamic":
            out.append(3.0 * size)
        else:
            out.append(size + min(fed, tokens) * size / tokens)
    return out


def narrow_kv(
    prof: Profile, paths: dict[int, str], facts: CacheFacts, kind: str, fed: int, ratio: float
) -> None:
    """Make ``prof`` move its cache at ``ratio`` times the model's width (module doc)."""
    for layer, moved in enumerate(cache_traffic(facts, kind, fed)):
        path = paths.get(layer)
        if path is None or not moved:
            continue
        read_less(prof, path, round(moved * (1.0 - ratio)))


__all__ = [
    "BLOCK_SIZE",
    "CACHES",
    "KV_WIDTHS",
    "attention_paths",
    "cache_traffic",
    "narrow_kv",
    "new_cache",
    "paged_facts",
    "paged_tokens",
    "ring",
    "rounded",
    "windows",
]
