"""The ``layerscope/1`` format, section by section, in the check language of
``export.jsoncheck`` and ``export.jsontable``: what every known key of a saved profile
holds (``MODEL``, ``ENV``, ``MEMORY``, ``TIMING``, ``NODE_FIELDS``, ``PROFILE_FIELDS``,
...).

The reader (``export.json``) checks files against these specifications, and
``schema_document`` builds from them the JSON Schema shipped beside this module
(``SCHEMA_PATH``): ``python -m layerscope.export.jsonspec`` rewrites that file, and a test
checks that the two agree.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import layerscope.metricspec as ms
from layerscope.export.jsoncheck import (
    NONFINITE,
    Arr,
    Bool,
    Check,
    Counts,
    Enum,
    Finite,
    Int,
    Map,
    Metrics,
    Num,
    Obj,
    Opt,
    Ref,
    Str,
    Where,
    fail,
)
from layerscope.export.jsonmemory import BY_KIND, TIMELINE
from layerscope.export.jsonmemory import BYTES as _BYTES
from layerscope.export.jsonrecords import STORAGES
from layerscope.export.jsontable import Range, Row
from layerscope.export.subjects import section_check
from layerscope.profile import DTYPE_KEYS, SCHEMA

#: a parameter's (or its gradient's) record; ``local_*``: this rank's shard of a DTensor
_PARAM = {"shape": Arr(Int(0)), "dtype": Str(), "bytes": _BYTES, "module": Str(),
          "local_shape": Arr(Int(0)), "local_bytes": _BYTES}  # fmt: skip

__all__ = [
    "COMM",
    "DIST",
    "ENV",
    "MAX_DEPTH",
    "MAX_SPAN_SECONDS",
    "MEMORY",
    "MODEL",
    "NODE_FIELDS",
    "NODE_NUMERICS",
    "NODE_REQUIRED",
    "NUMERICS",
    "PROFILE_FIELDS",
    "RANKS_DESCRIPTION",
    "SCHEMA_PATH",
    "SIGNATURES",
    "STORAGES",
    "TIMELINE",
    "TIMING",
    "TRACE",
    "UNSUPPORTED_OPS",
    "Leaf",
    "schema_document",
    "schema_text",
]

#: The JSON Schema (draft 2020-12) of ``layerscope/1``, shipped in the package.
SCHEMA_PATH: Path = Path(__file__).with_name("layerscope-1.schema.json")

#: Deepest module tree read or written: a node's ``depth`` is at most this (root 0).
MAX_DEPTH = 256


def _amounts() -> frozenset[str]:
    """Metric keys that are amounts (``json`` type ``finite`` in the metric table): finite
    numbers. Other metric keys (times, keys of newer versions) take any number."""
    return ms.AMOUNT_METRICS


# ---- layerscope/1, section by section ---------------------------------------------------
_STATS = Ref(
    "stats",
    Obj(
        {
            "median": Num("seconds"),
            "mean": Num("seconds"),
            "min": Num("seconds"),
            "max": Num("seconds"),
            "p90": Num("seconds"),
            "iqr": Num("seconds: p75 - p25"),
            "n": Int(0, description="how many values (the repeats)"),
        },
        required=("median", "p90", "iqr"),
        description="statistics of a time over repeats",
    ),
)

_EVENT = Ref(
    "nonfinite_event",
    Obj(
        {
            "path": Str("the module's qualified path ('' is the root)"),
            "node_id": Str(),
            "type": Str("the module's class name"),
            "call": Int(0, description="which call of the module, 0-based"),
            "where": Enum(("output", "grad_output", "grad_input")),
            "shapes": Arr(Arr(Int(0))),
            "dtypes": Arr(Str()),
            "nan": Int(0),
            "inf": Int(0),
        },
        required=("path", "type", "call", "where", "shapes", "nan", "inf"),
        description="a module call where NaN/Inf values were seen",
    ),
)

MODEL = Obj(
    {
        "name": Str("the model's class name"),
        "class": Str("module and qualified name of the model's class"),
        "ran": Bool("whether the model ran (false: structure and parameters only)"),
        "training": Bool("the model's train mode at its first call (else at the start)"),
        "grad_mode": Str("'enabled', 'no_grad' or 'inference_mode', as 'training'"),
        "device": Opt(Str()),
        "gpu": Opt(Str("the CUDA device's name (torch.cuda.get_device_name), when it ran on one")),
        "dtype": Opt(Str()),
        "target": Str(
            "the device whose kernels a meta analysis followed: 'cpu', 'h100 (cuda sm90)'"
        ),
        "kernels": Map(
            Map(Int(0)),
            "the kernels a meta analysis followed, by op: {op: {kernel: calls}}",
        ),
        "autocast": Opt(
            Str(
                "the dtype autocast ran ops in: torch.autocast at the first call, or CUDA "
                "autocast's rules a plan's meta analysis followed (DDP mixed precision)"
            )
        ),
        "autocast_device": Opt(Str("whose autocast rules ran: 'cuda' or 'cpu'")),
        "loop": Obj(
            {
                "cycle": Int(0),
                "steps": Int(0),
                "analysed_steps": Int(0),
                "timed_steps": Int(0),
                "first_step": Opt(Int(0)),
                "last_step": Opt(Int(0)),
                "steps_seen": Int(0),
                "complete": Bool(),
                "schedule": Opt(Map(Int(0), "wait, warmup, active, repeat")),
                "optimizer_states": Opt(
                    Bool(
                        "whether the optimizers' states existed when the analysed steps "
                        "began (null: no optimizer known)"
                    )
                ),
                "ddp_rebuilt_buckets": Opt(
                    Bool("whether DDP rebuilt its gradient buckets in an analysed step")
                ),
            },
            description="which steps of a Profiler's loop the profile holds (docs/loops.md)",
        ),
    },
    description="the model and how it was run",
)

ENV = Obj(
    {
        "layerscope": Str(),
        "torch": Str(),
        "python": Str(),
        "platform": Str(),
        "cuda": Opt(Str("CUDA version torch was built with")),
    },
    description="versions of the software that made the profile",
)

UNSUPPORTED_OPS = Map(
    Obj(
        {
            "count": Int(0),
            "forward": Int(0),
            "backward": Int(0),
            "modules": Map(Int(0), "module path -> calls of the op there"),
            "error": Str("why the op's formula failed, when it raised"),
        },
        required=("count", "modules"),
    ),
    description="ops that ran without a FLOP formula, by op name",
)

MEMORY = Obj(
    {
        "allocator": Str("'simulated' or 'cuda'"),
        "forward_peak_bytes": _BYTES,
        "forward_end_bytes": _BYTES,
        "session_peak_bytes": _BYTES,
        "baseline": Obj(
            {kind: _BYTES for kind in ms.BASELINE_KINDS},
            description="bytes live when the session began, by kind, each storage once",
        ),
        "baseline_bytes": _BYTES,
        "by_kind": BY_KIND,
        ms.ACTIVATION_BYTES: _BYTES,
        ms.BACKWARD_PEAK_BYTES: _BYTES,
        "grads": Map(
            Obj(
                _PARAM
                | {
                    "module": Str("the module path where it is counted"),
                    "param_local_shape": Arr(Int(0), "the parameter's shard, where it differs"),
                }
            ),
            "parameter name -> its gradient (local_*: this rank's shard of a DTensor's)",
        ),
        "frozen": Map(
            Obj(_PARAM),
            "parameter name -> a parameter without requires_grad (absent when none)",
        ),
        "params_by_dtype": Map(
            Counts(
                {
                    ms.PARAMS: Int(0),
                    "tensors": Int(0),
                    ms.TRAINABLE_PARAMS: Int(0),
                    "trainable_tensors": Int(0),
                }
            )
        ),
        "cuda": Obj(
            {
                "device": Str(),
                "peak_before_session_bytes": Opt(_BYTES),
                "forward_peak_bytes": Opt(_BYTES),
                "simulated_forward_peak_bytes": Opt(_BYTES),
                "forward_end_bytes": Opt(_BYTES),
                "simulated_forward_end_bytes": Opt(_BYTES),
                "session_peak_bytes": Opt(_BYTES),
                "simulated_session_peak_bytes": Opt(_BYTES),
                ms.BACKWARD_PEAK_BYTES: Opt(_BYTES),
                "simulated_backward_peak_bytes": Opt(_BYTES),
                "largest_peak_difference": Obj({"path": Str(), "bytes": _BYTES}),
            },
            description="CUDA allocator and simulated figures side by side",
        ),
        "training": Obj(
            {
                "optimizer": Str(),
                "master_weights": Bool(),
                "amsgrad": Bool(),
                ms.TRAINABLE_PARAMS: Int(0),
                ms.PARAM_BYTES: _BYTES,
                ms.BUFFER_BYTES: _BYTES,
                ms.GRAD_BYTES: _BYTES,
                "master_weight_bytes": _BYTES,
                "optimizer_state_bytes": _BYTES,
                ms.ACTIVATION_BYTES: _BYTES,
                "total_bytes": _BYTES,
                "notes": Arr(Str()),
            },
            required=("total_bytes",),
            description="bytes one training step needs (record_training_footprint)",
        ),
        "timeline": TIMELINE,
        "storages": STORAGES,
    },
    description="whole-model memory facts (memory=True); empty when not measured",
)

NUMERICS = Obj(
    {
        "mode": Str("'record', 'warn' or 'raise'"),
        "stats": Bool(),
        "grads": Bool(),
        "underflow": Bool(),
        "checked_calls": Int(0),
        "checked_grads": Int(0),
        "nonfinite_calls": Int(0),
        "nonfinite_grads": Int(0),
        "first_nonfinite": Opt(_EVENT),
        "origin": Opt(_EVENT),
        "skipped": Opt(Str("why some tensors were not read")),
        "skipped_tensors": Int(0),
    },
    description="the NaN/Inf check of the whole run; empty when not checked",
)

_SECONDS = Num("seconds")

#: The largest time of a span, in seconds (about 31 years): a trace scales times to
#: microseconds and subtracts them, which a finite float near 1e308 does not survive.
MAX_SPAN_SECONDS = 1e9
_SPAN_TIME = Range(-MAX_SPAN_SECONDS, MAX_SPAN_SECONDS, "seconds from the start of the run")
_SPAN = Ref(
    "span",
    Row(
        (
            Int(0, description="an index into 'paths'"),
            Int(0, description="the path's call number (forward, ops) or span number"),
            _SPAN_TIME,
            _SPAN_TIME,
        ),
        "one span: [path index, n, start, end]",
    ),
)
_SPANS = Arr(_SPAN, "spans, in start order")


class _Trace(Obj):
    """``timing.trace``: its rows' path indices must point into ``paths``."""

    def check(self, value: Any, where: Where) -> Any:
        out = super().check(value, where)
        paths = len(out["paths"])
        for key in ("forward", "backward", "ops"):
            for i, row in enumerate(out.get(key, ())):
                if row[0] >= paths:
                    at = (((where, key), i), 0)
                    fail(at, f"an index into 'paths' (an integer below {paths})", row[0])
        return out


TRACE = _Trace(
    {
        "repeat": Int(0, description="which timed repeat the spans are of (0-based)"),
        "repeats": Int(0),
        "duration": Range(0, MAX_SPAN_SECONDS, "that repeat's whole time, seconds"),
        "clock": Str(),
        "paths": Arr(Str(), "the module (and op row) paths the rows use"),
        "forward": _SPANS,
        "backward": _SPANS,
        "ops": _SPANS,
    },
    required=("paths",),
    description="the timeline of one representative repeat (docs/timing.md)",
)

TIMING = Obj(
    {
        "timer": Str("'hooks', 'kineto' or 'fx'"),
        "clock": Str(),
        "device": Str(),
        "sync": Bool(),
        "grad_mode": Str(),
        "backward": Bool(),
        "warmup": Int(0),
        "repeats": Int(0),
        "ops": Bool(),
        "training": Bool(),
        "batch_size": Opt(Int(0)),
        "batch_source": Opt(Str()),
        "latency": Opt(_STATS),
        "forward_latency": Opt(_STATS),
        "backward_latency": Opt(_STATS),
        "instrumented_forward": Opt(_STATS),
        "interpreted_forward": Opt(_STATS),
        "throughput": Opt(Num("inputs per second")),
        "throughput_unit": Str(),
        "overhead": Obj(
            {
                "clock_read": _SECONDS,
                "forward_hook_inner": _SECONDS,
                "forward_hook_outer": _SECONDS,
                "backward_hook": _SECONDS,
                "fx_node_inner": _SECONDS,
                "corrected": Bool(),
            },
            description="the calibrated instrumentation cost taken off module times",
        ),
        "trace": TRACE,
    },
    dependent={
        "latency": ("timer", "repeats", "warmup"),
        "throughput": ("batch_size", "batch_source"),
    },
    description="whole-model latency and throughput of a timing pass; empty when not timed",
)

_TENSOR_LEAF = Obj(
    {
        "path": Str("argument index or keyword, then keys/indices ('0', 'mask', '0.pixels')"),
        "shape": Arr(Int(0)),
        "dtype": Str(),
        "device": Str(),
    },
    required=("path", "shape", "dtype", "device"),
    description="a tensor",
)
_VALUE_LEAF = Obj(
    {"path": Str(), "type": Str(), "value": Opt(Str("a short repr"))},
    required=("path", "type"),
    description="a value that is not a tensor",
)


class Leaf(Check):
    """One leaf of a call signature: a tensor (it has ``shape``) or another value."""

    expected = "an object"

    def check(self, value: Any, where: Where) -> Any:
        if not isinstance(value, dict):
            fail(where, self.expected, value)
        if "shape" in value:
            return _TENSOR_LEAF.check(value, where)
        return _VALUE_LEAF.check(value, where)

    def schema(self) -> dict[str, Any]:
        return {
            "if": {"required": ["shape"]},
            "then": _TENSOR_LEAF.described(),
            "else": _VALUE_LEAF.described(),
        }


SIGNATURES = Arr(Arr(Leaf(), "one call's leaves"), "distinct call signatures")

_DTYPE_ROW = Counts({k: Int(0) for k in DTYPE_KEYS}, required=DTYPE_KEYS)

NODE_NUMERICS = Obj(
    {
        "checked_calls": Int(0),
        "elements": Int(0),
        "min": Opt(Num()),
        "max": Opt(Num()),
        "mean": Opt(Num()),
        "std": Opt(Num("population standard deviation")),
        "absmax": Opt(Num()),
        "min_abs_nonzero": Opt(Num()),
        "zero_fraction": Opt(Num()),
        "fp16_overflow": Opt(Bool()),
        "bf16_overflow": Opt(Bool()),
        "fp16_underflow": Opt(Bool()),
        "bf16_underflow": Opt(Bool()),
        "nan": Int(0),
        "inf": Int(0),
        "nonfinite_calls": Arr(Int(0)),
        "nonfinite_grad_calls": Arr(Int(0)),
    },
    description="statistics and NaN/Inf counts of the module's outputs, when checked",
)

DIST = Obj(
    {
        "rank": Int(0, description="global rank of the process that made the profile"),
        "world_size": Int(1, description="processes in the default process group"),
        "backend": Str("the process group's backend: 'gloo', 'nccl', ..."),
    },
    description="where a profile of a torch.distributed run was made; absent otherwise",
)

_COMM_ROW = Obj(
    {
        "calls": Int(0, description="how many calls of ops of this kind"),
        "bytes": Int(0, description="bytes handed to them as input (comm_bytes' convention)"),
        "wire_bytes": Finite("bytes on the wire per rank with a ring (comm_wire_bytes')"),
    },
    required=("calls", "bytes", "wire_bytes"),
    description="one kind of collective in one phase of one module",
)
_COMM_KINDS = Map(
    _COMM_ROW,
    "kind ('all_reduce', 'all_gather', 'reduce_scatter', 'all_to_all', 'broadcast', "
    "'reduce', 'gather', 'scatter', 'send', 'recv', 'other') -> its calls and bytes",
)
COMM = Map(
    Obj({"forward": _COMM_KINDS, "backward": _COMM_KINDS}, description="phase -> kinds"),
    "collectives by module path ('<outside>': work outside the profiled module), phase "
    "and kind, the module's own (not its children's); absent when none was observed",
)

#: Node keys, in the order of ``Node.to_dict``; ``children`` is read by the tree walk.
NODE_FIELDS: dict[str, Check] = {
    "path": Str("qualified module path ('' for the root)"),
    "name": Str("last path component (the class name for the root)"),
    "type": Str("class name"),
    "node_id": Str("'0' for the root, '1', '2', ... for its children, '1.2', ..."),
    "depth": Int(0, MAX_DEPTH, "0 for the root, its parent's + 1 for every other node"),
    "calls": Int(0, description="how many times the module ran"),
    "repr": Str("one-line Type(hyperparameters)"),
    "inputs": SIGNATURES,
    "outputs": SIGNATURES,
    "grad_inputs": Arr(
        Arr(Leaf(), "one call's gradient leaves"),
        "distinct signatures of the gradients that reached the module's inputs in backward",
    ),
    "grad_outputs": Arr(
        Arr(Leaf(), "one call's gradient leaves"),
        "distinct signatures of the gradients that reached the module's outputs in backward",
    ),
    "metrics": Metrics(_amounts, "inclusive metrics (self + all descendants) in base units"),
    "self_metrics": Metrics(_amounts, "metrics of work done directly in the module"),
    "by_dtype": Map(_DTYPE_ROW, "dtype -> inclusive parameter and buffer counts"),
    "self_by_dtype": Map(_DTYPE_ROW, "dtype -> the module's own parameters and buffers"),
    "shared": Arr(Str(), "tensors held here but counted at an ancestor (tied weights)"),
    "repeat": Int(1, description="how many repeats a folded entry stands for"),
    "members": Arr(Str(), "paths a folded entry stands for"),
    "numerics": NODE_NUMERICS,
}
NODE_REQUIRED: tuple[str, ...] = ("path", "name", "type", "node_id", "depth", "calls")

#: Top-level keys other than ``schema`` and ``root``.
PROFILE_FIELDS: dict[str, Check] = {
    "model": MODEL,
    "env": ENV,
    "unsupported_ops": UNSUPPORTED_OPS,
    "partial_metrics": Arr(Str(), "metric keys whose totals are partial (derived)"),
    "memory": MEMORY,
    "numerics": NUMERICS,
    "timing": TIMING,
    "notices": Arr(Str(), "what the user should know about the run"),
    "outside": Metrics(
        _amounts,
        "work done while no call of the profiled module ran (a loss and its backward, "
        "code around the calls): metric key -> value, not part of the root's totals",
    ),
    "dist": DIST,
    "comm": COMM,
}

#: What ``"ranks"`` holds (read by ``export.json``, which checks each entry as a profile).
RANKS_DESCRIPTION = (
    "every rank's own profile after Profile.gather, in group rank order: each a whole "
    "profile object (schema, sections, root) without 'ranks' of its own; absent otherwise"
)


# ---- the schema document -------------------------------------------------------------
_DESCRIPTION = (
    "A layerscope profile, schema 'layerscope/1': the module tree of one measurement "
    "session with every metric in base units (counts, FLOPs, bytes, seconds). Non-finite "
    'numbers are written as the strings "NaN", "Infinity" and "-Infinity" wherever a '
    "number belongs (readers also accept the bare tokens NaN/Infinity of older files). "
    "Every object may carry keys not listed here (newer versions, extensions): readers "
    "keep or ignore them."
)


def schema_document() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``layerscope/1``, from the reader's own specs."""
    node = Obj(dict(NODE_FIELDS), required=NODE_REQUIRED, description="a module").schema()
    node["properties"]["children"] = {
        "description": "child nodes in execution order",
        "type": "array",
        "items": {"$ref": "#/$defs/node"},
    }
    props: dict[str, Any] = {
        "schema": {"const": SCHEMA, "description": "the format version"},
        **{k: c.described() for k, c in PROFILE_FIELDS.items()},
        "ranks": {
            "description": RANKS_DESCRIPTION,
            "type": "array",
            "items": {"$ref": "#", "not": {"required": ["ranks"]}},
        },
        "root": {"$ref": "#/$defs/node", "description": "the whole model"},
        "plan": section_check("plan").described(),
        "generation": section_check("generation").described(),
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "urn:layerscope:schema:layerscope-1",
        "title": "layerscope/1 profile",
        "description": _DESCRIPTION,
        "type": "object",
        "required": ["schema", "root"],
        "properties": props,
        "$defs": {
            "node": node,
            "number": {
                "description": "any number; non-finite ones as strings",
                "anyOf": [{"type": "number"}, {"enum": list(NONFINITE)}],
            },
            "finite": {
                "description": "a count, operations or bytes: a finite number",
                "type": "number",
            },
            "stats": _STATS.inner.described(),
            "nonfinite_event": _EVENT.inner.described(),
            "span": _SPAN.inner.described(),
        },
    }


def schema_text() -> str:
    """The schema document as the text of ``SCHEMA_PATH``."""
    return json.dumps(schema_document(), indent=2) + "\n"


if __name__ == "__main__":
    SCHEMA_PATH.write_text(schema_text(), encoding="utf-8")
    print(f"wrote {SCHEMA_PATH}")
