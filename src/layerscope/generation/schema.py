"""The ``generation`` section of a ``layerscope/1`` document (``ls.profile_generate``'s
``Generation.save``): what ``Generation.from_dict`` checks and the JSON Schema says. The
document's own profile is the first stage; the section holds the others."""

from __future__ import annotations

from layerscope.export.jsoncheck import Arr, Int, Map, Num, Obj, Opt, Str

_BYTES = Int(0, description="bytes")

#: One row per model call: the prefill first, then each decode (or full) step.
STEP = Obj(
    {
        "stage": Str("prefill, decode or full"),
        "cache_tokens": Int(0, description="tokens in the cache before the call"),
        "tokens": Int(0, description="tokens fed per row"),
        "macs": Int(0),
        "flops": Int(0),
        "bytes_accessed": _BYTES,
        "peak_bytes": Int(0, description="peak above the call's entry level"),
        "kv_bytes": Int(0, description="KV-cache bytes after the call"),
        "time": Num("median seconds of the call, when timed"),
    },
    required=("stage", "cache_tokens", "tokens", "macs", "flops", "bytes_accessed"),
)

GENERATION = Obj(
    {
        "first_stage": Opt(Str(), "the stage the document's own profile is"),
        "stages": Map(Obj({}, description="a profile object"), "the other stages' profiles"),
        "calls": Arr(STEP, "one row per model call"),
        "kv_cache": Obj({}, description="the KV cache's bytes (docs/generate.md)"),
        "options": Obj({}, description="how the generation ran"),
        "notices": Arr(Str(), "what the figures leave out"),
    },
    required=("first_stage", "stages", "calls", "kv_cache", "options", "notices"),
    description="ls.profile_generate: stages, decode steps, the KV cache (docs/generate.md)",
)

__all__ = ["GENERATION", "STEP"]
