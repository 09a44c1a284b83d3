"""The roofline chart's labels in a headless Chromium, at the widths of a laptop's half
screen and a full one: the roof's (its peak, its ridge) and the points' names stay inside
the plot, clear of the axes' tick labels, of each other and of the roof's line. The
audit's cases: a ridge near the right end of the x axis ("ridge 295 FLO" cut off at 800
px) and a point near the left one, whose name covered a y tick label."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import torch

import layerscope as ls
from helpers.browser import report_pages
from layerscope import examples
from layerscope.profile import Profile

#: Every text of the chart, its box in the svg's units (the page's px), and the plot's.
GEOMETRY = """() => {
  const s = document.getElementById('ls-roofline-chart'), S = s.getBoundingClientRect();
  const box = t => { const r = t.getBoundingClientRect();
    return [r.left - S.left, r.top - S.top, r.right - S.left, r.bottom - S.top]; };
  const axes = s.querySelector('g.axis'), lines = [...axes.querySelectorAll('line')];
  const xs = lines.filter(l => l.getAttribute('x1') === l.getAttribute('x2'));
  const at = a => xs.map(l => +l.getAttribute(a)), roof = s.querySelector('path.rl-roof');
  return {
    svg: [s.viewBox.baseVal.width, s.viewBox.baseVal.height],
    plot: [Math.min(...at('x1')), Math.max(...at('x1')), Math.min(...at('y1')),
           Math.max(...at('y2'))],
    ticks: [...axes.querySelectorAll('text')].map(t => [t.textContent, ...box(t)]),
    labels: [...s.querySelectorAll('text')].filter(t => !axes.contains(t))
      .map(t => [t.textContent, ...box(t)]),
    roof: roof ? roof.getAttribute('d') : '',
  }; }"""


def _meets(a: list[Any], b: list[Any], gap: float = 0.0) -> bool:
    """Whether two [text, left, top, right, bottom] boxes overlap (by more than ``gap``)."""
    return bool(a[1] < b[3] - gap and b[1] < a[3] - gap and a[2] < b[4] - gap and b[2] < a[4] - gap)


def _crosses(d: str, box: list[Any]) -> bool:
    """Whether the roof's line (``M x y L x y ...``) passes through a label's box."""
    nums = [float(x) for x in d.replace("M", " ").replace("L", " ").split()]
    pts = list(zip(nums[::2], nums[1::2], strict=True))
    for (x1, y1), (x2, y2) in itertools.pairwise(pts):
        for k in range(401):
            x, y = x1 + (x2 - x1) * k / 400, y1 + (y2 - y1) * k / 400
            if box[1] + 0.5 < x < box[3] - 0.5 and box[2] + 0.5 < y < box[4] - 0.5:
                return True
    return False


@cache
def _profile(model: str) -> Profile:
    """A bfloat16 model analysed on meta for an H100: tiny_gpt (the plan's, with its
    backward) or a small Llama (the serving plan's and the estimate's)."""
    if model == "tiny_gpt":
        ex = examples.get("tiny_gpt")
        torch.manual_seed(0)
        net = ls.to_meta(ex.build()).to(torch.bfloat16)
        ids = torch.zeros_like(ex.example_input(), device="meta")
        return ls.profile(net, ids, target="h100", backward=True)
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2,
    )  # fmt: skip
    with torch.device("meta"):
        llama: Any = transformers.LlamaForCausalLM(config)
    ids = torch.zeros(1, 64, dtype=torch.long, device="meta")
    return ls.profile(llama.to(torch.bfloat16), ids, target="h100")


@pytest.fixture
def open_chart(browser: Any, tmp_path: Path) -> Iterator[Any]:
    with report_pages(browser, tmp_path) as open_:
        yield lambda prof, device, width: open_(prof, width, device)


def _check(geo: dict[str, Any]) -> list[str]:
    """What is wrong with the labels of one drawing of the chart (the roof's own labels
    clear of its line too; a point's name may cross it, on its halo)."""
    bad: list[str] = []
    width, height = geo["svg"]
    left, right, _, bottom = geo["plot"]
    texts = geo["ticks"] + geo["labels"]
    for t in texts:  # nothing cut by the svg's edges
        if t[1] < -0.5 or t[3] > width + 0.5 or t[2] < -0.5 or t[4] > height + 0.5:
            bad.append(f"cut: {t}")
    for t in geo["labels"]:  # names inside the plot, clear of every other text
        if t[1] < left - 0.5 or t[3] > right + 0.5 or t[2] < 0 or t[4] > bottom + 0.5:
            bad.append(f"outside the plot {geo['plot']}: {t}")
        bad += [f"meets: {t} / {o}" for o in texts if o is not t and _meets(t, o)]
        roofs = t[0].startswith("ridge ") or " peak " in t[0]
        if roofs and geo["roof"] and _crosses(geo["roof"], t):
            bad.append(f"on the roof's line: {t}")
    return bad


@pytest.mark.parametrize("width", [800, 1280])
@pytest.mark.parametrize(("model", "device"), [("tiny_gpt", "h100"), ("llama", "l4"),
                                               ("llama", "h100"), ("tiny_gpt", "l4")])  # fmt: skip
def test_labels_inside_the_plot_and_clear(
    open_chart: Any, model: str, device: str, width: int
) -> None:
    p = open_chart(_profile(model), device, width)
    phases = p.page.eval_on_selector_all(
        "#ls-rl-phase button", "bs => bs.map(b => b.dataset.phase)"
    )
    for phase in phases or ["forward"]:
        if phases:
            p.page.locator(f'#ls-rl-phase button[data-phase="{phase}"]').click()
        geo = p.page.evaluate(GEOMETRY)
        named = [t[0] for t in geo["labels"]]
        assert any(t.startswith("ridge ") and t.endswith(" FLOP/B") for t in named), named
        assert any(f"{device} peak " in t for t in named), named
        assert len(named) >= 4, named  # the roof's two and some points'
        assert _check(geo) == [], phase
    p.clean()


def test_the_audits_ridge_label_is_whole_at_800_px(open_chart: Any) -> None:
    """tiny_gpt in bfloat16 under an H100's roof: the ridge at 295 FLOP/B, 0.47 of a
    decade from the x axis's end at 1,000: its label is set against the plot's right edge,
    below the flat roof and right of the slope."""
    p = open_chart(_profile("tiny_gpt"), "h100", 800)
    geo = p.page.evaluate(GEOMETRY)
    ridge = next(t for t in geo["labels"] if t[0].startswith("ridge "))
    assert ridge[0] == "ridge 295 FLOP/B"
    assert ridge[3] <= geo["plot"][1] + 0.5
    assert not _crosses(geo["roof"], ridge)
    p.clean()
