"""A saved ``ServingPlan``'s document (``ServingPlan.save``, ``layerscope serve
--json``): every field ``from_dict`` reads, checked (its numbers finite and >= 0), so a
plan that loads always renders.
The derived figures (budget, KV budget, capacity, concurrency) are written, not read:
``ServingPlan.from_dict`` derives them again and refuses a document whose own differ.
Its ``"schema"`` (``SERVING_SCHEMA``) is checked before (``jsonread.check_schema``): a
document without one is older. The first plans (before TPOT was predicted) have no
``mode`` and rows without ``tpot_bound``, ``launch_time`` and ``kernels``; those before
TTFT was predicted rows without ``ttft_bound`` (``ServingPlan.from_dict`` reads them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from layerscope.errors import SchemaError
from layerscope.export.jsonamount import AMOUNT
from layerscope.export.jsoncheck import Arr, Bool, Check, Int, Obj, Opt, Str
from layerscope.generation.fields import SERVING_FIELDS

_TYPES: dict[str, Check] = {
    "integer": Int(0), "number": AMOUNT, "string": Str(), "boolean": Bool(),
}  # fmt: skip
_ROW: dict[str, Check] = {f.key: _TYPES[f.json_type] for f in SERVING_FIELDS}
_ROW["batch"] = Int(1)
#: A row's keys that came with the prediction of TPOT (``mode``: a plan with a mode has
#: them) and of TTFT (absent from the first plans with a mode: their TTFT was its bound).
PRICED = ("tpot_bound", "launch_time", "kernels")
LATER = ("ttft_bound", *PRICED)
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
    "rows": Arr(Obj(_ROW, required=tuple(k for k in _ROW if k not in LATER))),
    "notes": Arr(Str()),
}  # fmt: skip
#: The serving plan's document (``schema``: absent from an older one, as ``mode`` from the
#: first plans; ``tp``: only when above 1).
SERVING = Obj(
    {"schema": Str(), **_TOP, "tp": Int(2)}, required=tuple(k for k in _TOP if k != "mode"),
    description="ls.plan_serving's plan",
)  # fmt: skip
#: The top-level keys ``to_dict`` writes (those read and ``max_concurrency``, derived):
#: any other is the plan's ``extra``.
SERVING_KEYS = frozenset((*SERVING.props, "max_concurrency"))
#: The keys ``to_dict`` writes in ``memory`` and ``kv`` (those read and those derived)
#: and in a layer of ``kv.layers``: any other is kept, as read, and written back.
MEMORY_KEYS = frozenset((*_MEMORY, "budget_bytes", "kv_budget_bytes"))
KV_KEYS = frozenset(("layers", "bytes_per_token", "tokens", "blocks", "bytes_per_sequence"))
LAYER_KEYS = frozenset(_LAYER)


def check_rows(doc: Mapping[str, Any], source: str | None = None) -> None:
    """``SchemaError`` for a row without a key of ``PRICED`` in a plan with a ``mode``
    (every plan that has one wrote them: one missing is damage, not an older plan)."""
    if "mode" not in doc:
        return
    for n, row in enumerate(doc["rows"]):
        for key in PRICED:
            if key not in row:
                where = f"{source}: " if source else ""
                raise SchemaError(f"{where}$.rows[{n}]: missing key {key!r}")


__all__ = [
    "KV_KEYS", "LATER", "LAYER_KEYS", "MEMORY_KEYS", "PRICED", "SERVING", "SERVING_KEYS",
    "SERVING_SCHEMA", "check_rows",
]  # fmt: skip
