"""The report's Modules table for keyboard users and narrow windows, and its cells as the
text view has them: the focus survives a repaint, long names wrap, hidden columns are
announced, a name's direction marks stay inside it, calls and numerics as in the text.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import layerscope as ls
from helpers.browser import embedded, report_pages
from layerscope.export.html import to_html_text
from layerscope.render.context import ViewContext
from layerscope.render.options import view_options
from viewmodels import build, node, small

FOCUSED = (
    "() => { const a = document.activeElement;"
    " return [a.tagName, a.className, (a.closest('[data-i]') || {dataset: {}}).dataset.i,"
    " a.dataset.key || null]; }"
)


@pytest.fixture
def open_report(browser: Any, tmp_path: Path) -> Iterator[Any]:
    with report_pages(browser, tmp_path) as open_:
        yield lambda prof, width=1280: open_(prof, width)


def test_enter_on_a_toggle_keeps_the_focus(open_report: Any) -> None:
    p = open_report(small())
    page = p.page
    page.focus('#ls-table tr[data-i="1"] .tog')  # enc
    page.keyboard.press("Enter")
    assert p.rows() == ["Net", "enc", "head", "drop"]
    assert page.evaluate(FOCUSED) == ["BUTTON", "tog", "1", None]
    page.keyboard.press("Enter")  # the same button again: expanded
    assert p.rows() == ["Net", "enc", "attn", "mlp", "head", "drop"]
    assert page.evaluate(FOCUSED) == ["BUTTON", "tog", "1", None]
    page.keyboard.press("Shift+Tab")  # on from there (Net's toggle), not from the page's end
    assert page.evaluate(FOCUSED) == ["BUTTON", "tog", "0", None]
    p.clean()


def test_enter_on_a_header_keeps_the_focus(open_report: Any) -> None:
    p = open_report(small())
    page = p.page
    page.focus('#ls-table th[data-key="flops"]')
    page.keyboard.press("Enter")
    assert p.rows() == ["Net", "enc", "mlp", "attn", "head", "drop"]
    assert page.evaluate(FOCUSED) == ["TH", "desc", None, "flops"]
    page.keyboard.press("Enter")
    assert page.evaluate(FOCUSED) == ["TH", "asc", None, "flops"]
    page.keyboard.press("Enter")  # tree order
    assert p.rows() == ["Net", "enc", "attn", "mlp", "head", "drop"]
    assert page.evaluate(FOCUSED) == ["TH", "", None, "flops"]
    p.clean()


LONG = ".".join(["transformer", "encoder_layers_with_a_long_name"] * 8)


def test_long_module_path_wraps_in_the_legend_and_notes(open_report: Any) -> None:
    prof = small()
    prof.notices.append(f"a notice naming {LONG}")
    p = open_report(prof, width=800)
    page = p.page
    page.evaluate(  # the legend as a long path makes it (the timeline names one)
        "t => { const l = document.getElementById('ls-tl-legend')"
        " || document.body.appendChild(Object.assign(document.createElement('div'),"
        " {id: 'ls-tl-legend', className: 'note'})); l.textContent = t; }",
        LONG,
    )
    for sel in ("#ls-tl-legend", ".note"):
        assert page.eval_on_selector(sel, "e => getComputedStyle(e).overflowWrap") == "anywhere"
    widths = page.evaluate(
        "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert widths[0] <= widths[1]  # no sideways scroll at 800 px
    notes = page.eval_on_selector_all(".note", "es => es.map(e => e.textContent)")
    assert any(LONG in t for t in notes)
    p.clean()


def wide_profile() -> Any:
    """Many columns: more than an 800-px window shows."""
    leaf = node(
        "a_rather_long_module_name",
        "Linear",
        flops=9e9,
        params=1e6,
        macs=4e9,
        activation_bytes=1e6,
        peak_bytes=2e6,
        forward_time=1e-3,
        backward_time=2e-3,
        backward_flops=1.8e10,
    )
    return build(node("Net", "Net", leaf))


def test_modules_table_announces_columns_past_the_edge(open_report: Any) -> None:
    p = open_report(wide_profile(), width=560)
    page = p.page
    cue = page.locator("#ls-modules .sidecue")
    cue.wait_for(state="attached")
    page.wait_for_timeout(100)
    hidden = page.evaluate(
        "() => { const w = document.querySelector('#ls-modules .tablewrap');"
        " const edge = w.getBoundingClientRect().left + w.clientLeft + w.clientWidth + 1;"
        " return [...document.querySelectorAll('#ls-table thead th')]"
        ".filter(h => h.getBoundingClientRect().right > edge).length; }"
    )
    assert hidden >= 1
    word = "more columns" if hidden > 1 else "more column"
    assert cue.text_content() == f"{hidden} {word} to the right: scroll the table sideways →"
    assert cue.is_visible()
    page.set_viewport_size({"width": 2400, "height": 900})  # all fit: the cue goes
    page.wait_for_function("() => document.querySelector('#ls-modules .sidecue').hidden")
    assert cue.text_content() == ""
    p.clean()


BIDI = "evil\u202eesrever"


def test_direction_marks_stay_inside_a_name(open_report: Any) -> None:
    prof = build(node("Net", "Net", node(BIDI, BIDI + "Type", flops=1)))
    p = open_report(prof)
    page = p.page
    for sel in (".nm", ".ty"):
        styles = page.eval_on_selector_all(
            f"#ls-table {sel}", "es => es.map(e => getComputedStyle(e).unicodeBidi)"
        )
        assert styles and set(styles) == {"isolate"}, sel
    assert p.rows()[1] == BIDI  # the text itself unchanged
    p.clean()


def test_calls_of_a_module_never_run_as_the_text_view(open_report: Any) -> None:
    prof = small()  # drop: calls=0
    p = open_report(prof)
    p.page.click("#ls-modules details.cols summary")  # a column shown on request
    p.page.check('#ls-modules details.cols input[data-key="calls"]')
    heads = p.page.eval_on_selector_all("#ls-table th", "hs => hs.map(h => h.dataset.key)")
    col = heads.index("calls")
    ctx = ViewContext(prof, view_options(fold=False))
    for i, n in enumerate(prof.nodes()):
        cell = p.page.locator(f'#ls-table tr[data-i="{i}"] td').nth(col)
        assert cell.text_content() == ctx.cell(n, "calls"), n.path
    drop = prof.nodes().index(next(n for n in prof.nodes() if n.name == "drop"))
    assert p.page.locator(f'#ls-table tr[data-i="{drop}"] td').nth(col).text_content() == "-"
    p.clean()


def test_all_zero_nan_inf_columns_hidden_as_in_the_text_view() -> None:
    prof = small()
    for n in prof.nodes():
        n.numerics = {"absmax": 2.5, "nan": 0, "inf": 0}
    keys = [c["key"] for c in embedded(to_html_text(prof))["columns"]]
    text = ViewContext(prof, view_options(fold=False)).columns
    assert "absmax" in keys and "absmax" in text
    assert "nan" not in keys and "inf" not in keys
    assert "nan" not in text and "inf" not in text
    prof.nodes()[2].numerics["nan"] = 3  # one module with a NaN: the column is back
    keys = [c["key"] for c in embedded(to_html_text(prof))["columns"]]
    assert "nan" in keys and "nan" in ViewContext(prof, view_options(fold=False)).columns


def test_without_javascript_every_report_says_what_it_needs(tmp_path: Path) -> None:
    """A plan's report, not only a profile's, says why it shows nothing without
    JavaScript (it said "to show the profile" in every report)."""
    plan = ls.plan(nn.Sequential(nn.Linear(8, 8)), torch.randn(2, 8), world_size=1,
                   sharding="none", precision="fp32")  # fmt: skip
    plan.to_html(tmp_path / "plan.html")
    page = (tmp_path / "plan.html").read_text(encoding="utf-8")
    assert (
        "<noscript>This report needs JavaScript to draw its tables and charts.</noscript>" in page
    )
    assert "show the profile" not in page
