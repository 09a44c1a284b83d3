"""JSON: the layerscope/1 contract, the schema file, save/load round trips, atomic and
strict-parser-friendly saving, unknown keys."""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import layerscope as ls
from layerscope.examples import EXAMPLES
from layerscope.export.json import SCHEMA_PATH, comparable, schema_document, schema_text

CONTRACT_NODE_KEYS = {
    "path",
    "name",
    "type",
    "node_id",
    "depth",
    "calls",
    "inputs",
    "outputs",
    "metrics",
    "self_metrics",
    "children",
}

#: Cheap settings of every measurement: one timed repeat, no warmup.
EVERYTHING: dict[str, Any] = {
    "backward": True,
    "memory": True,
    "numerics": "record",
    "timing": {"warmup": 0, "repeats": 1},
}


def strict_loads(text: str) -> Any:
    """``json.loads`` that refuses the bare tokens NaN, Infinity, -Infinity."""

    def refuse(token: str) -> Any:
        raise ValueError(f"bare {token} in the JSON text")

    return json.loads(text, parse_constant=refuse)


@cache
def validator() -> Any:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def assert_valid(path: Path) -> dict[str, Any]:
    """The saved file parses strictly and validates against the shipped schema."""
    data = strict_loads(path.read_text(encoding="utf-8"))
    errors = [f"{e.json_path}: {e.message}" for e in validator().iter_errors(data)]
    assert errors == []
    assert isinstance(data, dict)
    return data


def nonfinite_profile() -> ls.Profile:
    """A profile with Inf in an output and NaN in another (x * 1e39 overflows float32),
    numerics recorded: NaN/Inf counts and statistics in node.numerics."""

    class Overflow(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 1e39

    linear = nn.Linear(2, 2)
    with torch.no_grad():
        linear.weight.fill_(1.0)
        linear.bias.fill_(0.0)
    model = nn.Sequential(linear, Overflow())
    return ls.profile(model, torch.tensor([[1.0, 2.0]]), numerics="record")


# ---- the contract ----------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_round_trip_every_example(name: str, tmp_path: Path) -> None:
    ex = EXAMPLES[name]
    prof = ls.profile(ex.build(), ex.example_input())
    path = tmp_path / "p.json"
    prof.save(path)
    again = ls.load(path)
    assert again == prof
    assert again.to_dict() == prof.to_dict()
    assert [n.node_id for n in again.nodes()] == [n.node_id for n in prof.nodes()]
    assert again.root.inputs == prof.root.inputs  # specs come back as TensorSpec objects
    again.self_check()


def test_contract_fields() -> None:
    prof = ls.profile(nn.Sequential(nn.Linear(3, 2)), torch.randn(1, 3))
    data = json.loads(prof.to_json())
    assert data["schema"] == "layerscope/1"
    assert {"schema", "model", "env", "unsupported_ops", "root"} <= set(data)
    assert set(data["root"]) >= CONTRACT_NODE_KEYS
    child = data["root"]["children"][0]
    assert set(child) >= CONTRACT_NODE_KEYS
    assert child["node_id"] == "1" and child["path"] == "0" and child["depth"] == 1
    assert child["metrics"]["params"] == 3 * 2 + 2  # 8
    assert child["inputs"] == [
        [{"path": "0", "shape": [1, 3], "dtype": "float32", "device": "cpu"}]
    ]
    assert data["env"]["torch"] == torch.__version__
    assert data["model"]["name"] == "Sequential" and data["model"]["ran"] is True


def test_self_check_catches_inconsistency() -> None:
    prof = ls.profile(nn.Sequential(nn.Linear(3, 2)))
    prof.root.metrics["params"] += 1
    with pytest.raises(ls.ProfileCheckError, match="params of <root>"):
        prof.self_check()


# ---- the schema file -------------------------------------------------------------------
def test_schema_file_is_the_readers_specification() -> None:
    """The shipped file is generated from the reader's own specs (regenerate it with
    ``python -m layerscope.export.jsonspec``) and is a valid draft 2020-12 schema."""
    assert SCHEMA_PATH.name == "layerscope-1.schema.json"
    assert SCHEMA_PATH.parent == Path(ls.__file__).parent / "export"
    assert SCHEMA_PATH.read_text(encoding="utf-8") == schema_text()
    doc = schema_document()
    assert doc["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert doc["properties"]["schema"]["const"] == "layerscope/1"
    assert '"NaN", "Infinity" and "-Infinity"' in doc["description"]
    validator()  # check_schema passes


def test_schema_never_forbids_unknown_keys() -> None:
    def walk(value: Any) -> None:
        if isinstance(value, dict):
            assert value.get("additionalProperties", True) is not False
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(schema_document())


VARIANTS: dict[str, dict[str, Any]] = {"plain": {}, "everything": EVERYTHING}


@pytest.mark.parametrize(
    ("name", "variant"),
    [
        # the LSTM tagger with every option takes over 2 s
        pytest.param(
            n, v, marks=[pytest.mark.slow] if (n, v) == ("lstm_tagger", "everything") else []
        )
        for n in sorted(EXAMPLES)
        for v in sorted(VARIANTS)
    ],
)
def test_every_example_validates_against_the_schema(
    name: str, variant: str, tmp_path: Path
) -> None:
    ex = EXAMPLES[name]
    prof = ls.profile(ex.build(), ex.example_input(), **VARIANTS[variant])
    prof.save(tmp_path / "p.json")
    data = assert_valid(tmp_path / "p.json")
    if variant == "everything":
        assert {"memory", "numerics", "timing"} <= {k for k, v in data.items() if v}
        assert "timeline" in data["memory"]  # an extension section validates too


def test_structure_only_profile_validates(tmp_path: Path) -> None:
    prof = ls.profile(EXAMPLES["tiny_resnet"].build())  # no input: structure and params
    prof.save(tmp_path / "p.json")
    data = assert_valid(tmp_path / "p.json")
    assert data["model"]["ran"] is False and data["root"]["inputs"] == []


def test_gpt2_from_transformers_validates(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=32)
    model = transformers.GPT2LMHeadModel(config).eval()  # random weights, no download
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(0))
    prof = ls.profile(model, kwargs={"input_ids": ids}, backward=True, memory=True)
    prof.save(tmp_path / "gpt2.json")
    data = assert_valid(tmp_path / "gpt2.json")
    assert data["model"]["name"] == "GPT2LMHeadModel"
    assert ls.load(tmp_path / "gpt2.json") == prof


def test_schema_refuses_what_load_refuses() -> None:
    prof = ls.profile(nn.Sequential(nn.Linear(3, 2)), torch.randn(1, 3))
    good = json.loads(prof.to_json(indent=None))
    assert list(validator().iter_errors(good)) == []

    def errors(edit: Callable[[dict[str, Any]], None]) -> list[str]:
        data = json.loads(prof.to_json(indent=None))
        edit(data)
        with pytest.raises(ls.SchemaError):
            ls.Profile.from_dict(data)
        return sorted(e.json_path for e in validator().iter_errors(data))

    def calls(d: dict[str, Any]) -> None:
        d["root"]["calls"] = "many"

    def flops(d: dict[str, Any]) -> None:
        d["root"]["children"][0]["metrics"]["flops"] = "many"

    def flag(d: dict[str, Any]) -> None:
        d["root"]["metrics"]["params"] = True

    def ops(d: dict[str, Any]) -> None:
        d["unsupported_ops"] = []

    assert errors(calls) == ["$.root.calls"]
    assert errors(flops) == ["$.root.children[0].metrics.flops"]
    assert errors(flag) == ["$.root.metrics.params"]
    assert errors(ops) == ["$.unsupported_ops"]


# ---- saving --------------------------------------------------------------------------
def test_save_is_compact_one_line_and_to_json_indents(tmp_path: Path) -> None:
    prof = ls.profile(nn.Sequential(nn.Linear(3, 2)), torch.randn(1, 3))
    prof.save(tmp_path / "p.json")
    text = (tmp_path / "p.json").read_text(encoding="utf-8")
    assert text.endswith("}\n") and text.count("\n") == 1
    assert text.startswith('{"schema":"layerscope/1","model":{')
    pretty = prof.to_json()  # indent=2 by default, as before
    assert pretty.startswith('{\n  "schema": "layerscope/1",\n  "model": {')
    assert json.loads(pretty) == json.loads(text) == json.loads(prof.to_json(indent=None))


def test_unserialisable_value_leaves_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_bytes(b"old bytes")
    prof = ls.profile(nn.Sequential(nn.Linear(3, 2)), torch.randn(1, 3))
    prof.model["x"] = object()
    with pytest.raises(ls.ExportError) as info:
        prof.save(path)
    assert str(info.value) == (
        f"cannot write {path}: the value at $.model.x is not JSON data (type object)"
    )
    assert path.read_bytes() == b"old bytes"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json"]  # no temp file left


def test_unserialisable_value_is_named_by_its_json_path(tmp_path: Path) -> None:
    prof = ls.profile(nn.Sequential(nn.Linear(3, 2)), torch.randn(1, 3))
    prof.notices = ["fine", torch.ones(1)]  # type: ignore[list-item]
    with pytest.raises(ls.ExportError) as info:
        prof.save(tmp_path / "p.json")
    assert str(info.value) == (
        f"cannot write {tmp_path / 'p.json'}: the value at $.notices[1] is not JSON data "
        "(type Tensor)"
    )
    prof.notices = []
    prof.root.children[0].metrics["odd key"] = {1, 2}  # type: ignore[assignment]
    with pytest.raises(ls.ExportError, match=r"\$\.root\.children\[0\]\.metrics\[\"odd key\"\] "):
        prof.to_json()
    assert not (tmp_path / "p.json").exists()


def test_save_to_a_directory_or_a_missing_folder(tmp_path: Path) -> None:
    prof = ls.profile(nn.Sequential(nn.Linear(3, 2)))
    with pytest.raises(ls.ExportError) as info:
        prof.save(tmp_path)
    assert str(info.value) == f"cannot write {tmp_path}: it is a directory"
    missing = tmp_path / "nope" / "p.json"
    with pytest.raises(ls.ExportError) as info:
        prof.save(missing)
    assert str(info.value) == (
        f"cannot write {missing}: the folder {tmp_path / 'nope'} does not exist"
    )


def test_save_keeps_the_files_permissions(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text("{}")
    os.chmod(path, 0o600)
    ls.profile(nn.Sequential(nn.Linear(3, 2))).save(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert ls.load(path).root.type == "Sequential"


def test_nonfinite_numbers_are_strings_strict_parsers_accept(tmp_path: Path) -> None:
    prof = nonfinite_profile()
    prof.timing = {"throughput": math.inf, "batch_size": 1, "batch_source": "given"}
    stats = prof.node("1").numerics  # Overflow's output: [1e39, 2e39] -> [inf, inf]
    assert stats["inf"] == 2 and stats["nonfinite_calls"] == [0]
    prof.save(tmp_path / "p.json")
    text = (tmp_path / "p.json").read_text(encoding="utf-8")
    data = strict_loads(text)  # no bare NaN/Infinity token anywhere
    assert data["timing"]["throughput"] == "Infinity"
    assert strict_loads(prof.to_json())["timing"]["throughput"] == "Infinity"
    again = ls.load(tmp_path / "p.json")
    assert again.timing["throughput"] == math.inf
    assert again == prof


def test_a_profile_with_nan_equals_itself_after_a_round_trip(tmp_path: Path) -> None:
    prof = nonfinite_profile()
    nan_stats = {"min": math.nan, "max": math.nan, "mean": float("nan"), "std": -math.inf}
    prof.node("1").numerics.update(nan_stats)
    prof.numerics["extra_statistic"] = float("nan")
    assert prof == prof
    prof.save(tmp_path / "p.json")
    again = ls.load(tmp_path / "p.json")
    assert math.isnan(again.node("1").numerics["mean"])
    assert again.node("1").numerics["std"] == -math.inf
    assert again == prof and prof == again


def test_nan_in_node_metrics_compares_equal_through_comparable(tmp_path: Path) -> None:
    """Node metrics are copied by ``to_dict`` as they are: ``comparable`` makes their NaNs
    the one ``math.nan`` (what ``Profile.__eq__`` needs to call them equal)."""
    prof = ls.profile(nn.Sequential(nn.Linear(3, 2)), torch.randn(1, 3))
    prof.root.metrics["forward_time"] = float("nan")
    prof.node("0").self_metrics["forward_time"] = float("nan")
    prof.save(tmp_path / "p.json")
    again = ls.load(tmp_path / "p.json")
    assert comparable(again.to_dict()) == comparable(prof.to_dict())
    assert comparable(prof.to_dict())["root"]["metrics"]["forward_time"] is math.nan


def test_files_with_bare_nan_tokens_still_load(tmp_path: Path) -> None:
    prof = nonfinite_profile()
    data = prof.to_dict()
    data["root"]["metrics"]["forward_time"] = math.nan
    data["root"]["children"][1]["numerics"]["std"] = math.inf
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data, allow_nan=True))  # how files were written so far
    assert "NaN" in path.read_text() and '"NaN"' not in path.read_text()
    again = ls.load(path)
    assert math.isnan(again.root.metrics["forward_time"])
    assert again.node("1").numerics["std"] == math.inf


def test_nan_strings_in_numeric_places_load_as_floats() -> None:
    prof = ls.profile(nn.Sequential(nn.Linear(3, 2)), torch.randn(1, 3))
    data = json.loads(prof.to_json(indent=None))
    data["root"]["metrics"]["forward_time"] = "NaN"
    data["root"]["self_metrics"]["forward_time"] = "-Infinity"
    data["timing"] = {"throughput": "Infinity", "batch_size": 1, "batch_source": "given"}
    again = ls.Profile.from_dict(data)
    assert math.isnan(again.root.metrics["forward_time"])
    assert again.root.self_metrics["forward_time"] == -math.inf
    assert again.timing["throughput"] == math.inf


# ---- unknown keys --------------------------------------------------------------------
def test_unknown_keys_load_and_where_they_are_kept(tmp_path: Path) -> None:
    prof = ls.profile(nn.Sequential(nn.Linear(3, 2)), torch.randn(1, 3))
    data = json.loads(prof.to_json(indent=None))
    data["per_rank"] = [{"rank": 0}]  # a top-level section of a newer version
    data["root"]["children"][0]["attributes"] = {"x": 1}  # a new node key
    data["root"]["children"][0]["metrics"]["energy_joules"] = 0.5  # a new metric
    data["root"]["children"][0]["self_metrics"]["energy_joules"] = "NaN"
    data["model"]["rank"] = 3
    # an unknown timing key ("trace" is known: its rows are checked, as exporters read them)
    data["timing"] = {"gpu_trace": {"events": [[1, 2], {"a": None}]}}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    again = ls.load(path)
    linear = again.node("0")
    assert linear.metrics["energy_joules"] == 0.5
    assert math.isnan(linear.self_metrics["energy_joules"])
    assert again.model["rank"] == 3
    assert again.timing["gpu_trace"] == {"events": [[1, 2], {"a": None}]}
    # kept everywhere: unknown top-level keys in Profile.extra, node keys in Node.extra
    assert again.extra == {"per_rank": [{"rank": 0}]}
    assert linear.extra == {"attributes": {"x": 1}}
    again.save(path)
    saved = json.loads(path.read_text())
    assert saved["per_rank"] == [{"rank": 0}]
    assert saved["root"]["children"][0]["attributes"] == {"x": 1}
    assert saved["root"]["children"][0]["metrics"]["energy_joules"] == 0.5
    assert saved["timing"]["gpu_trace"] == {"events": [[1, 2], {"a": None}]}
    again.render(view="table", width=100)
