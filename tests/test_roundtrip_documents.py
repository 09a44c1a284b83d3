"""A document read and written again loses nothing (docs/json.md, unknown keys): keys
this version does not know, a newer layerscope's or a user's, stay where they were in
every document ``layerscope show -o`` writes, in the sections a typed object rebuilds
(a plan's ``plan``, a generation's ``generation``, a serving plan's ``memory``, ``kv``
and its layers) as at the top level, whether written to another file or over the one
shown, and the views show the document as they did without them."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

import layerscope as ls
from helpers.documents import made, saved, show, small_model
from layerscope.generation.result import Generation
from layerscope.generation.serving_result import ServingPlan
from layerscope.planning import Plan
from layerscope.planning.fields import keys

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
    "sweep": [(), ("setting",)],
    "estimate": [(), ("device",)],
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


def test_objects_made_here_have_no_unknown_keys() -> None:
    plan, gen, serving = made("plan"), made("generation"), made("serving")
    assert isinstance(plan, Plan) and isinstance(gen, Generation)
    assert isinstance(serving, ServingPlan)
    assert plan.extra == gen.extra == serving.memory_extra == serving.kv_extra == {}
    assert all(layer.extra == {} for layer in serving.layers)
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
