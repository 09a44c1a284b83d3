"""The layout of the YAML display config and its checks.

:func:`normalise` validates a (partial) config mapping, as ``yaml.safe_load`` gives it,
into plain normalised dicts; ``layerscope.render.config`` merges them over the shipped
defaults. Every refusal comes from ``layerscope.validate``: a ``ConfigError`` naming the
file, the dotted key path, the bad value and what is allowed there.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

import rich.box
from rich.default_styles import DEFAULT_STYLES
from rich.errors import MarkupError, StyleSyntaxError
from rich.markup import render as render_markup
from rich.style import Style

from layerscope.validate import (
    Label,
    check_bool,
    check_choice,
    check_int,
    check_keys,
    close_matches,
    each,
    refuse,
    refuse_keys,
)

__all__ = ["BOX_NAMES", "PLACEHOLDER", "PLACEHOLDERS", "REMOVE", "Justify", "Overflow", "normalise"]

Justify = Literal["left", "center", "right"]
Overflow = Literal["ellipsis", "fold", "crop"]

#: Placeholders allowed in tree labels and the repeat-block title, written ``<name>``.
PLACEHOLDERS: tuple[str, ...] = ("node_id", "name", "type", "path", "depth", "repeat_time")
#: Names of the rich.box constants a ``box`` key may name.
BOX_NAMES: tuple[str, ...] = tuple(
    sorted(n for n in dir(rich.box) if isinstance(getattr(rich.box, n), rich.box.Box))
)
#: Anything that looks meant as a placeholder (so "<nmae>" or "<node-id>" is caught as a
#: typo), while a lone "<" or "<=" stays plain text.
PLACEHOLDER = re.compile(r"<([A-Za-z_][\w.-]*)>")
#: A partial entry given as null: drop that level / column entry when merging.
REMOVE = object()

_THEME_PREFIX = "layerscope."
_COLUMN_EXAMPLES = "flops, forward_time, flops_pct, module, input_shape"


@dataclass
class _Ctx:
    theme: Mapping[str, str]  # theme names a style may refer to


_Check = Callable[[_Ctx, Label, Any], Any]


def _bool(ctx: _Ctx, label: Label, value: Any) -> bool:
    return check_bool(label, value)


def _choice(values: tuple[str, ...], nullable: bool = False) -> _Check:
    return lambda ctx, label, value: check_choice(label, value, values, none=nullable)


def _style(ctx: _Ctx, label: Label, value: Any) -> str:
    if not isinstance(value, str):
        refuse(label, value, "a style string ('' for no style)")
    if value == "" or value in ctx.theme or value in DEFAULT_STYLES:
        return value
    try:
        Style.parse(value)
    except StyleSyntaxError as e:
        names = sorted(ctx.theme)
        refuse(
            label,
            value,
            f"a rich style such as 'bold red', '' for none, or a theme name: {', '.join(names)}",
            why=str(e),
            close=close_matches(value, names),
        )
    return value


def _styles(ctx: _Ctx, label: Label, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        refuse(label, value, "a list of styles ([] for none)")
    return tuple(each(label, value, lambda at, v: _style(ctx, at, v)))


def _box(ctx: _Ctx, label: Label, value: Any) -> str:
    box: str = check_choice(label, value, BOX_NAMES)
    return box


def _padding(ctx: _Ctx, label: Label, value: Any) -> tuple[int, int]:
    if not isinstance(value, list | tuple) or len(value) != 2:
        refuse(label, value, "[vertical, horizontal], two ints >= 0")
    vertical, horizontal = each(label, value, lambda at, v: check_int(at, v, 0))
    return (vertical, horizontal)


def _markup(ctx: _Ctx, label: Label, value: Any) -> str:
    if not isinstance(value, str):
        refuse(label, value, "a string of rich markup")
    try:
        render_markup(value)
    except MarkupError as e:
        refuse(label, value, "valid rich markup", why=str(e))
    return value


def _optional_markup(ctx: _Ctx, label: Label, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        refuse(label, value, "a string of rich markup or null")
    return _markup(ctx, label, value)


def _template(ctx: _Ctx, label: Label, value: Any) -> str:
    if not isinstance(value, str):
        refuse(label, value, "a string of rich markup with <placeholders>")
    for match in PLACEHOLDER.finditer(value):
        if match.group(1) not in PLACEHOLDERS:
            refuse(
                label,
                value,
                f"rich markup with the placeholders {', '.join(f'<{p}>' for p in PLACEHOLDERS)}",
                why=f"unknown placeholder {match.group(0)}",
                close=close_matches(match.group(1), PLACEHOLDERS),
            )
    return _markup(ctx, label, value)


def _fields(ctx: _Ctx, label: Label, value: Any, fields: Mapping[str, _Check]) -> dict[str, Any]:
    """Validate a section given as a mapping of known fields (null: an empty section)."""
    if value is None:
        return {}
    check_keys(label, value, fields, what=f"a mapping with keys {', '.join(fields)}")
    return {name: fields[name](ctx, label.at(name), item) for name, item in value.items()}


def _section(fields: Mapping[str, _Check]) -> _Check:
    return lambda ctx, label, value: _fields(ctx, label, value, fields)


_LEVEL_FIELDS: dict[str, _Check] = {
    "label": _template,
    "style": _style,
    "guide_style": _style,
    "hide": _bool,
    "expanded": _bool,
}
_REPEAT_FIELDS: dict[str, _Check] = {
    "show": _bool,
    "title": _template,
    "box": _box,
    "border_style": _style,
    "padding": _padding,
}
_COLUMN_FIELDS: dict[str, _Check] = {
    "justify": _choice(get_args(Justify), nullable=True),
    "style": _style,
    "overflow": _choice(get_args(Overflow)),
    "header": _optional_markup,
}


def _entry(ctx: _Ctx, label: Label, name: str, entry: Any, fields: Mapping[str, _Check]) -> Any:
    """A partial level or column entry: its fields, or ``REMOVE`` for a null one."""
    if entry is None and name != "default":
        return REMOVE
    if entry is not None and not isinstance(entry, Mapping):
        refuse(label, entry, f"a mapping with keys {', '.join(fields)}")
    return _fields(ctx, label, entry, fields)


def _level_key(label: Label, raw: Any) -> str:
    if raw in ("default", "all"):
        return str(raw)
    if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
        return str(raw)
    if isinstance(raw, str) and re.fullmatch(r"[0-9]+", raw):
        return str(int(raw))
    refuse_keys(
        label, [raw], ["default", "all"], more=" and level numbers 0, 1, 2, ... (0 is the root)"
    )


def _levels(ctx: _Ctx, label: Label, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        refuse(label, value, "a mapping of levels (default, all, 0, 1, ...)")
    out: dict[str, Any] = {}
    raw_keys: dict[str, Any] = {}
    for raw, entry in value.items():
        name = _level_key(label, raw)
        at = label.at(name)
        if name in raw_keys:
            raise at.error(f"{at} is given twice (as {raw_keys[name]!r} and {raw!r})")
        raw_keys[name] = raw
        out[name] = _entry(ctx, at, name, entry, _LEVEL_FIELDS)
    return out


def _columns(ctx: _Ctx, label: Label, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        refuse(label, value, f"a mapping of column keys (default, {_COLUMN_EXAMPLES}, ...)")
    out: dict[str, Any] = {}
    for name, entry in value.items():
        if not isinstance(name, str) or not name:
            refuse_keys(
                label, [name], ["default"], more=f" and column names such as {_COLUMN_EXAMPLES}"
            )
        out[name] = _entry(ctx, label.at(name), name, entry, _COLUMN_FIELDS)
    return out


_TREE_FIELDS: dict[str, _Check] = {"levels": _levels, "repeat_block": _section(_REPEAT_FIELDS)}
_TABLE_FIELDS: dict[str, _Check] = {
    "box": _box,
    "show_edge": _bool,
    "show_header": _bool,
    "header_style": _style,
    "border_style": _style,
    "title": _optional_markup,
    "caption": _optional_markup,
    "row_styles": _styles,
    "columns": _columns,
}
_TOP_FIELDS: dict[str, _Check] = {
    "tree": _section(_TREE_FIELDS),
    "table": _section(_TABLE_FIELDS),
    "theme": lambda ctx, label, value: {},  # read first, by _theme
}


def _theme_key(label: Label, name: Any, known: Mapping[str, str]) -> str:
    if isinstance(name, str) and (
        name in known or (name.startswith(_THEME_PREFIX) and name != _THEME_PREFIX)
    ):
        return name
    more = f", and new names that start with {_THEME_PREFIX!r}"
    refuse_keys(label, [name], list(known), more=more)


def _theme(label: Label, value: Any, known: Mapping[str, str]) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        refuse(label, value, "a mapping of style names (layerscope.*) to styles")
    out: dict[str, str] = {}
    for name, style in value.items():
        at = label.at(_theme_key(label, name, known))
        if not isinstance(style, str):
            refuse(at, style, "a rich style string ('' for no style)")
        try:
            Style.parse(style)
        except StyleSyntaxError as e:
            refuse(
                at,
                style,
                "a rich style such as 'bold green', or '' for none (not other theme names)",
                why=str(e),
            )
        out[name] = style
    return out


def normalise(data: Any, source: str | None, base_theme: Mapping[str, str]) -> dict[str, Any]:
    """Validate a whole (partial) config mapping into plain, normalised dicts; a style may
    name a theme entry of ``base_theme`` or of the config's own ``theme``."""
    root = Label("", source=source, config=True, root="the display config")
    if not isinstance(data, Mapping):
        refuse(root, data, f"a mapping with keys {', '.join(_TOP_FIELDS)}")
    theme = _theme(root.at("theme"), data.get("theme"), base_theme)
    out = _fields(_Ctx({**base_theme, **theme}), root, data, _TOP_FIELDS)
    out["theme"] = theme
    return out
