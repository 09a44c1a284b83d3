"""The display config: how the console views look, read from a YAML file.

The shipped defaults live in ``display.yaml`` beside this module (every key explained
there). A user's file only names what it changes; it is validated (the layout and its
checks: ``config_schema``) and merged over the defaults into a frozen
:class:`DisplayConfig`. Files are read with ``yaml.safe_load`` only, and every mistake
raises :class:`~layerscope.errors.ConfigError` with a one-line message naming the file, the
dotted key, the bad value and what is allowed.

Users reach this module as ``ls.config``: ``load(path)``, ``dump(path)``, ``reset()``,
``current()``; renderers call ``current()`` and read its fields.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import rich.box
import yaml
from rich.markup import escape
from rich.theme import Theme
from yaml.constructor import ConstructorError

from layerscope.render.config_schema import (
    BOX_NAMES,
    PLACEHOLDER,
    PLACEHOLDERS,
    REMOVE,
    Justify,
    Overflow,
    normalise,
)
from layerscope.validate import Label

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

#: The environment variable naming a display config file that ``current()`` loads on first use.
ENV_VAR = "LAYERSCOPE_CONFIG"

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


# --------------------------------------------------------------------------- merging


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if value is REMOVE:
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
    tree = normalise(yaml.safe_load(text), "<shipped display.yaml>", {})
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
    return _build(_merge(_SHIPPED_TREE, normalise(data, source, _DEFAULTS.theme)))


def _read(path: str | os.PathLike[str], source: str | None = None) -> DisplayConfig:
    name = os.fspath(path)
    file = Label("", source=source or name)
    try:
        text = Path(name).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise file.error("no such file") from None
    except UnicodeDecodeError as e:
        raise file.error(f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise file.error(f"cannot read the file: {e.strerror or e}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        if isinstance(e, ConstructorError):
            raise file.error(
                f"{at}unsupported YAML tag: {e.problem}; only plain YAML values are read "
                "(mappings, lists, strings, numbers, true/false, null)"
            ) from None
        context = ""
        if e.context:
            started = e.context_mark
            context = f" ({e.context}" + (
                f" at line {started.line + 1}, column {started.column + 1})" if started else ")"
            )
        syntax = f"YAML syntax error{' at ' + at if at else ': '}{e.problem}{context}"
        raise file.error(syntax) from None
    except yaml.YAMLError as e:
        raise file.error(f"YAML error: {e}") from None
    # An empty file (or one of comments only) changes nothing.
    return _from_data({} if data is None else data, file.source)


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
        raise Label("", source=name).error(f"cannot write the file: {e.strerror or e}") from None


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

    return PLACEHOLDER.sub(replace, template)
