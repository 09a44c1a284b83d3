"""One validation at the boundary: a bad value is refused with the same sentence through
the API (``ls.profile``), a view option (``prof.render``), the YAML display config and the
CLI, naming the option as the user wrote it there (parameter, YAML key path, flag); numpy
scalars are accepted wherever a bool or an int is."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from torch import nn

import layerscope as ls
from layerscope.cli import main
from layerscope.errors import ConfigError, InvalidInputError
from layerscope.render import config
from layerscope.validate import Label, check_choice, check_int, check_keys, refuse, shown

pytestmark = pytest.mark.usefixtures("default_display_config")

#: A route: (label, a function that passes the bad value there and returns the refusal).
Route = tuple[str, Callable[[Any], str]]


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), nn.ReLU())


def _x() -> torch.Tensor:
    return torch.ones(2, 4)


def api(**fixed: Any) -> Callable[[str], Callable[[Any], str]]:
    """``ls.profile(model, x, name=value)``; with ``timing=True``: ``timing={name: value}``."""

    def route(name: str) -> Callable[[Any], str]:
        def refusal(value: Any) -> str:
            options = {"timing": {name: value}} if fixed.get("timing") else {name: value}
            with pytest.raises(InvalidInputError) as info:
                ls.profile(_model(), _x(), **options)
            return str(info.value)

        return refusal

    return route


def view(name: str) -> Callable[[Any], str]:
    """``prof.render(name=value)``."""

    def refusal(value: Any) -> str:
        prof = ls.profile(_model(), _x())
        with pytest.raises(InvalidInputError) as info:
            prof.render(**{name: value})
        return str(info.value)

    return refusal


def diff_view(name: str) -> Callable[[Any], str]:
    """``ls.diff(a, b).render(name=value)``."""

    def refusal(value: Any) -> str:
        prof = ls.profile(_model(), _x())
        with pytest.raises(InvalidInputError) as info:
            ls.diff(prof, prof).render(**{name: value})
        return str(info.value)

    return refusal


def yaml_file(tmp: Path, layout: Callable[[Any], dict[str, Any]]) -> Callable[[Any], str]:
    """A YAML display config file with the value at ``layout``; the file's name stripped."""

    def refusal(value: Any) -> str:
        path = tmp / "display.yaml"
        path.write_text(yaml.safe_dump(layout(value)), encoding="utf-8")
        with pytest.raises(ConfigError) as info:
            config.load(path)
        message = str(info.value)
        assert message.startswith(f"{path}: ")
        return message.removeprefix(f"{path}: ")

    return refusal


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> Callable[[Any], str]:
    """``layerscope ARGV VALUE``: exit code 2 and one line on stderr."""

    def refusal(value: Any) -> str:
        assert main([*argv, str(value)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("layerscope: error: ") and err.endswith("\n")
        assert err.count("\n") == 1
        return err.removeprefix("layerscope: error: ").removesuffix("\n")

    return refusal


@pytest.fixture
def saved(tmp_path: Path) -> str:
    path = tmp_path / "p.json"
    ls.profile(_model(), _x()).save(path)
    return str(path)


#: (bad value, what is allowed, the routes by name) with the routes' labels.
CASES: list[tuple[str, Any, str, list[str]]] = [
    ("a string for a bool", "maybe", "True or False", ["api:backward", "view:pct", "yaml:bool"]),
    ("an int for a bool", 1, "True or False", ["api:memory", "view:raw", "yaml:bool"]),
    ("a negative depth", -1, "an int >= 0", ["view:max_depth", "yaml:padding", "cli:--depth"]),
    (
        "a zero count",
        0,
        "an int >= 1",
        ["timing:batch_size", "view:top", "cli:--top", "diff:top", "cli-diff:--top"],
    ),
    ("a zero count, bounded", 0, "an int from 1 to 10000", ["timing:repeats", "cli:--repeats"]),
    ("a float for an int", 2.5, "an int >= 1", ["timing:batch_size", "view:width"]),
    ("a float for an int >= 0", 1.5, "an int >= 0", ["view:max_depth", "yaml:padding"]),
    ("a bool for an int", True, "an int >= 1", ["timing:batch_size", "view:top"]),
    ("a % out of range", 100.5, "a number from 0 to 100", ["view:min_pct", "cli:--min-pct"]),
    ("a negative %", -0.5, "a number >= 0", ["diff:min_change_pct", "cli-diff:--min-pct"]),
]


def _routes(tmp: Path, capsys: pytest.CaptureFixture[str], saved: str) -> dict[str, Route]:
    return {
        "api:backward": ("backward", api()("backward")),
        "api:memory": ("memory", api()("memory")),
        "timing:batch_size": ("batch_size", api(timing=True)("batch_size")),
        "timing:repeats": ("repeats", api(timing=True)("repeats")),
        "view:pct": ("pct", view("pct")),
        "view:raw": ("raw", view("raw")),
        "view:max_depth": ("max_depth", view("max_depth")),
        "view:top": ("top", view("top")),
        "view:width": ("width", view("width")),
        "view:min_pct": ("min_pct", view("min_pct")),
        "yaml:bool": ("table.show_edge", yaml_file(tmp, lambda v: {"table": {"show_edge": v}})),
        "yaml:padding": (
            "tree.repeat_block.padding[1]",
            yaml_file(tmp, lambda v: {"tree": {"repeat_block": {"padding": [0, v]}}}),
        ),
        "diff:top": ("top", diff_view("top")),
        "diff:min_change_pct": ("min_change_pct", diff_view("min_change_pct")),
        "cli-diff:--min-pct": ("--min-pct", cli(capsys, "diff", saved, saved, "--min-pct")),
        "cli:--depth": ("--depth", cli(capsys, "show", saved, "--depth")),
        "cli-diff:--top": ("--top", cli(capsys, "diff", saved, saved, "--top")),
        "cli:--top": ("--top", cli(capsys, "show", saved, "--top")),
        "cli:--min-pct": ("--min-pct", cli(capsys, "show", saved, "--min-pct")),
        "cli:--repeats": (
            "--repeats",
            cli(capsys, "profile", "examples:shared_mlp", "--time", "--repeats"),
        ),
    }


@pytest.mark.parametrize(("case", "value", "allowed", "routes"), CASES, ids=[c[0] for c in CASES])
def test_a_bad_value_is_refused_with_one_sentence_everywhere(
    case: str,
    value: Any,
    allowed: str,
    routes: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    saved: str,
) -> None:
    table = _routes(tmp_path, capsys, saved)
    for route in routes:
        label, refusal = table[route]
        assert refusal(value) == f"{label} must be {allowed}, got {value!r}", route


def test_unknown_keys_are_refused_with_one_sentence_everywhere(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError) as info:
        ls.profile(_model(), _x(), timing={"repeat": 3})
    assert str(info.value) == (
        "unknown option 'repeat' in timing (did you mean 'repeats'?); known: timer, warmup, "
        "repeats, sync, grad_mode, ops, batch_size, progress"
    )
    with pytest.raises(InvalidInputError) as info:
        ls.profile(_model(), _x()).render(colour="red")
    assert str(info.value).startswith(
        "unknown option 'colour' in the view options (did you mean 'columns'?); known: view, "
    )
    path = tmp_path / "display.yaml"
    path.write_text("table:\n  colums: {}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as config_info:
        config.load(path)
    assert str(config_info.value).startswith(
        f"{path}: unknown key 'colums' in table (did you mean 'columns'?); known: box, "
    )
    assert (config_info.value.source, config_info.value.key) == (str(path), "table.colums")
    with pytest.raises(InvalidInputError) as info:
        ls.device_spec({"name": "x", "bandwith": 1.0, "peak_flops": {"float32": 1.0}})
    assert str(info.value).startswith(
        "unknown key 'bandwith' in the device spec (did you mean 'bandwidth'?); known: name, "
    )


def test_choices_read_alike_and_spell_none_as_the_user_writes_it() -> None:
    with pytest.raises(InvalidInputError) as info:
        ls.profile(_model(), _x(), mode="evaluation")  # type: ignore[arg-type]
    assert str(info.value) == "mode must be one of 'eval', 'train' or None, got 'evaluation'"
    with pytest.raises(InvalidInputError) as info:
        ls.profile(_model(), _x()).render(view="tabel")
    assert str(info.value) == (
        "view must be one of 'table', 'tree', 'repr', 'top', 'ops', 'roofline', got 'tabel' "
        "(did you mean 'table'?)"
    )
    with pytest.raises(ConfigError) as config_info:
        config.from_dict({"table": {"columns": {"flops": {"justify": "middle"}}}})
    assert str(config_info.value) == (
        "table.columns.flops.justify must be one of 'left', 'center', 'right' or null, got 'middle'"
    )


def test_numpy_scalars_are_accepted_wherever_a_bool_or_an_int_is() -> None:
    prof = ls.profile(
        _model(),
        _x(),
        backward=np.bool_(True),  # type: ignore[arg-type]
        count_flops=np.bool_(True),  # type: ignore[arg-type]
        numerics={"stats": np.bool_(True)},
        timing={
            "repeats": np.int64(2),
            "warmup": np.int32(0),
            "sync": np.bool_(False),
            "batch_size": np.int16(2),
        },
    )
    assert prof.timing["repeats"] == 2 and type(prof.timing["repeats"]) is int
    assert prof.timing["batch_size"] == 2 and type(prof.timing["batch_size"]) is int
    assert prof.root.metrics["backward_flops"] > 0
    model = _model()
    with ls.Profiler(model, memory=np.bool_(True)) as p:  # type: ignore[arg-type]
        model(_x())
    assert p.profile.root.metrics["output_bytes"] > 0

    numpy_view = prof.render(
        pct=np.bool_(False),
        raw=np.bool_(True),
        shapes=np.bool_(False),
        fold=np.bool_(False),
        show_not_called=np.bool_(True),
        top=np.int64(2),
        max_depth=np.int32(1),
        width=np.int64(100),
        min_pct=np.float32(0.5),
    )
    plain_view = prof.render(
        pct=False,
        raw=True,
        shapes=False,
        fold=False,
        show_not_called=True,
        top=2,
        max_depth=1,
        width=100,
        min_pct=0.5,
    )
    assert numpy_view == plain_view

    cfg = config.from_dict(
        {
            "table": {"show_edge": np.bool_(True)},
            "tree": {"repeat_block": {"padding": [np.int64(1), np.int8(2)]}},
        }
    )
    assert cfg == config.from_dict(
        {"table": {"show_edge": True}, "tree": {"repeat_block": {"padding": [1, 2]}}}
    )
    assert type(cfg.table.show_edge) is bool and type(cfg.repeat_block.padding[0]) is int
    assert "!!python" not in config.dumps(cfg)  # plain YAML, loadable with safe_load

    spec = ls.device_spec(
        {
            "name": "np",
            "bandwidth": np.float64(1e12),
            "peak_flops": {"float32": np.float32(2**40)},
            "memory_bytes": np.int64(2**30),
        }
    )
    assert (spec.bandwidth, spec.peak("float32"), spec.memory_bytes) == (1e12, 2**40, 2**30)


def test_a_refusal_is_one_line_with_the_value_shortened() -> None:
    long = list(range(100))
    with pytest.raises(InvalidInputError) as info:
        check_int("top", long, 1)
    message = str(info.value)
    assert message == f"top must be an int >= 1, got {shown(long)}"
    assert shown(long).endswith("...") and len(shown(long)) == 80
    with pytest.raises(InvalidInputError) as info:
        refuse("width", "ab", "an int", why="two\nlines")
    assert str(info.value) == "width must be an int, got 'ab' (two lines)"


def test_a_config_label_raises_config_errors_with_file_and_key() -> None:
    root = Label("", source="d.yaml", root="the display config")
    with pytest.raises(ConfigError) as info:
        check_choice(root.at("table").at("box"), None, ["ASCII", "ROUNDED"])
    assert str(info.value) == "d.yaml: table.box must be one of 'ASCII', 'ROUNDED', got null"
    assert (info.value.source, info.value.key) == ("d.yaml", "table.box")
    with pytest.raises(ConfigError) as info:
        check_keys(root, {"tabel": 1, "thme": 2}, ["tree", "table", "theme"])
    assert str(info.value) == (
        "d.yaml: unknown keys 'tabel', 'thme' in the display config; known: tree, table, theme"
    )
    assert info.value.key == "tabel"
    # a plain label is the API's: InvalidInputError, not the config's error
    with pytest.raises(InvalidInputError) as plain:
        check_choice("box", None, ["ASCII"])
    assert not isinstance(plain.value, ConfigError)
    assert str(plain.value) == "box must be one of 'ASCII', got None"
