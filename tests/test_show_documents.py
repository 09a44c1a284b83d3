"""``layerscope show`` of the documents besides a profile: each writes the formats its own
object writes (``export``) and refuses any other in one line, exit code 2; nothing but
JSON is written over the file shown; view flags ask a plan or a generation for its
profile (0 is a value, and stderr says which part is shown) and are refused by a sweep,
an estimate and a serving plan; text follows ``COLUMNS``."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import torch

import layerscope as ls
from helpers.documents import LOADERS, made, saved, show, small_model


@pytest.fixture(autouse=True)
def _eighty(monkeypatch: pytest.MonkeyPatch, default_display_config: None) -> None:
    monkeypatch.setenv("COLUMNS", "80")


MAKERS: dict[str, Callable[[], Any]] = {kind: partial(made, kind) for kind in LOADERS}
#: The documents whose object writes no HTML report once read from JSON.
PLAIN = ("sweep", "estimate", "serving")


# ---- 1. a sweep, an estimate, a serving plan ----------------------------------------
@pytest.mark.parametrize("kind", PLAIN)
def test_o_its_own_file_keeps_the_json(kind: str, tmp_path: Path) -> None:
    path = saved(kind, tmp_path)
    before = path.read_bytes()
    code, out, err = show(str(path), "-o", str(path))
    assert (code, out, err) == (0, "", "")
    assert path.read_bytes() == before  # written again by its own save: the same bytes
    assert LOADERS[kind](path).to_dict() == MAKERS[kind]().to_dict()


@pytest.mark.parametrize("kind", [*PLAIN, "plan", "generation", "profile"])
@pytest.mark.parametrize("flags", [["--format", "csv"], ["--format", "html"], ["--format", "md"]])
def test_another_format_over_the_file_shown_is_refused(
    kind: str, flags: list[str], tmp_path: Path
) -> None:
    if kind == "profile":
        path = tmp_path / "p.json"
        ls.profile(small_model(), torch.randn(2, 8)).save(path)
    else:
        path = saved(kind, tmp_path)
    before = path.read_bytes()
    code, out, err = show(str(path), "-o", str(path), *flags)
    assert code == 2 and out == ""
    assert err == (
        f"layerscope: error: -o {path} is the file being shown: writing {flags[1]} there "
        "would replace its JSON; give another file name\n"
    )
    assert path.read_bytes() == before


@pytest.mark.parametrize("kind", PLAIN)
@pytest.mark.parametrize(("name", "fmt"), [
    ("x.csv", "csv"), ("x.md", "md"), ("x.trace.json", "trace"), ("x.html", "html"),
])  # fmt: skip
def test_a_format_its_object_does_not_write_is_one_line(
    kind: str, name: str, fmt: str, tmp_path: Path
) -> None:
    path = saved(kind, tmp_path)
    what = {"sweep": "a sweep", "estimate": "an estimate", "serving": "a serving plan"}[kind]
    code, out, err = show(str(path), "-o", str(tmp_path / name))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(
        f"layerscope: error: cannot write {tmp_path / name}: {what} exports as json (.json) "
        f"or txt (.txt, .text), not as {fmt}"
    )
    if fmt == "html":
        assert "its HTML report: layerscope " in err and "--html PATH" in err
    assert not (tmp_path / name).exists()
    code, out, err = show(str(path), "--format", fmt)  # to standard output: the same
    assert code == 2 and out == "" and f"standard output: {what} exports as json" in err


@pytest.mark.parametrize("kind", PLAIN)
@pytest.mark.parametrize(
    "flags",
    [["--depth", "2"], ["--depth", "0"], ["--columns", "params"], ["--format", "tree"],
     ["--min-pct", "0"], ["--no-fold"], ["--format", "table", "-o", "x.txt"]],
)  # fmt: skip
def test_view_flags_are_refused(kind: str, flags: list[str], tmp_path: Path) -> None:
    path = saved(kind, tmp_path)
    code, out, err = show(str(path), *flags)
    shown = " ".join(flags[:2]) if flags[0] == "--format" else flags[0]
    assert code == 2 and out == ""
    assert err.startswith(f"layerscope: error: {shown} does not apply to ")
    assert "which has no module tree" in err and err.count("\n") == 1


@pytest.mark.parametrize("kind", PLAIN)
def test_what_it_writes(kind: str, tmp_path: Path) -> None:
    path = saved(kind, tmp_path)
    obj = MAKERS[kind]()
    assert show(str(path), "--width", "90", "-o", str(tmp_path / "x.txt"))[0] == 0
    assert (tmp_path / "x.txt").read_text() == obj.render(width=90)
    assert show(str(path), "-o", str(tmp_path / "x.json"))[0] == 0
    assert LOADERS[kind](tmp_path / "x.json").to_dict() == obj.to_dict()
    code, out, _ = show(str(path), "--format", "json")
    assert code == 0 and json.loads(out) == json.loads(json.dumps(obj.to_dict()))


# ---- 2. a plan and a generation, as their objects export ----------------------------
def test_a_plan_writes_its_own_report_and_json(tmp_path: Path) -> None:
    path = saved("plan", tmp_path)
    code, out, err = show(str(path), "-o", str(tmp_path / "cli.html"))
    assert (code, out, err) == (0, "", "")
    ls.load_plan(path).export(tmp_path / "py.html")
    page = (tmp_path / "cli.html").read_text()
    assert page == (tmp_path / "py.html").read_text()
    assert "layerscope plan</title>" in page and 'id="ls-plan-data"' in page
    code, out, err = show(str(path), "--format", "html")
    assert code == 0 and out == page
    assert show(str(path), "-o", str(tmp_path / "again.json"))[0] == 0
    assert ls.load_plan(tmp_path / "again.json").section() == ls.load_plan(path).section()


def test_a_format_a_plan_has_no_form_of_writes_its_analysis_and_says_so(tmp_path: Path) -> None:
    path = saved("plan", tmp_path)
    code, out, err = show(str(path), "-o", str(tmp_path / "a.csv"))
    assert code == 0 and out == ""
    assert err == (
        f"layerscope: {path} is a plan, which has no csv form: its analysis (the profile the "
        f"plan was computed from) written to {tmp_path / 'a.csv'} instead\n"
    )
    assert (tmp_path / "a.csv").read_text() == ls.load(path).to_csv()
    # a write that fails is its one error line, with no notice of a write before it
    code, out, err = show(str(path), "-o", str(tmp_path / "missing" / "a.csv"))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("layerscope: error: cannot write ")


def test_a_generation_writes_as_generation_export(tmp_path: Path) -> None:
    path = saved("generation", tmp_path)
    gen = ls.load_generation(path)
    assert show(str(path), "-o", str(tmp_path / "cli.html")) == (0, "", "")
    gen.export(tmp_path / "py.html")
    page = (tmp_path / "cli.html").read_text()
    assert page == (tmp_path / "py.html").read_text()
    assert "layerscope generation</title>" in page
    # a timed generation's trace: its calls, as Generation.export writes it
    assert show(str(path), "-o", str(tmp_path / "cli.trace.json")) == (0, "", "")
    gen.export(tmp_path / "py.trace.json")
    trace = json.loads((tmp_path / "cli.trace.json").read_text())
    assert trace == json.loads((tmp_path / "py.trace.json").read_text())
    assert trace["traceEvents"][0]["args"] == {"name": "generation"}


def test_view_flags_show_the_part_and_say_which(tmp_path: Path) -> None:
    plan, gen = saved("plan", tmp_path), saved("generation", tmp_path)
    code, out, err = show(str(plan), "--depth", "1")
    analysis = ls.load_plan(plan).analysis
    assert analysis is not None and analysis == made("plan").analysis  # the plan's own
    assert code == 0 and out == analysis.render(width=80, max_depth=1)
    assert err == (
        f"layerscope: {plan} is a plan: showing its analysis (the profile the plan was "
        "computed from), as view flags ask (without them, the plan itself)\n"
    )
    code, out, err = show(str(gen), "--depth", "1")
    assert code == 0
    assert out == ls.load_generation(gen).stages["prefill"].render(width=80, max_depth=1)
    assert err == (
        f"layerscope: {gen} is a generation: showing its prefill stage's profile, as view "
        "flags ask (without them, the generation itself)\n"
    )
    # without view flags: the document itself, and nothing on stderr
    code, out, err = show(str(plan))
    assert (code, err) == (0, "") and out == ls.load_plan(plan).render(width=80)


# ---- 3. a view flag of 0 is a view flag --------------------------------------------
@pytest.mark.parametrize(
    ("flags", "options"),
    [(["--depth", "0"], {"max_depth": 0}), (["--min-pct", "0"], {"min_pct": 0.0})],
)
@pytest.mark.parametrize("kind", ["plan", "generation"])
def test_a_view_flag_of_zero_shows_the_profile(
    kind: str, flags: list[str], options: dict[str, Any], tmp_path: Path
) -> None:
    path = saved(kind, tmp_path)
    code, out, err = show(str(path), *flags)
    profile = ls.load(path)  # the document's own profile: the analysis, the first stage
    assert code == 0 and out == profile.render(width=80, **options)
    assert "showing its" in err


def test_a_zero_view_flag_is_refused_by_a_file_format(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    ls.profile(small_model(), torch.randn(2, 8)).save(path)
    code, out, err = show(str(path), "--depth", "0", "-o", str(tmp_path / "p.csv"))
    assert code == 2 and out == "" and "--depth applies only to views" in err
    assert not (tmp_path / "p.csv").exists()


# ---- 4. a generation's text follows COLUMNS ----------------------------------------
@pytest.mark.parametrize("columns", [60, 140])
def test_a_generations_text_follows_columns(
    columns: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    path = saved("generation", tmp_path)
    assert show(str(path), "-o", str(tmp_path / "g.txt"))[0] == 0
    text = (tmp_path / "g.txt").read_text()
    assert text == ls.load_generation(path).render(width=columns)
    assert max(len(line) for line in text.splitlines()) <= columns
    assert shutil.get_terminal_size().columns == columns


@pytest.mark.parametrize("kind", ["plan", "generation"])
def test_o_its_own_file_keeps_a_plan_or_a_generation(kind: str, tmp_path: Path) -> None:
    """Written again by its own save (the profile's sections in another order): the same
    document, its section kept (before, the profile alone was written over it)."""
    path = saved(kind, tmp_path)
    before = json.loads(path.read_text())
    assert show(str(path), "-o", str(path)) == (0, "", "")
    assert json.loads(path.read_text()) == before and kind in before
