"""A saved ``ServingPlan``'s document (``ServingPlan.save``, ``layerscope serve
--json``): every field ``from_dict`` reads, checked (its numbers finite and >= 0), so a
plan that loads always renders.
The derived figures (budget, KV budget, capacity, concurrency) are written, not read:
``ServingPlan.from_dict`` derives them again and refuses a document whose own differ.
Its ``"schema"`` (``SERVING_SCHEMA``) is checked before (``jsonread.check_schema``): a
document without one is older."""

from __future__ import annotations

from layerscope.export.jsonamount import AMOUNT
from layerscope.export.jsoncheck import Arr, Bool, Check, Int, Obj, Opt, Str
from layerscope.generation.fields import SERVING_FIELDS

_TYPES: dict[str, Check] = {
    "integer": Int(0), "number": AMOUNT, "string": Str(), "boolean": Bool(),
}  # fmt: skip
_ROW: dict[str, Check] = {f.key: _TYPES[f.json_type] for f in SERVING_FIELDS}
_ROW["batch"] = Int(1)
_MEMORY: dict[str, Check] = {
    "usable_bytes": Int(0), "memory_utilization": AMOUNT, "weight_bytes": Int(0),
    "workspace_bytes": Int(0), "prefill_chunk": Int(1), "reserve_bytes": Int(0),
}  # fmt: skip
_LAYER: dict[str, Check] = {"bytes_per_token": AMOUNT, "cap": Opt(Int(1))}
#: A serving plan's ``"schema"``: its kind and format version (a profile's is
#: ``layerscope/1``).
SERVING_SCHEMA = "layerscope-serving/1"
_TOP: dict[str, Check] = {
    "model": Str(), "target": Str(), "device_label": Str(), "dtype": Str(),
    "weights": Opt(Str()), "kv_dtype": Str(), "block_size": Int(1), "max_context": Int(2),
    "prompt": Int(1), "new_tokens": Int(1), "mode": Str(),
    "memory": Obj(_MEMORY, required=tuple(_MEMORY)),
    "kv": Obj({"layers": Arr(Obj(_LAYER, required=tuple(_LAYER)))}, required=("layers",)),
    "rows": Arr(Obj(_ROW, required=tuple(_ROW))), "notes": Arr(Str()),
}  # fmt: skip
#: The serving plan's document (``schema``: absent from an older one; ``tp``: only when
#: above 1).
SERVING = Obj(
    {"schema": Str(), **_TOP, "tp": Int(2)}, required=tuple(_TOP),
    description="ls.plan_serving's plan",
)  # fmt: skip
#: The top-level keys ``to_dict`` writes (those read and ``max_concurrency``, derived):
#: any other is the plan's ``extra``.
SERVING_KEYS = frozenset((*SERVING.props, "max_concurrency"))

__all__ = ["SERVING", "SERVING_KEYS", "SERVING_SCHEMA"]
