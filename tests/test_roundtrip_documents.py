"""A document read and written again loses nothing (docs/json.md, unknown keys): keys
this version does not know, a newer layerscope's or a user's, stay where they were in
every document ``layerscope show -o`` writes, in the sections a typed object rebuilds
(a plan's ``plan``, a generation's ``generation``, a serving plan's ``memory``, ``kv``
and its layers, a sweep's rows, an estimate's rows, fits and their points) as at the top
level, whether written to another file or over the one shown, and the views show the
document as they did without them."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

import layerscope as ls
from helpers.documents import made, saved, show, small_model
from layerscope.export.jsonread import document_json
from layerscope.generation.decodefit import AffineFit, Point
from layerscope.generation.estimate_result import GenerateEstimate
from layerscope.generation.estimate_result import SweepRow as EstimateRow
from layerscope.generation.result import Generation
from layerscope.generation.serving_result import ServingPlan
from layerscope.planning import Plan
from layerscope.planning.fields import keys
from layerscope.planning.sweep import Sweep, SweepRow

#: What a newer layerscope might write: nested, a null, a non-finite number as the
#: string ``save`` writes it.
NEW = {"a": [1, "x", None], "b": 2.5, "c": "NaN"}
#: Where each kind's document gets a key this version does not know: every object of it
#: whose keys a loader reads ((): the top level; an index: that item of a list).
PLACES: dict[str, list[tuple[Any, ...]]] = {
    "profile": [(), ("model",), ("env",)],
    "plan": [(), ("plan",), ("plan", "options"), ("plan", "options", "cluster"),
             ("plan", "device"), ("plan", "timeline"), ("plan", "modules", 0)],
    "generation": [(), ("generation",), ("generation", "kv_cache"),
                   ("generation", "options"), ("generation", "calls", 0)],
    "serving": [(), ("memory",), ("kv",), ("kv", "layers", 0), ("kv", "layers", 1),
                ("rows", 0)],
    "sweep": [(), ("setting",), ("rows", 0), ("rows", 1)],
    "estimate": [(), ("device",), ("sweep", 0), ("fit", 0), ("fit", 0, "points", 0),
                 ("fit", 0, "points", 2)],
}  # fmt: skip


@pytest.fixture(autouse=True)
def _eighty(monkeypatch: pytest.MonkeyPatch, default_display_config: None) -> None:
    monkeypatch.setenv("COLUMNS", "80")


def _saved(kind: str, folder: Path) -> Path:
    if kind != "profile":
        return saved(kind, folder)
    path = folder / "profile.json"
    ls.profile(small_model(), torch.randn(2, 8)).save(path)
    return path


def _with_new_keys(kind: str, folder: Path) -> tuple[Path, Path]:
    """``kind``'s document as saved, and a copy with ``"zz_new": NEW`` at every place."""
    path = _saved(kind, folder)
    doc = json.loads(path.read_text(encoding="utf-8"))
    for place in PLACES[kind]:
        inner: Any = doc
        for key in place:
            inner = inner[key]
        inner["zz_new"] = NEW
    edited = folder / f"{kind}-new.json"
    edited.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return path, edited


@pytest.mark.parametrize("kind", list(PLACES))
def test_show_o_keeps_every_unknown_key(kind: str, tmp_path: Path) -> None:
    _, edited = _with_new_keys(kind, tmp_path)
    original = json.loads(edited.read_text(encoding="utf-8"))
    out = tmp_path / "out.json"
    assert show(str(edited), "-o", str(out)) == (0, "", "")
    assert json.loads(out.read_text(encoding="utf-8")) == original
    # over the file shown: the same document
    assert show(str(edited), "-o", str(edited)) == (0, "", "")
    assert json.loads(edited.read_text(encoding="utf-8")) == original


@pytest.mark.parametrize("kind", ["plan", "generation", "serving", "sweep", "estimate"])
def test_the_view_is_the_same_with_unknown_keys(kind: str, tmp_path: Path) -> None:
    path, edited = _with_new_keys(kind, tmp_path)
    code, text, err = show(str(path))
    assert (code, err) == (0, "") and text
    assert show(str(edited)) == (0, text, "")


def _zz(extra: dict[str, Any]) -> tuple[list[Any], float, bool]:
    """The parts of ``NEW`` read back: its list, its number, whether "NaN" is a NaN."""
    value = extra["zz_new"]
    return value["a"], value["b"], math.isnan(value["c"])


def test_a_plans_section_keeps_its_unknown_keys_after_the_known(tmp_path: Path) -> None:
    _, edited = _with_new_keys("plan", tmp_path)
    plan = ls.load_plan(edited)
    assert list(plan.extra) == ["zz_new"] and _zz(plan.extra) == ([1, "x", None], 2.5, True)
    assert _zz(plan.options) == _zz(plan.device) == _zz(plan.modules[0]) == _zz(plan.timeline)
    section = plan.section()
    assert list(section)[-3:] == ["fits", "headroom_bytes", "zz_new"]
    assert plan.analysis is not None and list(plan.analysis.extra) == ["zz_new"]
    # saved, read and saved again: the same bytes
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    plan.save(first)
    ls.load_plan(first).save(second)
    assert first.read_bytes() == second.read_bytes()
    assert json.loads(first.read_text())["plan"]["zz_new"] == NEW
    # a known key of the same name is the plan's own
    plan.extra = {"peak_bytes": 1, "fits": False, "own": 2}
    section = plan.section()
    assert (section["peak_bytes"], section["fits"]) == (plan.peak_bytes, plan.fits)
    assert list(section)[-1] == "own" and section["own"] == 2


def test_a_generations_section_keeps_its_unknown_keys_after_the_known(tmp_path: Path) -> None:
    _, edited = _with_new_keys("generation", tmp_path)
    gen = ls.load_generation(edited)
    assert list(gen.extra) == ["zz_new"] and _zz(gen.extra) == ([1, "x", None], 2.5, True)
    assert _zz(gen.kv_cache) == _zz(gen.options) == ([1, "x", None], 2.5, True)
    first_stage = gen.stages["prefill"]
    assert list(first_stage.extra) == ["zz_new"] and "generation" not in first_stage.extra
    section = gen.section()
    assert list(section) == [
        "first_stage", "stages", "calls", "kv_cache", "options", "notices", "zz_new",
    ]  # fmt: skip
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    gen.save(first)
    ls.load_generation(first).save(second)
    assert first.read_bytes() == second.read_bytes()
    gen.extra = {"calls": [], "own": 1}
    section = gen.section()
    assert len(section["calls"]) == len(gen.calls) == len(made("generation").calls)
    assert list(section)[-1] == "own"


def test_a_serving_plans_memory_and_kv_keep_their_unknown_keys(tmp_path: Path) -> None:
    path, edited = _with_new_keys("serving", tmp_path)
    plan = ls.load_serving(edited)
    for extra in (plan.extra, plan.memory_extra, plan.kv_extra, plan.layers[0].extra,
                  plan.layers[1].extra, plan.rows[0].extra):  # fmt: skip
        assert list(extra) == ["zz_new"] and _zz(extra) == ([1, "x", None], 2.5, True)
    data = plan.to_dict()
    assert list(data["memory"])[-2:] == ["kv_budget_bytes", "zz_new"]
    assert list(data["kv"])[-2:] == ["layers", "zz_new"]
    assert list(data["kv"]["layers"][0]) == ["bytes_per_token", "cap", "zz_new"]
    # what the plan derives is the same as without them
    plain = ls.load_serving(path)
    assert (plan.kv_tokens, plan.max_concurrency) == (plain.kv_tokens, plain.max_concurrency)
    assert [(x.bytes_per_token, x.cap) for x in plan.layers] == [
        (x.bytes_per_token, x.cap) for x in plain.layers
    ]
    # written as save writes: the same bytes again
    again = tmp_path / "again.json"
    plan.save(again)
    ls.load_serving(again).save(edited)
    assert again.read_bytes() == edited.read_bytes()
    # a known key of the same name is the plan's own
    plan.memory_extra = {"budget_bytes": 0, "own": 1}
    plan.kv_extra = {"tokens": -1}
    data = plan.to_dict()
    assert data["memory"]["budget_bytes"] == plan.budget and data["memory"]["own"] == 1
    assert data["kv"]["tokens"] == plan.kv_tokens


def _with_two_new_keys(kind: str, folder: Path, places: list[tuple[Any, ...]]) -> Path:
    """``kind``'s document with ``"zz_new": NEW`` then ``"aa_new": 1`` (not in sorted
    order) at the end of each of ``places``."""
    doc = json.loads(_saved(kind, folder).read_text(encoding="utf-8"))
    for place in places:
        inner: Any = doc
        for key in place:
            inner = inner[key]
        inner.update({"zz_new": NEW, "aa_new": 1})
    edited = folder / f"{kind}-two.json"
    edited.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return edited


def _same_bytes_again(path: Path, load: Any, folder: Path) -> None:
    """``path`` loaded and saved, loaded and saved again: the same bytes, and ``show -o``
    writes them too."""
    first, second, shown = folder / "first.json", folder / "second.json", folder / "shown.json"
    load(path).save(first)
    load(first).save(second)
    assert first.read_bytes() == second.read_bytes()
    assert show(str(path), "-o", str(shown)) == (0, "", "")
    assert shown.read_bytes() == first.read_bytes()


def test_a_sweeps_rows_keep_their_unknown_keys_in_order_after_the_known(
    tmp_path: Path,
) -> None:
    path = _with_two_new_keys("sweep", tmp_path, [("rows", 0), ("rows", 1)])
    sweep = ls.load_sweep(path)
    row, known = sweep.rows[0], list(made("sweep").rows[0].to_dict())
    assert list(row.extra) == ["zz_new", "aa_new"] and row.extra["aa_new"] == 1
    assert _zz(row.extra) == _zz(sweep.rows[1].extra) == ([1, "x", None], 2.5, True)
    assert list(row.to_dict()) == [*known, "zz_new", "aa_new"]
    # the typed row is the field table's: its mapping and figures are the same as without
    assert list(row) == known and "zz_new" not in row
    assert {k: row[k] for k in row} == made("sweep").rows[0].to_dict()
    written = json.loads(path.read_text(encoding="utf-8"))
    assert json.loads(document_json(sweep.to_dict())) == written
    _same_bytes_again(path, ls.load_sweep, tmp_path)
    again = json.loads((tmp_path / "first.json").read_text(encoding="utf-8"))
    assert [list(r)[-2:] for r in again["rows"]] == [["zz_new", "aa_new"]] * 2
    assert again["rows"][0]["zz_new"] == NEW
    # a key of the row's own is the row's, not extra's
    mine = SweepRow.from_dict({**made("sweep").rows[0].to_dict(), "own": 2})
    assert mine.extra == {"own": 2} and mine != made("sweep").rows[0]
    assert hash(mine) == hash(made("sweep").rows[0])  # hashed by its fields
    assert dataclasses.replace(mine).extra == {} and dataclasses.fields(mine)[-1].name != "extra"
    mine.extra.update({"step_time": -1.0, "tokens_per_s": 9})
    data = mine.to_dict()
    assert data["step_time"] == mine.step_time and list(data)[-1] == "own"
    assert mine.tokens_per_s is None and "tokens_per_s" in data and data["tokens_per_s"] is None


def test_an_estimates_rows_fits_and_points_keep_their_unknown_keys(tmp_path: Path) -> None:
    places: list[tuple[Any, ...]] = [
        ("sweep", 0), ("fit", 0), ("fit", 0, "points", 0), ("fit", 0, "points", 1),
    ]  # fmt: skip
    path = _with_two_new_keys("estimate", tmp_path, places)
    est, plain = ls.load_estimate(path), made("estimate")
    assert isinstance(plain, GenerateEstimate)
    row, fit = est.sweep[0], est.fit[0]
    for extra in (row.extra, fit.extra, fit.points[0].extra, fit.points[1].extra):
        assert list(extra) == ["zz_new", "aa_new"] and extra["aa_new"] == 1
        assert _zz(extra) == ([1, "x", None], 2.5, True)
    assert fit.points[2].extra == {}
    data = est.to_dict()
    assert list(data["sweep"][0]) == [*plain.sweep[0].to_dict(), "zz_new", "aa_new"]
    assert list(data["fit"][0]) == [*plain.fit[0].to_dict(), "zz_new", "aa_new"]
    assert list(data["fit"][0]["points"][0]) == [
        "length", "time", "flops", "macs", "bytes", "zz_new", "aa_new",
    ]  # fmt: skip
    assert list(data["fit"][0]["points"][2]) == ["length", "time", "flops", "macs", "bytes"]
    # what the estimate derives is the same as without them
    assert fit.to_dict()["lines"] == plain.fit[0].to_dict()["lines"]
    assert (fit.errors(), fit.held, fit.mean("time")) == (
        plain.fit[0].errors(), plain.fit[0].held, plain.fit[0].mean("time"),
    )  # fmt: skip
    assert row != plain.sweep[0] and dataclasses.replace(row) == plain.sweep[0]
    _same_bytes_again(path, ls.load_estimate, tmp_path)
    again = json.loads((tmp_path / "first.json").read_text(encoding="utf-8"))
    assert again["fit"][0]["points"][1]["zz_new"] == NEW
    # a key of its own is the object's, not extra's
    clash = dataclasses.replace(row, experts_per_layer=None)
    clash.extra.update({"batch": 99, "experts_per_layer": 7, "own": 1})
    assert clash.to_dict()["batch"] == row.batch and list(clash.to_dict())[-1] == "own"
    assert "experts_per_layer" not in clash.to_dict()  # a dense model's row
    point = Point(1, 2.0, 3.0, 4.0, 5.0, extra={"time": -1, "own": 1})
    assert point.to_dict() == {"length": 1, "time": 2.0, "flops": 3.0, "macs": 4.0,
                               "bytes": 5.0, "own": 1}  # fmt: skip
    hash(point)  # hashed by its figures
    fitted = dataclasses.replace(plain.fit[0], extra={"held": False, "lines": {}, "own": 1})
    assert fitted.to_dict() == {**plain.fit[0].to_dict(), "own": 1}


def test_objects_made_here_have_no_unknown_keys() -> None:
    plan, gen, serving = made("plan"), made("generation"), made("serving")
    sweep, est = made("sweep"), made("estimate")
    assert isinstance(plan, Plan) and isinstance(gen, Generation)
    assert isinstance(serving, ServingPlan) and isinstance(sweep, Sweep)
    assert isinstance(est, GenerateEstimate)
    assert plan.extra == gen.extra == serving.memory_extra == serving.kv_extra == {}
    assert all(layer.extra == {} for layer in serving.layers)
    assert all(row.extra == {} for row in sweep.rows)
    assert all(isinstance(row, EstimateRow) and row.extra == {} for row in est.sweep)
    assert all(isinstance(f, AffineFit) and f.extra == {} for f in est.fit)
    assert all(p.extra == {} for f in est.fit for p in f.points)
    assert all(row.absent == () for row in serving.rows)
    assert set(plan.section()) == set(keys("plan"))  # the field table's, no other


def test_a_memory_part_a_newer_version_adds_is_kept_and_shown(tmp_path: Path) -> None:
    path = saved("plan", tmp_path)
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["plan"]["memory"]["widget_bytes"] = 561
    path.write_text(json.dumps(doc), encoding="utf-8")
    plan = ls.load_plan(path)
    assert list(plan.memory)[-1] == "widget_bytes" and plan.memory["widget_bytes"] == 561
    code, out, err = show(str(path))
    assert (code, err) == (0, "")
    # 561 B of the 2,244 B peak: a quarter
    assert plan.peak_bytes == 2244
    assert [line.split() for line in out.splitlines() if "widget_bytes" in line] == [
        ["widget_bytes", "561", "B", "25.0%"]
    ]
    again = tmp_path / "again.json"
    assert show(str(path), "-o", str(again)) == (0, "", "")
    assert json.loads(again.read_text(encoding="utf-8"))["plan"]["memory"]["widget_bytes"] == 561
