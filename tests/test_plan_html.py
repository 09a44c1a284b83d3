"""The plan section of the HTML report (``Plan.to_html``, ``planning.html``): its data in
plain Python, then the page in a headless Chromium (as tests/test_html.py: Debian's
``chromium`` driven by Playwright's Python package; the browser tests skip without it).

Most tests use a hand-made plan on ``viewmodels.small()``, every figure chosen: at the
peak params 1,000 B, grads 3,000, optimizer states 4,000, activations 5,000, recompute
500, comm buffers 1,500 (15,000 B); budget 40,000 B, reserve 4,000, so 21,000 B of
headroom; six timeline points; a step of 5 ms.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import torch

import layerscope as ls
from helpers.browser import embedded
from helpers.browser import texts as _texts
from layerscope.errors import ExportError
from layerscope.examples.gpt import tiny_gpt
from layerscope.export.html import to_html_text
from layerscope.planning.fields import PARTS
from layerscope.planning.html import describe, plan_data
from layerscope.planning.html import to_html_text as plan_html_text
from layerscope.planning.result import Plan
from layerscope.planning.sweep import Sweep
from layerscope.render import units
from test_html import BREAKERS, HOSTILE
from viewmodels import small

MEMORY = {
    "param_bytes": 1000,
    "unsharded_param_bytes": 0,
    "grad_bytes": 3000,
    "optimizer_state_bytes": 4000,
    "master_weight_bytes": 0,
    "activation_bytes": 5000,
    "recompute_bytes": 500,
    "comm_buffer_bytes": 1500,
    "other_bytes": 0,
}
PEAK = 15_000
#: phase, event, path and the parts that are not at rest (params 1,000 and optimizer
#: states 4,000 are held at every point)
POINTS: list[tuple[str, str, str, dict[str, int]]] = [
    ("forward", "enter", "", {}),
    ("forward", "exit", "enc", {"activation_bytes": 5000}),
    ("forward", "exit", "head", {"activation_bytes": 7000}),
    ("backward", "peak", "head", dict(MEMORY, param_bytes=0, optimizer_state_bytes=0)),
    ("backward", "end", "", {"grad_bytes": 3000}),
    ("optimizer", "step", "", {"grad_bytes": 3000, "other_bytes": 2000}),
]


def timeline() -> dict[str, list[Any]]:
    cols: dict[str, list[Any]] = {"phase": [], "event": [], "path": [], "total": []}
    cols.update({key: [] for key, _ in PARTS})
    for phase, event, path, parts in POINTS:
        values = {key: parts.get(key, 0) for key, _ in PARTS}
        values["param_bytes"] += 1000
        values["optimizer_state_bytes"] += 4000
        cols["phase"].append(phase)
        cols["event"].append(event)
        cols["path"].append(path)
        for key, v in values.items():
            cols[key].append(v)
        cols["total"].append(sum(values.values()))
    return cols


def section(**changes: Any) -> dict[str, Any]:
    """A plan section with every figure chosen (the module docstring's)."""
    out: dict[str, Any] = {
        "options": {
            "target": "h100",
            "world_size": 8,
            "sharding": "fsdp",
            "precision": "bf16-mixed",
            "optimizer": "adamw",
            "grad_accum": 1,
            "rank": 0,
            "checkpoint": ["enc"],
            "fsdp_units": ["", "enc"],
            "inter_node_bandwidth": 5e10,
        },
        "device": {"name": "h100", "label": "NVIDIA H100", "memory_bytes": 80_000_000_000},
        "states": {
            "param_bytes": 1000,
            "grad_bytes": 3000,
            "optimizer_state_bytes": 4000,
            "master_weight_bytes": 0,
        },
        "peak_bytes": PEAK,
        "memory": dict(MEMORY),
        "peak_phase": {"phase": "backward", "event": "peak", "path": "head"},
        "budget": 40_000,
        "reserve_bytes": 4000,
        "checkpoint": ["enc"],
        "kept_activation_bytes": 2000,
        "recompute_flops": 900,
        "timeline": timeline(),
        "time": {
            "compute": 3e-3,
            "recompute": 1e-3,
            "exposed_comm": 5e-4,
            "optimizer": 5e-4,
            "comm": 2e-3,
        },
        "step_time": 5e-3,
        "model_flops": 3000,
        "mfu": 0.25,
        "tokens": 64,
        "tokens_per_s": 12_800.0,
        "modules": [
            {
                "path": "",
                "type": "Net",
                "params": 100,
                "unit": True,
                "checkpointed": False,
                "activation_bytes": 7000,
                "kept_activation_bytes": 7000,
                "recompute_bytes": 0,
                "recompute_flops": 0,
                "shard_elements": 2,
                "unsharded_bytes": 8,
                "gather_bytes": 1,
                "reduce_bytes": 8,
            },
            {
                "path": "enc",
                "type": HOSTILE,
                "params": 90,
                "unit": True,
                "checkpointed": True,
                "activation_bytes": 5000,
                "kept_activation_bytes": 0,
                "recompute_bytes": 500,
                "recompute_flops": 900,
                "shard_elements": 12,
                "unsharded_bytes": 360,
                "gather_bytes": 45,
                "reduce_bytes": 360,
            },
        ],
        "comm": {
            "": {"forward": {"all_gather": {"calls": 1, "bytes": 1, "wire_bytes": 7}}},
            "enc": {
                "forward": {"all_gather": {"calls": 1, "bytes": 45, "wire_bytes": 315}},
                "backward": {"reduce_scatter": {"calls": 1, "bytes": 360, "wire_bytes": 315}},
            },
        },
        "notes": ["step_time is a lower bound", f"a note naming {HOSTILE}"],
    }
    out.update(changes)
    return out


def make_plan(**changes: Any) -> Plan:
    return Plan.from_dict({**small().to_dict(), "plan": section(**changes)})


SWEEP: dict[str, Any] = {
    "axes": ["micro_batch", "checkpoint"],
    "rows": [
        {"micro_batch": 1, "world_size": 8, "sharding": "fsdp", "checkpoint": None,
         "precision": "bf16-mixed", "optimizer": "adamw", "grad_accum": 1, "fits": True,
         "peak_bytes": 12_000, "headroom_bytes": 24_000, "step_time": 4e-3,
         "tokens_per_s": 8000.0, "mfu": 0.2, "checkpointed": 0},
        {"micro_batch": 2, "world_size": 8, "sharding": "fsdp", "checkpoint": ["enc", "head"],
         "precision": "bf16-mixed", "optimizer": "adamw", "grad_accum": 1, "fits": False,
         "peak_bytes": 40_000, "headroom_bytes": -4000, "step_time": 6e-3,
         "tokens_per_s": 10_666.7, "mfu": 0.31, "checkpointed": 2},
    ],
}  # fmt: skip
#: The sweep table as the page shows it: the axes, then the figures.
SWEEP_TABLE = [
    ["Micro-batch", "Checkpoint", "Fits", "Peak", "Headroom", "Step", "Tokens/s", "MFU",
     "Checkpointed"],
    ["1", "none", "yes", "11.72 KiB", "23.44 KiB", "4 ms", "8 K", "20.0%", "0"],
    ["2", "enc, head", "no", "39.06 KiB", "-3.91 KiB", "6 ms", "10.7 K", "31.0%", "2"],
]  # fmt: skip


# ---- the data (no browser) -----------------------------------------------------------


def test_the_parts_travel_exactly_and_add_up_to_the_peak() -> None:
    data = plan_data(section())
    names = [label for _, label in PARTS]
    assert data["part_names"] == names
    parts = {names[k]: b for k, b in data["parts"]}
    assert parts == {
        "Params": 1000,
        "Grads": 3000,
        "Optimizer states": 4000,
        "Activations": 5000,
        "Recompute": 500,
        "Comm buffers": 1500,
    }  # the parts that are 0 at the peak are left out
    assert sum(parts.values()) == data["peak_bytes"] == PEAK
    assert (data["budget"], data["reserve_bytes"], data["fits"]) == (40_000, 4000, True)
    assert data["headroom_bytes"] == make_plan().headroom_bytes == 40_000 - 4000 - PEAK == 21_000
    over = plan_data(section(budget=18_000))
    assert (over["fits"], over["headroom_bytes"]) == (False, 18_000 - 4000 - PEAK)
    assert data["peak_at"] == {"phase": "backward", "label": "peak in head"}


def test_the_timeline_has_one_point_per_entry() -> None:
    t = plan_data(section())["timeline"]
    n = len(POINTS)
    assert len(t["total"]) == len(t["at"]) == n
    assert t["total"] == timeline()["total"]
    assert t["phases"] == [["forward", 0, 3], ["backward", 3, 5], ["optimizer", 5, 6]]
    assert [t["labels"][i] for i in t["at"]] == [
        "enter <root>",
        "exit enc",
        "exit head",
        "peak in head",
        "end of the backward",
        "optimizer step",
    ]
    # only the parts that are ever held travel, each with a value per point
    sent = {PARTS[k][0]: values for k, values in t["parts"]}
    assert set(sent) == {key for key, v in MEMORY.items() if v} | {"other_bytes"}
    for k in range(n):
        assert sum(values[k] for values in sent.values()) == t["total"][k]
    assert max(t["total"]) == PEAK


def test_malformed_plans_are_export_errors() -> None:
    short = timeline()
    short["path"] = short["path"][:-1]
    with pytest.raises(ExportError, match="timeline is malformed"):
        plan_data(section(timeline=short))
    with pytest.raises(ExportError, match="memory"):
        plan_data(section(memory=None))
    with pytest.raises(ExportError, match="peak_bytes"):
        plan_data(section(peak_bytes="lots"))


def test_a_plain_profile_report_has_no_plan_section() -> None:
    prof = small()
    text = to_html_text(prof)
    assert "ls-plan" not in text and "Training plan" not in text
    assert text.endswith("</script>\n</body>\n</html>\n")
    assert "— layerscope report</title>" in text


def test_the_plan_report_is_the_analysis_report_with_the_plan_section() -> None:
    plan = make_plan()
    assert plan.analysis is not None
    text = plan_html_text(plan.analysis, plan.section())
    # the analysis's data is the plain report's; the plan travels in its own block
    assert embedded(text) == embedded(to_html_text(plan.analysis))
    m = re.search(r'<script type="application/json" id="ls-plan-data">(.*?)</script>', text, re.S)
    assert m is not None
    assert json.loads(m.group(1)) == json.loads(json.dumps(plan_data(plan.section())))
    assert "— layerscope plan</title>" in text
    # strings from the model stay inside the JSON string
    block = m.group(1)
    assert all(b not in block for b in BREAKERS)
    assert "<img" not in block and "\\u003cimg" in block


def test_the_sweep_table_rows() -> None:
    sweep = plan_data(section(), SWEEP)["sweep"]
    assert [c[1] for c in sweep["columns"]] == SWEEP_TABLE[0]
    assert sweep["rows"] == [
        [1, "none", True, 12_000, 24_000, 0.004, 8000, 0.2, 0],
        [2, "enc, head", False, 40_000, -4000, 0.006, 10_666.7, 0.31, 2],
    ]
    # the options that do not change are said once
    assert sweep["same"] == [
        ["world size", "8"],
        ["sharding", "fsdp"],
        ["precision", "bf16-mixed"],
        ["optimizer", "adamw"],
        ["grad accum", "1"],
    ]


def test_to_html_and_export(tmp_path: Path) -> None:
    plan = make_plan()
    assert plan.analysis is not None
    plan.to_html(tmp_path / "a.html", sweep=Sweep(SWEEP["axes"], SWEEP["rows"]))
    plan.export(tmp_path / "b.html")
    a = (tmp_path / "a.html").read_text(encoding="utf-8")
    assert a == plan_html_text(plan.analysis, plan.section(), SWEEP)
    assert (tmp_path / "b.html").read_text(encoding="utf-8") == plan_html_text(
        plan.analysis, plan.section()
    )
    plan.export(tmp_path / "p.json")
    assert ls.load_plan(tmp_path / "p.json").section() == plan.section()
    plan.export(tmp_path / "p.out", format="html")
    assert (tmp_path / "p.out").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    with pytest.raises(ExportError, match=r"html \(\.html, \.htm\) or json"):
        plan.export(tmp_path / "p.csv")
    bare = Plan.from_dict({"plan": section()})
    with pytest.raises(ExportError, match="no analysis"):
        bare.to_html(tmp_path / "c.html")


# ---- in the browser ------------------------------------------------------------------


@pytest.fixture
def open_page(open_html: Any) -> Any:
    return open_html


def _widths(page: Any) -> dict[str, Any]:
    """The peak bar: its scale, each segment's bytes, CSS width (%) and drawn width (px)."""
    found: dict[str, Any] = page.eval_on_selector(
        "#ls-plan-bar",
        """bar => ({scale: +bar.dataset.scale, inner: bar.clientWidth,
            segs: Array.from(bar.children).map(s => ({part: +s.dataset.part,
              bytes: +s.dataset.bytes, pct: parseFloat(s.style.width),
              px: s.getBoundingClientRect().width}))})""",
    )
    return found


def test_plan_section_in_the_page(open_page: Any) -> None:
    plan = make_plan()
    assert plan.analysis is not None
    p = open_page(plan_html_text(plan.analysis, plan.section(), SWEEP))
    page = p.page
    # first on the page: the plan, then the analysis's cards and views
    order = page.eval_on_selector_all(
        "body > *", "els => els.map(e => e.id || e.className || e.tagName)"
    )
    assert order.index("ls-plan") < order.index("cards") < order.index("ls-modules")
    # each part's bytes as the report prints them, in the bar's legend
    legend = _texts(page, "#ls-plan-parts > span")
    names = dict(PARTS)
    want = [(names[k], b) for k, b in MEMORY.items() if b]
    assert legend[: len(want)] == [
        f"{name} {units.nbytes(b)}{units.pct(100 * b / PEAK)}" for name, b in want
    ]
    assert legend[len(want)] == f"= peak {units.nbytes(PEAK)}"
    cards = _texts(page, "#ls-plan-cards .card")
    assert cards[:4] == [
        f"{units.nbytes(PEAK)}Peak per GPU",
        f"{units.nbytes(40_000)}Budget",
        f"{units.nbytes(21_000)}Headroom",
        "5 msStep time",
    ]
    # the stacked bar: segment widths proportional to the parts. The peak is 37.5% of the
    # budget, so the bar is at the budget's scale: 1,000 B is 2.5% of its width.
    bar = _widths(page)
    assert bar["scale"] == 40_000
    assert [(s["part"], s["bytes"]) for s in bar["segs"]] == [
        (k, b) for k, (key, _) in enumerate(PARTS) if (b := MEMORY[key])
    ]
    for s in bar["segs"]:
        assert s["pct"] == pytest.approx(100 * s["bytes"] / 40_000, abs=1e-3)
        assert s["px"] == pytest.approx(bar["inner"] * s["bytes"] / 40_000, abs=0.6)
    assert sum(s["px"] for s in bar["segs"]) == pytest.approx(bar["inner"] * 0.375, abs=1)
    budget = page.locator("#ls-plan-budget")
    assert budget.text_content() == f"budget {units.nbytes(40_000)}"
    reserve = page.eval_on_selector("#ls-plan-reserve", "r => [r.style.left, r.style.width]")
    assert [float(x.rstrip("%")) for x in reserve] == pytest.approx([90.0, 10.0])
    # at the peak's scale the parts fill the bar: 1,000 B of 15,000 is 6.67%
    page.click('#ls-plan-scale button[data-scale="peak"]')
    bar = _widths(page)
    assert bar["scale"] == PEAK
    for s in bar["segs"]:
        assert s["pct"] == pytest.approx(100 * s["bytes"] / PEAK, abs=1e-3)
    assert sum(s["pct"] for s in bar["segs"]) == pytest.approx(100, abs=1e-2)
    assert page.locator("#ls-plan-budget").count() == 0
    # the timeline: one vertex per point, left to right, the highest at the peak
    d = page.get_attribute("#ls-plan-total", "d")
    xy = [tuple(map(float, v.split())) for v in re.findall(r"[ML]([\d.]+ [\d.]+)", d)]
    assert len(xy) == len(POINTS) == len(plan.timeline["total"])
    assert all(a[0] < b[0] for a, b in itertools.pairwise(xy))
    assert min(range(len(xy)), key=lambda k: xy[k][1]) == 3
    assert page.locator("#ls-plan-timeline rect[data-phase]").count() == 3
    # hovering a point names its phase, event and module, and its bytes
    box = page.locator("#ls-plan-timeline").bounding_box()
    page.mouse.move(
        box["x"]
        + xy[1][0]
        * box["width"]
        / float(page.get_attribute("#ls-plan-timeline", "viewBox").split()[2]),
        box["y"] + box["height"] / 2,
    )
    tip = page.locator("#ls-plan-memory .tip").text_content()
    assert tip.split("\n")[:2] == [
        f"point 2 of 6 · forward: {describe('exit', 'enc')}",
        f"{units.nbytes(10_000)} in all",
    ]
    # the tables: modules (the hostile type as text), collectives, the sweep
    rows = page.eval_on_selector_all(
        "#ls-plan-table tr", "trs => trs.map(r => Array.from(r.cells, c => c.textContent))"
    )
    assert rows[0][:4] == ["Module", "Type", "Params", "Unit"]
    assert rows[2][:3] == ["enc", HOSTILE, "90"]
    sweep = page.eval_on_selector_all(
        "#ls-plan-sweep-table tr",
        "trs => trs.map(r => Array.from(r.cells, c => c.textContent))",
    )
    assert sweep == SWEEP_TABLE
    assert _texts(page, "#ls-plan-notes li") == plan.notes
    p.clean()


def test_plan_section_fits_a_narrow_window(open_page: Any) -> None:
    plan = make_plan()
    assert plan.analysis is not None
    p = open_page(plan_html_text(plan.analysis, plan.section(), SWEEP), width=420)
    # nothing wider than the window but the tables, which scroll in their own box
    wide = p.page.evaluate(
        """() => Array.from(document.querySelectorAll('#ls-plan section > *'))
            .filter(e => e.getBoundingClientRect().right > innerWidth + 1)
            .map(e => e.className)"""
    )
    assert wide == []
    p.clean()


@pytest.fixture(scope="module")
def real_plan() -> Plan:
    return ls.plan(
        tiny_gpt(),
        input_shape=(2, 16),
        input_dtype=torch.long,
        target="h100",
        world_size=8,
        sharding="fsdp",
        checkpoint="blocks",
        precision="bf16-mixed",
    )


def test_real_plan_in_the_page(open_page: Any, real_plan: Plan) -> None:
    plan = copy.copy(real_plan)
    assert plan.analysis is not None
    p = open_page(plan_html_text(plan.analysis, plan.section()))
    page = p.page
    n = page.get_attribute("#ls-plan-total", "data-points")
    assert n is not None and int(n) == len(plan.timeline["total"])
    bar = _widths(page)
    parts = {key: plan.memory[key] for key, _ in PARTS if plan.memory[key]}
    assert sum(s["bytes"] for s in bar["segs"]) == plan.peak_bytes == sum(parts.values())
    for s in bar["segs"]:
        assert s["pct"] == pytest.approx(100 * s["bytes"] / bar["scale"], abs=1e-3)
    assert page.locator("#ls-plan-peak").is_visible()
    # the prediction, and beside it the roofline bound and the counted MFU
    labels = _texts(page, "#ls-plan-cards .card span")
    assert labels[labels.index("Step time") :] == [
        "Step time", "Step bound", "MFU", "MFU (counted)", "Tokens/s",
    ]  # fmt: skip
    bound = units.seconds(plan.step_time_bound or 0.0)
    assert f"the roofline lower bound is {bound}" in (page.text_content("#ls-plan-time") or "")
    p.clean()


def test_a_plan_without_budget_rate_or_tables(open_page: Any) -> None:
    """No budget, MFU or tokens, no module rows or collectives: the page says so, no more."""
    plan = make_plan(
        budget=None, mfu=None, tokens=None, tokens_per_s=None, modules=[], comm={},
        checkpoint=[], time={"compute": 1e-3, "recompute": 0, "exposed_comm": 0,
                             "optimizer": 0, "comm": 0},
    )  # fmt: skip
    assert plan.analysis is not None and plan.fits is None
    p = open_page(plan_html_text(plan.analysis, plan.section()))
    page = p.page
    assert _texts(page, "#ls-plan-cards .card span") == ["Peak per GPU", "Step time"]
    assert page.locator("#ls-plan-scale, #ls-plan-budget, #ls-plan-limits").count() == 0
    assert _widths(page)["scale"] == PEAK
    assert page.locator("#ls-plan-modules, #ls-plan-comm, #ls-plan-sweep").count() == 0
    assert _texts(page, "#ls-plan-timebar > i") == [""]
    p.clean()


def test_a_plan_over_its_budget(open_page: Any) -> None:
    """Budget 18,000 B, reserve 4,000: the 15,000-B peak runs 1,000 B into the reserve."""
    plan = make_plan(budget=18_000)
    assert plan.analysis is not None and plan.fits is False
    page = open_page(plan_html_text(plan.analysis, plan.section())).page
    card = page.locator("#ls-plan-cards .card.pl-bad")
    assert card.text_content() == f"{units.nbytes(1000)}Over budget"
    bar = _widths(page)
    assert bar["scale"] == 18_000  # the budget's scale: the parts fill 15 / 18 of the bar
    assert sum(s["pct"] for s in bar["segs"]) == pytest.approx(100 * 15 / 18, abs=1e-2)
    reserve = page.eval_on_selector("#ls-plan-reserve", "r => [r.style.left, r.style.width]")
    assert [float(x.rstrip("%")) for x in reserve] == pytest.approx([100 * 14 / 18, 100 * 4 / 18])


DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.mark.skipif(
    os.environ.get("LAYERSCOPE_UPDATE_SCREENSHOTS") != "1",
    reason="retakes docs/plan-report.png when asked",
)
def test_docs_plan_screenshot(open_page: Any, real_plan: Plan) -> None:
    """``LAYERSCOPE_UPDATE_SCREENSHOTS=1 pytest tests/test_plan_html.py -k docs``:
    tiny_gpt on 8 H100s (FSDP, bf16-mixed, blocks checkpointed), the plan's cards, peak
    and timeline at 1200 px."""
    assert real_plan.analysis is not None
    page = open_page(plan_html_text(real_plan.analysis, real_plan.section()), width=1200).page
    top = page.locator("#ls-plan > h2").bounding_box()
    end = page.locator("#ls-plan-time").bounding_box()
    page.screenshot(
        path=str(DOCS / "plan-report.png"),
        full_page=True,
        clip={
            "x": 0,
            "y": top["y"] - 8,
            "width": 1200,
            "height": end["y"] + end["height"] - top["y"] + 16,
        },
    )


def test_a_long_checkpoint_list_is_summarised(open_page: Any) -> None:
    """Six checkpointed blocks: the subtitle says what was asked and how many it chose,
    as the terminal's heading does; the facts name the first two and the last."""
    blocks = [torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()) for _ in range(6)]
    model = torch.nn.Sequential(*blocks)
    plan = ls.plan(model, torch.randn(4, 8), checkpoint="blocks", precision="fp32")
    assert plan.checkpoint == [str(i) for i in range(6)] and plan.analysis is not None
    p = open_page(plan_html_text(plan.analysis, plan.section()))
    sub = p.page.inner_text("#ls-plan .sub")
    assert sub.endswith(" \u00b7 checkpointing blocks: 6 modules"), sub
    assert "compiled" not in sub
    compiled = ls.plan(model, torch.randn(4, 8), checkpoint="blocks", precision="fp32",
                       compile=True)  # fmt: skip
    assert compiled.analysis is not None
    q = open_page(plan_html_text(compiled.analysis, compiled.section()))
    assert " \u00b7 compiled \u00b7 checkpointing" in q.page.inner_text("#ls-plan .sub")
    facts = [f for f in _texts(p.page, "#ls-plan .facts li") if f.startswith("Checkpointed")]
    words = "Checkpointed: 0, 1, \u2026, 5 (6 modules); activations kept "
    assert facts[0].startswith(words), facts
    p.clean()


def test_columns_past_the_edge_are_counted_below_the_table(open_page: Any, real_plan: Plan) -> None:
    """At 700 px the module table is wider than its box: the line under it counts the
    columns past the right edge (the page's own count of header cells past it), and is
    hidden once the table is scrolled to its end."""
    assert real_plan.analysis is not None
    p = open_page(plan_html_text(real_plan.analysis, real_plan.section()), width=700)
    page = p.page
    wrap = "document.querySelector('#ls-plan-table').parentNode"
    page.wait_for_timeout(100)
    hidden = page.evaluate(
        f"""() => {{ const w = {wrap};
            const edge = w.getBoundingClientRect().left + w.clientLeft + w.clientWidth + 1;
            return Array.from(w.querySelectorAll('thead th'))
                .filter(h => h.getBoundingClientRect().right > edge).length; }}"""
    )
    assert hidden > 1
    cue = page.evaluate(f"() => [{wrap}.nextSibling.className, {wrap}.nextSibling.textContent]")
    words = f"{hidden} more columns to the right: scroll the table sideways \u2192"
    assert cue == ["sidecue", words]
    page.evaluate(f"() => {{ const w = {wrap}; w.scrollLeft = w.scrollWidth; }}")
    page.wait_for_timeout(100)
    assert page.evaluate(f"() => {wrap}.nextSibling.hidden")
    p.clean()


def test_a_pipeline_plan_in_the_page(open_page: Any) -> None:
    """A pipeline's plan: the subtitle names the pipeline, the stages' table has a row
    per stage with the plan's figures, and the time adds the bubble."""
    model = torch.nn.Sequential(*(torch.nn.Linear(16, 16) for _ in range(4)))
    plan = ls.plan(model, input_shape=(2, 16), mesh={"pp": 2, "dp_shard": 2}, microbatches=4)
    assert plan.analysis is not None and plan.pipeline is not None
    p = open_page(plan_html_text(plan.analysis, plan.section()))
    page = p.page
    assert "pipeline 2 (1f1b, 4 microbatches)" in (page.text_content("#ls-plan") or "")
    said = page.text_content("#ls-plan-stages .note") or ""
    assert "2 stages, 1f1b, 4 microbatches; this plan is stage" in said
    headers = _texts(page, "#ls-plan-stages-table th")
    assert headers[:3] == ["Stage", "Modules", "Pieces"]
    cells = _texts(page, "#ls-plan-stages-table tbody tr:first-child td")
    assert cells[:3] == ["0", "0 .. 1", "2"]  # stage 0 runs Linears 0 and 1
    peaks = [r["peak_bytes"] for r in plan.pipeline["rows"]]
    assert _texts(page, "#ls-plan-stages-table tbody td:nth-child(8)") == [
        units.nbytes(b) for b in peaks
    ]
    assert "Bubble" in (page.text_content("#ls-plan-time") or "")
    p.clean()
