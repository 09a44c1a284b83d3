"""The HTML report shows the text view's digits: floats travel whole (no rounding before
the page's own, which is the console's), so a value never rounds twice (0.1235000001 is
0.124 in both, not 0.123 in the page), and a column the page rebuilds (a time total) is
rebuilt only where that gives the very same float."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import layerscope as ls
from helpers.browser import Page, embedded, report_pages
from layerscope import examples
from layerscope.export.html import page_number, report_data, to_html_text
from layerscope.profile import Profile
from layerscope.render.context import ViewContext
from layerscope.render.options import view_options
from viewmodels import build, node

#: Rounded to 6 significant digits first, 0.1235 is a tie that rounds to 0.123 in 3
ABSMAX = 0.1235000001
#: A time a real profile had: 3.775 µs at 6 digits, a tie that rounds to 3.77 µs in 3
SECONDS = 3.7750000000000003e-06


def _edge_profile() -> Profile:
    prof = build(node("Net", "Net", node("a", "Identity"), node("b", "Identity")))
    a, b = prof.root.children
    for n, t in ((prof.root, 2 * SECONDS), (a, SECONDS), (b, SECONDS)):
        n.metrics["forward_time"] = t
        n.self_metrics["forward_time"] = t if n.path else 0.0
    a.numerics = {"absmax": ABSMAX}
    b.numerics = {"absmax": 1.0}
    prof.root.numerics = {"absmax": 1.0}
    return prof


def test_floats_travel_whole() -> None:
    assert page_number(ABSMAX) == ABSMAX and page_number(SECONDS) == SECONDS
    assert page_number(2.0) == 2 and isinstance(page_number(2.0), int)
    assert page_number(float("nan")) == "NaN" and page_number(None) is None
    data = embedded(to_html_text(_edge_profile()))
    assert data["v"]["absmax"] == [1, ABSMAX, 1]
    assert data["v"]["forward_time"] == [2 * SECONDS, SECONDS, SECONDS]


def test_a_total_is_rebuilt_only_when_exact() -> None:
    """The page rebuilds ``<time>_total`` as per-call × calls: only where Python's total is
    that very float (a sum of repeats may differ from a product in the last bit)."""
    from layerscope.export.html import _derivable

    assert report_data(_edge_profile())["derived"]["forward_time_total"] == [
        "total",
        "forward_time",
    ]
    exact = {"forward_time": [0.1], "forward_time_total": [0.1 * 3]}
    assert _derivable(exact, {}, [], [3]) == {"forward_time_total": ["total", "forward_time"]}
    # 0.1 + 0.1 + 0.1 is 0.30000000000000004, 0.1 * 3 0.30000000000000004 too, but 0.3
    # (a total from other parts) would show other digits at 17: it travels
    close = {"forward_time": [0.1], "forward_time_total": [0.3]}
    assert _derivable(close, {}, [], [3]) == {}


@pytest.fixture
def open_page(browser: Any, tmp_path: Path) -> Iterator[Any]:
    def open_every_column(prof: Profile, width: int = 1600) -> Page:
        p = open_(prof, width)
        # every column the page has, shown
        p.page.eval_on_selector_all(
            "details.cols input", "cbs => cbs.forEach(cb => { if (!cb.checked) cb.click(); })"
        )
        return p

    with report_pages(browser, tmp_path) as open_:
        yield open_every_column


def _cells(p: Page) -> dict[int, dict[str, str]]:
    """The table's cells: node index -> column key -> the text shown (``pct``: the %)."""
    keys: list[str] = p.page.eval_on_selector_all(
        "#ls-table thead th", "hs => hs.map(h => h.dataset.key || '')"
    )
    rows: list[list[Any]] = p.page.eval_on_selector_all(
        "#ls-table tbody tr[data-i]",
        "rs => rs.map(r => [+r.dataset.i, [...r.cells].map(c => c.textContent)])",
    )
    return {i: dict(zip(keys, texts, strict=True)) for i, texts in rows}


def _same_as_text_view(prof: Profile, p: Page) -> int:
    """Every number cell of the page against the text view's cell of that node and column
    (``ViewContext.cell``, the table views' formatting); returns how many were compared."""
    ctx = ViewContext(prof, view_options(fold=False))
    nodes = ctx.profile.nodes()
    chart: str = p.page.evaluate(
        "() => { const c = document.getElementById('ls-icicle');"
        " return c ? c.dataset.metric : ''; }"
    )
    compared, differ = 0, []
    for i, row in _cells(p).items():
        for key, shown in row.items():
            if key in ("", "name", "input_shape", "output_shape"):
                continue
            text_key = f"{chart.removesuffix('_total')}_pct" if key == "pct" else key
            want = ctx.cell(nodes[i], text_key)
            compared += 1
            if shown != want:
                differ.append((nodes[i].path, key, shown, want))
    assert differ == []
    return compared


def test_edge_values_show_the_text_views_digits(open_page: Any) -> None:
    prof = _edge_profile()
    p = open_page(prof)
    row = _cells(p)[1]
    assert (row["absmax"], row["forward_time"]) == ("0.124", "3.78 µs")
    assert prof.render(width=120, columns=["absmax", "forward_time"]).count("0.124") == 1
    assert _same_as_text_view(prof, p) > 0
    # the icicle's tooltip too: a's time, half the model's
    title = p.page.text_content('#ls-icicle g[data-i="1"] title')
    assert title.split("\n")[1] == "Fwd time: 3.78 µs (50.0% of the model)"
    p.clean()


def test_a_real_profile_shows_the_text_views_digits(open_page: Any) -> None:
    """tiny_gpt with a backward, memory, two timed repeats and numerics: every cell."""
    ex = examples.get("tiny_gpt")
    torch.manual_seed(0)
    prof = ls.profile(
        ex.build(), ex.example_input(), backward=True, memory=True,
        timing={"warmup": 0, "repeats": 2}, numerics="record",
    )  # fmt: skip
    p = open_page(prof)
    assert _same_as_text_view(prof, p) > 300
    p.page.locator('#ls-metric button[data-key="forward_time_total"]').click()
    assert _same_as_text_view(prof, p) > 300  # the % of time too
    p.clean()


def test_numerics_of_a_float64_model_match(open_page: Any) -> None:
    """The audit's case: a float64 model whose values are 0.1235000001."""

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Identity()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.a(x)
            return out

    x = torch.tensor([ABSMAX, ABSMAX], dtype=torch.float64)
    prof = ls.profile(M().double(), x, numerics="record")
    p = open_page(prof)
    assert _cells(p)[1]["absmax"] == "0.124"
    assert _same_as_text_view(prof, p) > 0
    p.clean()
