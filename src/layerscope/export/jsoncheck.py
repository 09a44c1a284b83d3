"""A small language of checks for JSON data read from untrusted files.

Each ``Check`` does two jobs from one description: ``check(value, where)`` returns the
value to keep (a copy: subclasses of bool/int/float/str made plain, the strings
``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` turned into floats where numbers belong)
or raises ``Invalid`` naming where the value is and what is wrong; ``schema()`` gives the
same rule as JSON Schema (draft 2020-12). ``Str``, ``Enum``, ``Bool``, ``Int``, ``Num``,
``Finite``, ``Opt``, ``OneOf``, ``Arr``, ``Map``, ``Metrics``, ``Obj``, ``Counts`` and
``Ref`` combine into a format's specification (``export.jsonspec``); ``json_value``
checks a value under a key no specification names. Nothing here knows a profile's
layout. Checks loop only where they must: common shapes (a list of ints, an object of
counts) are checked at C speed, and a location (``Where``) is a cheap chain of keys,
formatted (``json_path``) only when an error is reported.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Callable
from typing import Any, NoReturn, TypeAlias

from layerscope.errors import SchemaError

__all__ = [
    "INT64_MAX",
    "MAX_NESTING",
    "NONFINITE",
    "Arr",
    "Bool",
    "Check",
    "Counts",
    "Enum",
    "Finite",
    "Int",
    "Invalid",
    "Map",
    "Metrics",
    "Num",
    "Obj",
    "Opt",
    "Ref",
    "Str",
    "Where",
    "checked_section",
    "fail",
    "json_path",
    "json_value",
    "value_text",
]

#: Deepest nesting of a value under a key no specification names (kept as it is).
MAX_NESTING = 64

#: Largest integer in a count (``calls``, a shape dimension, ...): a signed 64-bit int.
INT64_MAX = 2**63 - 1
#: Largest integer a float can hold; metric integers beyond ±2**63 load as floats.
_FLOAT_MAX_INT = int(float.fromhex("0x1.fffffffffffffp+1023"))

#: Canonical non-finite floats: one object each, so equal to themselves inside containers.
NONFINITE: dict[str, float] = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_NONFINITE_TEXT = '"NaN", "Infinity" or "-Infinity"'

#: Where a value is: "$" or a chain (parent, key) built cheaply, formatted on error only.
Where: TypeAlias = "str | tuple[Any, str | int]"

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


# ---- errors ----------------------------------------------------------------------------
class Invalid(Exception):
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


def value_text(value: Any) -> str:
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


def fail(where: Where, expected: str, value: Any) -> NoReturn:
    """Raise ``Invalid``: expected ``expected`` at ``where``, got ``value``."""
    raise Invalid(where, f"expected {expected}, got {value_text(value)}")


# ---- checks: each checks values and describes them as JSON Schema ----------------------
class Check:
    """One kind of value: ``check`` returns the value to keep (copied, non-finite strings
    turned into floats) or raises ``Invalid``; ``schema`` gives its JSON Schema."""

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
                fail(where, self.expected, value)
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
            fail(where, self.expected, value)
        return value

    def schema(self) -> dict[str, Any]:
        return {"enum": list(self.values)}


class Bool(Check):
    expected = "true or false"

    def check(self, value: Any, where: Where) -> Any:
        if value is not True and value is not False:
            fail(where, self.expected, value)
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
                fail(where, self.expected, value)
        if not self.low <= value <= self.maximum:
            fail(where, self.expected, value)
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
        fail(where, expected + " (within a float's range)", value)
    if t is str:
        special = NONFINITE.get(value)
        if special is not None:
            return special
    fail(where, expected, value)


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
            fail(where, self.expected + " (within a float's range)", value)
        if t is float and -math.inf < value < math.inf:
            return value
        fail(where, self.expected, value)

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
        except Invalid as e:
            if e.where is where and e.problem.startswith("expected "):
                fail(where, self.expected, value)
            raise

    def schema(self) -> dict[str, Any]:
        return {"anyOf": [self.inner.schema(), {"type": "null"}]}


_JSON_SCALARS = frozenset((str, int, float, bool, type(None)))


def json_value(value: Any, where: Where) -> Any:
    """A copy of a value under a key the specification does not name: JSON data nested at most
    ``MAX_NESTING`` levels (deeper, later deep copies could hit the recursion limit), the
    strings "NaN", "Infinity", "-Infinity" as floats (how ``save`` writes them anywhere).
    Anything else (a Python object given to ``from_dict``) is refused."""
    t = type(value)
    if t is str:
        return NONFINITE.get(value, value)
    if t is int or t is float or t is bool or value is None:
        return value
    top: list[Any] = [None]
    stack: list[tuple[Any, Where, int, Any, Any]] = [(value, where, 0, top, 0)]
    while stack:
        v, w, level, into, key = stack.pop()
        if isinstance(v, dict | list | tuple):
            if level >= MAX_NESTING:
                raise Invalid(w, f"nested more than {MAX_NESTING} levels deep")
            scalars = v.values() if isinstance(v, dict) else v
            if set(map(type, scalars)) <= _JSON_SCALARS and NONFINITE.keys().isdisjoint(scalars):
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
            into[key] = NONFINITE.get(v, _plain(v))
        elif v is None or isinstance(v, int | float):
            into[key] = _plain(v)
        else:
            fail(w, "JSON data (an object, array, string, number, true, false or null)", v)
    return top[0]


class Arr(Check):
    """A list of ``item`` (a tuple from Python data is taken as one)."""

    expected = "an array"

    def __init__(self, item: Check, description: str = "", length: int | None = None) -> None:
        super().__init__(description)
        self.item = item
        self.length = length  # the only length allowed, if any
        if length is not None:
            self.expected = f"an array of {length}"
        # Item types a whole list can be checked for at C speed.
        self._fast: type | None = None
        if type(item) is Str:
            self._fast = str
        elif type(item) is Int:
            self._fast = int

    def check(self, value: Any, where: Where) -> Any:
        if not isinstance(value, list | tuple) or self.length not in (None, len(value)):
            fail(where, self.expected, value)
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
        out: dict[str, Any] = {"type": "array", "items": self.item.described()}
        if self.length is not None:
            out |= {"minItems": self.length, "maxItems": self.length}
        return out


class OneOf(Check):
    """The first of ``options`` that accepts the value."""

    def __init__(self, *options: Check, description: str = "") -> None:
        super().__init__(description)
        self.options = options
        self.expected = " or ".join(o.expected for o in options)

    def check(self, value: Any, where: Where) -> Any:
        for option in self.options:
            with contextlib.suppress(Invalid):
                return option.check(value, where)
        fail(where, self.expected, value)

    def schema(self) -> dict[str, Any]:
        return {"anyOf": [o.described() for o in self.options]}


class Map(Check):
    """An object whose values are all ``value`` (any keys)."""

    expected = "an object"

    def __init__(self, value: Check, description: str = "") -> None:
        super().__init__(description)
        self.value = value

    def check(self, value: Any, where: Where) -> Any:
        if not isinstance(value, dict):
            fail(where, self.expected, value)
        _string_keys(value, where)
        check = self.value.check
        return {k: check(v, (where, k)) for k, v in value.items()}

    def schema(self) -> dict[str, Any]:
        return {"type": "object", "additionalProperties": self.value.described()}


def _string_keys(value: dict[Any, Any], where: Where) -> None:
    if value and set(map(type, value)) != {str}:
        for k in value:
            if not isinstance(k, str):
                raise Invalid(where, f"object keys must be strings, got {value_text(k)}")


class Metrics(Check):
    """An object of numbers (a profile's ``metrics``): finite numbers under the keys
    ``amounts()`` gives (asked at every check, so the set may grow), any number
    (non-finite included) under the others."""

    expected = "an object"

    def __init__(self, amounts: Callable[[], frozenset[str]], description: str = "") -> None:
        super().__init__(description)
        self.amounts = amounts

    def check(self, value: Any, where: Where) -> Any:
        if type(value) is not dict and not isinstance(value, dict):
            fail(where, self.expected, value)
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
        amounts = self.amounts()
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
            "properties": {k: {"$ref": "#/$defs/finite"} for k in sorted(self.amounts())},
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
            fail(where, self.expected, value)
        for key in self.required:
            if key not in value:
                raise Invalid(where, f"missing key {key!r}")
        for key, needs in self.dependent.items():
            if key in value:
                for other in needs:
                    if other not in value:
                        raise Invalid(where, f"missing key {other!r} (needed with {key!r})")
        out = dict(value)
        props = self.props
        for key in props.keys() & value.keys():
            out[key] = props[key].check(value[key], (where, key))
        unknown = value.keys() - self._keys
        if unknown:
            _string_keys(value, where)
            for key in [k for k in value if k in unknown]:  # in order: the first error
                out[key] = json_value(value[key], (where, key))
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


def checked_section(data: Any, key: str, spec: Check, missing: str) -> Any:
    """The section ``key`` of a document (parsed JSON) as ``spec`` keeps it;
    ``SchemaError`` naming the JSON path when it is malformed, and saying ``missing``
    when the document has none."""
    section = data.get(key) if isinstance(data, dict) else None
    if not isinstance(section, dict):
        raise SchemaError(f"$.{key}: {missing}")
    try:
        return spec.check(section, ("$", key))
    except Invalid as e:
        raise SchemaError(f"{json_path(e.where)}: {e.problem}") from None
