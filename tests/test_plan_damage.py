"""Damaged plan, sweep and generation documents: every one either is refused with a ``SchemaError``
naming its JSON path, or loads and then renders at 80 and 100 columns, writes its HTML
report and saves again to an equal document (the Profile's own such test is in
``test_json_safety``)."""

from __future__ import annotations

import contextlib
import copy
import json
from functools import cache
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from torch import nn

import layerscope as ls
from layerscope.planning.html import to_html_text
from layerscope.planning.sweep import Sweep
from test_json_safety import NASTY, places


@cache
def documents() -> tuple[dict[str, Any], ...]:
    """Two plans (FSDP2 with its blocks checkpointed; HSDP) of a 3-block stack, in their
    saved form."""
    blocks = [nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for _ in range(3)]
    model, x = nn.Sequential(*blocks), torch.randn(4, 8)
    plans = (
        ls.plan(model, x, precision="fp32", checkpoint="blocks"),
        ls.plan(model, x, precision="bf16-mixed", world_size=4, hsdp=(2, 2)),
    )
    return tuple(json.loads(json.dumps(p.to_dict(), allow_nan=False)) for p in plans)


@cache
def sweep_document() -> dict[str, Any]:
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
    sweep = ls.plan_sweep(model, torch.randn(4, 8), precision="fp32", world_size=[2, 4])
    doc: dict[str, Any] = json.loads(json.dumps(sweep.to_dict(), allow_nan=False))
    return doc


def damage(data: st.DataObject, doc: dict[str, Any], within: Any) -> None:
    """1 to 3 values of ``within`` (a part of ``doc``) deleted or replaced at random."""
    for _ in range(data.draw(st.integers(1, 3))):
        found = places(within)
        pattern = data.draw(st.sampled_from(sorted(found, key=repr)))
        container, key = data.draw(st.sampled_from(found[pattern]))
        if isinstance(container, dict) and data.draw(st.booleans()):
            del container[key]
        else:
            container[key] = copy.deepcopy(data.draw(NASTY))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
@pytest.mark.slow
def test_a_damaged_plan_is_refused_or_shown(data: st.DataObject) -> None:
    doc = copy.deepcopy(data.draw(st.sampled_from(documents())))
    damage(data, doc, doc["plan"])
    try:
        plan = ls.Plan.from_dict(doc)
    except ls.SchemaError as e:
        assert str(e).startswith("$.plan"), e
        event("refused")
        return
    event("loaded")
    for width in (80, 100):
        plan.render(width=width)
    assert plan.analysis is not None
    with contextlib.suppress(ls.ExportError):  # a section the report cannot draw
        to_html_text(plan.analysis, plan.section())
    again = ls.Plan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert json.dumps(again.section(), sort_keys=True) == json.dumps(plan.section(), sort_keys=True)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_damaged_sweep_is_refused_or_shown(data: st.DataObject) -> None:
    doc = copy.deepcopy(sweep_document())
    damage(data, doc, doc)
    try:
        sweep = Sweep.from_dict(doc)
    except ls.SchemaError as e:
        assert str(e).startswith("$"), e
        event("refused")
        return
    event("loaded")
    for width in (80, 100):
        sweep.render(width=width)
    sweep.best()
    assert Sweep.from_dict(json.loads(json.dumps(sweep.to_dict()))).to_dict() == sweep.to_dict()


def test_a_sweep_file_reads_back(tmp_path: Any) -> None:
    path = tmp_path / "sweep.json"
    Sweep.from_dict(sweep_document()).save(path)
    assert ls.load_sweep(path).to_dict() == sweep_document()
    bad = dict(sweep_document(), rows=[dict(sweep_document()["rows"][0], peak_bytes="x")])
    path.write_text(json.dumps(bad))
    with pytest.raises(ls.SchemaError, match=r"sweep.json: \$.rows\[0\].peak_bytes: expected"):
        ls.load_sweep(path)


@cache
def generation_document() -> dict[str, Any]:
    from helpers.models import tiny_llama

    gen = ls.profile_generate(tiny_llama(), torch.randint(1, 128, (2, 6)), max_new_tokens=3)
    doc: dict[str, Any] = json.loads(json.dumps(gen.to_dict(), allow_nan=False))
    return doc


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
@pytest.mark.slow
def test_a_damaged_generation_is_refused_or_shown(data: st.DataObject) -> None:
    doc = copy.deepcopy(generation_document())
    section = doc["generation"]
    damage(data, doc, {k: section[k] for k in ("calls", "kv_cache", "options", "notices")})
    try:
        gen = ls.Generation.from_dict(doc)
    except ls.SchemaError as e:
        assert str(e).startswith("$"), e
        event("refused")
        return
    event("loaded")
    for width in (80, 100):
        gen.render(width=width)
    again = ls.Generation.from_dict(json.loads(json.dumps(gen.to_dict())))
    assert again.render(width=100) == gen.render(width=100)
