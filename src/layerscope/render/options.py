"""View options: what ``prof.show``/``prof.render`` and ``layerscope profile|show`` accept,
validated once at the boundary (strings to enums, numbers checked) into ``ViewOptions``."""

from __future__ import annotations

import difflib
import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal, TypeAlias

from layerscope.analysis.catalog import known_keys, pct_base
from layerscope.errors import InvalidInputError

__all__ = ["FOLD_MODES", "OPTION_NAMES", "VIEWS", "ViewOptions", "view_options"]

View: TypeAlias = Literal["table", "tree", "repr", "top", "ops", "roofline"]
Fold: TypeAlias = bool | Literal["all"]

#: The views, in the order the docs present them.
VIEWS: tuple[str, ...] = ("table", "tree", "repr", "top", "ops", "roofline")
FOLD_MODES = (True, False, "all")


@dataclass(frozen=True)
class ViewOptions:
    """One view of a profile. Build it with ``view_options(**kwargs)``, which validates."""

    view: View = "table"
    #: Metric (and derived) columns to show, in order; None: chosen by what the profile has.
    columns: tuple[str, ...] | None = None
    max_depth: int | None = None
    #: Hide rows below this % of the whole-model ``pct_of`` total (1 means 1 %).
    min_pct: float | None = None
    pct_of: str | None = None
    #: Case-sensitive globs matched against a module's path and its type.
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    #: Sort descending by this key (siblings within the tree; globally in flat views).
    sort_by: str | None = None
    #: Keep the k largest rows by the sort (or % of) metric; per depth in the top view.
    top: int | None = None
    #: Aggregate modules by type (top and ops views).
    by_type: bool = False
    fold: Fold = True
    show_not_called: bool = True
    #: Add a % of total column for the ``pct_of`` metric.
    pct: bool = True
    #: Base units, unformatted (``1234567`` rather than ``1.23 M``).
    raw: bool = False
    #: Input and output shape columns (when the profile has shapes).
    shapes: bool = True
    width: int | None = None
    #: A device spec name (``"h100"``, ``"cpu"``, ...): the roofline columns and view are
    #: derived for it (``layerscope.hardware``); default: the target a meta analysis
    #: followed, when it names a spec.
    device: str | None = None


#: Option names ``view_options`` accepts.
OPTION_NAMES: tuple[str, ...] = tuple(f.name for f in fields(ViewOptions))


def view_options(**kwargs: Any) -> ViewOptions:
    """Validate keyword options into ``ViewOptions``; every error names the allowed values."""
    unknown = sorted(set(kwargs) - set(OPTION_NAMES))
    if unknown:
        raise InvalidInputError(
            f"unknown view option(s) {', '.join(map(repr, unknown))}; "
            f"known: {', '.join(OPTION_NAMES)}"
        )
    out: dict[str, Any] = {}
    if "view" in kwargs:
        out["view"] = _choice("view", kwargs["view"], VIEWS)
    if kwargs.get("columns") is not None:
        out["columns"] = tuple(
            _key("columns", c, numeric=False) for c in strings("columns", kwargs["columns"])
        )
        if not out["columns"]:
            raise InvalidInputError("columns is empty; name at least one column")
    for name in ("max_depth", "top", "width"):
        if kwargs.get(name) is not None:
            out[name] = _int(name, kwargs[name], minimum=0 if name == "max_depth" else 1)
    if kwargs.get("min_pct") is not None:
        out["min_pct"] = _number("min_pct", kwargs["min_pct"], 0.0, 100.0)
    for name in ("sort_by", "pct_of"):
        if kwargs.get(name) is not None:
            out[name] = _key(name, kwargs[name], numeric=True)
    if "pct_of" in out and pct_base(out["pct_of"]) is None:
        adds = [k for k in known_keys() if pct_base(k) == k]
        raise InvalidInputError(
            f"pct_of={out['pct_of']!r} does not add up over modules, so it has no % of "
            f"total; use one of: {', '.join(adds)}"
        )
    for name in ("include", "exclude"):
        if kwargs.get(name) is not None:
            out[name] = tuple(strings(name, kwargs[name]))
    if "fold" in kwargs:
        fold = kwargs["fold"]
        if fold not in FOLD_MODES or (fold not in (True, False) and not isinstance(fold, str)):
            raise InvalidInputError(f"fold must be True, False or 'all', got {fold!r}")
        out["fold"] = fold
    if kwargs.get("device") is not None:
        from layerscope.hardware import device_spec

        device = kwargs["device"]
        if not isinstance(device, str):
            raise InvalidInputError(
                f"device must be a device spec name such as 'h100' or 'cpu', got {device!r}"
            )
        device_spec(device)  # raises, naming the known devices
        out["device"] = device
    for name in ("by_type", "show_not_called", "pct", "raw", "shapes"):
        if name in kwargs:
            value = kwargs[name]
            if not isinstance(value, bool):
                raise InvalidInputError(f"{name} must be True or False, got {value!r}")
            out[name] = value
    options = ViewOptions(**out)
    if options.by_type and options.view not in ("top", "ops"):
        raise InvalidInputError(
            f"by_type applies to the 'top' and 'ops' views, not {options.view!r}"
        )
    return options


def _choice(name: str, value: Any, allowed: Iterable[str]) -> str:
    allowed = tuple(allowed)
    if not isinstance(value, str) or value not in allowed:
        raise InvalidInputError(f"unknown {name} {value!r}; choose one of: {', '.join(allowed)}")
    return value


def strings(name: str, value: Any) -> list[str]:
    """A string (comma-separated allowed) or a sequence of strings."""
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, Iterable) and not isinstance(value, bytes | Mapping):
        items = list(value)
        if all(isinstance(v, str) for v in items):
            return items
    raise InvalidInputError(f"{name} must be a string or a list of strings, got {value!r}")


def _key(name: str, value: Any, *, numeric: bool) -> str:
    keys = known_keys(numeric=numeric)
    if not isinstance(value, str) or value not in keys:
        derived = ("_pct", "_total", "_per_call")
        base = [k for k in keys if not k.startswith("self_") and not k.endswith(derived)]
        close = difflib.get_close_matches(str(value), keys, n=3)
        hint = f" (did you mean {' or '.join(close)}?)" if close else ""
        raise InvalidInputError(
            f"unknown {'metric' if numeric else 'column'} {value!r} for {name}{hint}; "
            f"known: {', '.join(base)}, and of these self_KEY (the module's own), KEY_pct "
            "(% of the whole model), KEY_per_call and, for times, KEY_total"
        )
    return value


def _int(name: str, value: Any, *, minimum: int) -> int:
    if isinstance(value, bool):
        raise InvalidInputError(f"{name} must be an integer, got {value!r}")
    try:
        number = operator.index(value)  # int and numpy integers
    except TypeError:
        raise InvalidInputError(f"{name} must be an integer, got {value!r}") from None
    if number < minimum:
        raise InvalidInputError(f"{name} must be >= {minimum}, got {number}")
    return number


def _number(name: str, value: Any, low: float, high: float) -> float:
    if isinstance(value, bool | str | bytes):
        raise InvalidInputError(f"{name} must be a number, got {value!r}")
    try:
        number = float(value)  # int, float and numpy scalars
    except (TypeError, ValueError):
        raise InvalidInputError(f"{name} must be a number, got {value!r}") from None
    if not low <= number <= high:  # also rejects NaN
        raise InvalidInputError(f"{name} must be between {low:g} and {high:g}, got {value!r}")
    return number
