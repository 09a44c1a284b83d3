"""The HTML report: its data and escaping (plain Python), and the page itself in a real
headless Chromium (Debian's ``chromium``, driven by Playwright's Python package, whose
wheel ships its own driver: no browser download, no ``playwright install``).

The browser tests skip where no Chromium is installed: ``apt-get install -y chromium
chromium-driver`` (``.ci/run`` does it). ``pytest -s`` prints the timings of a
10,000-module report.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import layerscope as ls
from helpers.browser import embedded, report_pages
from layerscope import examples
from layerscope.errors import ExportError
from layerscope.export import export
from layerscope.export.html import report_data, script_json, to_html, to_html_text
from layerscope.profile import Node, Profile
from layerscope.render import units
from layerscope.render.summary import summary_lines
from viewmodels import build, node, small

HOSTILE = "</script><img src=x onerror=alert(1)>"
#: Strings that must never appear raw in the embedded JSON.
BREAKERS = ("</", "<!--", "\u2028", "\u2029")


def chart_profile() -> Profile:
    """FLOPs and params in different proportions, so the chart changes with the metric."""
    return build(
        node(
            "Net",
            "Net",
            node(
                "enc",
                "Encoder",
                node("attn", "Attention", flops=600, params=10),
                node("mlp", "MLP", flops=300, params=80),
            ),
            node("head", "Linear", flops=100, params=10),
        )
    )


def hostile_profile() -> Profile:
    prof = build(
        node(
            "Net",
            "Net",
            node(HOSTILE, "<b>Bold</b>", flops=10, params=1),
            node("sep\u2028line<!--", "Linear", flops=5, params=2),
        ),
        name=HOSTILE,
    )
    prof.notices.append(f"a notice naming {HOSTILE}")
    prof.unsupported_ops["aten::<img src=y onerror=alert(2)>"] = {
        "count": 1,
        "forward": 1,
        "backward": 0,
        "modules": {HOSTILE: 1},
    }
    return prof


def big_profile(blocks: int, layers: int = 10, leaves: int = 9) -> Profile:
    """``1 + blocks * (1 + layers * (1 + leaves))`` modules: 10,101 for 100 blocks."""
    children = []
    for b in range(blocks):
        layer_nodes = []
        for i in range(layers):
            leaf_nodes = [
                node(
                    str(k),
                    "Linear",
                    flops=1000 * (k + 1) + i,
                    params=100 + 10 * k,
                    activation_bytes=512 * k,
                    peak_bytes=4096 * (k + 1),
                    forward_time=1e-5 * (k + 1),
                )
                for k in range(leaves)
            ]
            layer_nodes.append(node(str(i), "Layer", *leaf_nodes, flops=7))
        children.append(node(f"block{b}", "Block", *layer_nodes))
    return build(node("Net", "Net", *children, flops=3))


# ---- the file and its data (no browser) -----------------------------------------------


def test_one_self_contained_file(tmp_path: Path) -> None:
    prof = small()
    out = tmp_path / "r.html"
    to_html(prof, out)
    text = out.read_text(encoding="utf-8")
    assert text == to_html_text(prof)
    assert text.startswith("<!DOCTYPE html>")
    # nothing to fetch: no external scripts, styles, images, fonts or imports
    for ref in ("<script src", "<link", "src=", "href=", "@import", "url("):
        assert ref not in text, ref
    assert "default-src 'none'" in text  # and the page may not fetch anything either
    data = embedded(text)
    assert data["name"] == ["Net", "enc", "attn", "mlp", "head", "drop"]
    assert data["depth"] == [0, 1, 2, 2, 1, 1]
    assert data["v"]["flops"] == [1000, 900, 400, 500, 80, 0]
    # self values travel for the nodes with children only (leaves: self = inclusive)
    assert data["inner"] == [0, 1] and data["s"]["flops"] == [20, None]
    # paths and ids follow from the tree: none travel
    assert data["path"] == {} and data["id"] == {}
    assert [c["key"] for c in data["columns"]] == ["params", "flops", "calls"]
    assert [c["key"] for c in data["chart"]] == ["flops", "params"]
    assert data["not_called"] == [5]
    assert data["facts"] == [[t, s] for t, s in summary_lines(prof)]


def test_export_picks_html_from_the_extension(tmp_path: Path) -> None:
    prof = small()
    prof.export(tmp_path / "p.html")
    assert (tmp_path / "p.html").read_text(encoding="utf-8") == to_html_text(prof)
    with pytest.raises(ExportError, match="directory"):
        to_html(prof, tmp_path)


def test_hostile_strings_never_leave_the_json_string() -> None:
    prof = hostile_profile()
    text = to_html_text(prof)
    head, _, rest = text.partition('id="ls-data">')
    payload, _, _ = rest.partition("</script>")
    for raw in BREAKERS:
        assert raw not in payload, raw
    assert "<img" not in text and "<b>" not in text  # escaped in the title too
    assert "&lt;/script&gt;&lt;img" in head  # <title>, HTML-escaped
    data = json.loads(payload)
    assert data["name"][1] == HOSTILE and data["types"][1] == "<b>Bold</b>"
    assert data["name"][2] == "sep\u2028line<!--"
    assert json.loads(script_json(["</script>", "<!--", "\u2028\u2029", "&"])) == [
        "</script>",
        "<!--",
        "\u2028\u2029",
        "&",
    ]


def test_non_finite_values_travel_as_strings() -> None:
    prof = small()
    prof.root.numerics = {"absmax": math.inf, "nan": 3, "mean": math.nan}
    prof.root.children[0].metrics["forward_time"] = 1.234567891e-5
    data = embedded(to_html_text(prof))  # json.loads would reject NaN: none is there
    assert data["v"]["absmax"][0] == "Infinity"
    assert data["v"]["forward_time"][1] == 1.234567891e-5  # whole (test_html_digits.py)


def test_real_profile_carries_the_memory_timeline() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
    prof = ls.profile(model, torch.randn(2, 4), memory=True, backward=True)
    data = report_data(prof)
    t = prof.memory["timeline"]
    tl = data["timeline"]
    assert tl["op"] == t["op"] and tl["bytes"] == t["bytes"]
    letter = {"enter": "e", "exit": "x", "backward": "b", "peak": "p", "end": "n"}
    assert tl["event"] == "".join(letter[e] for e in t["event"])
    assert tl["event"].endswith("bpn")  # the Linear's backward, the peak in it, the end
    index = {n.path: i for i, n in enumerate(prof.nodes())}
    # the loss's backward ran outside the model: its path stays a string
    assert tl["node"] == [index.get(p, p) for p in t["path"]]
    assert "<outside>" in tl["node"]
    # what was held when the run began: the two Linears' parameters, 4*8*4 + 8*4 = 160 B
    assert prof.memory["baseline_bytes"] == 160
    assert tl["baseline"] == 160 and tl["baseline_kinds"] == [["params", 160]]
    assert tl["absolute_peak"] == 160 + prof.memory["session_peak_bytes"]
    assert {"peak_bytes", "activation_bytes", "output_shape"} <= {c["key"] for c in data["columns"]}


def test_sizes_and_write_time(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    one_k = big_profile(10)  # 1,011 modules
    to_html(one_k, tmp_path / "1k.html")
    size_1k = os.path.getsize(tmp_path / "1k.html")
    ten_k = big_profile(100)  # 10,101 modules
    start = time.perf_counter()
    to_html(ten_k, tmp_path / "10k.html")
    seconds = time.perf_counter() - start
    size_10k = os.path.getsize(tmp_path / "10k.html")
    with capsys.disabled():
        print(
            f"\nHTML report: 1,011 modules {size_1k / 1024:.0f} KiB; 10,101 modules "
            f"{size_10k / 1024:.0f} KiB, written in {seconds * 1000:.0f} ms"
        )
    assert size_1k < 150 * 1024
    assert seconds < 1.0


# ---- in the browser ----------------------------------------------------------------------


def expect(locator: Any) -> Any:
    from playwright.sync_api import expect as expect_

    return expect_(locator)


@pytest.fixture
def open_report(browser: Any, tmp_path: Path) -> Iterator[Any]:
    with report_pages(browser, tmp_path) as open_:
        yield lambda prof, name="r.html", width=1280, device=None: open_(prof, width, device, name)


def test_page_shows_a_real_profile(open_report: Any) -> None:
    ex = examples.get("shared_mlp")
    prof = ls.profile(ex.build(), ex.example_input(), memory=True, backward=True)
    p = open_report(prof)
    page = p.page
    assert p.rows()[0] == prof.root.name
    assert page.title() == f"{prof.model['name']} — layerscope report"
    # every summary fact, as text
    facts = page.eval_on_selector_all("#ls-notes li", "els => els.map(e => e.textContent)")
    assert facts == [t for t, _ in summary_lines(prof)]
    assert page.locator("#ls-icicle g").count() >= len(prof.nodes()) - 1
    assert page.locator("#ls-timeline path.tl-line").count() == 1
    mem = prof.memory
    held = ", ".join(
        f"{word} {units.nbytes(n)}"
        for word, n in (
            ("params", mem["baseline"]["parameters"]),
            ("buffers", mem["baseline"]["buffers"]),
        )
        if n
    )
    assert page.locator("#ls-baseline").text_content() == (
        f" Held when the run began (the line's 0): {units.nbytes(mem['baseline_bytes'])} "
        f"({held}); absolute peak "
        f"{units.nbytes(mem['baseline_bytes'] + mem['session_peak_bytes'])}."
    )
    # numbers with units, the raw value in the tooltip
    cell = page.locator('#ls-table tbody tr[data-i="0"] td').nth(
        1 + [c["key"] for c in report_data(prof)["columns"] if c["shown"]].index("flops")
    )
    flops = prof.root.metrics["flops"]
    assert cell.text_content() == units.si(flops)
    assert cell.get_attribute("title").split("\n")[0] == str(flops)
    # hovering the timeline names the module at that point
    box = page.locator("#ls-timeline").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.3, box["y"] + box["height"] / 2)
    tip = page.locator("#ls-memory .tip")
    assert tip.is_visible()
    assert re.match(r"(enter|exit|backward) ", tip.text_content())
    p.clean()


def test_sort_orders_siblings_within_the_tree(open_report: Any) -> None:
    p = open_report(small())
    header = p.page.locator('#ls-table th[data-key="flops"]')
    assert p.rows() == ["Net", "enc", "attn", "mlp", "head", "drop"]
    header.click()  # largest first, siblings within their parent
    assert p.rows() == ["Net", "enc", "mlp", "attn", "head", "drop"]
    assert header.get_attribute("aria-sort") == "descending"
    p.page.locator('#ls-table th[data-key="flops"]').click()  # smallest first
    assert p.rows() == ["Net", "drop", "head", "enc", "attn", "mlp"]
    p.page.locator('#ls-table th[data-key="flops"]').click()  # tree order again
    assert p.rows() == ["Net", "enc", "attn", "mlp", "head", "drop"]
    p.page.locator('#ls-table th[data-key="name"]').click()  # by name
    assert p.rows() == ["Net", "drop", "enc", "attn", "mlp", "head"]
    p.clean()


def test_collapse_hides_children_and_expand_brings_them_back(open_report: Any) -> None:
    p = open_report(small())
    toggle = p.page.locator('#ls-table tr[data-i="1"] .tog')  # enc
    assert toggle.get_attribute("aria-expanded") == "true"
    toggle.click()
    assert p.rows() == ["Net", "enc", "head", "drop"]  # not hidden: gone from the DOM
    assert toggle.get_attribute("aria-expanded") == "false"
    toggle.click()
    assert p.rows() == ["Net", "enc", "attn", "mlp", "head", "drop"]
    p.page.locator('#ls-table tr[data-i="0"] .tog').click()
    assert p.rows() == ["Net"]
    p.clean()


def test_filter_by_name_or_type_keeps_ancestors(open_report: Any) -> None:
    p = open_report(small())
    box = p.page.locator("#ls-filter")
    status = expect(p.page.locator("#ls-status"))
    box.fill("linear")  # a type
    status.to_have_text("1 matching · 2 of 6 rows shown")
    assert p.rows() == ["Net", "head"]
    box.fill("ATTN")  # a name, any case: its ancestors stay
    status.to_have_text("1 matching · 3 of 6 rows shown")
    assert p.rows() == ["Net", "enc", "attn"]
    box.fill("")
    status.to_have_text("6 of 6 rows shown")
    assert p.rows() == ["Net", "enc", "attn", "mlp", "head", "drop"]
    p.clean()


def test_switching_the_chart_metric_redraws_chart_and_percent(open_report: Any) -> None:
    p = open_report(chart_profile())
    page = p.page

    def widths() -> dict[str, float]:
        pairs = page.eval_on_selector_all(
            "#ls-icicle g",
            "gs => gs.map(g => [g.getAttribute('data-i'), "
            "+g.querySelector('rect').getAttribute('width')])",
        )
        return {str(i): float(w) for i, w in pairs}

    assert page.get_attribute("#ls-icicle", "data-metric") == "flops"
    before = widths()
    # attn is 600 of 1000 FLOPs: 60 % of the root's width
    assert before["2"] / before["0"] == pytest.approx(0.6, abs=0.01)
    assert page.locator('#ls-table th[data-key="pct"]').text_content() == "% FLOPs"
    page.locator('#ls-metric button[data-key="params"]').click()
    assert page.get_attribute("#ls-icicle", "data-metric") == "params"
    after = widths()
    assert after != before
    assert after["2"] / after["0"] == pytest.approx(0.1, abs=0.01)  # 10 of 100 params
    assert after["3"] / after["0"] == pytest.approx(0.8, abs=0.01)
    assert page.locator('#ls-table th[data-key="pct"]').text_content() == "% Params"
    mlp_pct = page.locator('#ls-table tr[data-i="3"] td.pct').text_content()
    assert mlp_pct == "80.0%"
    assert page.get_attribute('#ls-metric button[data-key="params"]', "aria-pressed") == "true"
    p.clean()


def test_time_columns_rebuilt_in_the_page(open_report: Any) -> None:
    prof = build(
        node(
            "Net",
            "Net",
            node("a", "A", calls=2, forward_time=1e-3),
            node("b", "B", forward_time=3e-3),
            forward_time=1e-4,
        )
    )
    for n, t in zip(prof.nodes(), (1e-4 + 2 * 1e-3 + 3e-3, 1e-3, 3e-3), strict=True):
        n.metrics["forward_time"] = t  # per call; the root's includes a's two calls
    data = report_data(prof)
    # self times and time totals are rebuilt by the page, not sent
    assert data["derived"] == {
        "self_forward_time": ["self", "forward_time"],
        "forward_time_total": ["total", "forward_time"],
    }
    p = open_report(prof)
    page = p.page
    page.locator('#ls-metric button[data-key="forward_time_total"]').click()
    keys = [c["key"] for c in data["columns"] if c["shown"]]
    cells = page.eval_on_selector_all(
        "#ls-table tbody tr:not(.sp)", "rows => rows.map(r => [...r.cells].map(c => c.textContent))"
    )
    own = 1 + keys.index("self_forward_time")
    assert [row[own] for row in cells] == ["100 µs", "1 ms", "3 ms"]
    # % of time: per-call time × calls over the root's 5.1 ms: a 2 ms, b 3 ms
    assert [row[-1] for row in cells] == ["100%", "39.2%", "58.8%"]
    p.clean()


def test_hostile_module_name_is_text_and_runs_nothing(open_report: Any) -> None:
    p = open_report(hostile_profile())
    page = p.page
    assert page.locator("img").count() == 0  # no element made from any string
    assert page.locator("b").filter(has_text="Bold").count() == 0
    assert p.rows()[1] == HOSTILE
    assert page.locator('#ls-table tr[data-i="1"] .ty').text_content() == "<b>Bold</b>"
    assert p.rows()[2] == "sep\u2028line<!--"
    assert page.locator("h1").text_content() == HOSTILE
    titles = page.eval_on_selector_all("#ls-icicle title", "ts => ts.map(t => t.textContent)")
    assert any(t.startswith(HOSTILE) for t in titles)
    # an op without a FLOP formula: the FLOPs columns are marked partial, the op listed
    assert page.locator('#ls-table th[data-key="flops"]').text_content() == "FLOPs*"
    assert page.locator('#ls-table th[data-key="pct"]').text_content() == "% FLOPs*"
    op_cells = page.eval_on_selector_all("#ls-unsupported td", "ts => ts.map(t => t.textContent)")
    assert op_cells == ["aten::<img src=y onerror=alert(2)>", "1", "1", "0", HOSTILE]
    notes = page.locator("#ls-notes").text_content()
    assert f"a notice naming {HOSTILE}" in notes and "aten::<img src=y" in notes
    page.locator("#ls-filter").fill("onerror")
    expect(page.locator("#ls-status")).to_have_text("1 matching · 2 of 3 rows shown")
    assert p.rows() == ["Net", HOSTILE]
    page.wait_for_timeout(50)  # an onerror handler would have fired by now
    assert page.locator("img").count() == 0
    p.clean()  # no dialog, no console error, no request


def test_number_formats_match_the_console(open_report: Any) -> None:
    p = open_report(small())
    samples: list[tuple[str, float, str]] = []
    # and at the units' edges, where a value rounds up to the next unit
    for x in (0, 7, 999, 1000, 28032, 1898496, 2.5e9, 1.23456e12, 1.23e15, -4096.0, 12.345,
              999_999, 999_499, 999.9, 2**20 - 1, 1023.999, -999_999,
              # exact ties, which Python rounds to even and toFixed up: 1.125 MiB, 0.125 K
              int(1.125 * 2**20), 125.0, 1.125, -2.5):  # fmt: skip
        samples.append(("count", x, units.count(x)))
        samples.append(("si", x, units.si(x)))
        samples.append(("bytes", x, units.nbytes(x)))
    for t in (0.0, 4.2e-9, 1.5e-6, 3.3e-4, 0.0123, 1.0, 42.0, 75.0, 9000.0, 0.9996, 9.996e-7):
        samples.append(("seconds", t, units.seconds(t)))
    for q in (0.0, 7.6e-05, 0.042, 0.5, 12.345, 99.97, 100.0, 0.25, 12.25):
        samples.append(("pct", q, units.pct(q)))
    for m in (0.00012, 65504.0, -3.14159, 1e-9, 123.0):
        samples.append(("number", m, units.magnitude(m)))
    got = p.page.evaluate(
        "s => s.map(([kind, x]) => window.lsFormat(x, kind))", [[k, x] for k, x, _ in samples]
    )
    assert got == [want for *_, want in samples]
    # the console's words for the two that once differed: P, and no exponent in a %
    assert units.si(1.23e15) == "1.23 P" and units.pct(7.6e-05) == "0.000076%"
    # rounded up to the next unit, not an exponent: 999,999 in 3 significant digits is
    # 1.00e6; 0.9996 s is 1.00 s; 1,048,575 B is 1023.999 KiB, 1.00 MiB in 2 decimals
    assert (units.si(999_999), units.seconds(0.9996), units.nbytes(2**20 - 1)) == (
        "1 M", "1 s", "1.00 MiB"
    )  # fmt: skip
    assert (units.si(999.9), units.nbytes(1023.999)) == ("999.9", "1023 B")  # exact below
    p.clean()


def test_ten_thousand_modules_render_fast(
    open_report: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Measured, not asserted: render from navigation start, sort, collapse, expand all."""
    prof = big_profile(100)
    n = len(prof.nodes())
    p = open_report(prof, "10k.html")
    page = p.page
    ready = page.evaluate("window.lsReport.ready")  # ms since navigation start
    painted = page.evaluate(
        "() => new Promise(r => requestAnimationFrame("
        "() => setTimeout(() => r(performance.now()))))"
    )
    timed = """sel => {
        const t0 = performance.now();
        document.querySelector(sel).click();
        document.body.offsetHeight;  // layout included
        return performance.now() - t0;
    }"""
    sort_ms = page.evaluate(timed, '#ls-table th[data-key="flops"]')
    first = p.rows()[1]
    assert first == "block0" or first.startswith("block")
    collapse_ms = page.evaluate(timed, '#ls-table tr[data-i="0"] .tog')
    assert p.rows() == ["Net"]
    expand_ms = page.evaluate(timed, '#ls-table tr[data-i="0"] .tog')
    expand_all_ms = page.evaluate(
        """() => {
        const s = document.getElementById('ls-depth'), t0 = performance.now();
        s.value = 'all'; s.dispatchEvent(new Event('change'));
        document.body.offsetHeight;
        return performance.now() - t0;
    }"""
    )
    assert page.locator("#ls-status").text_content() == f"{n} of {n} rows shown"
    in_dom = page.locator("#ls-table tbody tr:not(.sp)").count()
    sort_all_ms = page.evaluate(timed, '#ls-table th[data-key="params"]')
    with capsys.disabled():
        print(
            f"\n{n:,}-module report in Chromium: script done {ready:.0f} ms and painted "
            f"{painted:.0f} ms after navigation start; sort {sort_ms:.0f} ms, collapse "
            f"root {collapse_ms:.0f} ms, expand root {expand_ms:.0f} ms; expand all "
            f"{expand_all_ms:.0f} ms ({in_dom} rows in the DOM), then sort "
            f"{sort_all_ms:.0f} ms"
        )
    p.clean()


def test_not_called_and_folded_rows(open_report: Any) -> None:
    from layerscope.analysis.fold import fold

    root = Node(path="", name="Net", type="Net", calls=1)
    for i in range(3):
        root.children.append(
            Node(path=f"layers.{i}", name=str(i), type="Block", calls=1, self_metrics={"flops": 5})
        )
    prof = build(root)
    folded = fold(prof)
    p = open_report(folded)
    names = p.rows()
    assert len(names) == 2 and names[1].endswith("×3")
    p.clean()


# ==== the roofline chart ======================================================================

#: round numbers (peak 1,000 FLOP/s, 100 B/s: ridge 10 FLOP/B), as in test_roofline.py
TOY = {"name": "toy", "bandwidth": 100, "peak_flops": {"float32": 1000}}


def _mlp(backward: bool = False, seconds: float | None = None) -> Profile:
    """Linear(8, 16) - ReLU - Linear(16, 4) on (2, 8); per module (test_roofline.py):
    544 FLOPs / 768 B, 32 FLOPs / 256 B, 264 FLOPs / 432 B; ``seconds`` per call, a
    made-up timing pass."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    prof = ls.profile(model, torch.randn(2, 8), backward=backward)
    if seconds is not None:
        for n in prof.root.walk():
            n.metrics["forward_time"] = seconds
            n.self_metrics["forward_time"] = seconds if n.path else 0.0
    return prof


def test_roofline_points_travel_per_module() -> None:
    from layerscope.analysis.roofline import roof_of

    assert report_data(_mlp())["roofline"] is None  # neither a time nor a roof
    data = report_data(_mlp(backward=True), roof_of(TOY))["roofline"]
    assert data["roof"] == {
        "name": "toy",
        "dtype": "float32",
        "peak": 1000,
        "bandwidth": 100,
        # a CPU analysis drawn under another device's roof says so (as the text views do)
        "note": "The profile was analysed on cpu; the roofline is toy's, so the bytes moved "
        "are those of cpu's kernels.",
    }
    forward = data["phases"]["forward"]
    # node indices in pre-order: 0 the root (no work of its own, no point), 1, 2, 3
    assert forward == {
        "i": [1, 2, 3],
        "f": [544, 32, 264],
        "b": [768, 256, 432],
        "t": [None, None, None],
        "no_flops": 0,
        "timed": False,
    }
    # backward: Linear 0 computes only the weight and bias gradients (its input needs
    # none): 2*2*8*16 + 2*16 = 544 FLOPs; ReLU's threshold_backward 32 FLOPs, 384 B
    backward = data["phases"]["backward"]
    assert backward["i"] == [1, 2, 3] and backward["f"][:2] == [544, 32]
    assert backward["b"][1] == 3 * 32 * 4
    timed = report_data(_mlp(seconds=10.0))["roofline"]
    assert timed["roof"] is None and list(timed["phases"]) == ["forward"]
    assert timed["phases"]["forward"]["t"] == [10, 10, 10]
    assert timed["phases"]["forward"]["timed"] is True


def test_roofline_device_reaches_every_html_path(tmp_path: Path) -> None:
    prof = _mlp(seconds=10.0)
    prof.to_html(tmp_path / "a.html", device=TOY)
    export(prof, tmp_path / "b.html", device=TOY)
    for name in ("a.html", "b.html"):
        data = embedded((tmp_path / name).read_text(encoding="utf-8"))
        assert data["roofline"]["roof"]["name"] == "toy"
    with pytest.raises(ExportError, match="takes no options \\(only device\\), got view"):
        export(prof, tmp_path / "c.html", view="tree")
    with pytest.raises(ls.InvalidInputError, match="unknown device"):
        prof.to_html(tmp_path / "d.html", device="h10")


def test_roofline_chart_in_the_page(open_report: Any) -> None:
    p = open_report(_mlp(seconds=10.0), device=TOY)
    page = p.page
    chart = page.locator("#ls-roofline-chart")
    assert chart.locator("circle.rl-pt").count() == 3
    assert chart.locator("path.rl-roof").count() == 1
    note = page.locator("#ls-roofline .head .note").text_content()
    assert note.startswith(
        "Roof: toy (float32): peak 1 KFLOP/s, 100 B/s, ridge 10 FLOP/B. The profile was "
        "measured on cpu; the roofline is toy's, so Eff compares cpu's measured time with "
        "toy's lower bound. One point per module's own work"
    )
    tip = chart.locator('circle[data-i="1"]').get_attribute("data-tip")
    # 544 / 768 = 0.708 FLOP/B; 544 FLOPs in 10 s; 768 B in 10 s; roofline max(0.544,
    # 7.68) = 7.68 s, memory-bound: 76.8% of the measured 10 s
    assert tip.split("\n") == [
        "0 (Linear)",
        "0.708 FLOP/B \u00b7 544 FLOP, 768 B moved",
        "54.4 FLOP/s achieved, 76.8 B/s \u00b7 own time 10 s",
        "memory-bound, roofline time 7.68 s \u00b7 efficiency 76.8%",
    ]
    # the point's height: log10(54.4) between the axis decades
    box = chart.locator('circle[data-i="1"]').bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    assert page.locator("#ls-roofline .tip").text_content().startswith("0 (Linear)")
    p.clean()


def test_roofline_chart_on_meta_sits_on_the_roof(open_report: Any) -> None:
    """Not timed, with a roof and a backward: points on the roof, both phases."""
    torch.manual_seed(0)
    model = ls.to_meta(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)))
    prof = ls.profile(model, torch.empty(2, 8, device="meta"), backward=True)
    p = open_report(prof, device=TOY)
    page = p.page
    chart = page.locator("#ls-roofline-chart")
    assert chart.locator("circle.rl-pt.est").count() == 3
    tip = chart.locator('circle[data-i="3"]').get_attribute("data-tip").split("\n")
    # 264 / 432 = 0.611 FLOP/B: memory-bound, on the roof at 100 * 0.611 = 61.1 FLOP/s
    assert tip[1:] == [
        "0.611 FLOP/B \u00b7 264 FLOP, 432 B moved",
        "not timed: placed on the roof (61.1 FLOP/s)",
        "memory-bound, roofline time 4.32 s",
    ]
    assert "No time was measured" in page.locator("#ls-roofline > .note").text_content()
    page.locator('#ls-rl-phase button[data-phase="backward"]').click()
    tip = chart.locator('circle[data-i="2"]').get_attribute("data-tip").split("\n")
    assert tip[1] == "0.0833 FLOP/B \u00b7 32 FLOP, 384 B moved"  # 32 / 384
    p.clean()


def test_roofline_labels_overlap_nothing(open_report: Any) -> None:
    """A Llama's blocks put their modules' points on the same spots: each spot is named
    once at most, and no label's box meets another label or a point it does not name."""
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2,
    )  # fmt: skip
    with torch.device("meta"):
        model: Any = transformers.LlamaForCausalLM(config)
    ids = torch.zeros(2, 256, dtype=torch.long, device="meta")
    prof = ls.profile(model.to(torch.bfloat16), ids, target="h100", backward=True)
    p = open_report(prof, device="h100")
    boxes = p.page.eval_on_selector_all(
        "#ls-roofline-chart text.halo",
        "ts => ts.map(t => { const b = t.getBBox(); return [b.x, b.y, b.width, b.height]; })",
    )
    dots = p.page.eval_on_selector_all(
        "#ls-roofline-chart circle.rl-pt",
        "cs => cs.map(c => [+c.getAttribute('cx'), +c.getAttribute('cy'), +c.getAttribute('r')])",
    )
    assert len(boxes) >= 3
    for i, (x, y, w, h) in enumerate(boxes):
        for x2, y2, w2, h2 in boxes[i + 1 :]:
            assert x + w <= x2 or x2 + w2 <= x or y + h <= y2 or y2 + h2 <= y
        hit = [
            (cx, cy) for cx, cy, r in dots
            if (max(x, min(cx, x + w)) - cx) ** 2 + (max(y, min(cy, y + h)) - cy) ** 2 < r * r
        ]  # fmt: skip
        assert len(set(hit)) <= 1  # at most its own spot (a label starts 8 px from it)
    p.clean()


# ==== memory cards, the timeline's highest point, and what fits a window ======================

#: GPT-2's token embedding: 50,257 tokens x 768 float32 values (its weight and each of
#: the gradients the backward makes of it: the lm_head's and the lookup's dense one).
WTE_BYTES = 50_257 * 768 * 4


@pytest.fixture(scope="module")
def gpt2() -> Profile:
    """``GPT2LMHeadModel(GPT2Config(n_layer=2))`` on ``(1, 32)`` tokens, with a backward,
    memory and one timed repeat (the time columns a user sees)."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2))
    tokens = torch.randint(0, 50_257, (1, 32))
    return ls.profile(model, tokens, backward=True, memory=True, timing={"warmup": 0, "repeats": 1})


@pytest.mark.slow
def test_timeline_reaches_the_peak_card(gpt2: Profile) -> None:
    """The dense ``wte`` gradient at the end of GPT-2's backward: the run's peak, in the
    timeline to the byte, and on the cards as what each one measures."""
    data = report_data(gpt2)
    mem, t = gpt2.memory, data["timeline"]
    cards = {h[3]: h for h in data["headline"] if len(h) > 3}
    assert [cards[k][0] for k in ("session_peak_bytes", "forward_peak_bytes")] == [
        "Peak live",
        "Fwd peak",
    ]
    assert cards["backward_peak_bytes"][0] == "Bwd peak over bwd start"
    peak = max(t["bytes"])
    assert peak == cards["session_peak_bytes"][1] == mem["session_peak_bytes"]
    at = t["bytes"].index(peak)
    assert t["event"][at] == "p" and data["name"][t["node"][at]] == "wte"
    # the level where wte's backward starts, plus its two dense gradients (the lookup's
    # and their sum with the lm_head's), less the 1x32x768 float32 gradient of its
    # output, freed by then
    start = at - 1
    assert t["event"][start] == "b" and t["node"][start] == t["node"][at]
    assert peak - t["bytes"][start] == 2 * WTE_BYTES - 32 * 768 * 4
    # the backward's highest point above the level where it started: the Bwd peak card
    first = t["event"].index("b")
    rise = max(t["bytes"][first:]) - t["bytes"][first]
    assert rise == cards["backward_peak_bytes"][1] == mem["backward_peak_bytes"]


def test_container_never_entered_has_no_peak() -> None:
    class Stack(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.layers:
                x = layer(x)
            return x

    torch.manual_seed(0)
    prof = ls.profile(Stack(), torch.randn(2, 4), memory=True)
    data = report_data(prof)
    # each Linear adds its 2x4 float32 output (32 B); the root holds both at the second
    # one's exit (64 B); the ModuleList is never called: no peak, a blank cell
    assert data["v"]["peak_bytes"] == [64, None, 32, 32]
    assert data["not_called"] == [1]


def test_macs_hidden_beside_flops() -> None:
    shown = {c["key"]: c["shown"] for c in report_data(_mlp(backward=True))["columns"]}
    assert shown["flops"] and not shown["macs"]
    only_macs = build(node("Net", "Net", node("a", "Linear", macs=8)))
    assert {c["key"]: c["shown"] for c in report_data(only_macs)["columns"]}["macs"]


def _polyline(d: str) -> list[tuple[float, float]]:
    """The vertices of an SVG path of M, H and V commands (the timeline's step line)."""
    points: list[tuple[float, float]] = []
    for cmd, args in re.findall(r"([MHV])\s*([-\d. ]+)", d):
        nums = [float(x) for x in args.split()]
        if cmd == "M":
            points.append((nums[0], nums[1]))
        elif cmd == "H":
            points.append((nums[0], points[-1][1]))
        else:
            points.append((points[-1][0], nums[0]))
    return points


@pytest.mark.parametrize("width", [700, 1000, 1400])
def test_timeline_label_clear_of_the_line(open_report: Any, gpt2: Profile, width: int) -> None:
    p = open_report(gpt2, width=width)
    page = p.page
    svg = page.evaluate(
        "() => { const s = document.getElementById('ls-timeline'), b = s.viewBox.baseVal;"
        " return [b.width, b.height]; }"
    )
    box = page.evaluate(
        "() => { const b = document.getElementById('ls-tl-peak').getBBox();"
        " return [b.x, b.y, b.width, b.height]; }"
    )
    x, y, w, h = box
    assert x >= 0 and x + w <= svg[0] and y >= 0 and y + h <= svg[1]  # inside, not cut
    line = _polyline(page.get_attribute("#ls-timeline path.tl-line", "d"))
    # no segment of the step line enters the label's box
    for (x1, y1), (x2, y2) in itertools.pairwise(line):
        meets_x = min(x1, x2) <= x + w and max(x1, x2) >= x
        meets_y = min(y1, y2) <= y + h and max(y1, y2) >= y
        assert not (meets_x and meets_y), ((x1, y1), (x2, y2), box)
    peak = units.nbytes(gpt2.memory["session_peak_bytes"])
    label = page.text_content("#ls-tl-peak")
    assert label.startswith(f"highest {peak} = Peak live \u00b7 backward of transformer.wte")
    card = page.locator('.card[data-key="session_peak_bytes"] b').text_content()
    assert card == peak
    legend = page.text_content("#ls-tl-legend")
    bwd = units.nbytes(gpt2.memory["backward_peak_bytes"])
    assert f"the backward's highest point is {bwd} above it (the Bwd peak over bwd start" in legend
    p.clean()


def test_table_fits_1400_px(open_report: Any, gpt2: Profile) -> None:
    p = open_report(gpt2, width=1400)
    page = p.page
    heads = page.eval_on_selector_all("#ls-table th", "hs => hs.map(h => h.textContent)")
    # the columns a backward, memory and timing profile shows at first
    assert heads == ["Module", "Output shape", "Params", "FLOPs", "Bwd FLOPs", "Saved",
                     "Peak", "Fwd time", "Self fwd", "Bwd time", "Self bwd", "% FLOPs"]  # fmt: skip
    sizes = page.evaluate(
        "() => { const w = document.querySelector('.tablewrap');"
        " return [w.scrollWidth, w.clientWidth]; }"
    )
    assert sizes[0] <= sizes[1]
    wrap = page.locator(".tablewrap").bounding_box()
    pct = page.locator('#ls-table th[data-key="pct"]').bounding_box()
    assert pct["x"] + pct["width"] <= wrap["x"] + wrap["width"]
    # h, the ModuleList GPT2Model loops over, is never called: its Peak cell is blank
    index = [n.path for n in gpt2.nodes()].index("transformer.h")
    peak_col = heads.index("Peak")
    cell = page.locator(f'#ls-table tr[data-i="{index}"] td').nth(peak_col)
    assert cell.text_content() == ""
    p.clean()


#: a ridge at 1,000 FLOP/B: the x axis runs to 10^4
WIDE = {"name": "wide", "bandwidth": 1, "peak_flops": {"float32": 1000}}


@pytest.mark.parametrize("width", [700, 1000, 1400])
def test_roofline_last_tick_inside(open_report: Any, width: int) -> None:
    p = open_report(_mlp(seconds=10.0), width=width, device=WIDE)
    ticks = p.page.evaluate(
        "() => { const s = document.getElementById('ls-roofline-chart');"
        " return [...s.querySelectorAll('.axis text')].filter(t => t.getAttribute("
        "'text-anchor') === 'middle' && !t.hasAttribute('transform')"
        " && t.textContent !== 'FLOPs per byte moved')"
        ".map(t => { const b = t.getBBox(); return [t.textContent, b.x, b.x + b.width]; }); }"
    )
    svg_width = p.page.evaluate(
        "() => document.getElementById('ls-roofline-chart').viewBox.baseVal.width"
    )
    assert ticks[-1][0] == "10000"
    assert all(left >= 0 and right <= svg_width for _, left, right in ticks), ticks
    p.clean()


DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.mark.skipif(
    os.environ.get("LAYERSCOPE_UPDATE_SCREENSHOTS") != "1",
    reason="retakes docs/report.png and docs/roofline-chart.png when asked",
)
def test_docs_screenshots(open_report: Any) -> None:
    """``LAYERSCOPE_UPDATE_SCREENSHOTS=1 pytest tests/test_html.py -k docs_screenshots``:
    tiny_gpt with a backward, memory and timing: the whole page at 1400 px, and its
    roofline on this machine's CPU spec at 1200 px."""
    ex = examples.get("tiny_gpt")
    prof = ls.profile(ex.build(), ex.example_input(), backward=True, memory=True, timing=True)
    page = open_report(prof, width=1400).page
    page.screenshot(path=str(DOCS / "report.png"), full_page=True)
    page = open_report(prof, "rl.html", width=1200, device="cpu").page
    page.locator("#ls-roofline").screenshot(path=str(DOCS / "roofline-chart.png"))
