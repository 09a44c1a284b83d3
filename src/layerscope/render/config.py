"""The display config: how the console views look, read from a YAML file.

The shipped defaults live in ``display.yaml`` beside this module (every key explained
there). A user's file only names what it changes; it is validated and merged over the
defaults into a frozen :class:`DisplayConfig`. Files are read with ``yaml.safe_load`` only,
and every mistake raises :class:`~layerscope.errors.ConfigError` with a one-line message
naming the file, the dotted key, the bad value and what is allowed.

Users reach this module as ``ls.config``: ``load(path)``, ``dump(path)``, ``reset()``,
``current()``; renderers call ``current()`` and read its fields.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal, NoReturn, TypeVar, get_args

import rich.box
import yaml
from rich.default_styles import DEFAULT_STYLES
from rich.errors import MarkupError, StyleSyntaxError
from rich.markup import escape
from rich.markup import render as render_markup
from rich.style import Style
from rich.theme import Theme
from yaml.constructor import ConstructorError

from layerscope.errors import ConfigError

__all__ = [
    "BOX_NAMES",
    "ENV_VAR",
    "PLACEHOLDERS",
    "THEME_DEFAULTS",
    "ColumnStyle",
    "DisplayConfig",
    "FrozenMap",
    "Justify",
    "LevelStyle",
    "Overflow",
    "RepeatBlock",
    "TableStyle",
    "current",
    "defaults",
    "dump",
    "dumps",
    "fill",
    "from_dict",
    "load",
    "reset",
    "rich_box",
    "to_dict",
    "use",
]

Justify = Literal["left", "center", "right"]
Overflow = Literal["ellipsis", "fold", "crop"]

#: The environment variable naming a display config file that ``current()`` loads on first use.
ENV_VAR = "LAYERSCOPE_CONFIG"
#: Placeholders allowed in tree labels and the repeat-block title, written ``<name>``.
PLACEHOLDERS: tuple[str, ...] = ("node_id", "name", "type", "path", "depth", "repeat_time")
#: Names of the rich.box constants a ``box`` key may name.
BOX_NAMES: tuple[str, ...] = tuple(
    sorted(n for n in dir(rich.box) if isinstance(getattr(rich.box, n), rich.box.Box))
)

_JUSTIFY: tuple[str, ...] = get_args(Justify)
_OVERFLOW: tuple[str, ...] = get_args(Overflow)
# Anything that looks meant as a placeholder (so "<nmae>" or "<node-id>" is caught as a
# typo), while a lone "<" or "<=" stays plain text.
_PLACEHOLDER = re.compile(r"<([A-Za-z_][\w.-]*)>")
_THEME_PREFIX = "layerscope."

K = TypeVar("K")
V = TypeVar("V")


class FrozenMap(Mapping[K, V]):
    """A read-only mapping: equal to any mapping with the same items, hashable, picklable."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[K, V] | None = None) -> None:
        self._items: dict[K, V] = dict(items or {})

    def __getitem__(self, key: K) -> V:
        return self._items[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(frozenset(self._items.items()))

    def __repr__(self) -> str:
        return f"FrozenMap({self._items!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenMap, (self._items,))


# --------------------------------------------------------------------------- the config


@dataclass(frozen=True)
class LevelStyle:
    """How one level of the module tree is drawn (tree view and the table's tree column)."""

    label: str  # rich markup template with <placeholders>
    style: str  # style of the whole label
    guide_style: str  # style of the guides (├─ └─ │) drawn before nodes of this level
    hide: bool  # do not draw nodes of this level (their children are drawn one level up)
    expanded: bool  # draw the children of nodes of this level


@dataclass(frozen=True)
class RepeatBlock:
    """How the tree view draws a folded entry (×N)."""

    show: bool  # draw a folded entry's subtree inside a box
    title: str  # markup template with <placeholders>
    box: str  # name of a rich.box constant
    border_style: str
    padding: tuple[int, int]  # (vertical, horizontal), each >= 0


@dataclass(frozen=True)
class ColumnStyle:
    """How one table column is drawn."""

    justify: Justify | None  # None: the column's own default (text left, numbers right)
    style: str
    overflow: Overflow  # text columns only (module, shapes); metric cells are never cut
    header: str | None  # None: the column's own header


@dataclass(frozen=True)
class TableStyle:
    """How the table view is drawn."""

    box: str  # rich.box name
    show_edge: bool
    show_header: bool
    header_style: str
    border_style: str
    title: str | None  # markup, above the table
    caption: str | None  # markup, below the table
    row_styles: tuple[str, ...]  # alternate across body rows; () none
    columns: Mapping[str, ColumnStyle]  # resolved (merged over "default") for every key given

    def column(self, key: str) -> ColumnStyle:
        """The style of column ``key``: its own entry, else the ``default`` one."""
        style = self.columns.get(key)
        return style if style is not None else self.columns["default"]


@dataclass(frozen=True)
class DisplayConfig:
    """Everything the console views take from the display config. Immutable."""

    levels: Mapping[str, Mapping[str, Any]]  # partial entries: "default", "all", "0", "1", ...
    repeat_block: RepeatBlock
    table: TableStyle
    theme: Mapping[str, str]  # style name (layerscope.*) -> rich style string

    def level(self, depth: int) -> LevelStyle:
        """The style of tree level ``depth`` (0 is the root): each field from ``all`` if
        set there, else from the level's own entry, else from ``default``."""
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
            raise ValueError(f"depth must be an integer >= 0, got {depth!r}")
        fields = dict(self.levels["default"])
        fields.update(self.levels.get(str(depth), {}))
        fields.update(self.levels.get("all", {}))
        return LevelStyle(**fields)

    def column(self, key: str) -> ColumnStyle:
        """The style of table column ``key`` (``table.columns[key]`` over ``default``)."""
        return self.table.column(key)

    def rich_theme(self) -> Theme:
        """The theme as a rich Theme (rich's own default styles stay available)."""
        return Theme(dict(self.theme))


# --------------------------------------------------------------------------- validation

_Check = Callable[["_Ctx", str, Any], Any]
_REMOVE = object()  # a partial entry given as null: drop that level / column entry


@dataclass
class _Ctx:
    source: str | None  # the file, for messages
    theme: Mapping[str, str]  # theme names a style may refer to


def _fail(ctx: _Ctx, key: str, message: str) -> NoReturn:
    where = ": ".join(p for p in (ctx.source, key) if p)
    text = f"{where}: {message}" if where else message
    raise ConfigError(text.replace("\n", " "), source=ctx.source, key=key)


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    for cls, name in (
        (bool, "a boolean"),
        (int, "an integer"),
        (float, "a number"),
        (str, "a string"),
        (list, "a list"),
        (Mapping, "a mapping"),
    ):
        if isinstance(value, cls):
            return name
    return type(value).__name__


def _wrong_type(ctx: _Ctx, key: str, value: Any, expected: str) -> NoReturn:
    _fail(ctx, key, f"expected {expected}, got {_show(value)} ({_kind(value)})")


def _hint(word: str, known: list[str]) -> str:
    close = difflib.get_close_matches(word, known, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _bool(ctx: _Ctx, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        _wrong_type(ctx, key, value, "true or false")
    return value


def _choice(values: tuple[str, ...], nullable: bool = False) -> _Check:
    allowed = ", ".join(values) + (" or null" if nullable else "")

    def check(ctx: _Ctx, key: str, value: Any) -> str | None:
        if value is None and nullable:
            return None
        if not isinstance(value, str) or value not in values:
            _fail(ctx, key, f"{_show(value)} is not allowed; use one of {allowed}")
        return value

    return check


def _style(ctx: _Ctx, key: str, value: Any) -> str:
    if not isinstance(value, str):
        _wrong_type(ctx, key, value, "a style string ('' for no style)")
    if value == "" or value in ctx.theme or value in DEFAULT_STYLES:
        return value
    try:
        Style.parse(value)
    except StyleSyntaxError as e:
        names = sorted(ctx.theme)
        _fail(
            ctx,
            key,
            f"{_show(value)} is not a style ({e}){_hint(value, names)}; use a rich style "
            f"such as 'bold red', '' for none, or a theme name: {', '.join(names)}",
        )
    return value


def _styles(ctx: _Ctx, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        _wrong_type(ctx, key, value, "a list of styles ([] for none)")
    return tuple(_style(ctx, f"{key}[{i}]", v) for i, v in enumerate(value))


def _box(ctx: _Ctx, key: str, value: Any) -> str:
    if not isinstance(value, str) or value not in BOX_NAMES:
        hint = _hint(value.upper(), list(BOX_NAMES)) if isinstance(value, str) else ""
        _fail(
            ctx,
            key,
            f"{_show(value)} is not a rich box{hint}; use one of {', '.join(BOX_NAMES)}",
        )
    return value


def _padding(ctx: _Ctx, key: str, value: Any) -> tuple[int, int]:
    if (
        not isinstance(value, list | tuple)
        or len(value) != 2
        or any(isinstance(v, bool) or not isinstance(v, int) for v in value)
    ):
        _wrong_type(ctx, key, value, "[vertical, horizontal], two integers >= 0")
    if value[0] < 0 or value[1] < 0:
        _fail(ctx, key, f"padding must be >= 0, got {_show(list(value))}")
    return (value[0], value[1])


def _markup(ctx: _Ctx, key: str, value: Any) -> str:
    if not isinstance(value, str):
        _wrong_type(ctx, key, value, "a string of rich markup")
    try:
        render_markup(value)
    except MarkupError as e:
        _fail(ctx, key, f"{_show(value)} is not valid rich markup: {e}")
    return value


def _optional_markup(ctx: _Ctx, key: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        _wrong_type(ctx, key, value, "a string of rich markup or null")
    return _markup(ctx, key, value)


def _template(ctx: _Ctx, key: str, value: Any) -> str:
    if not isinstance(value, str):
        _wrong_type(ctx, key, value, "a string of rich markup with <placeholders>")
    for match in _PLACEHOLDER.finditer(value):
        if match.group(1) not in PLACEHOLDERS:
            allowed = ", ".join(f"<{p}>" for p in PLACEHOLDERS)
            hint = _hint(match.group(1), list(PLACEHOLDERS))
            _fail(
                ctx,
                key,
                f"unknown placeholder {match.group(0)} in {_show(value)}{hint}; "
                f"allowed placeholders: {allowed}",
            )
    return _markup(ctx, key, value)


def _fields(ctx: _Ctx, key: str, value: Any, fields: Mapping[str, _Check]) -> dict[str, Any]:
    """Validate a section given as a mapping of known fields (null: an empty section)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        _wrong_type(ctx, key, value, f"a mapping with keys {', '.join(fields)}")
    out: dict[str, Any] = {}
    for name, item in value.items():
        path = f"{key}.{name}" if key else str(name)
        check = fields.get(name) if isinstance(name, str) else None
        if check is None:
            hint = _hint(name, list(fields)) if isinstance(name, str) else ""
            _fail(ctx, path, f"unknown key {_show(name)}{hint}; known keys: {', '.join(fields)}")
        out[name] = check(ctx, path, item)
    return out


def _section(fields: Mapping[str, _Check]) -> _Check:
    return lambda ctx, key, value: _fields(ctx, key, value, fields)


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
    "justify": _choice(_JUSTIFY, nullable=True),
    "style": _style,
    "overflow": _choice(_OVERFLOW),
    "header": _optional_markup,
}


def _level_key(ctx: _Ctx, key: str, raw: Any) -> str:
    if raw in ("default", "all"):
        return str(raw)
    if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
        return str(raw)
    if isinstance(raw, str) and re.fullmatch(r"[0-9]+", raw):
        return str(int(raw))
    _fail(
        ctx,
        f"{key}.{raw}",
        f"level key {_show(raw)} is not allowed; use default, all or a level number "
        "0, 1, 2, ... (0 is the root)",
    )


def _levels(ctx: _Ctx, key: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        _wrong_type(ctx, key, value, "a mapping of levels (default, all, 0, 1, ...)")
    out: dict[str, Any] = {}
    raw_keys: dict[str, Any] = {}
    for raw, entry in value.items():
        name = _level_key(ctx, key, raw)
        path = f"{key}.{name}"
        if name in raw_keys:
            _fail(ctx, path, f"level {name} is given twice (as {raw_keys[name]!r} and {raw!r})")
        raw_keys[name] = raw
        if entry is None and name != "default":
            out[name] = _REMOVE
        elif entry is None or isinstance(entry, Mapping):
            out[name] = _fields(ctx, path, entry, _LEVEL_FIELDS)
        else:
            _wrong_type(ctx, path, entry, f"a mapping with keys {', '.join(_LEVEL_FIELDS)}")
    return out


def _columns(ctx: _Ctx, key: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        _wrong_type(ctx, key, value, "a mapping of column keys (default, flops, module, ...)")
    out: dict[str, Any] = {}
    for name, entry in value.items():
        if not isinstance(name, str) or not name:
            _fail(
                ctx,
                f"{key}.{name}",
                f"column key {_show(name)} is not allowed; use default or a column name "
                "such as flops, forward_time, flops_pct, module, input_shape",
            )
        path = f"{key}.{name}"
        if entry is None and name != "default":
            out[name] = _REMOVE
        elif entry is None or isinstance(entry, Mapping):
            out[name] = _fields(ctx, path, entry, _COLUMN_FIELDS)
        else:
            _wrong_type(ctx, path, entry, f"a mapping with keys {', '.join(_COLUMN_FIELDS)}")
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
    "theme": lambda ctx, key, value: {},  # read first, by _theme
}


def _theme(ctx: _Ctx, value: Any, known: Mapping[str, str]) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        _wrong_type(ctx, "theme", value, "a mapping of style names (layerscope.*) to styles")
    out: dict[str, str] = {}
    for name, style in value.items():
        path = f"theme.{name}"
        if not isinstance(name, str) or (
            name not in known and (not name.startswith(_THEME_PREFIX) or name == _THEME_PREFIX)
        ):
            hint = _hint(name, list(known)) if isinstance(name, str) else ""
            _fail(
                ctx,
                path,
                f"unknown theme key {_show(name)}{hint}; known keys: {', '.join(known)}; "
                f"new names must start with {_THEME_PREFIX!r}",
            )
        if not isinstance(style, str):
            _wrong_type(ctx, path, style, "a rich style string ('' for no style)")
        try:
            Style.parse(style)
        except StyleSyntaxError as e:
            _fail(
                ctx,
                path,
                f"{_show(style)} is not a rich style ({e}); theme values are rich styles "
                "such as 'bold green', or '' for none (not other theme names)",
            )
        out[name] = style
    return out


def _normalise(data: Any, source: str | None, base_theme: Mapping[str, str]) -> dict[str, Any]:
    """Validate a whole (partial) config mapping into plain, normalised dicts."""
    ctx = _Ctx(source, base_theme)
    if not isinstance(data, Mapping):
        _wrong_type(ctx, "", data, f"a mapping with keys {', '.join(_TOP_FIELDS)} at the top")
    theme = _theme(ctx, data.get("theme"), base_theme)
    ctx.theme = {**base_theme, **theme}
    out = _fields(ctx, "", data, _TOP_FIELDS)
    out["theme"] = theme
    return out


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if value is _REMOVE:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _level_order(key: str) -> tuple[int, int]:
    return (0, 0) if key == "default" else (1, 0) if key == "all" else (2, int(key))


def _build(tree: Mapping[str, Any]) -> DisplayConfig:
    """A DisplayConfig from a complete normalised tree (the defaults merged with a file)."""
    levels = tree["tree"]["levels"]
    table = dict(tree["table"])
    columns = table.pop("columns")
    default_column = columns["default"]
    return DisplayConfig(
        levels=FrozenMap({k: FrozenMap(levels[k]) for k in sorted(levels, key=_level_order)}),
        repeat_block=RepeatBlock(**tree["tree"]["repeat_block"]),
        table=TableStyle(
            **table,
            columns=FrozenMap(
                {k: ColumnStyle(**{**default_column, **v}) for k, v in columns.items()}
            ),
        ),
        theme=FrozenMap(tree["theme"]),
    )


def _shipped() -> tuple[dict[str, Any], DisplayConfig]:
    text = resources.files("layerscope.render").joinpath("display.yaml").read_text("utf-8")
    tree = _normalise(yaml.safe_load(text), "<shipped display.yaml>", {})
    cfg = _build(tree)  # raises TypeError if the shipped file is missing a field
    return tree, cfg


_SHIPPED_TREE, _DEFAULTS = _shipped()

#: The shipped theme: style name -> rich style string (a copy; changing it changes nothing).
THEME_DEFAULTS: dict[str, str] = dict(_DEFAULTS.theme)

_current: DisplayConfig | None = None


# --------------------------------------------------------------------------- public API


def from_dict(data: Mapping[str, Any]) -> DisplayConfig:
    """Validate ``data`` (the YAML layout, as plain values) and merge it over the shipped
    defaults. The config in force is not changed."""
    return _from_data(data, None)


def _from_data(data: Any, source: str | None) -> DisplayConfig:
    return _build(_merge(_SHIPPED_TREE, _normalise(data, source, _DEFAULTS.theme)))


def _read(path: str | os.PathLike[str], source: str | None = None) -> DisplayConfig:
    name = os.fspath(path)
    ctx = _Ctx(source or name, {})
    try:
        text = Path(name).read_text(encoding="utf-8")
    except FileNotFoundError:
        _fail(ctx, "", "no such file")
    except UnicodeDecodeError as e:
        _fail(ctx, "", f"not UTF-8 text ({e.reason} at byte {e.start})")
    except OSError as e:
        _fail(ctx, "", f"cannot read the file: {e.strerror or e}")
    try:
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        if isinstance(e, ConstructorError):
            _fail(
                ctx,
                "",
                f"{at}unsupported YAML tag: {e.problem}; only plain YAML values are read "
                "(mappings, lists, strings, numbers, true/false, null)",
            )
        context = ""
        if e.context:
            started = e.context_mark
            context = f" ({e.context}" + (
                f" at line {started.line + 1}, column {started.column + 1})" if started else ")"
            )
        _fail(ctx, "", f"YAML syntax error{' at ' + at if at else ': '}{e.problem}{context}")
    except yaml.YAMLError as e:
        _fail(ctx, "", f"YAML error: {e}")
    # An empty file (or one of comments only) changes nothing.
    return _from_data({} if data is None else data, ctx.source)


def load(path: str | os.PathLike[str]) -> DisplayConfig:
    """Read a YAML display config, merge it over the shipped defaults, make it the config in
    force and return it."""
    global _current
    cfg = _read(path)
    _current = cfg
    return cfg


def defaults() -> DisplayConfig:
    """The shipped defaults (the config in force is not changed)."""
    return _DEFAULTS


def reset() -> DisplayConfig:
    """Make the shipped defaults the config in force, and return them."""
    global _current
    _current = _DEFAULTS
    return _DEFAULTS


def use(cfg: DisplayConfig) -> DisplayConfig:
    """Make ``cfg`` (e.g. from :func:`from_dict`) the config in force, and return it."""
    global _current
    if not isinstance(cfg, DisplayConfig):
        raise TypeError(f"expected a DisplayConfig, got {type(cfg).__name__}")
    _current = cfg
    return cfg


def current() -> DisplayConfig:
    """The config in force. On first use, the file named by $LAYERSCOPE_CONFIG (if set)."""
    global _current
    if _current is None:
        path = os.environ.get(ENV_VAR, "")
        _current = _read(path, f"{path} (from ${ENV_VAR})") if path else _DEFAULTS
    return _current


def to_dict(cfg: DisplayConfig) -> dict[str, Any]:
    """``cfg`` as plain values in the YAML layout; ``from_dict`` of it gives an equal config.
    Column entries other than ``default`` list only the fields that differ from it; entries
    of the shipped defaults that ``cfg`` has removed are written as null."""
    # An entry of the shipped defaults that cfg lacks was removed: write it as null.
    levels: dict[str, Any] = {
        key: dict(cfg.levels[key]) if key in cfg.levels else None
        for key in sorted({*cfg.levels, *_SHIPPED_TREE["tree"]["levels"]}, key=_level_order)
    }
    base = _column_dict(cfg.table.columns["default"])
    columns: dict[str, Any] = {}
    for key, col in cfg.table.columns.items():
        fields = _column_dict(col)
        columns[key] = (
            fields if key == "default" else {k: v for k, v in fields.items() if v != base[k]}
        )
    for key in _SHIPPED_TREE["table"]["columns"]:
        columns.setdefault(key, None)
    rb = cfg.repeat_block
    t = cfg.table
    return {
        "tree": {
            "levels": levels,
            "repeat_block": {
                "show": rb.show,
                "title": rb.title,
                "box": rb.box,
                "border_style": rb.border_style,
                "padding": list(rb.padding),
            },
        },
        "table": {
            "box": t.box,
            "show_edge": t.show_edge,
            "show_header": t.show_header,
            "header_style": t.header_style,
            "border_style": t.border_style,
            "title": t.title,
            "caption": t.caption,
            "row_styles": list(t.row_styles),
            "columns": columns,
        },
        "theme": dict(cfg.theme),
    }


def _column_dict(col: ColumnStyle) -> dict[str, Any]:
    return {
        "justify": col.justify,
        "style": col.style,
        "overflow": col.overflow,
        "header": col.header,
    }


_DUMP_HEADER = (
    "# layerscope display config, written by ls.config.dump(); read it with ls.config.load().\n"
    "# Every key is explained in layerscope/render/display.yaml (the shipped defaults).\n"
)


def dumps(cfg: DisplayConfig | None = None) -> str:
    """The YAML text of ``cfg`` (default: the config in force)."""
    data = to_dict(current() if cfg is None else cfg)
    body = yaml.safe_dump(
        data, sort_keys=False, allow_unicode=True, default_flow_style=False, width=4096
    )
    return _DUMP_HEADER + body


def dump(path: str | os.PathLike[str], cfg: DisplayConfig | None = None) -> None:
    """Write the full config in force (or ``cfg``) as YAML; ``load(path)`` gives it back."""
    name = os.fspath(path)
    text = dumps(cfg)
    try:
        Path(name).write_text(text, encoding="utf-8")
    except OSError as e:
        _fail(_Ctx(name, {}), "", f"cannot write the file: {e.strerror or e}")


def rich_box(name: str) -> rich.box.Box:
    """The rich.box constant called ``name`` (as validated in a config)."""
    if name not in BOX_NAMES:
        raise ValueError(f"{name!r} is not a rich box; use one of {', '.join(BOX_NAMES)}")
    box: rich.box.Box = getattr(rich.box, name)
    return box


def fill(template: str, **values: object) -> str:
    """Replace ``<placeholder>``s in a markup template with values, escaped for markup
    (a module called "[x]" stays literal). Placeholders without a value are left as is."""

    def replace(match: re.Match[str]) -> str:
        key = match.group(1)
        return escape(str(values[key])) if key in values else match.group(0)

    return _PLACEHOLDER.sub(replace, template)
