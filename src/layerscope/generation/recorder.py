"""What a staged ``ls.Profiler(model, stages=...)`` records of each call of a decoding
loop: a row per call (its stage, cache length, tokens fed, work, KV bytes) and the KV
cache's facts, and the ``Generation`` they make.

``session/staging.py`` runs the calls; it reaches this module through its one plug
(``session.staging.RECORDER``), loaded by name, so that the session imports nothing of
the generation wing.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from functools import partial
from typing import Any

import torch
from torch import nn

from layerscope.generation.cache import cache_facts, kv_summary
from layerscope.generation.callrow import CallRow
from layerscope.generation.result import Generation
from layerscope.generation.stages import (
    CACHE_KEYWORDS,
    CallFacts,
    cache_stage,
    cache_tokens,
    call_facts,
)
from layerscope.profile import Profile


def default_rule(model: nn.Module) -> Any:
    """``stages=True``'s rule: ``cache_stage`` on ``model``."""
    return partial(cache_stage, model=model)


def _output_cache(out: Any) -> Any:
    """The cache a call's output holds (``cache``, or ``past_key_values`` before
    transformers 5), None if none. A mapping (transformers' ``ModelOutput``) is read by
    its keys, other objects by attribute."""
    for key in CACHE_KEYWORDS:
        if isinstance(out, Mapping):
            value = out.get(key)
        elif isinstance(out, tuple | list | torch.Tensor):
            return None
        else:
            value = getattr(out, key, None)
        if value is not None and not callable(value):
            return value
    return None


class Recorder:
    """The rows and cache facts of one staged Profiler's calls (module doc)."""

    def __init__(self, model: nn.Module, encoder_decoder: bool) -> None:
        self.model = model
        self.encoder_decoder = encoder_decoder
        #: one row per call
        self.rows: list[CallRow] = []
        self.notices: list[str] = []
        self._first: tuple[int, int] | None = None  # the first call's tokens and rows
        #: the cache's facts (and the tokens it has seen) after the first call that had
        #: one, the first prefill that had one, and the last call that had one
        self._first_kv: tuple[dict[str, Any], int] | None = None
        self._after_prefill: tuple[dict[str, Any], int] | None = None
        self._final: tuple[dict[str, Any], int] | None = None
        self._cached = False  # whether any call had a cache

    def before(self, args: tuple[Any, ...], kwargs: dict[str, Any], root: bool) -> CallFacts:
        """What the call is fed, read before it runs (the call changes its cache)."""
        return call_facts(args, kwargs, self.model if root else None)

    def after(self, stage: str, facts: CallFacts, prof: Profile, out: Any) -> None:
        """The call's row, from its analysis and the cache it filled."""
        if self._first is None:
            self._first = (facts.fed, facts.rows)
        cache = facts.cache if facts.cache is not None else _output_cache(out)
        kv = cache_facts(cache) if cache is not None else None
        kv_bytes = kv.total if kv is not None else 0
        self.rows.append(CallRow.measured(stage, facts.cache_tokens, facts.fed, prof, kv_bytes))
        if kv is not None:
            self._cached = True
            self.notices.extend(n for n in kv.notices if n not in self.notices)
            self._final = (kv.to_dict(), cache_tokens(cache))
            if self._first_kv is None:
                self._first_kv = self._final
            if self._after_prefill is None and stage == "prefill":
                self._after_prefill = self._final

    def generation(self, stages: Mapping[str, Profile], rule_name: str) -> Generation:
        """The calls as a ``Generation`` (``ls.profile_generate``'s result)."""
        kv: dict[str, Any] = {}
        new = sum(1 for r in self.rows if r.stage == "full")
        if self._final is not None:
            after, seen_after = self._after_prefill or self._first_kv or self._final
            final, seen_final = self._final
            kv = kv_summary(after, final)
            new = seen_final - seen_after + 1
        prompt, rows = self._first or (0, 0)
        options = {
            "prompt_tokens": prompt,
            "new_tokens": new,
            "batch": rows,
            "rows": rows,
            "use_cache": self._cached,
            "encoder_decoder": self.encoder_decoder,
            "calls": len(self.rows),
            "stages_rule": rule_name,
            "timing_repeats": 0,
        }
        notices = [
            "measured in the loop (ls.Profiler with stages): the prompt is the first "
            "call's tokens per row, the new tokens are those the cache gained after the "
            "first prefill plus the last one produced (not fed), and prompts are counted "
            "as rows (beams and samples are not told apart)",
            *self.notices,
        ]
        if self._cached and self._after_prefill is None:
            notices.append(
                "no call was a prefill with a cache: the KV cache after the prefill is "
                "the first cache seen"
            )
        copied = {name: copy.deepcopy(p) for name, p in stages.items()}
        return Generation(copied, list(self.rows), kv, options, notices)


__all__ = ["Recorder", "default_rule"]
