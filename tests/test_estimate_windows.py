"""A sliding-window model's KV cache in ``estimate_generate``, per cache kind, against the
cache transformers really holds and against ``plan_serving``'s paged cache.

The model: Mistral, 2 layers, hidden 128, 4 heads of 32 and 2 KV heads, bfloat16: one
token's keys and values in one layer are 2 x 2 heads x 32 x 2 B = 256 B. What each cache
holds of a window ``w`` once the sequence is longer than it (transformers 5,
``cache_utils``):

- dynamic (``DynamicSlidingWindowLayer``): the last ``w - 1`` tokens between steps (the
  step's own token is concatenated for attention, then dropped from the oldest end);
- static (``StaticSlidingWindowLayer``): ``min(w, max_cache_len)`` tokens, preallocated;
- paged (a server's): the window, the step's token and the ``w - 1`` before it, in whole
  blocks of 16 (``cachekinds.paged_tokens``), the rule ``plan_serving`` sizes by.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import transformers

import layerscope as ls
from layerscope.generation.cachekinds import paged_tokens, windows

#: one token's keys and values in one layer, bytes; and the layers
PER_TOKEN, LAYERS = 256, 2


def config(window: int | None) -> Any:
    return transformers.MistralConfig(
        vocab_size=256, hidden_size=128, intermediate_size=128, num_hidden_layers=LAYERS,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
        sliding_window=window,
    )  # fmt: skip


def mistral(window: int | None, device: str = "meta") -> Any:
    torch.manual_seed(0)
    with torch.device(device):
        model: Any = transformers.MistralForCausalLM(config(window))
    return model.to(torch.bfloat16).eval()


def kv(window: int | None, prompt: int, new: int, cache: str, batch: int = 1) -> int:
    est = ls.estimate_generate(
        mistral(window), target="h100", prompt=prompt, new_tokens=new, batch=batch, cache=cache
    )
    return est.sweep[0].kv_bytes


@pytest.mark.parametrize(
    ("window", "prompt", "new", "tokens"),
    [
        (8, 16, 8, 16),  # 8 of 24 tokens held: one block of 16
        (100, 120, 8, 112),  # 100 of 128: 7 blocks
        (17, 40, 8, 32),  # 17 of 48: one token past a block, 2 blocks
        (16, 40, 8, 16),  # 16 of 48: exactly one block
        (100, 16, 8, 32),  # 24 tokens, the window not reached: 2 blocks
        (None, 16, 8, 32),  # no window: 24 tokens, 2 blocks
    ],
)
def test_a_paged_window_is_whole_blocks(
    window: int | None, prompt: int, new: int, tokens: int
) -> None:
    """Per sequence: 2 layers x 256 B x the window's tokens rounded up to blocks of 16
    (window 8: 8,192 B, where 8 tokens would be 4,096; window 100: 57,344 B, not 51,200);
    two sequences twice that; ``plan_serving``'s sequence the same."""
    per_sequence = LAYERS * PER_TOKEN * tokens
    assert paged_tokens(prompt + new, window, 16) == tokens
    assert kv(window, prompt, new, "paged") == per_sequence
    assert kv(window, prompt, new, "paged", batch=2) == 2 * per_sequence
    plan = ls.plan_serving(
        mistral(window), target="h100", max_context=prompt + new, prompt=prompt,
        new_tokens=new, batch=1,
    )  # fmt: skip
    assert plan.kv_bytes(prompt + new) == per_sequence
    cap = window if window is not None and window < prompt + new else None
    assert [layer.cap for layer in plan.layers] == [cap] * LAYERS


def _real_cache(kind: str, window: int, prompt: int, new: int) -> Any:
    """A real cache of ``kind`` after a real (CPU) model's prefill of ``prompt`` tokens
    and ``new`` decode steps of one token, as ``generate()`` runs them."""
    model = mistral(window, device="cpu")
    total = prompt + new
    if kind == "dynamic":
        cache: Any = transformers.DynamicCache(config=model.config)
    else:
        cache = transformers.StaticCache(config=model.config, max_cache_len=total)
    ids = torch.randint(0, 256, (1, total))
    with torch.no_grad():
        model(ids[:, :prompt], cache=cache, use_cache=True)
        for i in range(prompt, total):
            model(ids[:, i : i + 1], cache=cache, use_cache=True)
    return cache


def _held(cache: Any) -> tuple[int, list[int]]:
    """Bytes the cache's layers hold, and each one's tokens."""
    layers = cache.layers
    return (
        sum(layer.keys.nbytes + layer.values.nbytes for layer in layers),
        [int(layer.keys.shape[-2]) for layer in layers],
    )


@pytest.mark.parametrize(("kind", "tokens"), [("dynamic", 7), ("static", 8)])
def test_dynamic_and_static_hold_what_transformers_holds(kind: str, tokens: int) -> None:
    """Window 8, 16 + 8 tokens: a real ``DynamicCache`` keeps 7 tokens a layer (window - 1:
    2 x 256 x 7 = 3,584 B), a real ``StaticCache`` of 24 its window's 8 (4,096 B); the
    estimate's figures are those."""
    real = _real_cache(kind, 8, 16, 8)
    assert _held(real) == (LAYERS * PER_TOKEN * tokens, [tokens] * LAYERS)
    assert windows(real) == [8] * LAYERS
    assert kv(8, 16, 8, kind) == LAYERS * PER_TOKEN * tokens


def test_windows_reads_a_real_cache() -> None:
    """``windows``: a dynamic layer's ``sliding_window``, a static layer's length (at most
    its ``max_cache_len``), None without a window."""
    assert windows(transformers.DynamicCache(config=config(8))) == [8, 8]
    assert windows(transformers.StaticCache(config=config(8), max_cache_len=4)) == [4, 4]
    assert windows(transformers.DynamicCache(config=config(None))) == [None, None]
    assert windows(transformers.StaticCache(config=config(None), max_cache_len=24)) == [None] * 2
