"""Views through every door: rich consoles with any theme, notebooks, the display config,
the CLI flags and errors, and what the run recorded (train/eval, grad mode)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import rich
import torch
from rich.console import Console
from rich.theme import Theme
from torch import nn

import layerscope as ls
from layerscope.cli import main
from layerscope.render import config
from viewmodels import small

pytestmark = pytest.mark.usefixtures("default_display_config")


def console(**kwargs: object) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=80, color_system=None, **kwargs), buf  # type: ignore[arg-type]


def test_any_rich_console_prints_a_profile() -> None:
    prof = small()
    plain, buf = console()  # a theme without layerscope's styles
    plain.print(prof)
    assert buf.getvalue() == prof.render(width=80)
    themed, buf = console(theme=Theme({"layerscope.name": "red", "repr.number": "blue"}))
    themed.print(prof)
    assert buf.getvalue() == prof.render(width=80)
    # colours: the console's own theme wins, the missing names fall back to layerscope's
    color = Console(
        file=io.StringIO(),
        width=80,
        color_system="truecolor",
        force_terminal=True,
        theme=Theme({"layerscope.header": "bold magenta"}),
    )
    color.print(prof)
    out = color.file.getvalue()  # type: ignore[attr-defined]
    assert "\x1b[1;35mModule" in out  # bold magenta header from the console's theme
    assert "\x1b[36mEncoder" in out  # cyan type from layerscope's theme


def test_rich_print_and_show_to_a_file(capsys: pytest.CaptureFixture[str]) -> None:
    prof = small()
    rich.print(prof)
    printed = capsys.readouterr().out
    assert "(1.1) attn Attention" in printed and "Run: eval mode" in printed
    buf = io.StringIO()
    prof.show(file=buf, view="ops", width=80, columns=["flops"])
    assert buf.getvalue() == prof.render(view="ops", width=80, columns=["flops"])


def test_notebook_html_is_a_table() -> None:
    html = small()._repr_html_()
    assert html.startswith('<div class="layerscope"><table')
    assert html.count("<tr") == 1 + 6 + 1  # header, 6 modules, Total
    assert '<th style="text-align: right; padding: 0 0.6em">% FLOPs</th>' in html
    assert '<td style="text-align: right; white-space: pre; padding: 0 0.6em">90.0%</td>' in html
    assert "Run: eval mode, grad enabled, device cpu, float32." in html


def test_run_facts_are_recorded_and_shown() -> None:
    model = nn.Sequential(nn.Linear(2, 2))
    with torch.no_grad():
        prof = ls.profile(model, torch.zeros(1, 2))
    assert prof.model["grad_mode"] == "no_grad" and prof.model["training"] is True
    assert "Run: train mode, no_grad, device cpu, float32." in prof.render(width=100)
    with torch.inference_mode():
        prof = ls.profile(model.eval(), torch.zeros(1, 2))
    assert prof.model["grad_mode"] == "inference_mode" and prof.model["training"] is False
    with ls.Profiler(model) as p:
        model(torch.zeros(1, 2))
    assert p.profile.model["grad_mode"] == "enabled"
    # a profile saved before grad modes were recorded still shows what it has
    old = ls.Profile.from_dict({**prof.to_dict(), "model": {"ran": True, "device": "cpu"}})
    assert "Run: device cpu." in old.render(width=100)


def test_config_changes_labels_columns_boxes_and_title(tmp_path: Path) -> None:
    path = tmp_path / "display.yaml"
    path.write_text(
        "tree:\n"
        "  levels:\n"
        "    default: {label: '<name> [<type>]'}\n"
        "    '0': {label: 'model <type>'}\n"
        "    '2': {hide: true}\n"
        "table:\n"
        "  title: Costs\n"
        "  caption: per module\n"
        "  columns:\n"
        "    flops: {header: Work, justify: left}\n",
        encoding="utf-8",
    )
    ls.config.load(path)
    text = small().render(width=80, columns=["flops"], pct=False)
    assert text.splitlines()[:10] == [
        "Costs",
        "Module              Work",
        "────────────────────────",
        "model Net           1 K",
        "├─ enc [Encoder]    900",  # level 2 (attn, mlp) hidden
        "├─ head [Linear]    80",
        "└─ drop [Dropout]   0",
        "",
        "Total               1 K",
        "per module",
    ]
    ls.config.reset()
    boxed = ls.profile(nn.Sequential(*[nn.Linear(2, 2) for _ in range(3)]), torch.zeros(1, 2))
    tree = boxed.render(view="tree", width=60, columns=["params"], pct=False)
    # the box spans the line (25) and a space each side; the fold sums 3 × (2×2 + 2) params
    assert tree.splitlines()[1:4] == [
        "└─ ╭─ ×3 " + "─" * 22 + "╮",
        "   │ (1) 0–2 Linear  Params 18 │",
        "   ╰" + "─" * 27 + "╯",
    ]


def test_tree_view_honours_hidden_levels(tmp_path: Path) -> None:
    """``levels.N.hide`` (torchmeter's hide_root): the tree view, like the table, leaves
    that level out and draws its children one level up (FLOPs from viewmodels.small)."""
    path = tmp_path / "display.yaml"
    path.write_text("tree:\n  levels:\n    '0': {hide: true}\n", encoding="utf-8")
    ls.config.load(path)
    tree = small().render(view="tree", width=60, columns=["flops"], pct=False)
    assert tree.splitlines()[:5] == [
        "(1) enc Encoder  FLOPs 900",  # 400 + 500
        "├─ (1.1) attn Attention  FLOPs 400",
        "└─ (1.2) mlp MLP  FLOPs 500",
        "(2) head Linear  FLOPs 80",
        "(3) drop Dropout",  # a zero is left off a tree label
    ]
    path.write_text("tree:\n  levels:\n    '1': {hide: true}\n", encoding="utf-8")
    ls.config.load(path)
    tree = small().render(view="tree", width=60, columns=["flops"], pct=False)
    # enc, head and drop (level 1) go; enc's children move up under the root
    assert tree.splitlines()[:3] == [
        "Net  FLOPs 1 K",
        "├─ (1.1) attn Attention  FLOPs 400",
        "└─ (1.2) mlp MLP  FLOPs 500",
    ]
    table = small().render(width=60, columns=["flops"], pct=False)
    assert table.splitlines()[2:5] == [
        "Net                         1 K",
        "├─ (1.1) attn Attention     400",
        "└─ (1.2) mlp MLP            500",
    ]


def test_environment_variable_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("table: {columns: {params: {header: Weights}}}\n", encoding="utf-8")
    monkeypatch.setenv("LAYERSCOPE_CONFIG", str(path))
    monkeypatch.setattr(config, "_current", None)  # as in a fresh process
    assert small().render(width=80).split()[:2] == ["Module", "Weights"]


# ---- the command line --------------------------------------------------------------------


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    path = tmp_path / "p.json"
    small().save(path)
    return path


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_view_flags_match_the_api(saved: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prof = ls.load(saved)
    cases = [
        (["--format", "ops", "--top", "2"], {"view": "ops", "top": 2}),
        (["--format", "tree", "--depth", "1"], {"view": "tree", "max_depth": 1}),
        (["--sort", "params", "--min-pct", "5"], {"sort_by": "params", "min_pct": 5}),
        (["--include", "*attn*", "--include", "Linear"], {"include": ["*attn*", "Linear"]}),
        (["--exclude", "enc", "--no-pct", "--raw"], {"exclude": "enc", "pct": False, "raw": True}),
        (
            ["--columns", "flops,params", "--pct-of", "params"],
            {"columns": "flops,params", "pct_of": "params"},
        ),
        (["--format", "top", "--by-type"], {"view": "top", "by_type": True}),
        (["--fold", "all", "--hide-not-called"], {"fold": "all", "show_not_called": False}),
        (["--format", "repr", "--no-fold"], {"view": "repr", "fold": False}),
    ]
    for flags, options in cases:
        code, out, _ = run(["show", str(saved), "--width", "90", *flags], capsys)
        assert code == 0, flags
        assert out == prof.render(width=90, **options), flags  # type: ignore[arg-type]


def test_cli_view_errors_are_one_line_exit_2(
    saved: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for flags, message in [
        (["--depth", "-1"], "--depth must be an int >= 0, got -1"),
        (["--sort", "speed"], "--sort must be a metric: "),
        (["--sort", "speed"], "for times, KEY_total, got 'speed'"),
        (["--columns", "params,x"], "--columns must be a column: "),
        (["--columns", "params,x"], "for times, KEY_total, got 'x'"),
        (["--by-type"], "--by-type applies to the 'top' and 'ops' views, not 'table'"),
        (["--min-pct", "200"], "--min-pct must be a number from 0 to 100, got 200.0"),
    ]:
        code, out, err = run(["show", str(saved), *flags], capsys)
        assert code == 2 and out == "", flags
        assert message in " ".join(err.split()), flags


def test_cli_profile_checks_view_flags_before_running(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["profile", "examples:tiny_resnet", "--sort", "nope"], capsys)
    assert code == 2 and "--sort must be a metric: " in err and err.endswith(", got 'nope'\n")


def test_cli_config_flag(saved: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "ok.yaml"
    good.write_text("table: {columns: {flops: {header: Work}}}\n", encoding="utf-8")
    code, out, _ = run(["show", str(saved), "--config", str(good)], capsys)
    assert code == 0 and out.splitlines()[0].split() == [
        "Module",
        "Params",
        "Work",
        "%",
        "FLOPs",
        "Calls",
    ]
    bad = tmp_path / "bad.yaml"
    bad.write_text("table: {box: NOPE}\n", encoding="utf-8")
    code, _, err = run(["show", str(saved), "--config", str(bad)], capsys)
    assert code == 2 and "table.box" in err


def test_saved_json_keeps_grad_mode(tmp_path: Path) -> None:
    prof = ls.profile(nn.Linear(2, 2), torch.zeros(1, 2))
    prof.save(tmp_path / "p.json")
    data = json.loads((tmp_path / "p.json").read_text(encoding="utf-8"))
    assert data["model"]["grad_mode"] == "enabled"
