"""The padding notice of ``ls.profile_generate``: which of the prompt's tokens are
padding, and what the profile counts of them.

The model computes every position it is fed, masked or not: a padded prompt's pad
tokens are work in the prefill (MACs, FLOPs, bytes) and their keys and values stay in
the cache, which every decode step attends over (masked). Where they come from:

- **a mask the model was given**: the ``attention_mask`` ``generate()`` passed to its
  first call (``generation.calllog``): the user's own, or the one ``generate()`` builds
  from ``pad_token_id`` for a decoder-only model given none (transformers infers it from
  a pad token other than the end token). For an encoder-decoder it is the encoder's
  mask, which ``generate()`` passes to every decoder call;
- **pad tokens no given mask covers**: ``generate()`` infers no mask for an
  encoder-decoder, so its prompt's pad tokens reach the model unmasked: it attends to
  them as to any token (BART, T5) unless it masks them itself (T5Gemma builds the mask
  from ``pad_token_id``); either way they are computed. The model is not run again to
  tell which (its hooks would fire, its time would be spent). A decoder-only model given
  no mask is fed them as any token.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from layerscope.generation.calllog import CallLog
from layerscope.render.units import count, plural


def pad_token_id(model: nn.Module, kwargs: Mapping[str, Any]) -> int | None:
    """The pad token ``generate()`` uses: its keyword, else the generation config's,
    else the model config's (None: none, or not one id)."""
    config = kwargs.get("generation_config") or getattr(model, "generation_config", None)
    pad = kwargs.get("pad_token_id", getattr(config, "pad_token_id", None))
    if pad is None:
        pad = getattr(getattr(model, "config", None), "pad_token_id", None)
    return pad if isinstance(pad, int) and not isinstance(pad, bool) else None


def _given_mask(log: CallLog) -> torch.Tensor | None:
    """The 2-D ``attention_mask`` ``generate()`` passed to its first call, if any."""
    first = next(iter(log.replayed()), None)
    mask = first[1].get("attention_mask") if first is not None else None
    return mask if isinstance(mask, torch.Tensor) and mask.dim() == 2 else None


def _per_prompt(counts: list[int]) -> str:
    """``; per prompt: 0, 3`` for more than one prompt, else nothing."""
    return f"; per prompt: {', '.join(count(c) for c in counts)}" if len(counts) > 1 else ""


def _kept(encdec: bool) -> str:
    what = "cross-attention keys and values" if encdec else "keys and values"
    return (
        "the model computes them all the same, so the prefill's MACs, FLOPs and bytes "
        f"count them as work, and their {what} are in the KV cache, which every decode "
        "step attends over"
    )


def _unmasked(model: nn.Module, pad: int, counts: list[int]) -> str:
    """The notice for pad tokens no mask given to the model covers."""
    held = f"the prompt holds {plural(sum(counts), 'pad token')} (pad_token_id {pad}"
    held += f"{_per_prompt(counts)})"
    if not getattr(getattr(model, "config", None), "is_encoder_decoder", False):
        return (
            f"padding: {held} and no attention mask masks them (generate() infers one only "
            "from a pad token other than the end token): the model is fed them as any "
            "token, and they are counted as work"
        )
    return (
        f"padding: {held} and no attention mask: generate() infers a mask from "
        "pad_token_id for decoder-only models only, so the model attends to them as to any "
        "token unless it masks them itself; they are computed, counted as work (pass "
        "attention_mask to mask them)"
    )


def padding_notices(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    log: CallLog,
    kwargs: Mapping[str, Any],
) -> list[str]:
    """The padding notice of one ``generate()`` (module doc): none for a prompt without
    padding."""
    batch, tokens = input_ids.shape
    encdec = bool(getattr(getattr(model, "config", None), "is_encoder_decoder", False))
    pad = pad_token_id(model, kwargs)
    mask = _given_mask(log)
    if mask is not None and mask.shape[0] >= batch and mask.shape[1] >= tokens:
        prompts = mask[:: mask.shape[0] // batch, :tokens]  # one row per prompt
        counts = [int(c) for c in (prompts == 0).sum(-1).tolist()]
        if sum(counts):
            given = attention_mask is not None and not bool(attention_mask.all())
            source = (
                "the attention_mask given"
                if given
                else f"the attention mask generate() built from pad_token_id {pad}"
            )
            per = f" ({_per_prompt(counts)[2:]})" if batch > 1 else ""
            return [
                f"padding: {count(sum(counts))} of the {count(batch * tokens)} prompt tokens"
                f"{per} are masked out by {source}; {_kept(encdec)}"
            ]
        return []
    if pad is None or attention_mask is not None:
        return []
    counts = [int(c) for c in (input_ids == pad).sum(-1).tolist()]
    return [_unmasked(model, pad, counts)] if sum(counts) else []


__all__ = ["pad_token_id", "padding_notices"]
