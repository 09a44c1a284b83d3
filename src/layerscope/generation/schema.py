"""The ``generation`` section of a ``layerscope/1`` document (``ls.profile_generate``'s
``Generation.save``): what ``Generation.from_dict`` checks and the JSON Schema says. The
document's own profile is the first stage; the section holds the others."""

from __future__ import annotations

from layerscope.export.jsoncheck import Arr, Check, Int, Map, Num, Obj, Opt, Str
from layerscope.generation.fields import CALL_FIELDS, CallField, required


def _value(f: CallField) -> Check:
    """A call row's value as the field table says: text, a number of seconds, or a
    count (tokens, operations, bytes)."""
    if f.kind == "text":
        return Str(f.description)
    if f.kind == "seconds":
        return Num(f.description)
    return Int(0, description=f.description)


#: One row per model call: the prefill first, then each decode (or full) step; its keys
#: and what each holds from the field table (``generation.fields``).
STEP = Obj({f.key: _value(f) for f in CALL_FIELDS}, required=required())

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
