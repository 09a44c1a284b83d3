"""The ``generation`` section of a ``layerscope/1`` document (``ls.profile_generate``'s
``Generation.save``): what ``Generation.from_dict`` checks and the JSON Schema says. The
document's own profile is the first stage; the section holds the others."""

from __future__ import annotations

from layerscope.export.jsonamount import Amount
from layerscope.export.jsoncheck import Arr, Bool, Check, Int, Map, Obj, Opt, Str
from layerscope.generation.fields import CALL_FIELDS, CallField, required


def _value(f: CallField) -> Check:
    """A call row's value as the field table says: text, a number of seconds (>= 0), or
    a count (tokens, operations, bytes)."""
    if f.kind == "text":
        return Str(f.description)
    if f.kind == "seconds":
        return Amount(f.description)
    return Int(0, description=f.description)


#: One row per model call: the prefill first, then each decode (or full) step; its keys
#: and what each holds from the field table (``generation.fields``).
STEP = Obj({f.key: _value(f) for f in CALL_FIELDS}, required=required())

#: The KV cache's figures (``cache.kv_summary``): bytes, counts and per-layer lists.
KV_CACHE = Obj(
    {
        **{k: Int(0) for k in ("bytes_after_prefill", "bytes_final", "bytes_per_token",
                               "cross_bytes", "rows", "tokens_final")},
        **{k: Arr(Int(0)) for k in ("per_layer", "tokens_per_layer", "cross_per_layer")},
    },
    description="the KV cache's bytes (docs/generate.md)",
)  # fmt: skip
#: How the generation ran (``profile_generate``'s and a staged ``Profiler``'s keys).
OPTIONS = Obj(
    {
        **{k: Int(0) for k in ("batch", "new_tokens", "prompt_tokens", "rows",
                               "timing_repeats", "calls")},
        **{k: Bool() for k in ("use_cache", "encoder_decoder")},
        "generate_kwargs": Map(Str()), "stages_rule": Str(),
    },
    description="how the generation ran",
)  # fmt: skip

GENERATION = Obj(
    {
        "first_stage": Opt(Str(), "the stage the document's own profile is"),
        "stages": Map(Obj({}, description="a profile object"), "the other stages' profiles"),
        "calls": Arr(STEP, "one row per model call"),
        "kv_cache": KV_CACHE,
        "options": OPTIONS,
        "notices": Arr(Str(), "what the figures leave out"),
    },
    required=("first_stage", "stages", "calls", "kv_cache", "options", "notices"),
    description="ls.profile_generate: stages, decode steps, the KV cache (docs/generate.md)",
)

__all__ = ["GENERATION", "STEP"]
