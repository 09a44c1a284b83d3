"""JSON: the layerscope/1 contract, save/load round trips, clear errors on bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

import layerscope as ls
from layerscope.examples import EXAMPLES

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


def test_unknown_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"schema": "layerscope/99", "root": {}}))
    with pytest.raises(ls.SchemaError, match="layerscope/99"):
        ls.load(path)


def test_not_json_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text("{not json")
    with pytest.raises(ls.SchemaError, match="not valid JSON"):
        ls.load(path)


def test_malformed_node_is_refused() -> None:
    with pytest.raises(ls.SchemaError, match="malformed node"):
        ls.Profile.from_dict({"schema": "layerscope/1", "root": {"path": ""}})


def test_self_check_catches_inconsistency() -> None:
    prof = ls.profile(nn.Sequential(nn.Linear(3, 2)))
    prof.root.metrics["params"] += 1
    with pytest.raises(ls.ProfileCheckError, match="params of <root>"):
        prof.self_check()
