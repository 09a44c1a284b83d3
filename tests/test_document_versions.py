"""The documents besides a profile (a sweep, a generation estimate, a serving plan) name
their kind and format version in ``"schema"``, as a profile does: ``save`` writes it, a
file without it (written before it) loads as before, another kind's document and
another version are refused in one line (exit code 2 through ``layerscope show``), and
top-level keys this version does not know are kept and written back (docs/json.md)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import torch

import layerscope as ls
from helpers.documents import LOADERS as ALL_LOADERS
from helpers.documents import made, saved, show, small_model
from layerscope.export.jsonread import document_json
from layerscope.generation.estimate_schema import ESTIMATE_SCHEMA
from layerscope.generation.serving_schema import SERVING_SCHEMA
from layerscope.planning.schema import SWEEP_SCHEMA

KINDS = ("sweep", "estimate", "serving")
SCHEMAS = {"sweep": SWEEP_SCHEMA, "estimate": ESTIMATE_SCHEMA, "serving": SERVING_SCHEMA}
#: What each loader calls its document in its messages.
WHAT = {"sweep": "sweep", "estimate": "generation estimate", "serving": "serving plan"}
LOADERS = {kind: ALL_LOADERS[kind] for kind in KINDS}
MAKERS: dict[str, Callable[[], Any]] = {kind: partial(made, kind) for kind in KINDS}


def rewritten(path: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    """``path``'s document changed by ``change``, written back as ``save`` writes."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    change(doc)
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def _eighty(monkeypatch: pytest.MonkeyPatch, default_display_config: None) -> None:
    monkeypatch.setenv("COLUMNS", "80")


# ---- writing and reading back ------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_save_writes_the_schema_first(kind: str, tmp_path: Path) -> None:
    doc = json.loads(saved(kind, tmp_path).read_text(encoding="utf-8"))
    assert next(iter(doc.items())) == ("schema", SCHEMAS[kind])
    assert MAKERS[kind]().to_dict()["schema"] == SCHEMAS[kind]
    assert MAKERS[kind]().extra == {}


def test_the_schema_values() -> None:
    assert (SWEEP_SCHEMA, ESTIMATE_SCHEMA, SERVING_SCHEMA) == (
        "layerscope-sweep/1", "layerscope-estimate/1", "layerscope-serving/1",
    )  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
def test_a_round_trip_is_equal_in_objects_and_bytes(kind: str, tmp_path: Path) -> None:
    first = saved(kind, tmp_path)
    loaded = LOADERS[kind](first)
    assert loaded.to_dict() == json.loads(json.dumps(MAKERS[kind]().to_dict()))
    again = tmp_path / "again.json"
    loaded.save(again)
    assert again.read_bytes() == first.read_bytes()
    assert LOADERS[kind](again) == loaded
    assert loaded.render(width=100) == MAKERS[kind]().render(width=100)


@pytest.mark.parametrize("kind", KINDS)
def test_a_file_without_the_schema_loads_as_before(kind: str, tmp_path: Path) -> None:
    """Files written before the key: read as they always were, written back with it."""
    path = rewritten(saved(kind, tmp_path), lambda doc: doc.pop("schema"))
    loaded = LOADERS[kind](path)
    assert loaded.extra == {}
    assert loaded == LOADERS[kind](saved(kind, tmp_path, "current"))
    code, out, err = show(str(path))
    assert (code, err) == (0, "") and out == show(str(tmp_path / "current.json"))[1]
    assert out.startswith(MAKERS[kind]().render(width=80).rstrip("\n"))


# ---- refused: another kind, another version ------------------------------------------
def _others(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """A document of each other kind, and what the loaders call it."""
    profile, plan = tmp_path / "profile.json", tmp_path / "plan.json"
    ls.profile(small_model(), torch.randn(4, 8)).save(profile)
    ls.plan(small_model(), torch.randn(4, 8), target="h100", world_size=8).save(plan)
    return {
        "profile": (profile, "a profile ('layerscope/1'), not a {what}: read it with ls.load"),
        "plan": (plan, "a plan ('layerscope/1'), not a {what}: read it with ls.load_plan"),
        **{
            kind: (saved(kind, tmp_path), f"a {WHAT[kind]} ({SCHEMAS[kind]!r}), not a "
                   f"{{what}}: read it with ls.load_{kind}")
            for kind in KINDS
        },
    }  # fmt: skip


def test_another_kinds_document_is_named_with_its_reader(tmp_path: Path) -> None:
    others = _others(tmp_path)
    for kind, load in LOADERS.items():
        for other, (path, said) in others.items():
            if other == kind:
                continue
            with pytest.raises(ls.SchemaError) as e:
                load(path)
            assert str(e.value) == f"{path}: $.schema: this is {said.format(what=WHAT[kind])}"


def test_a_profile_loader_names_the_kind_and_its_reader(tmp_path: Path) -> None:
    """``ls.load`` given a sweep, an estimate or a serving plan says what it is and what
    reads it, where it said "unsupported profile schema"."""
    for kind in KINDS:
        path = saved(kind, tmp_path)
        said = f"a {WHAT[kind]} ({SCHEMAS[kind]!r}), not a profile: read it with ls.load_{kind}"
        with pytest.raises(ls.SchemaError) as e:
            ls.load(path)
        assert str(e.value) == f"{path}: $.schema: this is {said}"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("schema", ["future", "layerscope-x/1", 1, None])
def test_another_version_is_refused(kind: str, schema: Any, tmp_path: Path) -> None:
    value = SCHEMAS[kind].replace("/1", "/2") if schema == "future" else schema
    path = rewritten(saved(kind, tmp_path), lambda doc: doc.update(schema=value, new={"x": 1}))
    with pytest.raises(ls.SchemaError) as e:
        LOADERS[kind](path)
    assert str(e.value) == (
        f"{path}: $.schema: unsupported {WHAT[kind]} schema {value!r}; "
        f"this layerscope reads {SCHEMAS[kind]!r}"
    )
    # from_dict says the same without the file's name
    with pytest.raises(ls.SchemaError, match=r"^\$\.schema: unsupported "):
        type(MAKERS[kind]()).from_dict(json.loads(path.read_text(encoding="utf-8")))


@pytest.mark.parametrize("kind", KINDS)
def test_show_refuses_a_future_version_in_one_line(kind: str, tmp_path: Path) -> None:
    future = SCHEMAS[kind].replace("/1", "/2")
    path = rewritten(saved(kind, tmp_path), lambda doc: doc.update(schema=future))
    code, out, err = show(str(path))
    assert (code, out) == (2, "")
    assert err == (
        f"layerscope: error: {path}: $.schema: unsupported {WHAT[kind]} schema {future!r}; "
        f"this layerscope reads {SCHEMAS[kind]!r}\n"
    )


# ---- unknown keys ------------------------------------------------------------------------
#: Values a newer version might write, non-finite numbers among them (as ``save`` writes
#: them: strings) and nested containers.
EXTRA: dict[str, Any] = {
    "version": 2,
    "new_section": {"x": [1, 2.5, "NaN", {"deep": None, "inf": "-Infinity"}], "y": "Infinity"},
    "note": "kept",
    "empty": [],
    "float": 1.0,
}


@pytest.mark.parametrize("kind", KINDS)
def test_unknown_top_level_keys_survive_load_and_save(kind: str, tmp_path: Path) -> None:
    path = rewritten(saved(kind, tmp_path), lambda doc: doc.update(EXTRA))
    loaded = LOADERS[kind](path)
    assert list(loaded.extra) == list(EXTRA)
    assert math.isnan(loaded.extra["new_section"]["x"][2])  # read as load reads numbers
    assert loaded.extra["new_section"]["y"] == math.inf
    again = tmp_path / "again.json"
    loaded.save(again)
    assert again.read_bytes() == path.read_bytes()  # the extras after the known keys
    assert LOADERS[kind](again) == loaded
    assert loaded.render(width=100) == MAKERS[kind]().render(width=100)
    code, out, err = show(str(path), "-o", str(tmp_path / "shown.json"))
    assert (code, out, err) == (0, "", "")
    assert (tmp_path / "shown.json").read_bytes() == path.read_bytes()


@pytest.mark.parametrize("kind", KINDS)
def test_unknown_keys_anywhere_at_the_top_are_written_after_the_known(
    kind: str, tmp_path: Path
) -> None:
    def first(doc: dict[str, Any]) -> None:
        items = list(doc.items())
        doc.clear()
        doc.update({"before": {"a": [1, "x"]}, **dict(items[:2]), "between": True,
                    **dict(items[2:])})  # fmt: skip

    path = rewritten(saved(kind, tmp_path), first)
    again = tmp_path / "again.json"
    LOADERS[kind](path).save(again)
    written = json.loads(again.read_text(encoding="utf-8"))
    original = json.loads(path.read_text(encoding="utf-8"))
    assert list(written)[-2:] == ["before", "between"]
    assert written == original  # the same keys and values
    assert again.read_text(encoding="utf-8").endswith(
        ' "before": {\n  "a": [\n   1,\n   "x"\n  ]\n },\n "between": true\n}\n'
    )


@pytest.mark.parametrize("kind", KINDS)
def test_unknown_values_are_checked_as_any_other(kind: str, tmp_path: Path) -> None:
    deep: Any = 1
    for _ in range(70):
        deep = [deep]
    path = rewritten(saved(kind, tmp_path), lambda doc: doc.update(new={"x": deep}))
    with pytest.raises(ls.SchemaError, match=r": \$\.new\.x(\[0\])+: nested more than 64 "):
        LOADERS[kind](path)
    # the bare token NaN (files written by json.dump) reads as the string "NaN" does
    assert math.isnan(LOADERS[kind](rewritten(saved(kind, tmp_path), _bare_nan)).extra["k"])


def _bare_nan(doc: dict[str, Any]) -> None:
    doc["k"] = math.nan


def test_known_keys_win_over_extra_of_the_same_name(tmp_path: Path) -> None:
    sweep = ls.load_sweep(saved("sweep", tmp_path))
    sweep.extra = {"axes": ["nothing"], "schema": "x", "own": 1}
    data = sweep.to_dict()
    assert data["axes"] == list(made("sweep").axes) and data["schema"] == SWEEP_SCHEMA
    assert list(data)[-1] == "own"


def test_a_serving_plans_rows_keep_their_unknown_keys(tmp_path: Path) -> None:
    def add(doc: dict[str, Any]) -> None:
        for i, row in enumerate(doc["rows"]):
            row["queue_time"] = [i, "NaN"]

    path = rewritten(saved("serving", tmp_path), add)
    plan = ls.load_serving(path)
    assert plan.rows[1].extra["queue_time"][0] == 1
    again = tmp_path / "again.json"
    plan.save(again)
    assert again.read_bytes() == path.read_bytes()


def test_document_json_writes_non_finite_floats_as_load_reads_them() -> None:
    text = document_json({"a": [math.nan, math.inf, -math.inf, 1.5], "b": (1, "x")})
    assert json.loads(text) == {"a": ["NaN", "Infinity", "-Infinity", 1.5], "b": [1, "x"]}
    assert document_json({"a": 1}) == '{\n "a": 1\n}\n'
