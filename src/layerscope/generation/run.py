"""``ls.profile_generate``: a Hugging Face model's ``generate()``, measured per stage and
per step (``docs/generate.md``).

``generate()`` runs once, as given (its random state put back after), for the tokens it
produces. Then the same steps are replayed one model call at a time, each analysed on
its own (``ls.profile`` under ``torch.no_grad()``, as ``generate()`` runs): the prefill
(the prompt into an empty cache, ``logits_to_keep=1`` as ``generate()`` asks; for an
encoder-decoder, the encoder and the first decoder step), then one call per new token
but the last, each feeding one token per row on the cache the previous calls filled.
Without a cache (``use_cache=False``) every step is a full forward over the sequence so
far. The replay feeds the first returned sequence of each prompt to every row of it
(beams, samples): the cost of a dense model's step does not depend on the token values,
and the rows are the ones ``generate()`` computes (batch x beams, or x samples); the
beams' cache reordering (one gather per layer per step) is not replayed.
"""

from __future__ import annotations

import copy
import inspect
import statistics
import time
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from layerscope.analysis.merge import merge_profiles
from layerscope.collect.timing.options import MAX_REPEATS
from layerscope.errors import InvalidInputError, LayerscopeError, ModelError
from layerscope.generation.cache import cache_facts, kv_summary, seq_length
from layerscope.generation.callrow import CallRow
from layerscope.generation.result import Generation
from layerscope.profile import Profile
from layerscope.validate import check_int, refuse


def _cache_name(model: nn.Module) -> str:
    """The forward's keyword for the cache (transformers 5: ``cache``; before it,
    ``past_key_values``)."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _rows(model: nn.Module, kwargs: Mapping[str, Any]) -> int:
    """How many rows each prompt becomes: its beams, or its returned samples."""
    config = getattr(model, "generation_config", None)
    beams = int(kwargs.get("num_beams", getattr(config, "num_beams", 1) or 1))
    if beams > 1:
        return beams
    return int(kwargs.get("num_return_sequences", getattr(config, "num_return_sequences", 1) or 1))


def _generate(
    model: nn.Module, input_ids: torch.Tensor, new: int, mask: Any, kwargs: dict[str, Any]
) -> Any:
    devices = [input_ids.device] if input_ids.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        try:
            return model.generate(  # type: ignore[operator]
                input_ids, attention_mask=mask, max_new_tokens=new, return_dict_in_generate=True,
                **{"min_new_tokens": new, **kwargs},
            )  # fmt: skip
        except LayerscopeError:
            raise
        except Exception as e:  # the model's own generate(), before any analysis
            raise ModelError(
                f"the model's generate() raised {type(e).__name__}: {e}", "", type(model).__name__
            ) from e


def _step(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Profile:
    from layerscope.session.run import profile

    with torch.no_grad():
        return profile(model, args=args, kwargs=kwargs, memory=True)


def _timed(
    model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], name: str, repeats: int
) -> float:
    """Median seconds of the call over ``repeats`` runs after one warm-up, each on its own
    copy of the cache as it is now (a call grows the cache it is given); the runs' draws
    (dropout in train mode) leave the user's generators as they were."""
    cache = kwargs.get(name)
    devices = sorted({p.get_device() for p in model.parameters() if p.is_cuda})
    sync = bool(devices)
    with torch.random.fork_rng(devices=devices):
        return _median_time(model, args, kwargs, name, repeats, cache, sync)


def _median_time(
    model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], name: str, repeats: int,
    cache: Any, sync: bool,
) -> float:  # fmt: skip
    times: list[float] = []
    for i in range(repeats + 1):
        call = dict(kwargs)
        if cache is not None:
            call[name] = copy.deepcopy(cache)
        if sync:
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad():
            model(*args, **call)
        if sync:
            torch.cuda.synchronize()
        if i:  # the first run warms up
            times.append(time.perf_counter() - start)
    return statistics.median(times)


#: The most tokens ``profile_generate`` makes: each is a call it analyses on its own
#: (a longer run: ``ls.estimate_generate``, or profile it in parts).
MAX_NEW_TOKENS = 4096


def profile_generate(
    model: nn.Module,
    input_ids: torch.Tensor,
    max_new_tokens: int = 16,
    *,
    attention_mask: torch.Tensor | None = None,
    timing: bool | int = False,
    **generate_kwargs: Any,
) -> Generation:
    """Run ``model.generate(input_ids, max_new_tokens=..., **generate_kwargs)`` and
    measure it per stage and per step (module doc). ``min_new_tokens`` defaults to
    ``max_new_tokens`` so that a model with random weights does not stop at its end
    token. ``timing`` (True: 3 repeats, or a number) times every call too, in a pass of
    its own before the call is analysed: each repeat on a copy of the cache as it was
    before the call, after one warm-up; the median goes to its row's ``time``. The model
    is left as found."""
    if not isinstance(model, nn.Module) or not callable(getattr(model, "generate", None)):
        raise InvalidInputError("profile_generate needs a model with generate() (transformers)")
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        raise InvalidInputError("input_ids must be a (batch, tokens) tensor of token ids")
    new = check_int("max_new_tokens", max_new_tokens, 1, MAX_NEW_TOKENS)
    repeats = (
        (3 if timing else 0)
        if isinstance(timing, bool)
        else check_int("timing", timing, 1, MAX_REPEATS)
    )
    if attention_mask is not None and (
        not isinstance(attention_mask, torch.Tensor) or attention_mask.shape != input_ids.shape
    ):
        refuse(
            "attention_mask",
            attention_mask,
            f"a tensor of input_ids' shape {tuple(input_ids.shape)}",
        )
    if input_ids.device.type == "meta":
        raise InvalidInputError(
            "generate() reads token values, which meta tensors have not: profile on a real "
            "device, or estimate on meta with ls.estimate_generate"
        )
    out = _generate(model, input_ids, new, attention_mask, dict(generate_kwargs))
    rows = _rows(model, generate_kwargs)
    encdec = bool(getattr(getattr(model, "config", None), "is_encoder_decoder", False))
    sequences = out.sequences
    batch = input_ids.shape[0]
    produced = sequences[:, 1:] if encdec else sequences[:, input_ids.shape[1] :]
    tokens = produced.reshape(batch, -1, produced.shape[-1])[:, 0].repeat_interleave(rows, 0)
    prompt = input_ids.repeat_interleave(rows, 0)
    mask = attention_mask.repeat_interleave(rows, 0) if attention_mask is not None else None
    use_cache = bool(generate_kwargs.get("use_cache", True))
    start = sequences[:, :1] if encdec else None
    replay = _Replay(model, prompt, mask, tokens, encdec, start, repeats)
    replay.static = generate_kwargs.get("cache_implementation") == "static"
    generation = replay.cached() if use_cache else replay.uncached()
    generation.options = {
        "prompt_tokens": int(input_ids.shape[1]),
        "new_tokens": int(tokens.shape[1]),
        "batch": int(batch),
        "rows": int(prompt.shape[0]),
        "use_cache": use_cache,
        "encoder_decoder": encdec,
        "generate_kwargs": {k: repr(v) for k, v in generate_kwargs.items()},
        "timing_repeats": repeats,
    }
    return generation


class _Replay:
    """The model calls of one generation, one at a time."""

    def __init__(
        self,
        model: nn.Module,
        prompt: torch.Tensor,
        mask: torch.Tensor | None,
        tokens: torch.Tensor,
        encdec: bool,
        start: torch.Tensor | None,
        repeats: int = 0,
    ) -> None:
        self.model, self.prompt, self.mask, self.tokens = model, prompt, mask, tokens
        self.encdec, self.start = encdec, start
        self.name = _cache_name(model)
        self.repeats = repeats
        self.static = False

    def _call(self, stage: str, args: tuple[Any, ...], kwargs: dict[str, Any], before: int,
              fed: int) -> tuple[Profile, CallRow]:  # fmt: skip
        """Time the call (when asked), then analyse it: its Profile and its row."""
        seconds = (
            _timed(self.model, args, kwargs, self.name, self.repeats) if self.repeats else None
        )
        prof = _step(self.model, args, kwargs)
        row = CallRow.measured(stage, before, fed, prof, cache_facts(kwargs.get(self.name)).total)
        return prof, (row if seconds is None else row.timed(seconds))

    def _new_cache(self) -> Any:
        import transformers

        config: Any = self.model.config
        if self.static and not self.encdec:  # generate(cache_implementation="static")
            length = self.prompt.shape[1] + self.tokens.shape[1]
            return transformers.StaticCache(config=config, max_cache_len=length)
        if self.encdec:
            return transformers.EncoderDecoderCache(
                transformers.DynamicCache(config=config), transformers.DynamicCache(config=config)
            )
        return transformers.DynamicCache(config=config)

    def _start(self) -> torch.Tensor:
        """The decoder's start token, one per row."""
        assert self.start is not None
        return self.start.repeat_interleave(self.prompt.shape[0] // self.start.shape[0], 0)

    def _mask(self, length: int) -> torch.Tensor | None:
        if self.mask is None:
            return None
        grown = self.prompt.new_ones((self.prompt.shape[0], length - self.mask.shape[1]))
        return torch.cat([self.mask, grown.to(self.mask.dtype)], dim=1)

    def cached(self) -> Generation:
        cache = self._new_cache()
        notices: list[str] = []
        kwargs: dict[str, Any] = {self.name: cache, "use_cache": True, "logits_to_keep": 1}
        if self.encdec:
            kwargs["decoder_input_ids"] = self._start()
            with torch.no_grad():
                encoder = self.model.get_encoder()(  # type: ignore[operator]
                    input_ids=self.prompt, attention_mask=self.mask
                )
        if self.mask is not None:
            kwargs["attention_mask"] = self.mask
        prefill, first = self._call("prefill", (self.prompt,), kwargs, 0, self.prompt.shape[1])
        facts = cache_facts(cache)
        notices += facts.notices
        after_prefill = facts.to_dict()
        steps = [first]
        decode: list[Profile] = []
        length = self.prompt.shape[1]
        for i in range(self.tokens.shape[1] - 1):  # the last token is not fed
            before = seq_length(cache)
            token = self.tokens[:, i : i + 1]
            kwargs = {self.name: cache, "use_cache": True, "logits_to_keep": 1}
            length += 1
            if self.encdec:
                kwargs.update(encoder_outputs=encoder, decoder_input_ids=token)
                if self.mask is not None:
                    kwargs["attention_mask"] = self.mask
                args: tuple[Any, ...] = ()
            else:
                args = (token,)
                if self.mask is not None:
                    kwargs["attention_mask"] = self._mask(length)
            prof, row = self._call("decode", args, kwargs, before, 1)
            decode.append(prof)
            steps.append(row)
        final = cache_facts(cache)
        stages = {"prefill": prefill}
        if decode:
            stages["decode"] = merge_profiles(decode)
        return Generation(stages, steps, kv_summary(after_prefill, final.to_dict()), {}, notices)

    def uncached(self) -> Generation:
        steps = []
        profiles = []
        sequence = self.prompt
        for i in range(self.tokens.shape[1]):
            kwargs: dict[str, Any] = {"use_cache": False, "logits_to_keep": 1}
            if self.mask is not None and not self.encdec:
                kwargs["attention_mask"] = self._mask(sequence.shape[1])
            if self.encdec:
                kwargs["decoder_input_ids"] = torch.cat([self._start(), self.tokens[:, :i]], 1)
                args: tuple[Any, ...] = (self.prompt,)
            else:
                args = (sequence,)
            prof, row = self._call("full", args, kwargs, 0, int(args[0].shape[1]))
            profiles.append(prof)
            steps.append(row)
            if not self.encdec:
                sequence = torch.cat([sequence, self.tokens[:, i : i + 1]], dim=1)
        return Generation({"full": merge_profiles(profiles)}, steps, {}, {}, [])


__all__ = ["profile_generate"]
