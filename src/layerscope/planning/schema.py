"""The ``plan`` section of a ``layerscope/1`` document (``ls.plan``'s ``Plan.save``): what
``Plan.from_dict`` checks and the JSON Schema says, built from the field table
(``planning.fields``): its keys, their order, types and descriptions. Bytes, seconds
and FLOPs in base units; docs/plan.md explains every figure."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from layerscope.errors import InvalidInputError, SchemaError
from layerscope.export.jsonamount import AMOUNT, Amount
from layerscope.export.jsoncheck import (
    Arr,
    Bool,
    Check,
    Finite,
    Int,
    Map,
    Obj,
    OneOf,
    Opt,
    Str,
    Where,
)
from layerscope.export.jsonread import schema_name
from layerscope.planning.fields import PlanField, fields, keys

__all__ = ["PLAN", "SWEEP", "SWEEP_SCHEMA", "check_figures", "is_sweep", "plan_spec", "sweep_spec"]

_BYTES = Int(0, description="bytes")
_COLUMN = Arr(Finite(), "one value per point of the timeline")
#: The timeline's columns before its parts.
_POINT = ("phase", "event", "path")


def _number(f: PlanField, description: str = "") -> Check:
    """A number's check: >= 0 (seconds, rates, ratios) unless its field has no minimum."""
    return Finite(description) if f.minimum is None else Amount(description)


def _value(f: PlanField) -> Check:
    """A figure's check. A byte count that is never null is described by its unit
    alone; every other figure by its description."""
    if f.json == "bool":
        inner: Check = Bool()
    elif f.json == "number":
        inner = _number(f)
    elif f.json == "text":
        inner = Str()
    elif f.json == "object":
        return Obj({}, description=f.description)
    elif f.json != "int":
        raise InvalidInputError(f"plan field {f.key!r}: a {f.json} needs its shape in _SHAPES")
    else:
        inner = Int(f.minimum)
    if f.nullable:
        return Opt(inner, f.description)
    if f.json == "int":
        return Int(f.minimum, description="bytes" if f.unit == "bytes" else f.description)
    return _number(f, f.description) if f.json == "number" else inner


class _Parts(Obj):
    """The memory at the peak by part: the table's parts, and any part a newer version
    adds, all bytes (the views show every part as a row of bytes)."""

    def check(self, value: Any, where: Where) -> Any:
        out = super().check(value, where)
        for key in [k for k in value if k not in self.props]:  # in order: the first error
            out[key] = _BYTES.check(value[key], (where, key))
        return out

    def schema(self) -> dict[str, Any]:
        return {**super().schema(), "additionalProperties": _BYTES.described()}


def _memory(f: PlanField) -> Check:
    parts = keys("memory")
    return _Parts({p: _BYTES for p in parts}, required=parts, description=f.description)


def _timeline(f: PlanField) -> Check:
    parts = keys("memory")
    return Obj(
        {**{k: Arr(Str()) for k in _POINT}, "total": _COLUMN, **{p: _COLUMN for p in parts}},
        required=(*_POINT, "total", *parts),
        description=f.description,
    )


def _cell(f: PlanField) -> Check:
    """A per-module cell's check, from its field's JSON type."""
    shapes: dict[str, Check] = {
        "text": Str(), "bool": Bool(), "number": _number(f), "int": Int(f.minimum),
    }  # fmt: skip
    check = shapes.get(f.json, Obj({}))
    return Opt(check) if f.nullable else check


def _modules(f: PlanField) -> Check:
    path = keys("module")[0]
    cells = {c.key: _cell(c) for c in fields("module") if c.json != "any"}
    return Arr(Obj(cells, required=(path,)), f.description)


#: The device section's known keys (``DeviceSpec``'s that a plan writes).
_DEVICE = {
    "name": Str(), "label": Str(), "memory_bytes": Opt(Int(0)), "interconnect": Opt(AMOUNT),
    "usable_memory_bytes": Opt(Int(0)),
    "interconnect_kind": Str(), "node_size": Int(1),
}  # fmt: skip
#: The cluster the collectives were priced on (``planning.cluster.Cluster``): bandwidths
#: in bytes/s, efficiencies, latencies in seconds, all >= 0 as ``cluster=`` takes them.
_CLUSTER = {
    "gpus_per_node": Int(1), "intra_bandwidth": AMOUNT, "intra_kind": Str(),
    "nics_per_node": Int(1), "nic_bandwidth": AMOUNT, "intra_efficiency": AMOUNT,
    "nic_efficiency": AMOUNT, "base_latency": AMOUNT, "intra_latency": AMOUNT,
    "inter_latency": AMOUNT, "sources": Arr(Str()),
}  # fmt: skip
#: The options section's known keys (``Options.section``); others are kept as JSON.
_OPTIONS = {
    "target": Str(), "world_size": Int(1), "sharding": Str(), "precision": Str(),
    "optimizer": Str(), "grad_accum": Int(1), "rank": Int(0),
    "reshard_after_forward": Bool(), "checkpoint": Opt(OneOf(Str(), Arr(Str()))),
    "units": Opt(Arr(Str())), "fsdp_units": Arr(Str()),
    "inter_node_bandwidth": Opt(AMOUNT), "bucket_cap_mb": AMOUNT,
    "hsdp": Opt(Arr(Int(1), length=2)), "cluster": Obj(_CLUSTER), "reduce_dtype": Opt(Str()),
    "compile": Opt(Bool()), "float8": Opt(Bool()), "float8_all_gather": Opt(Bool()),
    "loss": Str(), "mesh": Opt(Map(Int(1))), "sequence_parallel": Opt(Bool()),
    "tp_plan": Opt(Map(Str())), "microbatches": Opt(Int(1)), "schedule": Opt(Str()),
    "pp_split": Opt(Arr(Str())), "return_outputs": Opt(Bool()),
    "virtual_stages": Opt(Int(1)),
}  # fmt: skip
#: The pipeline section (``planning.pipeline``).
_PIPELINE = {
    "schedule": Str(), "microbatches": Int(1), "stages": Int(1), "stage": Int(0),
    "virtual_stages": Int(1),
    "chosen": Str(), "bubble": AMOUNT,
    "rows": Arr(Obj({f.key: _cell(f) for f in fields("stage")}, required=keys("stage"))),
}  # fmt: skip


#: The shape of each structure of the section, from its field.
_SHAPES: dict[str, Callable[[PlanField], Check]] = {
    "options": lambda f: Obj(_OPTIONS, description=f.description),
    "device": lambda f: Obj(_DEVICE, description=f.description),
    "states": lambda f: Map(_BYTES, f.description),
    "memory": _memory,
    "peak_phase": lambda f: Map(Str(), f.description),
    "checkpoint": lambda f: Arr(Str(), f.description),
    "timeline": _timeline,
    "time": lambda f: Map(AMOUNT, f"{f.description}: {', '.join(keys('time'))}"),
    "time_bound": lambda f: Opt(Map(AMOUNT), f"{f.description}: {', '.join(keys('time'))}"),
    "modules": _modules,
    "comm": lambda f: Map(Map(Map(Map(AMOUNT))), f.description),
    "notes": lambda f: Arr(Str(), f.description),
    "pipeline": lambda f: Opt(Obj(_PIPELINE, required=tuple(_PIPELINE), description=f.description)),
}


def plan_spec() -> Obj:
    """The plan section's check from the table as it is now (registered fields too)."""
    table = fields("plan")
    return Obj(
        {f.key: _SHAPES[f.key](f) if f.key in _SHAPES else _value(f) for f in table},
        required=tuple(f.key for f in table if f.required),
        description="ls.plan's answer for one GPU of a training run (docs/plan.md)",
    )


#: The plan section; every key is written by ``Plan.save``.
PLAN = plan_spec()


def check_figures(section: Mapping[str, Any]) -> None:
    """``SchemaError`` where a checked plan section contradicts itself, as an edited or
    damaged document does: its peak below the sum of its parts (``memory``; a part this
    version does not know may add to the peak), or a headroom or a fit written that is
    not what the budget, the reserve and the peak give."""
    peak = section["peak_bytes"]
    parts = sum(section["memory"][k] for k in keys("memory"))
    if peak < parts:
        raise SchemaError(
            f"$.plan.peak_bytes is {peak!r}, but its parts ($.plan.memory) add up to "
            f"{parts!r}: the document was edited or damaged"
        )
    budget = section["budget"]
    headroom = None if budget is None else budget - section["reserve_bytes"] - peak
    derived = {"headroom_bytes": headroom, "fits": None if headroom is None else headroom >= 0}
    for key, value in derived.items():
        if section.get(key, value) != value:
            raise SchemaError(
                f"$.plan.{key} is {section[key]!r}, but the plan's budget, reserve and peak "
                f"give {value!r}: the document was edited or damaged"
            )


#: A sweep's ``"schema"``: its kind and format version (a profile's is ``layerscope/1``).
SWEEP_SCHEMA = "layerscope-sweep/1"


def sweep_spec() -> Obj:
    """A sweep's document (``Sweep.save``): its schema, the axes, the setting and one row
    per plan, each row's options and figures checked by their fields' types. The schema
    is checked before (``jsonread.check_schema``): a document without one is older."""
    row = (*fields("axis"), *fields("row"))
    cells = {f.key: OneOf(Str(), Arr(Str())) if f.json == "any" else _cell(f) for f in row}
    cells["checkpoint"] = Opt(OneOf(Str(), Arr(Str())))
    setting = Obj({"target": Str(), "device": Str(), "budget": Opt(Int(0)), "input": Str(),
                   "loss": Str(), "compile": Bool(), "float8": Bool()})  # fmt: skip
    return Obj(
        {"schema": Str(f"the format version, {SWEEP_SCHEMA!r}"), "axes": Arr(Str()),
         "setting": setting,
         "rows": Arr(Obj(cells, required=tuple(f.key for f in row if f.required)))},
        required=("axes", "rows"),
        description="ls.plan_sweep's plans, one row per combination of the options swept",
    )  # fmt: skip


#: A sweep's document; ``Sweep.from_dict`` checks it (its keys are those ``to_dict``
#: writes: any other is the sweep's ``extra``).
SWEEP = sweep_spec()


def is_sweep(data: object) -> bool:
    """Whether a JSON document is a sweep (``Sweep.to_dict``): its schema says so (any
    version: ``Sweep.from_dict`` says which it reads), or, without one (an older file),
    it has axes and rows."""
    if not isinstance(data, dict):
        return False
    if "schema" in data:
        return schema_name(data) == SWEEP_SCHEMA.split("/", 1)[0]
    return isinstance(data.get("rows"), list) and "axes" in data
