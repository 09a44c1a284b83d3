"""The plan's field table (``layerscope.planning.fields``): one row is all a new column
needs. Made-up fields registered through the table alone reach the text view, the JSON
schema and the HTML section's data; the typed sweep row and the plan section have the
table's keys; and no module outside ``planning/`` spells the plan's own keys.
"""

from __future__ import annotations

import ast
import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import layerscope.metricspec as ms
from layerscope.errors import ExportError, InvalidInputError
from layerscope.export.json import schema_document
from layerscope.planning import fields as F
from layerscope.planning.fields import PlanField, field, fields, keys
from layerscope.planning.html import plan_data
from layerscope.planning.schema import PLAN, SWEEP_SCHEMA, plan_spec
from layerscope.planning.sweep import Sweep, SweepRow
from layerscope.planning.view import render_plan, render_sweep
from layerscope.render import units
from test_plan_html import make_plan
from test_plan_views import SMALL, SWEEP, line_with

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "layerscope"


@pytest.fixture(autouse=True)
def _shipped_config(default_display_config: None) -> None:
    """The views as shipped, whatever the environment configures."""


@pytest.fixture
def registered() -> Iterator[list[PlanField]]:
    """Register the fields a test appends; unregister them after it."""
    added: list[PlanField] = []
    try:
        yield added
    finally:
        for f in added:
            F.unregister_field(f.group, f.key)
        assert all(f not in F.FIELDS for f in added)


def _add(added: list[PlanField], spec: PlanField) -> PlanField:
    F.register_field(spec)
    added.append(spec)
    return spec


# ---- made-up fields reach every view ---------------------------------------------------
def test_a_module_field_reaches_the_text_table_and_the_page(registered: list[PlanField]) -> None:
    _add(registered, PlanField("module", "widget_bytes", "bytes", "bytes of widgets", "Widgets",
                               priority=40, legend=True))  # fmt: skip
    section = copy.deepcopy(SMALL)
    for k, m in enumerate(section["modules"]):
        m["widget_bytes"] = (k + 1) * 2048  # 2, 4 and 6 KiB
    text = render_plan(section, width=200)
    assert line_with(text, "Module").endswith("Gather Reduce Widgets")
    assert line_with(text, "layers.1").endswith("4.00 MiB 6.00 KiB")  # 3 x 2,048 = 6 KiB
    assert "Widgets: bytes of widgets." in " ".join(text.split())
    data = plan_data(section)["modules"]
    assert data["columns"][-1] == ["widget_bytes", "Widgets", "bytes", "bytes of widgets"]
    assert [row[-1] for row in data["rows"]] == [2048, 4096, 6144]


def test_a_module_field_not_shown_by_default_is_only_on_the_page(
    registered: list[PlanField],
) -> None:
    _add(registered, PlanField("module", "widgets", "count", "widgets", "Widgets",
                               default=False))  # fmt: skip
    section = copy.deepcopy(SMALL)
    section["modules"][0]["widgets"] = 7
    assert "Widgets" not in render_plan(section, width=200)
    data = plan_data(section)["modules"]
    assert data["columns"][-1][:2] == ["widgets", "Widgets"]
    assert [row[-1] for row in data["rows"]] == [7, None, None]


def test_a_time_part_reaches_the_step_table_and_the_page(registered: list[PlanField]) -> None:
    _add(registered, PlanField("time", "widget", "seconds", "widget time", "Widget",
                               json="number"))  # fmt: skip
    section = copy.deepcopy(SMALL)
    section["time"]["widget"] = 0.0025
    text = render_plan(section, width=80).split("Step time", 1)[1]
    assert line_with(text, "Widget") == "Widget 2.5 ms 25.0%"  # 2.5 ms of a 10 ms step
    assert plan_data(section)["time"][-1] == ["Widget", 0.0025]


def test_a_memory_part_reaches_the_table_the_page_and_the_schema(
    registered: list[PlanField],
) -> None:
    _add(registered, PlanField("memory", "widget_bytes", "bytes", "widgets", "Widgets"))
    section = copy.deepcopy(SMALL)
    section["memory"]["widget_bytes"] = 1024 * 1024  # 1 MiB of a 10 MiB peak
    text = render_plan(section, width=80).split("Step time", 1)[0]
    assert line_with(text, "Widgets") == "Widgets 1.00 MiB 10.0%"
    data = plan_data(section)
    assert data["part_names"][-1] == "Widgets"
    assert data["parts"][-1] == [len(keys("memory")) - 1, 1024 * 1024]
    spec = plan_spec().props["memory"].schema()
    assert spec["required"][-1] == "widget_bytes"
    timeline = plan_spec().props["timeline"].schema()
    assert timeline["required"][-1] == "widget_bytes"


def test_a_sweep_figure_reaches_the_text_table_and_the_page(registered: list[PlanField]) -> None:
    _add(registered, PlanField("row", "widgets", "count", "widgets", "Widgets", priority=95))
    sweep = copy.deepcopy(SWEEP)
    for k, row in enumerate(sweep["rows"]):
        row["widgets"] = 1000 * (k + 1)
    text = render_sweep(sweep, width=200)
    assert line_with(text, "GPUs").endswith("Tokens/s MFU Widgets")
    assert re.search(r"30\.0%\s+4,000$", text, re.MULTILINE)  # the last row: 4 x 1,000
    page = plan_data(make_plan().section(), sweep)["sweep"]
    assert page["columns"][-1] == ["widgets", "Widgets", "count", "widgets"]
    assert [row[-1] for row in page["rows"]] == [1000, 2000, 3000, 4000]


def test_a_plan_figure_reaches_the_schema_and_the_pages_labels(registered: list[PlanField]) -> None:
    _add(registered, PlanField("plan", "widget_bytes", "bytes", "bytes of widgets", "Widgets"))
    labels = plan_data(SMALL)["labels"]
    assert labels["widget_bytes"] == "Widgets" and labels["peak_bytes"] == "Peak per GPU"
    spec = plan_spec()
    assert list(spec.props)[-1] == "widget_bytes"
    assert spec.required[-1] == "widget_bytes"
    assert spec.props["widget_bytes"].schema() == {"type": "integer", "minimum": 0,
                                                   "maximum": 2**63 - 1}  # fmt: skip
    assert "widget_bytes" not in PLAN.props  # the shipped check is as the table was


def test_register_refuses_a_second_field_of_one_key() -> None:
    with pytest.raises(InvalidInputError, match=r"module\.gather_bytes is already registered"):
        F.register_field(PlanField("module", "gather_bytes", "bytes", "again", "Again"))
    with pytest.raises(InvalidInputError, match="group 'nowhere' is not one of"):
        PlanField("nowhere", "x", "bytes", "x")  # type: ignore[arg-type]


# ---- the table is the data's shape -------------------------------------------------------
def test_the_schema_and_the_section_have_the_plan_groups_keys() -> None:
    assert tuple(PLAN.props) == keys("plan")
    assert PLAN.required == tuple(f.key for f in fields("plan") if f.required)
    assert set(make_plan().section()) == set(keys("plan"))
    assert schema_document()["properties"]["plan"] == PLAN.described()


def test_the_sweep_row_has_the_axis_and_row_groups_keys() -> None:
    names = tuple(f for f in SweepRow.__dataclass_fields__)
    assert names == keys("axis") + keys("row")
    row = SweepRow.from_dict(SWEEP["rows"][0])
    assert row["peak_bytes"] == row.peak_bytes == 9 * 2**30
    assert dict(row) == row.to_dict() == SWEEP["rows"][0]
    with pytest.raises(KeyError):
        row["nothing"]
    with pytest.raises(InvalidInputError, match="a sweep row needs mfu"):
        SweepRow.from_dict({k: v for k, v in SWEEP["rows"][0].items() if k != "mfu"})


def test_headers_are_one_word_per_field_in_text_and_page() -> None:
    """The text view and the page name a column alike (the table's header)."""
    text = render_plan(SMALL, width=200)
    page = plan_data(SMALL)["modules"]["columns"]
    shown = line_with(text, "Module").split(" ")
    for key, header, *_ in page:
        f = field("module", key)
        assert header == f.header
        if f.default and " " not in header:
            assert header in shown, header
    sweep = plan_data(SMALL, SWEEP)["sweep"]
    for key, header, *_ in sweep["columns"]:
        group = "axis" if key in keys("axis") else "row"
        assert header == field(group, key).header  # type: ignore[arg-type]


def test_the_kinds_are_the_units_display_formats() -> None:
    for f in F.FIELDS:
        assert f.kind in (*units.BY_KIND, "ratio", "flag", "fits", "text", "data"), f


# ---- the sweep's display face ------------------------------------------------------------
def test_sweep_save_export_and_to_html(tmp_path: Path) -> None:
    sweep = Sweep(SWEEP["axes"], SWEEP["rows"])
    assert all(isinstance(r, SweepRow) for r in sweep.rows)
    sweep.save(tmp_path / "a.json")
    text = (tmp_path / "a.json").read_text(encoding="utf-8")
    assert text == json.dumps({"schema": SWEEP_SCHEMA, **SWEEP}, indent=1) + "\n"
    sweep.export(tmp_path / "b.json")
    assert (tmp_path / "b.json").read_text(encoding="utf-8") == text
    with pytest.raises(ExportError, match="a sweep's table is drawn in a plan's report"):
        sweep.export(tmp_path / "c.html")
    plan = make_plan()
    sweep.to_html(tmp_path / "d.html", plan=plan)
    plan.to_html(tmp_path / "e.html", sweep=sweep)
    d = (tmp_path / "d.html").read_text(encoding="utf-8")
    assert d == (tmp_path / "e.html").read_text(encoding="utf-8")
    assert sweep.render(width=100) == render_sweep(SWEEP, width=100)


# ---- no other module spells the plan's own keys -----------------------------------------
def _other_subjects_keys() -> set[str]:
    """Every property name of the layerscope/1 schema but the plan's, and every metric."""
    doc = schema_document()
    del doc["properties"]["plan"]
    names: set[str] = set()

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            names.update(x.get("properties", {}) if isinstance(x.get("properties"), dict) else ())
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(doc)
    return names | set(ms.METRICS)


def _strings(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }


def test_no_module_outside_planning_spells_the_plans_part_keys() -> None:
    """The parts of memory and time and the module table's columns that are the plan's
    alone (not a key of another subject's document, not a metric; compound names, not
    a word such as ``compute``) appear as a string only under ``planning/``."""
    own = {
        f.key for f in F.FIELDS if f.group in ("memory", "time", "module") and "_" in f.key
    } - _other_subjects_keys()
    assert {"other_bytes", "exposed_comm", "gather_bytes", "kept_activation_bytes"} <= own
    found = {
        (str(p.relative_to(PACKAGE)), key)
        for p in PACKAGE.rglob("*.py")
        if "planning" not in p.relative_to(PACKAGE).parts
        for key in own & _strings(p)
    }
    for asset in (PACKAGE / "export" / "assets").iterdir():
        text = asset.read_text(encoding="utf-8")
        found |= {(asset.name, key) for key in own if f'"{key}"' in text}
    assert not found, sorted(found)


def test_render_and_export_name_planning_only_in_the_subjects_table() -> None:
    """Views and exports hold no plan module and import none; ``export/subjects.py``
    names the module that declares the plan's section, loaded when the schema needs it."""
    naming = sorted(
        str(p.relative_to(PACKAGE))
        for sub in ("render", "export")
        for p in (PACKAGE / sub).rglob("*.py")
        if "layerscope.planning" in p.read_text(encoding="utf-8")
    )
    assert naming == ["export/subjects.py"]
    assert not [p for sub in ("render", "export") for p in (PACKAGE / sub).rglob("*plan*.py")]


def test_a_sweep_takes_the_plans_view_options() -> None:
    """``width`` and ``max_rows`` as for a plan: the first rows, and a line that says so."""
    sweep = Sweep(SWEEP["axes"], SWEEP["rows"])
    full = sweep.render(width=120)
    short = sweep.render(width=120, max_rows=2)
    assert "Showing 2 of 4 rows (max_rows 2)." in short
    assert "Showing" not in full
    rows = [line for line in short.splitlines() if re.match(r" +(8|16) ", line)]
    assert rows == [line for line in full.splitlines() if re.match(r" +8 ", line)]  # the 8s
    with pytest.raises(InvalidInputError, match="max_rows"):
        sweep.render(max_rows=0)
