"""The YAML display config (layerscope.render.config): defaults, level and column
resolution, merging, LAYERSCOPE_CONFIG, the dump/load round trip and every error kind."""

from __future__ import annotations

import copy
import pickle
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from layerscope.errors import ConfigError, InvalidInputError
from layerscope.render import config
from layerscope.render.config import ColumnStyle, DisplayConfig, LevelStyle, RepeatBlock

DEFAULT_LABEL = (
    "[layerscope.id](<node_id>)[/] [layerscope.name]<name>[/] [layerscope.type]<type>[/]"
)
ROOT_LABEL = "[layerscope.type]<type>[/]"
THEME = {
    "layerscope.guide": "dim",
    "layerscope.id": "bold bright_black",
    "layerscope.name": "green",
    "layerscope.type": "cyan",
    "layerscope.repeat": "bold yellow",
    "layerscope.uncalled": "dim italic",
    "layerscope.total": "bold",
    "layerscope.notice": "yellow",
    "layerscope.error": "bold red",
    "layerscope.op": "dim",
    "layerscope.header": "bold",
    "layerscope.pct": "",
    "layerscope.hidden": "dim",
}
DEFAULT_COLUMN = ColumnStyle(justify=None, style="", overflow="ellipsis", header=None)


pytestmark = pytest.mark.usefixtures("default_display_config")


def write(tmp_path: Path, text: str, name: str = "display.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def error_of(data: Any) -> str:
    with pytest.raises(ConfigError) as info:
        config.from_dict(data)
    return str(info.value)


# --------------------------------------------------------------------------- defaults


def test_defaults() -> None:
    cfg = config.current()
    assert cfg == config.defaults() == config.reset()
    assert dict(cfg.levels) == {
        "default": {
            "label": DEFAULT_LABEL,
            "style": "",
            "guide_style": "layerscope.guide",
            "hide": False,
            "expanded": True,
        },
        "0": {"label": ROOT_LABEL},
    }
    assert cfg.repeat_block == RepeatBlock(
        show=True,
        title="[layerscope.repeat]×<repeat_time>[/]",
        box="ROUNDED",
        border_style="layerscope.repeat",
        padding=(0, 1),
    )
    t = cfg.table
    assert (t.box, t.show_edge, t.show_header) == ("SIMPLE_HEAD", False, True)
    assert (t.header_style, t.border_style) == ("layerscope.header", "")
    assert (t.title, t.caption, t.row_styles) == (None, None, ())
    assert dict(t.columns) == {"default": DEFAULT_COLUMN}
    assert dict(cfg.theme) == THEME
    assert config.THEME_DEFAULTS == THEME
    assert cfg.rich_theme().styles["layerscope.id"].bold


def test_shipped_file_is_the_defaults() -> None:
    shipped = Path(config.__file__).with_name("display.yaml")
    assert config.load(shipped) == config.defaults()


def test_config_is_immutable_hashable_picklable() -> None:
    cfg = config.defaults()
    with pytest.raises(AttributeError):
        cfg.table = cfg.table  # type: ignore[misc]
    with pytest.raises(TypeError):
        cfg.theme["layerscope.name"] = "red"  # type: ignore[index]
    with pytest.raises(TypeError):
        cfg.levels["default"]["hide"] = True  # type: ignore[index]
    assert hash(cfg) == hash(config.from_dict({}))
    assert pickle.loads(pickle.dumps(cfg)) == cfg
    assert copy.deepcopy(cfg) == cfg
    config.THEME_DEFAULTS["layerscope.name"] = "red"  # a copy: changes nothing
    try:
        assert config.from_dict({}).theme["layerscope.name"] == "green"
    finally:
        config.THEME_DEFAULTS["layerscope.name"] = "green"


# --------------------------------------------------------------------------- resolution


def test_level_resolution_default_and_root() -> None:
    cfg = config.defaults()
    common: dict[str, Any] = {
        "style": "",
        "guide_style": "layerscope.guide",
        "hide": False,
        "expanded": True,
    }
    assert cfg.level(0) == LevelStyle(label=ROOT_LABEL, **common)
    assert cfg.level(1) == LevelStyle(label=DEFAULT_LABEL, **common)
    assert cfg.level(2) == LevelStyle(label=DEFAULT_LABEL, **common)
    with pytest.raises(ValueError, match="depth must be an integer >= 0"):
        cfg.level(-1)


def test_level_resolution_all_wins_then_own_then_default() -> None:
    cfg = config.from_dict(
        {
            "tree": {
                "levels": {
                    "default": {"style": "italic"},
                    1: {"label": "<name>", "hide": True, "guide_style": "red"},
                    "all": {"guide_style": "blue"},
                }
            }
        }
    )
    assert list(cfg.levels) == ["default", "all", "0", "1"]
    # depth 0: label from "0", style from default, guide_style from all
    assert cfg.level(0) == LevelStyle(
        label=ROOT_LABEL, style="italic", guide_style="blue", hide=False, expanded=True
    )
    # depth 1: label and hide from "1"; its guide_style "red" loses to all's "blue"
    assert cfg.level(1) == LevelStyle(
        label="<name>", style="italic", guide_style="blue", hide=True, expanded=True
    )
    # depth 2: no entry of its own
    assert cfg.level(2) == LevelStyle(
        label=DEFAULT_LABEL, style="italic", guide_style="blue", hide=False, expanded=True
    )


def test_columns_resolve_over_default() -> None:
    cfg = config.from_dict(
        {
            "table": {
                "columns": {
                    "default": {"justify": "center"},
                    "flops": {"style": "bold", "header": "FLOPs"},
                    "module": {"justify": None, "overflow": "fold"},
                }
            }
        }
    )
    assert cfg.column("flops") == ColumnStyle("center", "bold", "ellipsis", "FLOPs")
    assert cfg.column("module") == ColumnStyle(None, "", "fold", None)
    assert cfg.column("macs") == ColumnStyle("center", "", "ellipsis", None)  # no entry
    assert cfg.table.columns["flops"] == cfg.column("flops")  # stored resolved
    assert cfg.table.column("module") == cfg.column("module")


# --------------------------------------------------------------------------- merging


def test_partial_load_changes_only_what_it_names(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
tree:
  levels:
    "0": {style: bold}
    2: {expanded: false}
table:
  box: HEAVY_HEAD
  row_styles: ["", dim]
  columns:
    flops: {justify: left}
theme:
  layerscope.name: magenta
  layerscope.mine: underline
""",
    )
    cfg = config.load(path)
    assert config.current() is cfg
    base = config.defaults()
    assert dict(cfg.levels) == {
        "default": base.levels["default"],
        "0": {"label": ROOT_LABEL, "style": "bold"},  # merged with the shipped "0"
        "2": {"expanded": False},
    }
    assert cfg.repeat_block == base.repeat_block
    assert cfg.table.box == "HEAVY_HEAD"
    assert cfg.table.row_styles == ("", "dim")
    assert (cfg.table.show_edge, cfg.table.header_style) == (False, "layerscope.header")
    assert dict(cfg.table.columns) == {
        "default": DEFAULT_COLUMN,
        "flops": ColumnStyle("left", "", "ellipsis", None),
    }
    assert dict(cfg.theme) == {
        **THEME,
        "layerscope.name": "magenta",
        "layerscope.mine": "underline",
    }
    # each load starts again from the shipped defaults, not from the previous load
    assert config.load(write(tmp_path, "table: {show_edge: true}\n", "b.yaml")).table.box == (
        "SIMPLE_HEAD"
    )


def test_null_removes_a_level_or_column_entry() -> None:
    cfg = config.from_dict({"tree": {"levels": {0: None}}})
    assert list(cfg.levels) == ["default"]
    assert cfg.level(0).label == DEFAULT_LABEL
    cfg = config.from_dict({"table": {"columns": {"flops": {"style": "red"}}}})
    assert "flops" in cfg.table.columns
    assert list(config.from_dict({"table": {"columns": {"flops": None}}}).table.columns) == [
        "default"
    ]


def test_empty_file_and_empty_sections_change_nothing(tmp_path: Path) -> None:
    assert config.load(write(tmp_path, "# only a comment\n")) == config.defaults()
    assert config.load(write(tmp_path, "tree:\ntable:\ntheme:\n")) == config.defaults()


def test_from_dict_does_not_change_current() -> None:
    cfg = config.from_dict({"table": {"box": "ASCII"}})
    assert cfg.table.box == "ASCII"
    assert config.current() == config.defaults()
    assert config.use(cfg) is cfg
    assert config.current() is cfg
    assert config.reset() == config.current() == config.defaults()


def test_styles_may_name_theme_entries_added_in_the_same_file() -> None:
    cfg = config.from_dict(
        {"theme": {"layerscope.mine": "bold"}, "table": {"border_style": "layerscope.mine"}}
    )
    assert cfg.table.border_style == "layerscope.mine"


# --------------------------------------------------------------------------- LAYERSCOPE_CONFIG


def test_env_var_is_loaded_on_first_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "table: {box: DOUBLE}\n")
    monkeypatch.setenv("LAYERSCOPE_CONFIG", str(path))
    monkeypatch.setattr(config, "_current", None)  # as in a fresh process
    assert config.current().table.box == "DOUBLE"
    assert config.current() is config.current()
    # reset() means the shipped defaults, even with the variable set
    assert config.reset().table.box == "SIMPLE_HEAD"
    assert config.current().table.box == "SIMPLE_HEAD"


def test_env_var_unset_or_empty_gives_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config, "_current", None)
    assert config.current() == config.defaults()
    monkeypatch.setattr(config, "_current", None)
    monkeypatch.setenv("LAYERSCOPE_CONFIG", "")
    assert config.current() == config.defaults()


def test_env_var_errors_name_the_file_and_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, "table: {box: NOPE}\n")
    monkeypatch.setenv("LAYERSCOPE_CONFIG", str(path))
    monkeypatch.setattr(config, "_current", None)
    with pytest.raises(
        ConfigError, match=re.escape(f"{path} (from $LAYERSCOPE_CONFIG): table.box")
    ):
        config.current()


# --------------------------------------------------------------------------- round trip


def test_dump_load_round_trip_and_idempotent_text(tmp_path: Path) -> None:
    cfg = config.load(
        write(
            tmp_path,
            """
tree:
  levels:
    all: {guide_style: "#ff8800"}
    10: {hide: true}
    "2": {label: "<path> [b]<depth>[/b]"}
    "0": null
  repeat_block: {show: false, padding: [1, 2], title: "×<repeat_time> '\\"quoted\\"'"}
table:
  title: "[b]Profile[/]"
  caption: "yes"
  row_styles: ["", "on grey11"]
  columns:
    default: {justify: center}
    flops: {justify: null, header: "FLOPs"}
    module: {}
theme:
  layerscope.extra: "italic"
""",
        )
    )
    first = tmp_path / "first.yaml"
    config.dump(first)
    assert config.load(first) == cfg
    second = tmp_path / "second.yaml"
    config.dump(second)
    assert second.read_text(encoding="utf-8") == first.read_text(encoding="utf-8")
    assert config.dumps(cfg) == first.read_text(encoding="utf-8")
    assert list(cfg.levels) == ["default", "all", "2", "10"]
    # column entries are written as their differences from default
    data = yaml.safe_load(first.read_text(encoding="utf-8"))
    assert data["table"]["columns"] == {
        "default": {"justify": "center", "style": "", "overflow": "ellipsis", "header": None},
        "flops": {"justify": None, "header": "FLOPs"},
        "module": {},
    }
    assert data["tree"]["levels"]["0"] is None  # the shipped "0" entry, removed
    assert data["table"]["caption"] == "yes"  # quoted, not read back as true
    assert config.from_dict(config.to_dict(cfg)) == cfg


def test_dump_of_defaults_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "d.yaml"
    config.dump(path)
    assert config.load(path) == config.defaults()
    assert config.to_dict(config.defaults())["tree"]["repeat_block"]["padding"] == [0, 1]


def test_dump_to_an_unwritable_path(tmp_path: Path) -> None:
    target = tmp_path / "missing" / "d.yaml"
    with pytest.raises(ConfigError, match=re.escape(f"{target}: cannot write the file")):
        config.dump(target)


def test_fill_replaces_placeholders_and_escapes_values() -> None:
    assert config.fill("<name> <type> <other>", name="[b]x", type="Linear") == (
        "\\[b]x Linear <other>"
    )


# --------------------------------------------------------------------------- errors


def test_error_is_an_invalid_input_error() -> None:
    assert issubclass(ConfigError, InvalidInputError)
    assert issubclass(ConfigError, ValueError)


def test_unknown_keys_list_the_known_ones(tmp_path: Path) -> None:
    path = write(tmp_path, "table:\n  colums: {}\n")
    with pytest.raises(ConfigError) as info:
        config.load(path)
    assert str(info.value) == (
        f"{path}: unknown key 'colums' in table (did you mean 'columns'?); known: "
        "box, show_edge, show_header, header_style, border_style, title, caption, row_styles, "
        "columns"
    )
    assert (info.value.source, info.value.key) == (str(path), "table.colums")
    assert error_of({"tabel": {}}) == (
        "unknown key 'tabel' in the display config (did you mean 'table'?); known: tree, "
        "table, theme"
    )
    assert error_of({"tree": {"levels": {1: {"color": "red"}}}}) == (
        "unknown key 'color' in tree.levels.1; known: label, style, guide_style, hide, expanded"
    )
    assert error_of({"table": {"columns": {"flops": {"width": 3}}}}) == (
        "unknown key 'width' in table.columns.flops; known: justify, style, overflow, header"
    )
    assert error_of({"tree": {"repeat_block": {"expand": True}}}) == (
        "unknown key 'expand' in tree.repeat_block; known: show, title, box, border_style, padding"
    )


def test_wrong_types() -> None:
    assert error_of({"table": {"show_edge": "yes"}}) == (
        "table.show_edge must be True or False, got 'yes'"
    )
    assert error_of({"tree": {"levels": {"default": {"hide": 1}}}}) == (
        "tree.levels.default.hide must be True or False, got 1"
    )
    assert error_of({"table": {"header_style": None}}) == (
        "table.header_style must be a style string ('' for no style), got null"
    )
    assert error_of({"table": {"title": 5}}) == (
        "table.title must be a string of rich markup or null, got 5"
    )
    assert error_of({"table": {"row_styles": "dim"}}) == (
        "table.row_styles must be a list of styles ([] for none), got 'dim'"
    )
    assert error_of({"tree": {"levels": {2: "hide"}}}) == (
        "tree.levels.2 must be a mapping with keys label, style, guide_style, hide, "
        "expanded, got 'hide'"
    )
    assert error_of({"table": []}).startswith("table must be a mapping with keys box, ")
    assert error_of({"table": {"columns": {3: {}}}}) == (
        "unknown key 3 in table.columns; known: default and column names such as "
        "flops, forward_time, flops_pct, module, input_shape"
    )


def test_bad_enum_values() -> None:
    assert error_of({"table": {"columns": {"flops": {"justify": "middle"}}}}) == (
        "table.columns.flops.justify must be one of 'left', 'center', 'right' or null, got 'middle'"
    )
    assert error_of({"table": {"columns": {"module": {"overflow": None}}}}) == (
        "table.columns.module.overflow must be one of 'ellipsis', 'fold', 'crop', got null"
    )


def test_bad_styles() -> None:
    message = error_of({"table": {"row_styles": ["", "bold nonsense"]}})
    assert message.startswith(
        "table.row_styles[1] must be a rich style such as 'bold red', '' for none, or a "
        "theme name: layerscope.error, "
    )
    assert message.endswith(
        ", got 'bold nonsense' "
        "(unable to parse 'nonsense' as color; 'nonsense' is not a valid color)"
    )
    message = error_of({"tree": {"levels": {1: {"guide_style": "layerscope.gide"}}}})
    assert message.startswith("tree.levels.1.guide_style must be a rich style")
    assert ", got 'layerscope.gide' (unable to parse" in message
    assert "; did you mean 'layerscope.guide'" in message
    assert "layerscope.guide, layerscope.header" in message
    # accepted: rich styles, theme names, rich's own style names, "" and "none"
    for style in ["bold red", "#ff8800 on grey11", "layerscope.op", "repr.number", "", "none"]:
        assert config.from_dict({"table": {"border_style": style}}).table.border_style == style


def test_unknown_box_names() -> None:
    assert error_of({"table": {"box": "rounded"}}) == (
        "table.box must be one of 'ASCII', 'ASCII2', 'ASCII_DOUBLE_HEAD', 'DOUBLE', "
        "'DOUBLE_EDGE', 'HEAVY', 'HEAVY_EDGE', 'HEAVY_HEAD', 'HORIZONTALS', 'MARKDOWN', "
        "'MINIMAL', 'MINIMAL_DOUBLE_HEAD', 'MINIMAL_HEAVY_HEAD', 'ROUNDED', 'SIMPLE', "
        "'SIMPLE_HEAD', 'SIMPLE_HEAVY', 'SQUARE', 'SQUARE_DOUBLE_HEAD', got 'rounded' "
        "(did you mean 'ROUNDED'?)"
    )
    message = error_of({"tree": {"repeat_block": {"box": None}}})
    assert message.startswith("tree.repeat_block.box must be one of 'ASCII', ")
    assert message.endswith(", got null")
    assert config.rich_box("HEAVY_EDGE").top_left == "┏"


def test_bad_padding() -> None:
    assert error_of({"tree": {"repeat_block": {"padding": [0, -1]}}}) == (
        "tree.repeat_block.padding[1] must be an int >= 0, got -1"
    )
    assert error_of({"tree": {"repeat_block": {"padding": 1}}}) == (
        "tree.repeat_block.padding must be [vertical, horizontal], two ints >= 0, got 1"
    )
    assert error_of({"tree": {"repeat_block": {"padding": [0, 1, 2]}}}) == (
        "tree.repeat_block.padding must be [vertical, horizontal], two ints >= 0, got [0, 1, 2]"
    )


@pytest.mark.parametrize("key", ["top", "-1", -1, True, 1.5, "1a"])
def test_bad_level_keys(key: Any) -> None:
    assert error_of({"tree": {"levels": {key: {}}}}) == (
        f"unknown key {key!r} in tree.levels; "
        "known: default, all and level numbers 0, 1, 2, ... (0 is the root)"
    )


def test_level_keys_int_and_string_are_one_key(tmp_path: Path) -> None:
    cfg = config.load(write(tmp_path, "tree:\n  levels:\n    3: {hide: true}\n    '04': {}\n"))
    assert list(cfg.levels) == ["default", "0", "3", "4"]
    assert error_of({"tree": {"levels": {0: {}, "0": {}}}}) == (
        "tree.levels.0 is given twice (as 0 and '0')"
    )


def test_unknown_placeholders() -> None:
    allowed = "<node_id>, <name>, <type>, <path>, <depth>, <repeat_time>"
    assert error_of({"tree": {"levels": {"default": {"label": "[b]<nmae>[/b]"}}}}) == (
        f"tree.levels.default.label must be rich markup with the placeholders {allowed}, "
        "got '[b]<nmae>[/b]' (unknown placeholder <nmae>; did you mean 'name'?)"
    )
    assert error_of({"tree": {"repeat_block": {"title": "x<times>"}}}) == (
        f"tree.repeat_block.title must be rich markup with the placeholders {allowed}, "
        "got 'x<times>' (unknown placeholder <times>)"
    )
    # a lone "<" is text, not a placeholder
    cfg = config.from_dict({"tree": {"levels": {"all": {"label": "<name> <= <depth>"}}}})
    assert cfg.level(5).label == "<name> <= <depth>"


def test_bad_markup() -> None:
    assert error_of({"table": {"title": "[/b]x"}}) == (
        "table.title must be valid rich markup, got '[/b]x' "
        "(closing tag '[/b]' at position 0 doesn't match any open tag)"
    )


def test_theme_errors() -> None:
    message = error_of({"theme": {"foo": "red"}})
    assert message.startswith("unknown key 'foo' in theme; known: layerscope.guide, ")
    assert message.endswith("layerscope.hidden, and new names that start with 'layerscope.'")
    assert error_of({"theme": {"layerscope.name": "grean"}}) == (
        "theme.layerscope.name must be a rich style such as 'bold green', or '' for none "
        "(not other theme names), got 'grean' (unable to parse 'grean' as color; "
        "'grean' is not a valid color)"
    )
    assert error_of({"theme": {"layerscope.name": "layerscope.type"}}).endswith(
        "got 'layerscope.type' (unable to parse 'layerscope.type' as color; "
        "'layerscope.type' is not a valid color)"
    )
    assert error_of({"theme": {"layerscope.name": 3}}) == (
        "theme.layerscope.name must be a rich style string ('' for no style), got 3"
    )


def test_yaml_syntax_error(tmp_path: Path) -> None:
    path = write(tmp_path, "table: [1, 2\nbox: 3\n")
    with pytest.raises(ConfigError) as info:
        config.load(path)
    assert str(info.value) == (
        f"{path}: YAML syntax error at line 2, column 4: expected ',' or ']', but got ':' "
        "(while parsing a flow sequence at line 1, column 8)"
    )
    assert "\n" not in str(info.value)


def test_python_tags_are_refused_not_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = write(tmp_path, f'table: !!python/object/apply:os.system ["touch {marker}"]\n')
    with pytest.raises(ConfigError) as info:
        config.load(path)
    assert str(info.value) == (
        f"{path}: line 1, column 8: unsupported YAML tag: could not determine a constructor "
        "for the tag 'tag:yaml.org,2002:python/object/apply:os.system'; only plain YAML "
        "values are read (mappings, lists, strings, numbers, true/false, null)"
    )
    assert not marker.exists()
    assert config.current() == config.defaults()  # a failed load changes nothing


def test_file_that_is_not_a_mapping(tmp_path: Path) -> None:
    path = write(tmp_path, "- tree\n- table\n")
    with pytest.raises(ConfigError) as info:
        config.load(path)
    assert str(info.value) == (
        f"{path}: the display config must be a mapping with keys tree, table, theme, "
        "got ['tree', 'table']"
    )
    assert error_of("tree") == (
        "the display config must be a mapping with keys tree, table, theme, got 'tree'"
    )


def test_missing_and_unreadable_files(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match=f"^{re.escape(str(missing))}: no such file$"):
        config.load(missing)
    with pytest.raises(ConfigError, match=f"^{re.escape(str(tmp_path))}: cannot read the file"):
        config.load(tmp_path)
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match=f"^{re.escape(str(binary))}: not UTF-8 text"):
        config.load(binary)


def test_errors_in_files_name_the_file_and_key(tmp_path: Path) -> None:
    path = write(tmp_path, "table:\n  columns:\n    flops:\n      justify: middle\n")
    with pytest.raises(ConfigError) as info:
        config.load(path)
    assert str(info.value) == (
        f"{path}: table.columns.flops.justify must be one of 'left', 'center', 'right' or "
        "null, got 'middle'"
    )


def test_use_rejects_other_objects() -> None:
    with pytest.raises(TypeError, match="expected a DisplayConfig"):
        config.use({})  # type: ignore[arg-type]
    assert isinstance(config.current(), DisplayConfig)
