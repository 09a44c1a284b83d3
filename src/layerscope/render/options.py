"""View options: what ``prof.show``/``prof.render`` and ``layerscope profile|show`` accept,
validated once at the boundary (strings to enums, numbers checked) into ``ViewOptions``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal, TypeAlias

from layerscope.analysis.catalog import known_keys, pct_base
from layerscope.errors import InvalidInputError
from layerscope.validate import (
    check_bool,
    check_choice,
    check_int,
    check_keys,
    check_names,
    check_number,
    close_matches,
    is_bool,
    refuse,
)

__all__ = ["FOLD_MODES", "OPTION_NAMES", "VIEWS", "ViewOptions", "check_view", "view_options"]

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
    #: Globs (path or type) of modules whose work is taken out of their ancestors and
    #: the Total, and whose rows are left out (DeepSpeed's ``ignore_modules``).
    ignore: tuple[str, ...] = ()
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
#: Options that None leaves unset (the others refuse None).
_UNSET_BY_NONE = frozenset(
    [f.name for f in fields(ViewOptions) if f.default is None] + ["include", "exclude", "ignore"]
)


def view_options(**kwargs: Any) -> ViewOptions:
    """Validate keyword options into ``ViewOptions``; every error names the allowed values."""
    return check_view(kwargs)


def check_view(options: Mapping[str, Any], labels: Mapping[str, str] | None = None) -> ViewOptions:
    """``options`` (by ``ViewOptions`` field) validated into ``ViewOptions``; a refusal
    names an option by ``labels[name]`` when given (the CLI's flags), else by its name."""
    check_keys("the view options", options, OPTION_NAMES, noun="option")
    names = labels or {}
    given = {k: v for k, v in options.items() if v is not None or k not in _UNSET_BY_NONE}
    out = {name: _CHECKS[name](names.get(name, name), value) for name, value in given.items()}
    if "pct_of" in out and pct_base(out["pct_of"]) is None:
        adds = [k for k in known_keys() if pct_base(k) == k]
        refuse(
            names.get("pct_of", "pct_of"),
            out["pct_of"],
            f"a metric that adds up over modules (one of {', '.join(adds)})",
            why="it has no % of total",
        )
    checked = ViewOptions(**out)
    if checked.by_type and checked.view not in ("top", "ops"):
        raise InvalidInputError(
            f"{names.get('by_type', 'by_type')} applies to the 'top' and 'ops' views, "
            f"not {checked.view!r}"
        )
    return checked


def _columns(label: str, value: Any) -> tuple[str, ...]:
    names = check_names(label, value)
    if not names:
        refuse(label, value, "one or more column names")
    return tuple(_key(label, c, numeric=False) for c in names)


def _key(label: str, value: Any, *, numeric: bool) -> str:
    keys = known_keys(numeric=numeric)
    if isinstance(value, str) and value in keys:
        return value
    derived = ("_pct", "_total", "_per_call")
    base = [k for k in keys if not k.startswith("self_") and not k.endswith(derived)]
    refuse(
        label,
        value,
        f"{'a metric' if numeric else 'a column'}: {', '.join(base)}, or of these self_KEY "
        "(the module's own), KEY_pct (% of the whole model), KEY_per_call and, for times, "
        "KEY_total",
        close=close_matches(value, keys),
    )


def _globs(label: str, value: Any) -> tuple[str, ...]:
    """Globs from a string or a list of strings, each comma-separated or not."""
    return tuple(
        g.strip() for name in check_names(label, value) for g in name.split(",") if g.strip()
    )


def _fold(label: str, value: Any) -> Fold:
    if isinstance(value, str) and value == "all":
        return "all"
    if is_bool(value):
        return bool(value)
    refuse(label, value, "True, False or 'all'")


def _device(label: str, value: Any) -> str:
    from layerscope.hardware import device_spec

    if not isinstance(value, str):
        refuse(label, value, "a device spec name such as 'h100' or 'cpu'")
    device_spec(value)  # raises, naming the known devices
    return value


#: The check of each option: (label, value) -> the checked value.
_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "view": lambda label, v: check_choice(label, v, VIEWS),
    "columns": _columns,
    "max_depth": lambda label, v: check_int(label, v, 0),
    "top": lambda label, v: check_int(label, v, 1),
    "width": lambda label, v: check_int(label, v, 1),
    "min_pct": lambda label, v: check_number(label, v, 0.0, 100.0),
    "sort_by": lambda label, v: _key(label, v, numeric=True),
    "pct_of": lambda label, v: _key(label, v, numeric=True),
    "include": lambda label, v: tuple(check_names(label, v)),
    "exclude": lambda label, v: tuple(check_names(label, v)),
    "ignore": lambda label, v: _globs(label, v),
    "fold": _fold,
    "device": _device,
    **{name: check_bool for name in ("by_type", "show_not_called", "pct", "raw", "shapes")},
}
