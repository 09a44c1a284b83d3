"""What a transformers ``Cache`` holds, read from the object itself (no transformers
import here): bytes per layer as stored, self-attention and cross-attention apart.

A transformers 5 cache keeps its layers in ``cache.layers`` (``layer.keys``,
``layer.values``: ``(rows, kv heads, tokens, head dim)``); an ``EncoderDecoderCache``
holds a ``self_attention_cache`` and a ``cross_attention_cache``. A sliding-window layer
stores at most its window's last tokens, a static layer its whole preallocated length:
both are counted as stored. A quantized cache keeps its data in private attributes; its
layers are read where they show ``keys``/``values`` tensors, else a notice says what
could not be read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from layerscope.generation.fields import KV_FIELDS
from layerscope.render.units import count, nbytes, plural


@dataclass
class CacheFacts:
    """The bytes a cache holds now, per layer (self-attention, then cross-attention)."""

    #: bytes of each self-attention layer's keys and values, as stored
    self_bytes: list[int] = field(default_factory=list)
    #: tokens each self-attention layer stores (a sliding window stops growing)
    self_tokens: list[int] = field(default_factory=list)
    cross_bytes: list[int] = field(default_factory=list)
    cross_tokens: list[int] = field(default_factory=list)
    #: rows of the cache (batch x beams)
    rows: int = 0
    notices: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.self_bytes) + sum(self.cross_bytes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "bytes": self.total,
            "self_bytes": sum(self.self_bytes),
            "cross_bytes": sum(self.cross_bytes),
            "per_layer": list(self.self_bytes),
            "tokens": list(self.self_tokens),
            "cross_per_layer": list(self.cross_bytes),
            "cross_tokens": list(self.cross_tokens),
            "rows": self.rows,
        }


def _layers(cache: Any) -> list[Any] | None:
    layers = getattr(cache, "layers", None)
    return list(layers) if isinstance(layers, list | tuple) else None


def _read(layers: list[Any], where: str, facts: CacheFacts) -> tuple[list[int], list[int]]:
    sizes: list[int] = []
    tokens: list[int] = []
    for i, layer in enumerate(layers):
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if not isinstance(keys, torch.Tensor) or not isinstance(values, torch.Tensor):
            if getattr(layer, "is_initialized", True):
                facts.notices.append(
                    f"{where} layer {i} ({type(layer).__name__}) keeps its data where "
                    "layerscope cannot read it: its bytes are not counted"
                )
            sizes.append(0)
            tokens.append(0)
            continue
        sizes.append(keys.nbytes + values.nbytes)
        tokens.append(int(keys.shape[-2]) if keys.dim() >= 2 else 0)
        if keys.dim() >= 1 and keys.numel():
            facts.rows = max(facts.rows, int(keys.shape[0]))
    return sizes, tokens


def cache_facts(cache: Any) -> CacheFacts:
    """The bytes ``cache`` holds now (module doc); an unknown object gives a notice."""
    facts = CacheFacts()
    if cache is None:
        return facts
    inner = getattr(cache, "self_attention_cache", None)
    if inner is not None:  # encoder-decoder
        own, cross = _layers(inner), _layers(getattr(cache, "cross_attention_cache", None))
        facts.self_bytes, facts.self_tokens = _read(own or [], "self-attention", facts)
        facts.cross_bytes, facts.cross_tokens = _read(cross or [], "cross-attention", facts)
        return facts
    layers = _layers(cache)
    if layers is None:
        facts.notices.append(
            f"the cache is a {type(cache).__name__} without layers: its bytes are not counted"
        )
        return facts
    facts.self_bytes, facts.self_tokens = _read(layers, "cache", facts)
    return facts


def seq_length(cache: Any) -> int:
    """Tokens the cache has seen (``get_seq_length``), 0 without a cache."""
    if cache is None:
        return 0
    inner = getattr(cache, "self_attention_cache", cache)
    get = getattr(inner, "get_seq_length", None)
    return int(get()) if callable(get) else 0


@dataclass(frozen=True)
class KVSummary:
    """A generation's KV cache (``Generation.kv_cache`` is its ``to_dict()``): bytes
    after the prefill and at the end, per token and row, per layer, self- and
    cross-attention apart."""

    bytes_after_prefill: int
    bytes_final: int
    bytes_per_token: int
    tokens_final: int
    rows: int
    per_layer: list[int]
    tokens_per_layer: list[int]
    cross_bytes: int
    cross_per_layer: list[int]

    @classmethod
    def of(cls, after_prefill: Mapping[str, Any], final: Mapping[str, Any]) -> KVSummary:
        """From two ``CacheFacts.to_dict()``: after the prefill and at the end."""
        rows = max(final.get("rows", 0), 1)
        tokens = max(final["tokens"] or [0])
        # each layer stores tokens x rows entries of the same size: its bytes per token
        # and row, summed over the layers
        per_token = sum(
            b // (t * rows) for b, t in zip(final["per_layer"], final["tokens"], strict=True) if t
        )
        return cls(after_prefill["bytes"], final["bytes"], per_token, tokens, rows,
                   final["per_layer"], final["tokens"], final["cross_bytes"],
                   final["cross_per_layer"])  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        """The ``kv_cache`` object, in the field table's order (``KV_FIELDS``)."""
        return {key: getattr(self, key) for key, _, _ in KV_FIELDS}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> KVSummary:
        return cls(**{key: data[key] for key, _, _ in KV_FIELDS})


def kv_summary(after_prefill: dict[str, Any], final: dict[str, Any]) -> dict[str, Any]:
    """A generation's ``kv_cache`` from two ``CacheFacts.to_dict()`` (``KVSummary``)."""
    return KVSummary.of(after_prefill, final).to_dict()


def held_words(kv: Mapping[str, Any]) -> str:
    """What a generation's cache holds at the end (its ``kv_cache``), in words that
    multiply to its bytes: ``7 tokens x 2 rows; 512 B per token and row``, or, where
    layers hold different counts (a sliding window keeps fewer), ``1 row; 23 tokens in
    1 layer, 7 in 1 (a sliding window); 256 B per token, row and layer``."""
    rows = int(kv.get("rows") or 0)
    tokens = [int(t) for t in kv.get("tokens_per_layer") or [kv.get("tokens_final") or 0]]
    counts = Counter(t for t in tokens if t)
    per_token = f"{nbytes(kv.get('bytes_per_token') or 0)} per token and row"
    if len(counts) <= 1:
        return f"{plural(next(iter(counts), 0), 'token')} x {plural(rows, 'row')}; {per_token}"
    (most, layers), *rest = sorted(counts.items(), reverse=True)
    held = [f"{plural(most, 'token')} in {plural(layers, 'layer')}"]
    held += [f"{count(t)} in {count(n)}" for t, n in rest]
    per_layer = kv.get("per_layer") or []
    sizes = {
        b // (t * rows) for b, t in zip(per_layer, tokens, strict=False) if t and rows
    }  # fmt: skip
    if len(sizes) == 1:  # every layer the same size per token: the sum multiplies out
        per_token = f"{nbytes(sizes.pop())} per token, row and layer"
    return f"{plural(rows, 'row')}; {', '.join(held)} (a sliding window); {per_token}"


__all__ = ["CacheFacts", "KVSummary", "cache_facts", "held_words", "kv_summary", "seq_length"]
