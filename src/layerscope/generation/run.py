"""``ls.profile_generate``: a Hugging Face model's ``generate()``, measured per stage and
per step (``docs/generate.md``).

``generate()`` runs once, as given (its random state put back after), for the tokens it
produces, and each of its model calls is recorded with the arguments ``generate()``
passed (``generation.calllog``: token ids, position ids, the attention mask or none,
``logits_to_keep``, ...). Then the same calls are made again one at a time, each
analysed on its own (``ls.profile`` under ``torch.no_grad()``, as ``generate()`` runs),
on a copy of the cache ``generate()`` was given before its prefill: the prefill (for an
encoder-decoder, the encoder and the first decoder step), then one call per new token
but the last. Without a cache (``use_cache=False``) every call is a full forward over
the sequence so far. The rows are the ones ``generate()`` computes (batch x beams, or x
samples), fed the tokens ``generate()`` fed them; the beams' cache reordering between
calls (one gather per layer per step) is not replayed.

Assisted and prompt-lookup decoding feed the model a draft of several tokens per call
and then ``crop()`` the cache back to the tokens accepted: the replay makes the same
crops at the same points (``generation.calllog``), so its cache holds, before every
call and at the end, the tokens and bytes ``generate()``'s held; where it would not (a
change to the cache the replay does not repeat) the replay stops with an error rather
than give another cache's figures. An assistant model's own calls are not replayed (a
notice says so); a model drafting for itself (``assistant_early_exit``, or the model as
its own ``assistant_model``) is refused.
"""

from __future__ import annotations

import copy
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
from layerscope.generation.calllog import CallLog, cache_state, is_cache, recording
from layerscope.generation.callrow import CallRow
from layerscope.generation.modelcheck import check_positions
from layerscope.generation.padding import padding_notices
from layerscope.generation.result import Generation
from layerscope.generation.stages import call_facts
from layerscope.planning.headless import head_class
from layerscope.profile import Profile
from layerscope.validate import check_int, refuse, shown


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
    model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], name: str | None,
    repeats: int,
) -> float:  # fmt: skip
    """Median seconds of the call over ``repeats`` runs after one warm-up, each on its own
    copy of the cache as it is now (a call grows the cache it is given); the runs' draws
    (dropout in train mode) leave the user's generators as they were."""
    cache = kwargs.get(name) if name is not None else None
    devices = sorted({p.get_device() for p in model.parameters() if p.is_cuda})
    sync = bool(devices)
    with torch.random.fork_rng(devices=devices):
        return _median_time(model, args, kwargs, name, repeats, cache, sync)


def _median_time(
    model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], name: str | None,
    repeats: int, cache: Any, sync: bool,
) -> float:  # fmt: skip
    times: list[float] = []
    for i in range(repeats + 1):
        call = dict(kwargs)
        if name is not None:
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


def _drafting(model: nn.Module, kwargs: Mapping[str, Any]) -> list[str]:
    """The notice for an assistant model, whose calls are not replayed; a refusal for a
    model that drafts for itself, whose draft calls the replay cannot make as
    ``generate()`` made them."""
    config = kwargs.get("generation_config") or getattr(model, "generation_config", None)
    early = kwargs.get("assistant_early_exit", getattr(config, "assistant_early_exit", None))
    if early is not None:
        refuse(
            "assistant_early_exit", early, "None for profile_generate",
            why="generate() drafts with the model itself, its config cut to that many "
            "layers around each draft call, which the replay of its calls cannot repeat",
        )  # fmt: skip
    assistant = kwargs.get("assistant_model")
    if assistant is None:
        return []
    if assistant is model:
        raise InvalidInputError(
            "profile_generate cannot replay a model that is its own assistant_model: its "
            "draft calls would be recorded among its own; pass a separate assistant model"
        )
    return [
        f"assisted decoding: the assistant model's calls ({type(assistant).__name__}: its "
        "drafts) are not in this generation; the model's own calls are, each feeding the "
        "draft it verifies"
    ]


#: The most tokens ``profile_generate`` makes: each is a call it analyses on its own
#: (a longer run: ``ls.estimate_generate``, or profile it in parts).
MAX_NEW_TOKENS = 4096


#: The transformers mappings from a model type to its class that generates, in the
#: order they are read: a causal LM's head, then an encoder-decoder's.
def check_generates(model: object, spec: str | None = None) -> None:
    """``InvalidInputError`` for a model without ``generate()``, naming its class and the
    class to give instead (``planning.headless.head_class``); ``spec``: how the command
    line named the model (``transformers:llama``), whose fix is then a spec too."""
    if isinstance(model, nn.Module) and callable(getattr(model, "generate", None)):
        return
    name = type(model).__name__
    if not isinstance(model, nn.Module):
        raise InvalidInputError(
            f"profile_generate needs a model with generate() (a transformers model), got a {name}"
        )
    given = name if spec is None else f"{name} ({spec})"
    found = head_class(model)
    if found is None:
        fix = "give the model with a language-modelling head (a ...ForCausalLM)"
    else:
        fix = f"give {'' if spec is None else 'transformers:'}{found[0]}, {found[1]}"
    raise InvalidInputError(
        f"profile_generate needs a model with generate() (transformers): {given} has none "
        f"(a base model has no head to generate with); {fix}"
    )


def _shape_of(value: object) -> str:
    """A refused tensor by its shape (its values say nothing of what was wrong)."""
    if isinstance(value, torch.Tensor):
        return f"shape {tuple(value.shape)}"
    return shown(value)


def _check_call(
    model: nn.Module, input_ids: torch.Tensor, max_new_tokens: int, mask: torch.Tensor | None
) -> int:
    """``profile_generate``'s model, token ids, mask and length checked before
    ``generate()`` runs; the new tokens."""
    check_generates(model)
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        raise InvalidInputError(
            f"input_ids must be a (batch, tokens) tensor of token ids, got {_shape_of(input_ids)}"
        )
    new = check_int("max_new_tokens", max_new_tokens, 1, MAX_NEW_TOKENS)
    if mask is not None and (not isinstance(mask, torch.Tensor) or mask.shape != input_ids.shape):
        raise InvalidInputError(
            f"attention_mask must be a tensor of input_ids' shape {tuple(input_ids.shape)}, "
            f"got {_shape_of(mask)}"
        )
    if input_ids.device.type == "meta":
        raise InvalidInputError(
            "generate() reads token values, which meta tensors have not: profile on a real "
            "device, or estimate on meta with ls.estimate_generate"
        )
    check_positions(model, int(input_ids.shape[1]) + new)
    return new


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
    is left as found. Refused before anything runs: a model without ``generate()``, and
    a prompt + new tokens beyond its positions (``check_positions``)."""
    new = _check_call(model, input_ids, max_new_tokens, attention_mask)
    repeats = (
        (3 if timing else 0)
        if isinstance(timing, bool)
        else check_int("timing", timing, 1, MAX_REPEATS)
    )
    notices = _drafting(model, generate_kwargs)
    with recording(model) as log:
        out = _generate(model, input_ids, new, attention_mask, dict(generate_kwargs))
    if not log.calls:
        raise InvalidInputError(
            "profile_generate needs a generate() that calls the model itself (its forward "
            "pre-hooks never ran: there is no call to replay)"
        )
    rows = _rows(model, generate_kwargs)
    encdec = bool(getattr(getattr(model, "config", None), "is_encoder_decoder", False))
    sequences = out.sequences
    del out  # generate()'s cache, which the output holds
    batch = input_ids.shape[0]
    produced = sequences.shape[1] - (1 if encdec else input_ids.shape[1])
    # as generate() called the model (its keyword, else the model's generation config)
    first = log.calls[0][1].get("use_cache")
    use_cache = bool(generate_kwargs.get("use_cache", True) if first is None else first)
    prompt = input_ids if encdec else None
    notices += padding_notices(model, input_ids, attention_mask, log, generate_kwargs)
    generation = _Replay(model, log, prompt, repeats).run(use_cache)
    generation.notices[:0] = notices
    generation.options = {
        "prompt_tokens": int(input_ids.shape[1]),
        "new_tokens": int(produced),
        "batch": int(batch),
        "rows": int(batch * rows),
        "use_cache": use_cache,
        "encoder_decoder": encdec,
        "generate_kwargs": {k: repr(v) for k, v in generate_kwargs.items()},
        "timing_repeats": repeats,
    }
    return generation


class _Replay:
    """The model calls of one generation, made again one at a time as ``generate()``
    made them (``generation.calllog``), each on its own analysis."""

    def __init__(
        self, model: nn.Module, log: CallLog, prompt: torch.Tensor | None, repeats: int = 0
    ) -> None:
        self.model, self.log, self.repeats = model, log, repeats
        #: an encoder-decoder's prompt: the prefill runs the encoder on it
        self.prompt = prompt

    def _call(self, stage: str, args: tuple[Any, ...], kwargs: dict[str, Any], name: str | None,
              before: int, fed: int) -> tuple[Profile, CallRow]:  # fmt: skip
        """Time the call (when asked), then analyse it: its Profile and its row."""
        seconds = _timed(self.model, args, kwargs, name, self.repeats) if self.repeats else None
        prof = _step(self.model, args, kwargs)
        kv = cache_facts(kwargs.get(name) if name is not None else None).total
        row = CallRow.measured(stage, before, fed, prof, kv)
        return prof, (row if seconds is None else row.timed(seconds))

    def _with_encoder(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any], int]:
        """An encoder-decoder's first call with the encoder run inside it: the prompt
        (one row per decoder row, as ``generate()`` expanded the encoder's output) in
        place of ``encoder_outputs``, and the prompt's tokens per row as fed."""
        assert self.prompt is not None
        facts = call_facts(args, kwargs, self.model)
        rows = facts.rows or self.prompt.shape[0]
        prompt = self.prompt.repeat_interleave(max(rows // self.prompt.shape[0], 1), 0)
        name = getattr(self.model, "main_input_name", "input_ids")
        kwargs = {k: v for k, v in kwargs.items() if k != "encoder_outputs"}
        kwargs[name if isinstance(name, str) else "input_ids"] = prompt
        return args, kwargs, int(prompt.shape[1])

    def _sync(self, call: int | None) -> tuple[int, int]:
        """Crop the caches' copies as generate() cropped its caches before call ``call``
        (None: after the last), then refuse where a copy differs from generate()'s
        cache there; the crops that removed tokens, and the tokens they removed."""
        crops = removed = 0
        for crop in self.log.crop_before(len(self.log.calls) if call is None else call):
            cache = self.log.caches[crop.index]
            before = seq_length(cache)
            cache.crop(*crop.args, **crop.kwargs)
            gone = before - seq_length(cache)
            crops, removed = crops + (gone > 0), removed + gone
        indices = range(len(self.log.caches)) if call is None else self.log.states[call]
        for index in indices:
            problem = self.log.mismatch(index, cache_state(self.log.caches[index]), call)
            if problem is not None:
                raise InvalidInputError(
                    f"profile_generate cannot replay this generate(): {problem}. generate() "
                    "changed its cache between calls in a way the replay does not repeat "
                    "(it repeats crop(), as assisted and prompt-lookup decoding use it), "
                    "so the replay's figures would not be generate()'s"
                )
        return crops, removed

    def run(self, cached: bool) -> Generation:
        """Every call: with a cache, the first is the prefill and the others decode
        steps; without one, each is a full forward."""
        notices: list[str] = []
        profiles: dict[str, list[Profile]] = {}
        rows: list[CallRow] = []
        after_prefill: dict[str, Any] = {}
        cache: Any = None
        cropped = [0, 0]  # the crops that removed tokens, and the tokens they removed
        for i, (args, kwargs) in enumerate(self.log.replayed()):
            cropped = [a + b for a, b in zip(cropped, self._sync(i), strict=True)]
            name = next((k for k, v in kwargs.items() if is_cache(v)), None)
            cache = kwargs[name] if name is not None else None
            if i == 0 and self.prompt is not None:
                args, kwargs, fed = self._with_encoder(args, kwargs)
            else:
                fed = call_facts(args, kwargs, self.model).fed
            stage = ("prefill" if i == 0 else "decode") if cached else "full"
            prof, row = self._call(stage, args, kwargs, name, seq_length(cache), fed)
            profiles.setdefault(stage, []).append(prof)
            rows.append(row)
            if cached and i == 0:
                facts = cache_facts(cache)
                notices += facts.notices
                after_prefill = facts.to_dict()
        cropped = [a + b for a, b in zip(cropped, self._sync(None), strict=True)]
        if cropped[1]:
            notices.append(_cropped_words(*cropped))
        stages = {s: (p[0] if s == "prefill" else merge_profiles(p)) for s, p in profiles.items()}
        kv = kv_summary(after_prefill, cache_facts(cache).to_dict()) if cached else {}
        return Generation(stages, rows, kv, {}, notices)


def _cropped_words(crops: int, tokens: int) -> str:
    return (
        f"generate() cropped its cache {crops} time{'s' if crops != 1 else ''}, dropping "
        f"{tokens} draft token{'s' if tokens != 1 else ''} it did not accept (assisted or "
        "prompt-lookup decoding), and the replay crops its copy alike: a call's KV after "
        "holds the draft it was fed, the next call's cache before only the tokens kept"
    )


__all__ = ["check_generates", "profile_generate"]
