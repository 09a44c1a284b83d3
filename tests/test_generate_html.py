"""The generation section of the HTML report (``Generation.to_html``, ``generation.html``):
its data in plain Python, then the page in a headless Chromium (as tests/test_html.py:
Debian's ``chromium`` driven by Playwright's Python package; the browser tests skip
without it).

The generation is ``ls.profile_generate`` on a 2-layer Llama (hidden 64, 4 query heads
and 2 KV heads of 16, MLP 128, vocab 128), batch 2, a 16-token prompt, 5 new tokens, each
call timed once: a prefill and 4 decode calls on caches of 16 to 19 tokens. The KV cache
holds keys and values of 2 heads of 16 floats per layer: 2 x 2 x 2 x 16 x 4 = 512 B per
token and row; 10,240 B per layer after 20 tokens for 2 rows, 20,480 B in all.
"""

from __future__ import annotations

import copy
import functools
import itertools
import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import torch

import layerscope as ls
from helpers.browser import embedded
from helpers.browser import texts as _texts
from layerscope.errors import ExportError
from layerscope.export.html import to_html_text
from layerscope.generation.html import generation_data
from layerscope.generation.html import to_html_text as gen_html_text
from layerscope.generation.result import Generation
from layerscope.render import units
from test_html import BREAKERS, HOSTILE

transformers = pytest.importorskip("transformers")

LAYERS, KV_HEADS, HEAD, ROWS, PROMPT, NEW = 2, 2, 16, 2, 16, 5
#: keys and values of every layer for one token of one row, float32
PER_TOKEN = LAYERS * 2 * KV_HEADS * HEAD * 4  # 512 B
#: weight MACs per token: q 64x64, k and v 64x32, o 64x64, gate, up, down 64x128 per
#: layer, and the LM head 64x128
WEIGHT_MACS = LAYERS * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128) + 64 * 128  # 81,920

#: An estimate's ``to_dict()`` (``GenerateEstimate``'s form): three batch sizes, the
#: largest compute-bound and over the GPU's memory. The cards are the first batch's.
ESTIMATE: dict[str, Any] = {
    "model": "LlamaForCausalLM",
    "target": "h100",
    "device": {"name": "h100", "label": "NVIDIA H100 SXM5 80GB", "peak_flops": 4.947e14,
               "bandwidth": 3.35e12, "memory_bytes": 80_000_000_000},
    "dtype": "float32",
    "prompt": PROMPT,
    "new_tokens": NEW,
    "cache": "dynamic",
    "lower_bound": True,
    "prefill_time": 2.5e-5,
    "decode_time_per_token": 4e-6,
    "tokens_per_s": 250_000.0,
    "memory_bound": False,
    "crossover_batch": 32,
    "sweep": [
        {"batch": 1, "prefill_time": 2.5e-5, "decode_time_per_token": 4e-6,
         "tokens_per_s_per_sequence": 250_000.0, "tokens_per_s": 250_000.0, "bound": "memory",
         "weight_bytes": 294_912, "kv_bytes": 10_240, "fits": True, "decode_flops": 180_000.0,
         "decode_bytes": 471_040.0, "prefill_flops": 2.5e6, "prefill_bytes": 1_048_576.0},
        {"batch": 8, "prefill_time": 2e-4, "decode_time_per_token": 5e-6,
         "tokens_per_s_per_sequence": 200_000.0, "tokens_per_s": 1_600_000.0, "bound": "memory",
         "weight_bytes": 294_912, "kv_bytes": 81_920, "fits": True, "decode_flops": 1.44e6,
         "decode_bytes": 1_433_600.0, "prefill_flops": 2e7, "prefill_bytes": 8_388_608.0},
        {"batch": 32, "prefill_time": 8e-4, "decode_time_per_token": 8e-6,
         "tokens_per_s_per_sequence": 125_000.0, "tokens_per_s": 4_000_000.0, "bound": "compute",
         "weight_bytes": 294_912, "kv_bytes": 327_680, "fits": False, "decode_flops": 5.76e6,
         "decode_bytes": 4_718_592.0, "prefill_flops": 8e7, "prefill_bytes": 33_554_432.0},
    ],
    "fit": [{"batch": 1, "points": []}],
    "kernels": {"aten::mm": {"sm90_gemm": 14}},
    "notes": [f"a note naming {HOSTILE}"],
}  # fmt: skip
#: The sweep as the page prints it (tokens/s = batch / decode time per token; 1,433,600 B
#: = 1.37 MiB, 4,718,592 B = 4.50 MiB).
SWEEP_TABLE = [
    ["Batch", "Prefill", "Decode per token", "Tokens/s per sequence", "Tokens/s", "Bound",
     "Weights", "KV cache", "Fits", "Decode FLOPs", "Decode bytes moved", "Prefill FLOPs",
     "Prefill bytes moved"],
    ["1", "25 µs", "4 µs", "250 K", "250 K", "memory", "288.00 KiB", "10.00 KiB", "yes",
     "180 K", "460.00 KiB", "2.5 M", "1.00 MiB"],
    ["8", "200 µs", "5 µs", "200 K", "1.6 M", "memory", "288.00 KiB", "80.00 KiB", "yes",
     "1.44 M", "1.37 MiB", "20 M", "8.00 MiB"],
    ["32", "800 µs", "8 µs", "125 K", "4 M", "compute", "288.00 KiB", "320.00 KiB", "no",
     "5.76 M", "4.50 MiB", "80 M", "32.00 MiB"],
]  # fmt: skip


def llama() -> Any:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS,
        num_attention_heads=4, num_key_value_heads=KV_HEADS,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def gen() -> Generation:
    ids = torch.randint(0, 128, (ROWS, PROMPT), generator=torch.Generator().manual_seed(0))
    return ls.profile_generate(llama(), ids, max_new_tokens=NEW, timing=1)


def section_of(gen: Generation, **kv: Any) -> dict[str, Any]:
    """The figures the page reads, the KV cache changed by ``kv``."""
    section = copy.deepcopy(gen.section_for_views())
    section["kv_cache"].update(kv)
    return section


# ---- the data (no browser) -----------------------------------------------------------


def test_the_cache_and_the_calls_travel_exactly(gen: Generation) -> None:
    data = generation_data(gen.section_for_views(), stage="decode")
    o = data["options"]
    assert (o["prompt_tokens"], o["new_tokens"], o["batch"], o["rows"]) == (16, 5, 2, 2)
    kv = data["kv"]
    assert kv["bytes_per_token"] == PER_TOKEN == 512
    assert kv["bytes_after_prefill"] == PROMPT * ROWS * PER_TOKEN == 16_384
    assert kv["bytes_final"] == (PROMPT + NEW - 1) * ROWS * PER_TOKEN == 20_480
    # per layer: 20 tokens x 2 rows x keys and values of 2 heads of 16 floats
    assert kv["self"] == [20 * ROWS * 2 * KV_HEADS * HEAD * 4] * LAYERS == [10_240, 10_240]
    assert kv["tokens"] == [20, 20] and kv["cross"] == []
    calls = data["calls"]
    headers = [c[1] for c in calls["columns"]]
    assert headers == [
        "Stage", "Cache before", "Fed", "MACs", "FLOPs", "Bytes moved", "Peak", "KV after", "Time",
    ]  # fmt: skip
    rows = calls["rows"]
    assert [r[:3] for r in rows] == [["prefill", 0, 16]] + [["decode", L, 1] for L in range(16, 20)]
    for r in rows[1:]:  # a decode call on L tokens: the weights, and q.k and p.v over L + 1
        assert r[3] == ROWS * (WEIGHT_MACS + LAYERS * 2 * 4 * HEAD * (r[1] + 1))
    assert rows[1][3] == 172_544
    assert [r[7] for r in rows] == [PER_TOKEN * ROWS * (16 + k) for k in range(5)]
    assert all(isinstance(r[8], float) and r[8] > 0 for r in rows)
    assert data["stage"] == ["decode", 4]
    assert [s["name"] for s in data["stages"]] == ["prefill", "decode"]
    # the chart: one point per call at the tokens cached before it, the prefill apart
    chart = data["chart"]
    assert chart["x"] == [0, 16, 17, 18, 19] and chart["apart"] == [0]
    assert [m[0] for m in chart["metrics"]] == ["bytes_accessed", "flops", "time"]


def test_an_untimed_generation_has_no_time() -> None:
    section = {
        "stages": {"prefill": {"calls": 1, "flops": 10}},
        "calls": [{"stage": "prefill", "cache_tokens": 0, "tokens": 4, "flops": 10,
                          "bytes_accessed": 40, "kv_bytes": 64}],
        "kv_cache": {"bytes_final": 64, "per_layer": [64], "tokens_per_layer": [4]},
        "options": {"generate_kwargs": {"num_beams": "2"}},
    }  # fmt: skip
    data = generation_data(section)
    # no cache before the prefill: that column is all 0, left out
    columns = ["stage", "tokens", "flops", "bytes_accessed", "kv_bytes"]
    assert [c[0] for c in data["calls"]["columns"]] == columns
    assert [m[0] for m in data["chart"]["metrics"]] == ["bytes_accessed", "flops"]
    assert data["stage"] == ["prefill", 1]
    assert ["generate num_beams", "2"] in data["settings"]


def test_the_estimate_sweep() -> None:
    est = generation_data({}, ESTIMATE)["estimate"]
    assert [c[1] for c in est["sweep"]["columns"]] == SWEEP_TABLE[0]
    assert est["sweep"]["rows"][2][:9] == [
        32, 0.0008, 8e-06, 125_000, 4_000_000, "compute", 294_912, 327_680, False,
    ]  # fmt: skip
    assert [c[:3] for c in est["cards"]] == [
        ["Prefill", 2.5e-05, "seconds"],
        ["Decode per token", 4e-06, "seconds"],
        ["Tokens/s per sequence", 250_000, "rate"],
    ]
    facts = dict(est["facts"])
    assert facts["device label"] == "NVIDIA H100 SXM5 80GB"
    assert facts["device peak flops"] == "495 TFLOP/s"
    assert facts["device bandwidth"] == "3.35 TB/s"
    # the datasheet's decimal label, not 74.51 GiB beside a usable 79.19 GiB
    assert facts["device memory bytes"] == "80 GB, the datasheet's (80,000,000,000 B)"
    assert (facts["lower bound"], facts["crossover batch"], facts["cache"]) == (
        "true", "32", "dynamic",
    )  # fmt: skip
    assert "fit" not in facts and "kernels" not in facts  # tables of their own, not facts


def test_malformed_generations_are_export_errors(gen: Generation) -> None:
    with pytest.raises(ExportError, match="calls"):
        generation_data({"calls": "many"})
    with pytest.raises(ExportError, match=r"kv_cache\.per_layer"):
        generation_data(section_of(gen, per_layer="lots"))
    with pytest.raises(ExportError, match="estimate"):
        generation_data({}, ["not", "a", "dict"])  # type: ignore[arg-type]


def test_a_plain_profile_report_is_unchanged(gen: Generation) -> None:
    """The generation's page is the decode stage's own report, byte for byte, with the
    section's style and its JSON block and script added; the plain report has neither."""
    prof = gen.stages["decode"]
    plain = to_html_text(prof)
    assert "ls-gen" not in plain and ".gn-line" not in plain
    page = gen_html_text(prof, gen.section_for_views(), stage="decode")
    head, block, _ = page.partition('<script type="application/json" id="ls-gen-data">')
    assert block
    css = resources.files("layerscope.export").joinpath("assets/generation.css")
    head = head.replace(css.read_text(encoding="utf-8"), "", 1)
    head = head.replace("— layerscope generation</title>", "— layerscope report</title>")
    assert head + "</body>\n</html>\n" == plain
    assert embedded(page) == embedded(plain)


def test_to_html_and_export(gen: Generation, tmp_path: Path) -> None:
    section = gen.section_for_views()

    class Estimate:
        def to_dict(self) -> dict[str, Any]:
            return ESTIMATE

    gen.to_html(tmp_path / "a.html", estimate=Estimate())
    decode = gen.stages["decode"]
    a = (tmp_path / "a.html").read_text(encoding="utf-8")
    assert a == gen_html_text(decode, section, ESTIMATE, stage="decode")
    m = re.search(r'<script type="application/json" id="ls-gen-data">(.*?)</script>', a, re.S)
    assert m is not None and all(b not in m.group(1) for b in BREAKERS)
    assert "\\u003cimg" in m.group(1)  # the hostile note stays inside its JSON string
    gen.export(tmp_path / "b.htm")
    b = (tmp_path / "b.htm").read_text(encoding="utf-8")
    assert b == gen_html_text(decode, section, stage="decode")
    gen.export(tmp_path / "g.json")
    loaded = ls.load_generation(tmp_path / "g.json")
    assert loaded.section() == gen.section()
    loaded.export(tmp_path / "c.out", format="html")
    assert (tmp_path / "c.out").read_text(encoding="utf-8") == b  # loaded reports as fresh
    with pytest.raises(ExportError, match=r"html \(\.html, \.htm\), trace \(\.trace\.json\)"):
        gen.export(tmp_path / "g.csv")
    with pytest.raises(ExportError, match="without stages"):
        Generation({}, [], {}).to_html(tmp_path / "d.html")
    prefill_only = Generation({"prefill": gen.stages["prefill"]}, gen.calls[:1], {})
    prefill_only.to_html(tmp_path / "e.html")
    e = (tmp_path / "e.html").read_text(encoding="utf-8")
    assert embedded(e) == embedded(to_html_text(gen.stages["prefill"]))


# ---- in the browser ------------------------------------------------------------------


@pytest.fixture
def open_page(open_html: Any) -> Any:
    """``open_html`` waiting for the generation section."""
    return functools.partial(open_html, ready="#ls-gen[data-ready]")


def _cells(page: Any, selector: str) -> list[list[str]]:
    found: list[list[str]] = page.eval_on_selector_all(
        f"{selector} tr", "trs => trs.map(r => Array.from(r.cells, c => c.textContent))"
    )
    return found


def _points(page: Any) -> list[dict[str, Any]]:
    """The calls chart's marks: call index, class, x, y (value), centre, and the y of the
    axis's 0 and top gridlines."""
    found: list[dict[str, Any]] = page.eval_on_selector(
        "#ls-gen-chart",
        """svg => {
          const grid = Array.from(svg.querySelectorAll('g.axis > line:not(.gn-tick)'));
          const y0 = +grid[0].getAttribute('y1'), y1 = +grid[grid.length - 1].getAttribute('y1');
          return Array.from(svg.querySelectorAll('.gn-pt')).map(m => {
            const b = m.getBBox();
            return {i: +m.dataset.i, cls: m.getAttribute('class'), x: +m.dataset.x,
                    y: +m.dataset.y, cx: b.x + b.width / 2, cy: b.y + b.height / 2,
                    y0: y0, y1: y1, top: +svg.dataset.top};
          });
        }""",
    )
    return found


def test_generation_section_in_the_page(open_page: Any, gen: Generation) -> None:
    steps = gen.calls
    p = open_page(gen_html_text(gen.stages["decode"], gen.section_for_views(), stage="decode"))
    page = p.page
    order = page.eval_on_selector_all("body > *", "els => els.map(e => e.id || e.className)")
    assert order.index("ls-gen") < order.index("gn-divider") < order.index("cards")
    assert page.locator("h2.gn-divider").text_content() == "The decode stage's profile"
    # the cards: 20 tokens x 2 rows x 512 B = 20,480 B = 20.00 KiB
    cards = _texts(page, "#ls-gen-cards .card")
    assert cards[:5] == [
        "16Prompt tokens", "5New tokens", "2Rows", "20.00 KiBKV cache at the end",
        "512 BKV per token and row",
    ]  # fmt: skip
    assert cards[5:] == [
        f"{units.seconds(sum(s.time or 0.0 for s in steps if s.stage == stage))}"
        f"{stage.capitalize()} time"
        for stage in ("prefill", "decode")
    ]
    assert _texts(page, "#ls-gen-stages li")[1].startswith("decode: 4 calls, 693 K MACs, ")
    # the calls chart: one mark per call; the prefill apart, the decode calls on a line
    # at the tokens cached before each, left to right
    pts = _points(page)
    assert len(pts) == len(steps) == 5
    apart = [q for q in pts if "gn-apart" in q["cls"]]
    line = sorted((q for q in pts if "gn-apart" not in q["cls"]), key=lambda q: q["i"])
    assert [q["i"] for q in apart] == [0]
    assert [q["x"] for q in line] == [16, 17, 18, 19]
    assert all(a["cx"] < b["cx"] for a, b in itertools.pairwise([apart[0], *line]))
    assert page.get_attribute("#ls-gen-chart-line", "data-points") == "4"
    # FLOPs: each decode point's height is its FLOPs over the axis's top
    page.click('#ls-gen-metric button[data-key="flops"]')
    pts = _points(page)
    for q, s in zip(sorted(pts, key=lambda q: q["i"]), steps, strict=True):
        assert q["y"] == s.flops
        if "gn-off" not in q["cls"]:
            frac = (q["y0"] - q["cy"]) / (q["y0"] - q["y1"])
            assert frac == pytest.approx(s.flops / q["top"], abs=0.01)
    # the prefill's 5 M FLOPs is above the decode calls' scale (356 K at most): marked
    # off-scale, its value printed; at the scale of all calls it is the highest point
    prefill = next(q for q in pts if q["i"] == 0)
    assert "gn-off" in prefill["cls"]
    assert units.si(steps[0].flops) + " ↑" in _texts(page, "#ls-gen-chart .gn-label")
    page.click('#ls-gen-scale button[data-key="all"]')
    pts = _points(page)
    assert not any("gn-off" in q["cls"] for q in pts)
    assert min(pts, key=lambda q: q["cy"])["i"] == 0
    # hovering a decode call names it and prints its row
    box = page.locator("#ls-gen-chart").bounding_box()
    view = float(page.get_attribute("#ls-gen-chart", "viewBox").split()[2])
    at = next(q for q in pts if q["i"] == 1)["cx"] * box["width"] / view
    page.mouse.move(box["x"] + at, box["y"] + box["height"] / 2)
    tip = page.locator("#ls-gen-per-call .tip").text_content().split("\n")
    assert tip[:2] == ["call 2 of 5 · decode", "16 tokens in the cache before it, 1 fed per row"]
    assert "MACs 173 K" in tip
    # the KV cache: one bar per layer, 10,240 B each; the axis tops at 10 KiB (steps of
    # 2.5 KiB), so each bar is the plot's full height
    bars = page.eval_on_selector_all(
        "#ls-gen-kv-chart rect.gn-self",
        "rs => rs.map(r => [+r.dataset.layer, +r.dataset.bytes, +r.getAttribute('height')])",
    )
    assert [b[:2] for b in bars] == [[0, 10_240], [1, 10_240]]
    assert bars[0][2] == bars[1][2] > 100
    assert page.locator("#ls-gen-kv-chart rect.gn-cross").count() == 0
    assert _texts(page, "#ls-gen-kv li") == [
        "16.00 KiB after the prefill, 20.00 KiB at the end: 20 tokens × 2 rows × 512 B per "
        "token and row."
    ]
    # the calls table, as the console prints it
    rows = _cells(page, "#ls-gen-table")
    assert rows[0][:8] == [
        "Stage", "Cache before", "Fed", "MACs", "FLOPs", "Bytes moved", "Peak", "KV after",
    ]  # fmt: skip
    assert rows[2][:5] == ["decode", "16", "1", "173 K", units.si(steps[1].flops)]
    assert rows[2][5:8] == [
        units.nbytes(steps[1].bytes_accessed),
        units.nbytes(steps[1].peak_bytes or 0),
        "17.00 KiB",  # 17 tokens x 2 rows x 512 B = 17,408 B
    ]
    assert [r[0] for r in rows[1:]] == ["prefill"] + ["decode"] * 4
    assert _texts(page, "#ls-gen-notes li") == ["No notices."]
    p.clean()


def test_cross_attention_and_an_estimate(open_page: Any, gen: Generation) -> None:
    """A cache of 6,144 B of self-attention and 4,096 B of cross-attention per layer:
    stacked bars, the cross-attention on top; the estimate's sweep and its chart."""
    section = section_of(
        gen, per_layer=[6144, 6144], cross_per_layer=[4096, 4096], cross_bytes=8192
    )
    p = open_page(gen_html_text(gen.stages["decode"], section, ESTIMATE, stage="decode"))
    page = p.page
    bars = page.eval_on_selector_all(
        "#ls-gen-kv-chart rect",
        """rs => rs.filter(r => r.dataset.layer !== undefined).map(r => [
            r.getAttribute('class'), +r.dataset.layer, +r.dataset.bytes,
            +r.getAttribute('y'), +r.getAttribute('height')])""",
    )
    assert [b[:3] for b in bars] == [
        ["gn-self", 0, 6144], ["gn-cross", 0, 4096], ["gn-self", 1, 6144], ["gn-cross", 1, 4096],
    ]  # fmt: skip
    own, cross = bars[0], bars[1]
    assert cross[3] + cross[4] == pytest.approx(own[3], abs=0.2)  # stacked on top
    assert cross[4] / own[4] == pytest.approx(4096 / 6144, abs=0.01)
    box = page.locator("#ls-gen-kv-chart").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.75, box["y"] + box["height"] / 2)
    assert page.locator("#ls-gen-kv .tip").text_content().split("\n") == [
        "layer 1: 10.00 KiB",  # 6,144 + 4,096 B
        "self-attention 6.00 KiB (20 tokens × 2 rows)",
        "cross-attention 4.00 KiB",
    ]
    assert _texts(page, "#ls-gen-kv .gn-legend > span") == [
        "self-attention 12.00 KiB",
        "cross-attention 8.00 KiB",
    ]
    head = page.locator("#ls-gen-estimate h2").text_content()
    assert head == "Estimate on NVIDIA H100 SXM5 80GB"
    assert _texts(page, "#ls-gen-estimate-cards .card") == [
        "25 µsPrefill",
        "4 µsDecode per token",
        "250 KTokens/s per sequence",
    ]
    assert _cells(page, "#ls-gen-sweep") == SWEEP_TABLE
    marks = page.eval_on_selector_all(
        "#ls-gen-batch-chart .gn-pt", "ms => ms.map(m => [+m.dataset.x, m.getAttribute('class')])"
    )
    assert [m[0] for m in marks] == [1, 8, 32]
    assert ["gn-bad" in m[1] for m in marks] == [False, False, True]
    assert HOSTILE in _texts(page, "#ls-gen-estimate li")[0]
    p.clean()


def test_a_real_estimate(open_page: Any, gen: Generation, tmp_path: Path) -> None:
    """``estimate_generate`` on the same Llama for batches 1, 8 and 32, passed as the
    estimate object: a table row and a chart point per batch, each as printed."""
    module = pytest.importorskip("layerscope.generation.estimate")
    est = module.estimate_generate(
        llama(), target="h100", prompt=PROMPT, new_tokens=NEW, batch=[1, 8, 32]
    )
    gen.to_html(tmp_path / "real.html", estimate=est)
    p = open_page((tmp_path / "real.html").read_text(encoding="utf-8"))
    page = p.page
    rows = _cells(page, "#ls-gen-sweep")
    assert rows[0][:3] == ["Batch", "Prefill", "Decode per token"]
    assert [r[:3] for r in rows[1:]] == [
        [str(r.batch), units.seconds(r.prefill_time), units.seconds(r.decode_time_per_token)]
        for r in est.sweep
    ]
    marks = page.eval_on_selector_all(
        "#ls-gen-batch-chart .gn-pt", "ms => ms.map(m => [+m.dataset.x, +m.dataset.y])"
    )
    assert [m[0] for m in marks] == [1, 8, 32]
    decode = [r.decode_time_per_token for r in est.sweep]
    assert [m[1] for m in marks] == pytest.approx(decode, rel=1e-5)  # 6 digits travel
    assert _texts(page, "#ls-gen-estimate-cards .card span") == [
        "Prefill", "Decode per token", "Tokens/s per sequence", "Tokens/s",
    ]  # fmt: skip
    p.clean()


def test_a_generation_without_a_cache(open_page: Any) -> None:
    """``use_cache=False``: every call a full forward over the sequence so far, the
    chart over the tokens fed, no KV cache section and no prefill apart."""
    ids = torch.randint(0, 128, (ROWS, 8), generator=torch.Generator().manual_seed(1))
    full = ls.profile_generate(llama(), ids, max_new_tokens=3, use_cache=False)
    assert list(full.stages) == ["full"]
    p = open_page(gen_html_text(full.stages["full"], full.section_for_views(), stage="full"))
    page = p.page
    pts = _points(page)
    assert sorted(q["x"] for q in pts) == [8, 9, 10]
    assert not any("gn-apart" in q["cls"] for q in pts)
    assert page.locator("#ls-gen-kv, #ls-gen-scale, #ls-gen-cards .card").count() == 3
    assert "no cache: full forwards" in page.locator("#ls-gen > .sub").text_content()
    p.clean()


@pytest.mark.parametrize("width", [1400, 420])
def test_the_section_fits_the_window(open_page: Any, gen: Generation, width: int) -> None:
    """Nothing wider than the window but the tables, which scroll in their own box; a
    screenshot under /tmp to look at."""
    section = section_of(gen, cross_per_layer=[4096, 4096], cross_bytes=8192)
    p = open_page(
        gen_html_text(gen.stages["decode"], section, ESTIMATE, stage="decode"), width=width
    )
    wide = p.page.evaluate(
        """() => Array.from(document.querySelectorAll('#ls-gen > *, #ls-gen section > *'))
            .filter(e => e.getBoundingClientRect().right > innerWidth + 1)
            .map(e => e.id || e.className)"""
    )
    assert wide == []
    box = p.page.locator("#ls-gen").bounding_box()
    p.page.screenshot(
        path=f"/tmp/layerscope-generation-{width}.png",
        full_page=True,
        clip={"x": 0, "y": 0, "width": width, "height": box["y"] + box["height"]},
    )
    assert json.loads(p.page.locator("#ls-gen-data").text_content())["stage"] == ["decode", 4]
    p.clean()
