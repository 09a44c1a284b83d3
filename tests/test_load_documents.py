"""The loaders of the documents besides a profile (``ls.load_plan``, ``load_generation``,
``load_sweep``, ``load_estimate``, ``load_serving``): every error names the file as
``ls.load``'s do, seconds, rates and bytes a run cannot make negative are refused, and so
is a plan whose peak is below its own parts or an estimate's fit whose lines, errors or
mean length are not what its points give; documents from real runs still load."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import torch

import layerscope as ls
from helpers.documents import LOADERS, made, small_model
from layerscope.cli import main
from layerscope.export.json import SCHEMA_PATH


@cache
def _documents() -> dict[str, dict[str, Any]]:
    """Each kind's document, as its save writes it (parsed)."""
    return {k: json.loads(json.dumps(made(k).to_dict())) for k in LOADERS}


def _write(tmp_path: Path, kind: str, edit: Callable[[dict[str, Any]], None]) -> Path:
    doc = json.loads(json.dumps(_documents()[kind]))
    edit(doc)
    path = tmp_path / f"{kind}.json"
    path.write_text(json.dumps(doc))
    return path


def _set(*keys: Any) -> Callable[[Any], Callable[[dict[str, Any]], None]]:
    def value(v: Any) -> Callable[[dict[str, Any]], None]:
        def edit(doc: dict[str, Any]) -> None:
            inner: Any = doc
            for k in keys[:-1]:
                inner = inner[k]
            inner[keys[-1]] = v

        return edit

    return value


@pytest.mark.parametrize("kind", list(LOADERS))
def test_documents_of_real_runs_load(kind: str, tmp_path: Path) -> None:
    path = _write(tmp_path, kind, lambda doc: None)
    assert json.loads(json.dumps(LOADERS[kind](path).to_dict())) == _documents()[kind]


# ---- 5. every loader names the file --------------------------------------------------
@pytest.mark.parametrize(
    ("loader", "wrong", "words"),
    [
        (
            ls.load_plan,
            "generation",
            "$.plan: no 'plan' section: this is a generation "
            "('layerscope/1'), not a plan: read it with ls.load_generation",
        ),
        (
            ls.load_generation,
            "plan",
            "$.generation: no 'generation' section: this is a plan "
            "('layerscope/1'), not a generation: read it with ls.load_plan",
        ),
        (
            ls.load_plan,
            "sweep",
            "$.schema: this is a sweep ('layerscope-sweep/1'), not a "
            "plan: read it with ls.load_sweep",
        ),
        (
            ls.load_plan,
            "serving",
            "$.schema: this is a serving plan ('layerscope-serving/1'), "
            "not a plan: read it with ls.load_serving",
        ),
        (
            ls.load_generation,
            "estimate",
            "$.schema: this is a generation estimate "
            "('layerscope-estimate/1'), not a generation: read it with ls.load_estimate",
        ),
        (
            ls.load_sweep,
            "plan",
            "$.schema: this is a plan ('layerscope/1'), not a sweep: read it with ls.load_plan",
        ),
        (
            ls.load_estimate,
            "plan",
            "$.schema: this is a plan ('layerscope/1'), not a "
            "generation estimate: read it with ls.load_plan",
        ),
        (
            ls.load_serving,
            "plan",
            "$.schema: this is a plan ('layerscope/1'), not a serving "
            "plan: read it with ls.load_plan",
        ),
    ],
)
def test_a_loaders_message_starts_with_the_file(
    loader: Callable[[Path], Any], wrong: str, words: str, tmp_path: Path
) -> None:
    path = _write(tmp_path, wrong, lambda doc: None)
    with pytest.raises(ls.SchemaError) as e:
        loader(path)
    assert str(e.value) == f"{path}: {words}"


@pytest.mark.parametrize(
    ("loader", "words"),
    [
        (ls.load_plan, "$.plan: not a plan (no 'plan' section); make one with ls.plan"),
        (ls.load_generation, "$.generation: not a generation (no 'generation' section); make "
         "one with ls.profile_generate"),
    ],
)  # fmt: skip
def test_a_profile_is_not_a_plan_or_a_generation(
    loader: Callable[[Path], Any], words: str, tmp_path: Path
) -> None:
    path = tmp_path / "p.json"
    ls.profile(small_model(), torch.randn(2, 8)).save(path)
    with pytest.raises(ls.SchemaError) as e:
        loader(path)
    assert str(e.value) == f"{path}: {words}"


ALL = {"profile": ls.load, **LOADERS}


@pytest.mark.parametrize("kind", list(ALL))
def test_a_file_cut_short_or_empty_says_so(kind: str, tmp_path: Path) -> None:
    """A copy or a write that did not finish: wherever the file ends, inside a string,
    a number, a literal or between keys, the message says it is cut short."""
    if kind == "profile":
        text = json.dumps({"schema": "layerscope/1", "model": {"name": "M", "x": -1.5e-7},
                           "root": {"path": "", "calls": 1, "ok": True, "n": None}})  # fmt: skip
    else:
        text = json.dumps(_documents()[kind], indent=1)
    path = tmp_path / f"{kind}.json"
    for end in (1, 2, 17, len(text) // 3, len(text) // 2, len(text) - 1):
        path.write_text(text[:end], encoding="utf-8")
        with pytest.raises(ls.SchemaError) as e:
            ALL[kind](path)
        assert str(e.value) == (
            f"{path} is not valid JSON: it ends inside its JSON, after {end:,} characters: "
            "the file is cut short (a copy or a write that did not finish?)"
        )
    path.write_text("", encoding="utf-8")
    with pytest.raises(ls.SchemaError) as e:
        ALL[kind](path)
    assert str(e.value) == f"{path} is not valid JSON: the file is empty"
    code, out, err = _show(path)
    assert (code, out) == (2, "")
    assert err == f"layerscope: error: {path} is not valid JSON: the file is empty\n"


def test_a_cut_is_told_from_a_mistake() -> None:
    """Text that cannot be the start of a document keeps the parser's words."""
    from layerscope.export.jsonread import _not_json

    cases = {
        '{"a": 1': "cut", '{"a": tr': "cut", '{"a": -': "cut", '{"a": 1.': "cut",
        '{"a": 2e-': "cut", '{"a": "x\\u00': "cut", '{"a": "x': "cut", '{"a"': "cut",
        '{"a": NaN, "b": -Inf': "cut",
        "{not json": "Expecting property name enclosed in double quotes: line 1 column 2 "
        "(char 1)",
        '{"a": 1 2}': "Expecting ',' delimiter: line 1 column 9 (char 8)",
        '{"a": tx': "Expecting value: line 1 column 7 (char 6)",
        '{"a": 1}}': "Extra data: line 1 column 9 (char 8)",
        '{"a": "\\u00zz"}': "Invalid \\uXXXX escape: line 1 column 9 (char 8)",
    }  # fmt: skip
    for text, said in cases.items():
        with pytest.raises(json.JSONDecodeError) as e:
            json.loads(text, parse_constant=float)
        expected = (
            f"it ends inside its JSON, after {len(text):,} characters: the file is cut "
            "short (a copy or a write that did not finish?)"
            if said == "cut"
            else said
        )
        assert _not_json(text, e.value) == expected, text


def _show(path: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["show", str(path)])
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    ("loader", "kind", "edit", "words"),
    [
        (ls.load_plan, "plan", _set("plan", "peak_bytes")(-1),
         "$.plan.peak_bytes: expected an integer >= 0, got the integer -1"),
        (ls.load_generation, "generation", _set("generation", "calls", 0, "tokens")("x"),
         "$.generation.calls[0].tokens: expected an integer >= 0, got the string 'x'"),
        (ls.load_generation, "generation", _set("root", "calls")(-1),
         "$.root.calls: expected an integer >= 0, got the integer -1"),
    ],
)  # fmt: skip
def test_plan_and_generation_name_the_file(
    loader: Callable[[Path], Any], kind: str, edit: Any, words: str, tmp_path: Path
) -> None:
    path = _write(tmp_path, kind, edit)
    with pytest.raises(ls.SchemaError) as e:
        loader(path)
    assert str(e.value) == f"{path}: {words}"


# ---- 6. impossible numbers ------------------------------------------------------------
NEGATIVE = [
    ("plan", ("plan", "step_time"), -1.0, "a finite number >= 0", "the number -1.0"),
    ("plan", ("plan", "time", "compute"), -1e-3, "a finite number >= 0", "the number -0.001"),
    ("plan", ("plan", "tokens_per_s"), -5, "a finite number >= 0 or null", "the integer -5"),
    # the network: bandwidths, efficiencies and latencies, as cluster= takes them
    ("plan", ("plan", "options", "inter_node_bandwidth"), -1.0, "a finite number >= 0 or null",
     "the number -1.0"),
    ("plan", ("plan", "options", "bucket_cap_mb"), -25, "a finite number >= 0",
     "the integer -25"),
    ("plan", ("plan", "options", "cluster", "nic_bandwidth"), -5e10, "a finite number >= 0",
     "the number -50000000000.0"),
    ("plan", ("plan", "options", "cluster", "base_latency"), -1e-6, "a finite number >= 0",
     "the number -1e-06"),
    ("plan", ("plan", "options", "cluster", "gpus_per_node"), 0, "an integer >= 1",
     "the integer 0"),
    ("plan", ("plan", "device", "interconnect"), -1, "a finite number >= 0 or null",
     "the integer -1"),
    # a memory part a newer version adds is bytes too (the views show it as a row)
    ("plan", ("plan", "memory", "new_part_bytes"), -1, "an integer >= 0", "the integer -1"),
    ("plan", ("plan", "memory", "new_part_bytes"), {"a": 1}, "an integer >= 0", "an object"),
    ("serving", ("kv", "layers", 0, "bytes_per_token"), -256.0, "a finite number >= 0",
     "the number -256.0"),
    ("serving", ("memory", "weight_bytes"), -1, "an integer >= 0", "the integer -1"),
    ("estimate", ("prefill_time",), -2.0, "a finite number >= 0", "the number -2.0"),
    ("estimate", ("sweep", 0, "decode_bytes"), -1, "a finite number >= 0", "the integer -1"),
    ("serving", ("rows", 0, "tpot"), -1.0, "a finite number >= 0", "the number -1.0"),
    ("generation", ("generation", "calls", 1, "time"), -1.0, "a finite number >= 0",
     "the number -1.0"),
    ("sweep", ("rows", 0, "tokens_per_s"), -7, "a finite number >= 0 or null", "the integer -7"),
    ("sweep", ("rows", 0, "step_time"), -0.5, "a finite number >= 0", "the number -0.5"),
]  # fmt: skip


def _json_path(keys: tuple[Any, ...]) -> str:
    return "$" + "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in keys)


@pytest.mark.parametrize(("kind", "keys", "value", "expected", "got"), NEGATIVE)
def test_a_negative_time_rate_or_amount_is_refused(
    kind: str, keys: tuple[Any, ...], value: float, expected: str, got: str, tmp_path: Path
) -> None:
    path = _write(tmp_path, kind, _set(*keys)(value))
    message = f"{path}: {_json_path(keys)}: expected {expected}, got {got}"
    with pytest.raises(ls.SchemaError) as e:
        LOADERS[kind](path)
    assert str(e.value) == message
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert main(["show", str(path)]) == 2
    assert err.getvalue() == f"layerscope: error: {message}\n" and out.getvalue() == ""


def test_zero_is_an_amount(tmp_path: Path) -> None:
    path = _write(tmp_path, "estimate", _set("prefill_time")(0))
    assert ls.load_estimate(path).prefill_time == 0


def test_a_plans_peak_below_its_parts_is_refused(tmp_path: Path) -> None:
    parts = sum(_documents()["plan"]["plan"]["memory"].values())
    assert parts == _documents()["plan"]["plan"]["peak_bytes"]
    path = _write(tmp_path, "plan", _set("plan", "peak_bytes")(1))
    with pytest.raises(ls.SchemaError) as e:
        ls.load_plan(path)
    assert str(e.value) == (
        f"{path}: $.plan.peak_bytes is 1, but its parts ($.plan.memory) add up to {parts}: "
        "the document was edited or damaged"
    )


def test_a_plans_headroom_or_fit_that_its_figures_do_not_give_is_refused(
    tmp_path: Path,
) -> None:
    section = _documents()["plan"]["plan"]
    assert section["budget"] is not None and section["fits"] is True
    headroom = section["headroom_bytes"]
    path = _write(tmp_path, "plan", _set("plan", "headroom_bytes")(headroom + 1))
    with pytest.raises(ls.SchemaError, match=r"\$\.plan\.headroom_bytes is .* edited or damaged"):
        ls.load_plan(path)
    path = _write(tmp_path, "plan", _set("plan", "fits")(False))
    with pytest.raises(ls.SchemaError) as e:
        ls.load_plan(path)
    assert str(e.value) == (
        f"{path}: $.plan.fits is False, but the plan's budget, reserve and peak give True: "
        "the document was edited or damaged"
    )
    # an older document without them loads

    def older(doc: dict[str, Any]) -> None:
        del doc["plan"]["fits"], doc["plan"]["headroom_bytes"]

    path = _write(tmp_path, "plan", older)
    assert ls.load_plan(path).headroom_bytes == headroom


#: Edits of an estimate's derived fit figures, and what its points give instead.
FIT_EDITS = [
    (("mean_length",), 18.0, "18.0", "17.5"),
    (("lines", "flops", "b"), 681.0, "681.0", "680.0"),
    (("errors", "bytes"), 0.5, "0.5", "0.0"),
    (("held",), False, "False", "True"),
]


@pytest.mark.parametrize(("keys", "value", "written", "given"), FIT_EDITS)
def test_an_estimates_fit_figures_that_its_points_do_not_give_are_refused(
    keys: tuple[str, ...], value: Any, written: str, given: str, tmp_path: Path
) -> None:
    fit = _documents()["estimate"]["fit"][0]
    assert (fit["first_length"], fit["last_length"], len(fit["points"])) == (16, 19, 3)
    assert fit["mean_length"] == 17.5 and fit["lines"]["flops"]["b"] == 680.0
    assert fit["errors"]["bytes"] == 0.0 and fit["held"] is True
    path = _write(tmp_path, "estimate", _set("fit", 0, *keys)(value))
    message = (
        f"{path}: $.fit[0].{'.'.join(keys)} is {written}, but the fit's points give {given}: "
        "the document was edited or damaged"
    )
    with pytest.raises(ls.SchemaError) as e:
        ls.load_estimate(path)
    assert str(e.value) == message
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert main(["show", str(path)]) == 2
    assert err.getvalue() == f"layerscope: error: {message}\n" and out.getvalue() == ""


def test_an_error_where_a_fit_has_no_middle_point_is_refused(tmp_path: Path) -> None:
    def ends_only(doc: dict[str, Any]) -> None:
        fit = doc["fit"][0]
        del fit["points"][1], fit["held"]
        fit["errors"] = {"time": 0.0}

    path = _write(tmp_path, "estimate", ends_only)
    with pytest.raises(ls.SchemaError) as e:
        ls.load_estimate(path)
    assert str(e.value) == (
        f"{path}: $.fit[0].errors.time is 0.0, but the fit's points give no error (no middle "
        "point to check): the document was edited or damaged"
    )
    # without it, the line through the ends is the one written: it loads

    def no_errors(doc: dict[str, Any]) -> None:
        ends_only(doc)
        del doc["fit"][0]["errors"]

    fit = ls.load_estimate(_write(tmp_path, "estimate", no_errors)).fit[0]
    assert fit.held is None and fit.errors() == {}
    assert fit.to_dict()["lines"] == _documents()["estimate"]["fit"][0]["lines"]


def test_a_fit_without_its_derived_figures_loads_and_gets_them(tmp_path: Path) -> None:
    def bare(doc: dict[str, Any]) -> None:
        for key in ("mean_length", "lines", "errors", "held"):
            del doc["fit"][0][key]

    path = _write(tmp_path, "estimate", bare)
    again = json.loads(json.dumps(ls.load_estimate(path).to_dict()))
    assert again["fit"] == _documents()["estimate"]["fit"]


def test_a_fit_figure_of_the_wrong_type_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "estimate", _set("fit", 0, "lines", "time", "a")("x"))
    with pytest.raises(ls.SchemaError) as e:
        ls.load_estimate(path)
    assert str(e.value) == (
        f"{path}: $.fit[0].lines.time.a: expected a finite number, got the string 'x'"
    )


def test_the_json_schema_says_so() -> None:
    schema = json.loads(SCHEMA_PATH.read_text())
    plan = schema["properties"]["plan"]["properties"]
    assert plan["step_time"]["minimum"] == 0
    assert plan["headroom_bytes"]["anyOf"][0]["minimum"] < 0
    call = schema["properties"]["generation"]["properties"]["calls"]["items"]["properties"]
    assert call["time"]["minimum"] == 0


def test_a_loaded_plans_analysis_equals_the_original(tmp_path: Path) -> None:
    """The plan's section lives once, on the Plan: its analysis, loaded back, is the
    analysis it was (no copy of the section among the profile's unknown keys)."""
    plan = ls.plan(small_model(), torch.randn(4, 8), world_size=1, sharding="none")
    path = tmp_path / "plan.json"
    plan.export(str(path))
    loaded = ls.load_plan(str(path))
    assert loaded.analysis == plan.analysis
    assert loaded.analysis is not None and "plan" not in loaded.analysis.extra
