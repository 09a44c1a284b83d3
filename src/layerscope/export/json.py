"""JSON of schema ``layerscope/1``: a fast, atomic ``save`` and a ``load`` that checks
every known key and names the JSON path of anything wrong.

- **Writing** serialises the whole profile to a string first (C encoder, compact, the
  garbage collector paused), then writes it atomically (``export.files.write_text``): a
  value that is not JSON data fails with an ``ExportError`` naming the file and the JSON
  path of the value, and leaves an existing file untouched. Non-finite floats are written
  as the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"``, so strict parsers read the
  file; they are found without walking the tree in Python unless one exists.
- **Reading** checks the type and value of every key the schema knows, in one pass that
  also builds the nodes (iteratively: no recursion, at most ``MAX_DEPTH`` levels), and
  turns every malformed input into a ``SchemaError`` such as
  ``$.root.children[3].metrics.flops: expected a finite number, got the string 'many'``.
  The strings ``"NaN"``/``"Infinity"``/``"-Infinity"`` (and the bare tokens of older
  files) in numeric places come back as floats. Keys it does not know are kept where a
  dict can hold them (model, env, the whole-model sections, metrics, node numerics);
  unknown top-level keys and unknown node keys are dropped. Nothing is executed.

The same specification drives the reader and the JSON Schema shipped beside this module
(``SCHEMA_PATH``); ``python -m layerscope.export.json`` rewrites that file, and a test
checks that the two agree.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeAlias

from layerscope.errors import ExportError, SchemaError
from layerscope.export.files import write_text
from layerscope.gcpause import gc_paused
from layerscope.profile import (
    ADDITIVE_METRICS,
    DTYPE_KEYS,
    SCHEMA,
    Node,
    Profile,
    Signature,
    Spec,
    TensorSpec,
    ValueSpec,
    new_node,
)

__all__ = [
    "MAX_DEPTH",
    "MAX_NESTING",
    "SCHEMA_PATH",
    "comparable",
    "load",
    "node_from_dict",
    "profile_from_dict",
    "save",
    "schema_document",
    "to_json",
]

#: The JSON Schema (draft 2020-12) of ``layerscope/1``, shipped in the package.
SCHEMA_PATH: Path = Path(__file__).with_name("layerscope-1.schema.json")

#: Deepest module tree read or written: a node's ``depth`` is at most this (root 0).
MAX_DEPTH = 256
#: Deepest nesting of a value under a key the reader does not know (kept as it is).
MAX_NESTING = 64

#: Largest integer in a count (``calls``, a shape dimension, ...): a signed 64-bit int.
INT64_MAX = 2**63 - 1
#: Largest integer a float can hold; metric integers beyond ±2**63 load as floats.
_FLOAT_MAX_INT = int(float.fromhex("0x1.fffffffffffffp+1023"))

#: Canonical non-finite floats: one object each, so equal to themselves inside containers.
_NONFINITE: dict[str, float] = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_NONFINITE_TEXT = '"NaN", "Infinity" or "-Infinity"'

#: Metrics that are amounts (counts, operations, bytes): finite numbers. Other metric
#: keys (times, keys of newer versions) take any number, non-finite ones included.
AMOUNT_METRICS: frozenset[str] = frozenset(
    (
        *ADDITIVE_METRICS,
        "peak_bytes",
        "simulated_peak_bytes",
        "bytes_accessed",
        "backward_bytes_accessed",
    )
)

#: Where a value is: "$" or a chain (parent, key) built cheaply, formatted on error only.
Where: TypeAlias = "str | tuple[Any, str | int]"

_MISSING: Any = object()
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


# ---- errors ----------------------------------------------------------------------------
class _Invalid(Exception):
    """A malformed value: where it is and what is wrong (a SchemaError at the boundary)."""

    def __init__(self, where: Where, problem: str) -> None:
        super().__init__(problem)
        self.where = where
        self.problem = problem


def json_path(where: Where) -> str:
    """``$.root.children[3].metrics.flops`` for a chain of keys."""
    keys: list[str | int] = []
    while isinstance(where, tuple):
        where, key = where
        keys.append(key)
    parts = [where]
    for key in reversed(keys):
        if isinstance(key, int):
            parts.append(f"[{key}]")
        elif _IDENT.match(key):
            parts.append(f".{key}")
        else:
            parts.append(f"[{json.dumps(key)}]")
    return "".join(parts)


def _got(value: Any) -> str:
    """The value, as an error message names it."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, str):
        text = repr(value)
        return f"the string {text[:40] + '...' if len(text) > 43 else text}"
    if isinstance(value, int):
        if value.bit_length() > 100:
            try:
                return f"an integer of {len(str(abs(value)))} digits"
            except ValueError:  # past sys.get_int_max_str_digits()
                return "an integer too long to write out"
        return f"the integer {value}"
    if isinstance(value, float):
        return f"the number {value!r}"
    if isinstance(value, list | tuple):
        return f"an array of {len(value)} items" if value else "an empty array"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__} object"


def _fail(where: Where, expected: str, value: Any) -> NoReturn:
    raise _Invalid(where, f"expected {expected}, got {_got(value)}")


# ---- the specification: checks values and describes them as JSON Schema ----------------
class Check:
    """One kind of value: ``check`` returns the value to keep (copied, non-finite strings
    turned into floats) or raises ``_Invalid``; ``schema`` gives its JSON Schema."""

    expected = "a value"

    def __init__(self, description: str = "") -> None:
        self.description = description

    def check(self, value: Any, where: Where) -> Any:
        raise NotImplementedError

    def schema(self) -> dict[str, Any]:
        raise NotImplementedError

    def described(self) -> dict[str, Any]:
        out = self.schema()
        if self.description:
            out = {"description": self.description, **out}
        return out


def _plain(value: Any) -> Any:
    """An instance of a subclass of bool, int, float or str (numpy's float64, torch's
    version string) as the plain value; anything else as it is."""
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str.__str__(value)
    return value


class Str(Check):
    expected = "a string"

    def check(self, value: Any, where: Where) -> Any:
        if type(value) is not str:
            value = _plain(value)
            if type(value) is not str:
                _fail(where, self.expected, value)
        return value

    def schema(self) -> dict[str, Any]:
        return {"type": "string"}


class Enum(Str):
    def __init__(self, values: tuple[str, ...], description: str = "") -> None:
        super().__init__(description)
        self.values = values
        self.expected = "one of " + ", ".join(repr(v) for v in values)

    def check(self, value: Any, where: Where) -> Any:
        value = _plain(value)
        if type(value) is not str or value not in self.values:
            _fail(where, self.expected, value)
        return value

    def schema(self) -> dict[str, Any]:
        return {"enum": list(self.values)}


class Bool(Check):
    expected = "true or false"

    def check(self, value: Any, where: Where) -> Any:
        if value is not True and value is not False:
            _fail(where, self.expected, value)
        return value

    def schema(self) -> dict[str, Any]:
        return {"type": "boolean"}


class Int(Check):
    """An integer (a float with no fraction is taken as one, as JSON Schema does)."""

    def __init__(
        self, minimum: int | None = 0, maximum: int = INT64_MAX, description: str = ""
    ) -> None:
        super().__init__(description)
        self.minimum = minimum
        self.maximum = maximum
        self.low = -maximum - 1 if minimum is None else minimum
        if maximum != INT64_MAX:
            self.expected = f"an integer from {self.low} to {maximum}"
        elif minimum is None:
            self.expected = "a 64-bit integer"
        else:
            self.expected = f"an integer >= {minimum}"

    def check(self, value: Any, where: Where) -> Any:
        if type(value) is not int:
            value = _plain(value)
            if type(value) is float and value.is_integer():
                value = int(value)
            elif type(value) is not int:
                _fail(where, self.expected, value)
        if not self.low <= value <= self.maximum:
            _fail(where, self.expected, value)
        return value

    def schema(self) -> dict[str, Any]:
        return {"type": "integer", "minimum": self.low, "maximum": self.maximum}


def _number(value: Any, where: Where, expected: str) -> float | int:
    """A number of a metric or statistic: ints beyond ±2**63 become floats (refused past
    a float's range), non-finite strings become floats."""
    t = type(value)
    if t is float:
        return float(value)
    if t is not int and t is not str:
        value = _plain(value)
        t = type(value)
        if t is float:
            return float(value)
    if t is int:
        n = int(value)
        if -INT64_MAX - 1 <= n <= INT64_MAX:
            return n
        if -_FLOAT_MAX_INT <= n <= _FLOAT_MAX_INT:
            return float(n)
        _fail(where, expected + " (within a float's range)", value)
    if t is str:
        special = _NONFINITE.get(value)
        if special is not None:
            return special
    _fail(where, expected, value)


class Num(Check):
    """Any number; non-finite ones as the strings "NaN", "Infinity", "-Infinity"."""

    expected = f"a number or {_NONFINITE_TEXT}"

    def check(self, value: Any, where: Where) -> Any:
        return _number(value, where, self.expected)

    def schema(self) -> dict[str, Any]:
        return {"$ref": "#/$defs/number"}


class Finite(Check):
    """A finite number: a count, operations or bytes (JSON has no other numbers; the
    strings for non-finite values are refused here)."""

    expected = "a finite number"

    def check(self, value: Any, where: Where) -> Any:
        t = type(value)
        if t is not int and t is not float:
            value = _plain(value)
            t = type(value)
        if t is int:
            if -INT64_MAX - 1 <= value <= INT64_MAX:
                return value
            if -_FLOAT_MAX_INT <= value <= _FLOAT_MAX_INT:
                return float(value)
            _fail(where, self.expected + " (within a float's range)", value)
        if t is float and -math.inf < value < math.inf:
            return value
        _fail(where, self.expected, value)

    def schema(self) -> dict[str, Any]:
        return {"$ref": "#/$defs/finite"}


class Opt(Check):
    """``inner`` or null."""

    def __init__(self, inner: Check, description: str = "") -> None:
        super().__init__(description or inner.description)
        self.inner = inner
        self.expected = f"{inner.expected} or null"

    def check(self, value: Any, where: Where) -> Any:
        if value is None:
            return None
        try:
            return self.inner.check(value, where)
        except _Invalid as e:
            if e.where is where and e.problem.startswith("expected "):
                _fail(where, self.expected, value)
            raise

    def schema(self) -> dict[str, Any]:
        return {"anyOf": [self.inner.schema(), {"type": "null"}]}


_JSON_SCALARS = frozenset((str, int, float, bool, type(None)))


def _json_value(value: Any, where: Where) -> Any:
    """A copy of a value under a key the reader does not know: JSON data nested at most
    ``MAX_NESTING`` levels (deeper, later deep copies could hit the recursion limit), the
    strings "NaN", "Infinity", "-Infinity" as floats (how ``save`` writes them anywhere).
    Anything else (a Python object given to ``from_dict``) is refused."""
    t = type(value)
    if t is str:
        return _NONFINITE.get(value, value)
    if t is int or t is float or t is bool or value is None:
        return value
    top: list[Any] = [None]
    stack: list[tuple[Any, Where, int, Any, Any]] = [(value, where, 0, top, 0)]
    while stack:
        v, w, level, into, key = stack.pop()
        if isinstance(v, dict | list | tuple):
            if level >= MAX_NESTING:
                raise _Invalid(w, f"nested more than {MAX_NESTING} levels deep")
            scalars = v.values() if isinstance(v, dict) else v
            if set(map(type, scalars)) <= _JSON_SCALARS and _NONFINITE.keys().isdisjoint(scalars):
                # Plain scalars, no non-finite string (a row of a trace): copied at C speed.
                if isinstance(v, dict):
                    _string_keys(v, w)
                    into[key] = dict(v)
                else:
                    into[key] = list(v)
                continue
            if isinstance(v, dict):
                _string_keys(v, w)
                out: Any = dict.fromkeys(v)
                items: list[tuple[Any, Any]] = list(v.items())
            else:
                out = [None] * len(v)
                items = list(enumerate(v))
            into[key] = out
            stack.extend((item, (w, k), level + 1, out, k) for k, item in reversed(items))
        elif isinstance(v, str):
            into[key] = _NONFINITE.get(v, _plain(v))
        elif v is None or isinstance(v, int | float):
            into[key] = _plain(v)
        else:
            _fail(w, "JSON data (an object, array, string, number, true, false or null)", v)
    return top[0]


class Arr(Check):
    """A list of ``item`` (a tuple from Python data is taken as one)."""

    expected = "an array"

    def __init__(self, item: Check, description: str = "") -> None:
        super().__init__(description)
        self.item = item
        # Item types a whole list can be checked for at C speed.
        self._fast: type | None = None
        if type(item) is Str:
            self._fast = str
        elif type(item) is Int:
            self._fast = int

    def check(self, value: Any, where: Where) -> Any:
        if not isinstance(value, list | tuple):
            _fail(where, self.expected, value)
        if not value:
            return []
        fast = self._fast
        if fast is not None and set(map(type, value)) == {fast}:
            if fast is str:
                return list(value)
            item = self.item
            assert isinstance(item, Int)
            if min(value) >= item.low and max(value) <= item.maximum:
                return list(value)
        check = self.item.check
        return [check(v, (where, i)) for i, v in enumerate(value)]

    def schema(self) -> dict[str, Any]:
        return {"type": "array", "items": self.item.described()}


class Map(Check):
    """An object whose values are all ``value`` (any keys)."""

    expected = "an object"

    def __init__(self, value: Check, description: str = "") -> None:
        super().__init__(description)
        self.value = value

    def check(self, value: Any, where: Where) -> Any:
        if not isinstance(value, dict):
            _fail(where, self.expected, value)
        _string_keys(value, where)
        check = self.value.check
        return {k: check(v, (where, k)) for k, v in value.items()}

    def schema(self) -> dict[str, Any]:
        return {"type": "object", "additionalProperties": self.value.described()}


def _string_keys(value: dict[Any, Any], where: Where) -> None:
    if value and set(map(type, value)) != {str}:
        for k in value:
            if not isinstance(k, str):
                raise _Invalid(where, f"object keys must be strings, got {_got(k)}")


class Metrics(Check):
    """``metrics`` / ``self_metrics``: finite numbers under the known amount keys, any
    number (non-finite included) under the others."""

    expected = "an object"

    def check(self, value: Any, where: Where) -> Any:
        if type(value) is not dict and not isinstance(value, dict):
            _fail(where, self.expected, value)
        if not value:
            return {}
        values = value.values()
        types = set(map(type, values))
        # The common case at C speed: all ints, none past 64 bits.
        if types == {int} and min(values) >= -INT64_MAX - 1 and max(values) <= INT64_MAX:
            _string_keys(value, where)
            return dict(value)
        _string_keys(value, where)
        out = {}
        amounts = AMOUNT_METRICS
        for k, v in value.items():
            if k in amounts:
                out[k] = _FINITE.check(v, (where, k))
            elif type(v) is float:
                out[k] = v
            else:
                out[k] = _number(v, (where, k), Num.expected)
        return out

    def schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {k: {"$ref": "#/$defs/finite"} for k in sorted(AMOUNT_METRICS)},
            "additionalProperties": {"$ref": "#/$defs/number"},
        }


class Obj(Check):
    """An object with known keys (checked when present; ``required`` ones must be) and
    any other keys (kept, checked to be JSON data)."""

    expected = "an object"

    def __init__(
        self,
        props: dict[str, Check],
        required: tuple[str, ...] = (),
        description: str = "",
        dependent: dict[str, tuple[str, ...]] | None = None,
    ) -> None:
        super().__init__(description)
        self.props = props
        self.required = required
        #: key -> keys that must be present when it is (JSON Schema ``dependentRequired``).
        self.dependent = dependent or {}
        self._keys = frozenset(props)

    def check(self, value: Any, where: Where) -> Any:
        if not isinstance(value, dict):
            _fail(where, self.expected, value)
        for key in self.required:
            if key not in value:
                raise _Invalid(where, f"missing key {key!r}")
        for key, needs in self.dependent.items():
            if key in value:
                for other in needs:
                    if other not in value:
                        raise _Invalid(where, f"missing key {other!r} (needed with {key!r})")
        out = dict(value)
        props = self.props
        for key in props.keys() & value.keys():
            out[key] = props[key].check(value[key], (where, key))
        unknown = value.keys() - self._keys
        if unknown:
            _string_keys(value, where)
            for key in [k for k in value if k in unknown]:  # in order: the first error
                out[key] = _json_value(value[key], (where, key))
        return out

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": "object",
            "properties": {k: c.described() for k, c in self.props.items()},
        }
        if self.required:
            out["required"] = list(self.required)
        if self.dependent:
            out["dependentRequired"] = {k: list(v) for k, v in self.dependent.items()}
        return out


class Counts(Obj):
    """An object of counts (integers >= 0), checked at C speed when every value is one
    and every required key is there (the generic check names the bad value otherwise)."""

    def check(self, value: Any, where: Where) -> Any:
        if type(value) is dict and value:
            values = value.values()
            if (
                set(map(type, values)) == {int}
                and min(values) >= 0
                and max(values) <= INT64_MAX
                and set(map(type, value)) == {str}
                and all(k in value for k in self.required)
            ):
                return dict(value)
        return super().check(value, where)


class Ref(Check):
    """A named definition (``$defs``) of the schema document."""

    def __init__(self, name: str, inner: Check, description: str = "") -> None:
        super().__init__(description)
        self.name = name
        self.inner = inner
        self.expected = inner.expected

    def check(self, value: Any, where: Where) -> Any:
        return self.inner.check(value, where)

    def schema(self) -> dict[str, Any]:
        return {"$ref": f"#/$defs/{self.name}"}


_FINITE = Finite()
COUNT = Int(0)
SIGNED = Int(None)

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
        "training": Bool("the model's train mode when the run began"),
        "grad_mode": Str("'enabled', 'no_grad' or 'inference_mode'"),
        "device": Opt(Str()),
        "dtype": Opt(Str()),
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

_BYTES = Int(None, description="bytes")
MEMORY = Obj(
    {
        "allocator": Str("'simulated' or 'cuda'"),
        "forward_peak_bytes": _BYTES,
        "forward_end_bytes": _BYTES,
        "session_peak_bytes": _BYTES,
        "activation_bytes": _BYTES,
        "backward_peak_bytes": _BYTES,
        "grads": Map(
            Obj(
                {
                    "shape": Arr(Int(0)),
                    "dtype": Str(),
                    "bytes": _BYTES,
                    "module": Str("the module path where it is counted"),
                }
            ),
            "parameter name -> its gradient",
        ),
        "params_by_dtype": Map(
            Counts(
                {
                    "params": Int(0),
                    "tensors": Int(0),
                    "trainable_params": Int(0),
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
                "backward_peak_bytes": Opt(_BYTES),
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
                "trainable_params": Int(0),
                "param_bytes": _BYTES,
                "buffer_bytes": _BYTES,
                "grad_bytes": _BYTES,
                "master_weight_bytes": _BYTES,
                "optimizer_state_bytes": _BYTES,
                "activation_bytes": _BYTES,
                "total_bytes": _BYTES,
                "notes": Arr(Str()),
            },
            required=("total_bytes",),
            description="bytes one training step needs (record_training_footprint)",
        ),
        "timeline": Obj(
            {
                "clock": Str(),
                "allocator": Str(),
                "op": Arr(Int(0)),
                "event": Arr(Str()),
                "path": Arr(Str()),
                "bytes": Arr(Int(None)),
                "base_bytes": _BYTES,
                "dropped": Int(0),
            },
            description="live bytes at every module boundary, as parallel lists",
        ),
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
            _fail(where, self.expected, value)
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
    "metrics": Metrics("inclusive metrics (self + all descendants) in base units"),
    "self_metrics": Metrics("metrics of work done directly in the module"),
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
}


# ---- reading -------------------------------------------------------------------------
def profile_from_dict(data: Any, source: str | None = None) -> Profile:
    """The Profile in ``data`` (parsed JSON); ``SchemaError`` naming the JSON path of the
    first malformed value (after ``source``, the file, when given)."""
    try:
        with gc_paused():
            return _profile(data)
    except _Invalid as e:
        raise _schema_error(e, source) from None


def node_from_dict(data: Any) -> Node:
    """A Node and its subtree from ``data``; errors name JSON paths from ``$`` (this node)."""
    try:
        with gc_paused():
            return _tree(data, "$", None)
    except _Invalid as e:
        raise _schema_error(e, None) from None


def _schema_error(e: _Invalid, source: str | None) -> SchemaError:
    text = f"{json_path(e.where)}: {e.problem}"
    return SchemaError(f"{source}: {text}" if source is not None else text)


def _profile(data: Any) -> Profile:
    if not isinstance(data, dict):
        raise _Invalid("$", f"a saved profile must be a JSON object, got {_got(data)}")
    if "schema" not in data:
        raise _Invalid("$", f"missing key 'schema': not a layerscope profile ({SCHEMA!r})")
    schema = data["schema"]
    if type(schema) is not str or schema != SCHEMA:
        raise _Invalid(
            ("$", "schema"),
            f"unsupported profile schema {schema!r}; this layerscope reads {SCHEMA!r}",
        )
    if "root" not in data:
        raise _Invalid("$", "missing key 'root' (the module tree)")
    sections: dict[str, Any] = {}
    for key, spec in PROFILE_FIELDS.items():
        if key in data:
            sections[key] = spec.check(data[key], ("$", key))
    return Profile(
        root=_tree(data["root"], ("$", "root"), 0),
        model=sections.get("model", {}),
        env=sections.get("env", {}),
        unsupported_ops=sections.get("unsupported_ops", {}),
        memory=sections.get("memory", {}),
        numerics=sections.get("numerics", {}),
        timing=sections.get("timing", {}),
        notices=sections.get("notices", []),
        schema=SCHEMA,
        extra={
            key: _json_value(value, ("$", key))
            for key, value in data.items()
            if key not in _PROFILE_KNOWN
        },
    )


def _tree(data: Any, where: Where, depth: int | None) -> Node:
    """A node and its subtree, depth first with a stack: no recursion, at most MAX_DEPTH
    levels. ``depth`` is what the top node's ``depth`` must be (None: any)."""
    leaves: dict[tuple[Any, ...], Spec] = {}
    top = _node(data, where, depth, leaves)
    stack: list[tuple[Node, list[Any], Where]] = []
    kids = data.get("children")
    if kids:
        stack.append((top, _children(kids, where), where))
    elif kids is not None:
        _children(kids, where)
    while stack:
        parent, kids, w = stack.pop()
        level = parent.depth + 1
        if level > MAX_DEPTH:
            raise _Invalid(
                where,
                f"the module tree is more than {MAX_DEPTH} levels deep "
                f"(layerscope reads up to {MAX_DEPTH})",
            )
        out = parent.children
        kw = (w, "children")
        pending = []
        for i, child in enumerate(kids):
            cw = (kw, i)
            node = _node(child, cw, level, leaves)
            node.parent = parent
            out.append(node)
            grand = child.get("children")
            if grand:
                pending.append((node, _children(grand, cw), cw))
            elif grand is not None:
                _children(grand, cw)
        stack.extend(reversed(pending))
    return top


def _children(value: Any, where: Where) -> list[Any]:
    if not isinstance(value, list | tuple):
        _fail((where, "children"), "an array of module nodes", value)
    return value  # type: ignore[return-value]


#: Top-level keys this version reads; any other is kept in ``Profile.extra``.
_PROFILE_KNOWN = frozenset((*PROFILE_FIELDS, "schema", "root", "partial_metrics"))
#: Node keys this version reads; any other is kept in ``Node.extra``.
_NODE_KNOWN = frozenset((*NODE_FIELDS, "children"))

#: Node keys read by the generic loop of ``_node`` (the others are read first, inline).
_NODE_OTHER = tuple(
    (k, c)
    for k, c in NODE_FIELDS.items()
    if k not in (*NODE_REQUIRED, "repr", "inputs", "outputs", "metrics", "self_metrics")
)
_METRICS = NODE_FIELDS["metrics"]
_STR = Str()
_DEPTH = NODE_FIELDS["depth"]
_CALLS = NODE_FIELDS["calls"]


def _node(d: Any, where: Where, depth: int | None, leaves: dict[tuple[Any, ...], Spec]) -> Node:
    """One node without its children; ``depth`` is what its ``depth`` must be (None: any)."""
    if type(d) is not dict and not isinstance(d, dict):
        _fail(where, "a module node (an object)", d)
    for key in NODE_REQUIRED:
        if key not in d:
            raise _Invalid(where, f"missing key {key!r} of a module node")
    path, name, type_, node_id = d["path"], d["name"], d["type"], d["node_id"]
    if type(path) is not str:
        path = _STR.check(path, (where, "path"))
    if type(name) is not str:
        name = _STR.check(name, (where, "name"))
    if type(type_) is not str:
        type_ = _STR.check(type_, (where, "type"))
    if type(node_id) is not str:
        node_id = _STR.check(node_id, (where, "node_id"))
    got = _DEPTH.check(d["depth"], (where, "depth"))
    if depth is not None and got != depth:
        why = "the root" if depth == 0 else "its parent's depth + 1"
        raise _Invalid((where, "depth"), f"expected {depth} ({why}), got {_got(d['depth'])}")
    calls = d["calls"]
    if type(calls) is not int or not 0 <= calls <= INT64_MAX:
        calls = _CALLS.check(calls, (where, "calls"))
    repr_ = d.get("repr", "")
    if type(repr_) is not str:
        repr_ = _STR.check(repr_, (where, "repr"))
    node = new_node(path, name, type_, got, repr_)
    node.node_id = node_id
    node.calls = calls
    value = d.get("inputs")
    if value is not None:
        node.inputs = _signatures(value, (where, "inputs"), leaves)
    value = d.get("outputs")
    if value is not None:
        node.outputs = _signatures(value, (where, "outputs"), leaves)
    value = d.get("metrics")
    if value is not None:
        node.metrics = _METRICS.check(value, (where, "metrics"))
    value = d.get("self_metrics")
    if value is not None:
        node.self_metrics = _METRICS.check(value, (where, "self_metrics"))
    for key, spec in _NODE_OTHER:
        value = d.get(key, _MISSING)
        if value is _MISSING or (not value and type(value) in (list, dict)):
            continue  # absent or empty: the default
        setattr(node, key, spec.check(value, (where, key)))
    if len(d) > len(_NODE_KNOWN) or not _NODE_KNOWN.issuperset(d):
        unknown = {k: _json_value(v, (where, k)) for k, v in d.items() if k not in _NODE_KNOWN}
        if unknown:
            node.extra = unknown
    return node


def _signatures(value: Any, where: Where, leaves: dict[tuple[Any, ...], Spec]) -> list[Signature]:
    """Call signatures as tuples of TensorSpec/ValueSpec (equal leaves shared: immutable)."""
    if not isinstance(value, list | tuple):
        _fail(where, "an array of call signatures", value)
    out: list[Signature] = []
    for i, sig in enumerate(value):
        sw = (where, i)
        if not isinstance(sig, list | tuple):
            _fail(sw, "an array of leaves (one call's inputs or outputs)", sig)
        out.append(tuple([_leaf(leaf, (sw, j), leaves) for j, leaf in enumerate(sig)]))
    return out


_LEAF = Leaf()


def _leaf(leaf: Any, where: Where, leaves: dict[tuple[Any, ...], Spec]) -> Spec:
    if type(leaf) is dict and len(leaf) == 4:
        # The common case, checked at C speed: a tensor leaf with exactly its 4 keys.
        shape = leaf.get("shape")
        path, dtype, device = leaf.get("path"), leaf.get("dtype"), leaf.get("device")
        if (
            type(shape) is list
            and type(path) is str
            and type(dtype) is str
            and type(device) is str
            and (not shape or (set(map(type, shape)) == {int} and min(shape) >= 0))
            and (not shape or max(shape) <= INT64_MAX)
        ):
            key = (path, dtype, device, *shape)
            spec = leaves.get(key)
            if spec is None:
                spec = leaves[key] = TensorSpec(path, tuple(shape), dtype, device)
            return spec
    checked = _LEAF.check(leaf, where)
    if "shape" in checked:
        return TensorSpec(
            checked["path"], tuple(checked["shape"]), checked["dtype"], checked["device"]
        )
    return ValueSpec(checked["path"], checked["type"], checked.get("value"))


def load(path: str | os.PathLike[str]) -> Profile:
    """Read a profile saved with ``save``. ``FileNotFoundError`` when there is no such
    file; ``SchemaError`` for everything else that cannot be read as ``layerscope/1``."""
    source = os.fspath(path)
    if os.path.isdir(source):
        raise SchemaError(f"cannot read {source}: it is a directory")
    try:
        with open(source, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise
    except OSError as e:
        raise SchemaError(f"cannot read {source}: {e.strerror or e}") from e
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise SchemaError(
            f"{source} is not a layerscope profile: not UTF-8 text ({e.reason} at byte {e.start})"
        ) from None
    with gc_paused():  # many small containers and no cycles: collections cost the most
        try:
            data = json.loads(text, parse_constant=_NONFINITE.__getitem__)
        except json.JSONDecodeError as e:
            raise SchemaError(f"{source} is not valid JSON: {e}") from None
        except RecursionError:
            raise SchemaError(
                f"{source} is nested too deeply to read (layerscope reads module trees "
                f"up to {MAX_DEPTH} levels deep)"
            ) from None
        except ValueError as e:  # an integer past Python's int-max-str-digits
            raise SchemaError(f"{source} holds a number too long to read: {e}") from None
        return profile_from_dict(data, source)


# ---- writing -------------------------------------------------------------------------
def to_json(profile: Profile, indent: int | None = 2) -> str:
    """The profile as JSON text (``indent=None``: one line); ``ExportError`` naming the
    JSON path of a value that is not JSON data."""
    return _encode(profile, indent, None, "cannot serialise the profile")


def save(profile: Profile, path: str | os.PathLike[str]) -> None:
    """Write the profile to ``path`` as compact JSON, atomically: on any failure an
    existing file is left as it was, and the error (``ExportError``) names the file."""
    target = os.fspath(path)
    text = _encode(profile, None, (",", ":"), f"cannot write {target}")
    write_text(target, text + "\n")


def _encode(
    profile: Profile, indent: int | None, separators: tuple[str, str] | None, what: str
) -> str:
    deepest = _deepest(profile.root)
    if deepest > MAX_DEPTH:
        raise ExportError(
            f"{what}: the module tree is {deepest} levels deep; layerscope/1 files hold "
            f"up to {MAX_DEPTH}"
        )
    with gc_paused():  # to_dict and the encoder allocate many containers, no cycles
        try:
            data = profile.to_dict()
        except RecursionError:
            raise ExportError(f"{what}: a value is nested too deeply") from None
        except (AttributeError, TypeError, ValueError) as e:
            raise ExportError(f"{what}: the profile holds a value of the wrong kind: {e}") from e
        for attempt in range(2):
            try:
                # The encoder fails on the first non-finite float: the cheap way to know
                # that there is none. Else they are replaced where floats can be, and the
                # second attempt succeeds.
                return json.dumps(data, indent=indent, separators=separators, allow_nan=False)
            except ValueError:
                if attempt:
                    break
                _replace_nonfinite(data)
            except (TypeError, RecursionError):
                break
        bad = _not_json(data)
        if bad is not None:
            where, problem = bad
            raise ExportError(f"{what}: the value at {json_path(where)} {problem}")
        try:
            # Non-finite values _replace_nonfinite missed (in a float subclass): the parser
            # turns their tokens into strings.
            text = json.dumps(data, allow_nan=True, separators=(",", ":"))
            data = json.loads(text, parse_constant=str)
            return json.dumps(data, indent=indent, separators=separators, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as e:
            raise ExportError(f"{what}: {e}") from e


def _nonfinite_text(x: float) -> str:
    return "NaN" if x != x else ("Infinity" if x > 0 else "-Infinity")


def _same_nan(x: float) -> float:
    return math.nan if x != x else x


def comparable(data: dict[str, Any]) -> dict[str, Any]:
    """``to_dict``'s output with every NaN float replaced, in place, by the one object
    ``math.nan``: dicts holding it compare equal (``==`` takes an object as equal to
    itself), so two profiles with NaN in the same places do. Returns ``data``."""
    _replace_nonfinite(data, _same_nan)
    return data


def _replace_nonfinite(
    data: dict[str, Any], replace: Callable[[float], Any] = _nonfinite_text
) -> None:
    """Replace the non-finite floats of ``to_dict``'s output in place (by default by
    their strings): the sections walked whole (they are small), per node the metrics
    checked a dict at a time at C speed (a finite sum means finite values) and the
    numerics' own values."""
    for key, value in data.items():
        if key != "root":
            _replace_in(value, replace)
    stack = [data.get("root")]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            continue
        for key in ("metrics", "self_metrics"):
            metrics = node.get(key)
            if metrics and isinstance(metrics, dict):
                try:
                    total = sum(metrics.values())
                    finite = total - total == 0
                except (TypeError, OverflowError):
                    finite = False
                if not finite:
                    _replace_in(metrics, replace)
        numerics = node.get("numerics")
        if numerics:
            _replace_in(numerics, replace)
        children = node.get("children")
        if children and isinstance(children, list):
            stack.extend(children)


def _replace_in(value: Any, replace: Callable[[float], Any]) -> None:
    """Non-finite floats inside ``value`` (dicts and lists, any depth) replaced."""
    stack = [value]
    seen: set[int] = set()
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if isinstance(v, dict):
            items: Any = v.items()
        elif isinstance(v, list):
            if set(map(type, v)) <= _SCALARS_NOT_FLOAT:
                continue  # a list of ints or strings (a timeline): nothing to replace
            items = enumerate(v)
        else:
            continue
        for k, x in list(items):
            t = type(x)
            if t is float:
                if x - x != 0:
                    v[k] = replace(x)
            elif t is dict or t is list:
                stack.append(x)


_SCALARS_NOT_FLOAT = frozenset((int, str, bool, type(None)))


def _deepest(root: Node) -> int:
    """How many levels the tree has below ``root`` (iterative)."""
    deepest = 0
    stack = [(root, 0)]
    while stack:
        node, level = stack.pop()
        if level > deepest:
            deepest = level
        if node.children:
            stack.extend((c, level + 1) for c in node.children)
    return deepest


def _not_json(data: Any) -> tuple[Where, str] | None:
    """The first value ``json.dumps`` cannot write (non-finite floats aside), depth first:
    an object of another type, a key of another type, a circular reference, an integer
    too long for Python to write."""
    stack: list[tuple[Any, Where, bool]] = [(data, "$", False)]
    open_: set[int] = set()
    while stack:
        value, where, leaving = stack.pop()
        if leaving:
            open_.discard(id(value))
            continue
        if isinstance(value, str) or value is None or isinstance(value, bool | float):
            continue
        if isinstance(value, int):
            try:
                int.__repr__(value)
            except ValueError:
                return where, "is an integer too long to write"
            continue
        if isinstance(value, dict):
            items: list[tuple[Any, Any]] = list(value.items())
            for k, _ in items:
                if not (k is None or isinstance(k, str | int | float | bool)):
                    return where, f"has a key of type {type(k).__name__} (JSON keys are strings)"
        elif isinstance(value, list | tuple):
            items = list(enumerate(value))
        else:
            return where, f"is not JSON data (type {type(value).__name__})"
        if id(value) in open_:
            return where, "is a circular reference (it contains itself)"
        open_.add(id(value))
        stack.append((value, where, True))
        is_dict = isinstance(value, dict)
        stack.extend(
            (v, (where, json.dumps(k) if is_dict and not isinstance(k, str) else k), False)
            for k, v in reversed(items)
        )
    return None


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
        "root": {"$ref": "#/$defs/node", "description": "the whole model"},
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
                "anyOf": [{"type": "number"}, {"enum": list(_NONFINITE)}],
            },
            "finite": {
                "description": "a count, operations or bytes: a finite number",
                "type": "number",
            },
            "stats": _STATS.inner.described(),
            "nonfinite_event": _EVENT.inner.described(),
        },
    }


def schema_text() -> str:
    """The schema document as the text of ``SCHEMA_PATH``."""
    return json.dumps(schema_document(), indent=2) + "\n"


if __name__ == "__main__":
    SCHEMA_PATH.write_text(schema_text(), encoding="utf-8")
    print(f"wrote {SCHEMA_PATH}")
