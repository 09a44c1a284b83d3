"""Which row a report shows, and a chart whose rows span decades: a sweep's report names
the row its plan section is (the terminal's words) and marks it in the Sweep table; the
serving report's Batches chart draws time per output token on a log axis when the rows'
times span more than 10x (a toggle back to linear), its labels apart."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from layerscope.cli import main
from layerscope.generation.serving import plan_serving
from layerscope.planning.html import plan_data
from test_plan_html import SWEEP, section
from test_serving import llama
from test_serving import plan as small_serving

SHOWN = "the plan of the row micro_batch 4 (the most tokens/s that fits)"


def test_the_row_the_plan_is_travels_with_the_sweep() -> None:
    """The row whose peak and step time are the plan's; why it was chosen only when it is
    ``Sweep.best``'s; none when no row is the plan."""
    best = plan_data(section(peak_bytes=12_000, step_time=4e-3), SWEEP)["sweep"]
    assert best["shown"] == 0
    assert best["shown_said"] == (
        "the plan of the row micro_batch 1, checkpoint none (the most tokens/s that fits)"
    )
    other = plan_data(section(peak_bytes=40_000, step_time=6e-3), SWEEP)["sweep"]
    assert (other["shown"], other["shown_said"]) == (
        1,
        "the plan of the row micro_batch 2, checkpoint enc+head",
    )
    none = plan_data(section(), SWEEP)["sweep"]
    assert (none["shown"], none["shown_said"]) == (None, None)


def test_a_sweep_report_names_and_marks_its_row(
    open_html: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sweep.html"
    args = ["plan", "examples:tiny_gpt", "--sweep", "micro_batch=1,2,4", "--html", str(out), "-q"]
    assert main(args) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert f"HTML report: {SHOWN}." in printed
    p = open_html(out.read_text(encoding="utf-8"))
    page = p.page
    assert page.text_content("#ls-plan-row") == (
        f"Shown: {SHOWN}; its row is marked \u25c0 in the Sweep table below."
    )
    # right under the title, above the cards
    order = page.eval_on_selector_all("#ls-plan > *", "es => es.map(e => e.id || e.className)")
    assert order[:3] == ["pl-title", "ls-plan-row", "sub"]

    def marked() -> list[list[str]]:
        got: list[list[str]] = page.eval_on_selector_all(
            "#ls-plan-sweep-table tbody tr",
            """trs => trs.map(r => [r.className, r.cells[0].firstChild.textContent,
                Array.from(r.querySelectorAll('.pl-shown-mark'), m => m.textContent).join('|')])""",
        )
        return got

    assert marked() == [["", "1", ""], ["", "2", ""], ["pl-shown", "4", "\u25c0 shown above"]]
    assert (
        page.get_attribute("#ls-plan-sweep-table tr.pl-shown", "title") == f"Shown above: {SHOWN}"
    )
    page.click("#ls-plan-sweep-table th:first-child")  # sorted: the mark moves with its row
    assert marked()[0] == ["pl-shown", "4", "\u25c0 shown above"]
    p.clean()


def _labels_apart(page: Any) -> bool:
    boxes = page.eval_on_selector_all(
        "#ls-serve-chart text.sv-label",
        """ts => ts.map(t => { const b = t.getBoundingClientRect();
            return [b.left, b.top, b.right, b.bottom]; })""",
    )
    return all(
        a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1]
        for i, a in enumerate(boxes)
        for b in boxes[i + 1 :]
    )


def test_the_batches_chart_is_log_when_the_times_span_decades(
    open_html: Any, tmp_path: Path
) -> None:
    """The maximum concurrency's row (about 50x the small batches' time per token): a log
    axis by default, the small batches well above its floor, no label over another; the
    toggle draws it linear again."""
    served = plan_serving(llama(), target="h100", max_context=1024, prompt=768, new_tokens=256)
    tpots = [r["tpot"] for r in served.to_dict()["rows"]]
    assert max(tpots) / min(tpots) > 10
    served.to_html(tmp_path / "s.html")
    for width in (1400, 700):
        p = open_html((tmp_path / "s.html").read_text(), width=width, ready="#ls-serve[data-ready]")
        page = p.page
        assert page.get_attribute("#ls-serve-chart", "data-scale") == "log"
        buttons = page.eval_on_selector_all(
            "#ls-serve-scale button", "bs => bs.map(b => [b.textContent, b.className])"
        )
        assert buttons == [["Scale: log", "on"], ["Scale: linear", ""]]
        axis = page.eval_on_selector_all(
            "#ls-serve-chart text.sv-axis", "ts => ts.map(t => t.textContent)"
        )
        assert axis[:3] == ["1 ms", "10 ms", "per output token (log scale)"]
        ys = page.eval_on_selector_all(
            "#ls-serve-chart circle.sv-pt", "cs => cs.map(c => +c.getAttribute('cy'))"
        )
        grid = page.eval_on_selector_all(
            "#ls-serve-chart line.sv-grid", "ls => ls.map(g => +g.getAttribute('y1'))"
        )
        # a decade (1 ms to 10 ms) is as tall as log10 of the times' ratio says
        decades = math.log10(max(tpots) / min(tpots))
        assert (max(ys) - min(ys)) / (grid[0] - grid[1]) == pytest.approx(decades, rel=1e-3)
        assert _labels_apart(page)
        page.click("#ls-serve-scale button[data-scale=linear]")
        assert page.get_attribute("#ls-serve-chart", "data-scale") == "linear"
        axis = page.eval_on_selector_all(
            "#ls-serve-chart text.sv-axis", "ts => ts.map(t => t.textContent)"
        )
        assert axis[0] == "0 ns" and axis[3] == "per output token"
        assert _labels_apart(page)
        p.clean()


def test_times_within_10x_keep_the_linear_axis(open_html: Any, tmp_path: Path) -> None:
    small_serving().to_html(tmp_path / "s.html")
    page = open_html((tmp_path / "s.html").read_text(), ready="#ls-serve[data-ready]").page
    assert page.get_attribute("#ls-serve-chart", "data-scale") == "linear"
    assert page.locator("#ls-serve-scale").count() == 0  # the same time at every batch
