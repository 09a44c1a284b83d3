"""The HTML report's charts in a headless Chromium: the icicle sizes a container by its
modules where it has no value of its own (a ModuleList is never called: no time), and the
memory timeline calls only the backward's work backward (not an optimizer step after it)
and gives the Bwd peak card's figure, the text view's."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import layerscope as ls
from helpers.browser import Page, report_pages
from layerscope import examples
from layerscope.analysis.catalog import Values
from layerscope.profile import Profile
from layerscope.render import units
from viewmodels import build, node


@pytest.fixture
def open_report(browser: Any, tmp_path: Path) -> Iterator[Any]:
    with report_pages(browser, tmp_path) as open_:
        yield open_


# ==== the icicle ==============================================================================


def _timed(prof: Profile, seconds: dict[str, float]) -> Profile:
    """``seconds`` per call by path: the forward time of those modules (the others none)."""
    for n in prof.nodes():
        if n.path in seconds:
            n.metrics["forward_time"] = n.self_metrics["forward_time"] = seconds[n.path]
    return prof


def _rects(p: Page) -> dict[str, tuple[float, float, str]]:
    """The icicle's bars by node index: (x, width, tooltip)."""
    found = p.page.eval_on_selector_all(
        "#ls-icicle g",
        "gs => gs.map(g => [g.dataset.i, +g.querySelector('rect').getAttribute('x'),"
        " +g.querySelector('rect').getAttribute('width'), g.querySelector('title').textContent])",
    )
    return {str(i): (x, w, tip) for i, x, w, tip in found}


def _show_time(p: Page) -> None:
    p.page.locator('#ls-metric button[data-key="forward_time_total"]').click()
    assert p.page.get_attribute("#ls-icicle", "data-metric") == "forward_time_total"


def test_a_never_called_container_is_as_wide_as_its_modules(open_report: Any) -> None:
    """Net (12 ms) > blocks (a ModuleList: never called, no time) > b0 (3 ms), b1 (6 ms);
    head 1 ms: blocks is 9 of the 12 ms, its blocks 3 and 6 of them."""
    prof = build(
        node(
            "Net",
            "Net",
            node(
                "blocks",
                "ModuleList",
                node("b0", "Block", flops=10),
                node("b1", "Block", flops=10),
                calls=0,
            ),
            node("head", "Linear", flops=10),
        )
    )
    _timed(prof, {"": 12e-3, "blocks.b0": 3e-3, "blocks.b1": 6e-3, "head": 1e-3})
    assert Values(prof).get(prof.root.children[0], "forward_time_total") is None  # blocks
    p = open_report(prof)
    _show_time(p)
    bars = _rects(p)
    assert set(bars) == {"0", "1", "2", "3", "4"}
    root = bars["0"][1]
    for i, share in (("1", 9 / 12), ("2", 3 / 12), ("3", 6 / 12), ("4", 1 / 12)):
        assert bars[i][1] / root == pytest.approx(share, abs=0.5 / root), i
    # b0 and b1 side by side under blocks, from its left edge
    assert bars["2"][0] == bars["1"][0]
    assert bars["3"][0] == pytest.approx(bars["2"][0] + bars["2"][1], abs=0.1)
    assert bars["1"][2].split("\n")[1] == (
        "Fwd time: 9 ms, the sum of its modules' (never called itself) (75.0% of the model)"
    )
    assert bars["2"][2].split("\n")[1] == "Fwd time: 3 ms (25.0% of the model)"
    p.clean()


def test_a_container_is_at_least_its_modules(open_report: Any) -> None:
    """A measured time below its modules' sum (timing noise): the sum sizes the bar."""
    prof = build(node("Net", "Net", node("a", "A", flops=1), node("b", "B", flops=1)))
    _timed(prof, {"": 2e-3, "a": 3e-3, "b": 1e-3})
    p = open_report(prof)
    _show_time(p)
    bars = _rects(p)
    assert bars["1"][1] / bars["0"][1] == pytest.approx(0.75, abs=0.001)
    assert bars["2"][1] / bars["0"][1] == pytest.approx(0.25, abs=0.001)
    assert bars["0"][2].split("\n")[1] == (
        "Fwd time: 4 ms, the sum of its modules' (its own: 2 ms) (100% of the model)"
    )
    p.clean()


def _inclusive(prof: Profile, values: list[Any]) -> list[float]:
    """max(own, sum of the children's), bottom up: what the icicle sizes each node by."""
    nodes = prof.nodes()
    index = {id(n): i for i, n in enumerate(nodes)}
    out = [float(x) if isinstance(x, int | float) and x > 0 else 0.0 for x in values]
    for i in reversed(range(len(nodes))):
        kids = [index[id(c)] for c in nodes[i].children]
        if kids:
            out[i] = max(out[i], sum(out[k] for k in kids))
    return out


def test_tiny_gpts_blocks_in_the_time_icicle(open_report: Any) -> None:
    """The audit's case: tiny_gpt timed, whose ``blocks`` ModuleList has no time."""
    ex = examples.get("tiny_gpt")
    torch.manual_seed(0)
    prof = ls.profile(ex.build(), ex.example_input(), timing={"warmup": 1, "repeats": 2})
    paths = [n.path for n in prof.nodes()]
    values = Values(prof)
    totals = [values.get(n, "forward_time_total") for n in prof.nodes()]
    assert totals[paths.index("blocks")] is None
    want = _inclusive(prof, totals)
    p = open_report(prof)
    _show_time(p)
    bars = _rects(p)
    root = bars["0"][1]
    for path in ("blocks", "blocks.0", "blocks.1", "blocks.0.attn", "blocks.1.mlp"):
        i = paths.index(path)
        assert bars[str(i)][1] > 0, path
        share = want[i] / want[0]
        assert bars[str(i)][1] / root == pytest.approx(share, abs=0.6 / root), path
    blocks = want[paths.index("blocks.0")] + want[paths.index("blocks.1")]
    assert want[paths.index("blocks")] == blocks
    p.clean()


# ==== the memory timeline =====================================================================


def _loop(optimizer: Callable[..., torch.optim.Optimizer], steps: int, **schedule: int) -> Profile:
    """Linear(8, 16) - ReLU - Linear(16, 4) trained in a Profiler loop."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = optimizer(model.parameters(), lr=0.01)
    sched = ls.schedule(**schedule) if schedule else None
    prof = ls.Profiler(model, schedule=sched, memory=True)
    prof.start()
    for _ in range(steps):
        model(torch.randn(2, 8)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        if sched is not None:
            prof.step()
    prof.stop()
    return prof.profile


def _timeline(p: Page) -> dict[str, Any]:
    got: dict[str, Any] = p.page.evaluate(
        """() => {
        const s = document.getElementById('ls-timeline'), n = (e, a) => +e.getAttribute(a);
        const all = q => [...s.querySelectorAll(q)], text = id => document.getElementById(id);
        return {
          width: s.viewBox.baseVal.width,
          shaded: all('rect.tl-bw').map(r => [n(r, 'x'), n(r, 'x') + n(r, 'width')]),
          dashed: all('line.tl-start').map(l => [n(l, 'x1'), n(l, 'x2')]),
          peak: n(s.querySelector('circle.tl-peak'), 'cx'),
          label: text('ls-tl-peak').textContent,
          legend: text('ls-tl-legend').textContent,
          start: all('.axis text').filter(t => t.textContent === 'backward \u2192')
            .map(t => n(t, 'x')),
          card: document.querySelector('.card[data-key="backward_peak_bytes"] b').textContent,
        }; }"""
    )
    return got


def test_an_optimizer_step_after_the_backward_is_not_backward(open_report: Any) -> None:
    """The audit's loop: AdamW's step after the backward makes the run's peak. The shading
    stops at it, it is named as after the backward, and the legend gives the Bwd peak
    card's figure (816 B, the text view's), not the optimizer's rise."""
    prof = _loop(torch.optim.AdamW, 4, wait=1, warmup=1, active=1, repeat=1)
    mem, t = prof.memory, prof.memory["timeline"]
    peak = t["bytes"].index(max(t["bytes"]))
    last_bw = max(k for k, e in enumerate(t["event"]) if e == "backward")
    # the peak: after the backward's last module's work, by code outside the model
    assert peak > last_bw and t["path"][peak] == "<outside>" != t["path"][last_bw]
    bwd = units.nbytes(mem["backward_peak_bytes"])
    assert f"backward peak {bwd}" in prof.render(width=200)  # the text view's figure
    for width in (800, 1280):
        p = open_report(prof, width)
        tl = _timeline(p)
        assert len(tl["shaded"]) == 1 and tl["start"] == [tl["shaded"][0][0]]
        assert tl["shaded"][0][1] == pytest.approx(tl["peak"], abs=0.05)  # stops at it
        assert tl["dashed"] == [tl["shaded"][0]]
        high = units.nbytes(mem["session_peak_bytes"])
        assert tl["label"] == f"highest {high} = Peak live \u00b7 <outside>, after the backward"
        assert tl["legend"].startswith(
            f"Highest point: {high}, in <outside> after the backward (the Peak live card). "
            f"Dashed: {units.nbytes(t['bytes'][t['event'].index('backward')])} live when the "
            f"backward started; the backward's highest point is {bwd} above it (the Bwd peak "
            "over bwd start card; reached between two samples"
        )
        assert "backward of" not in tl["label"] + tl["legend"]
        assert tl["card"] == bwd
        p.clean()


def test_each_backward_of_a_loop_is_shaded_apart(open_report: Any) -> None:
    """Two steps in one session: the second forward is not backward; the last backward
    runs to the end of the line (the timeline has no event where a backward ends)."""
    prof = _loop(torch.optim.SGD, 2)
    t = prof.memory["timeline"]
    assert t["event"].count("enter") == 8  # the root and its 3 modules, twice
    p = open_report(prof)
    tl = _timeline(p)
    assert len(tl["shaded"]) == 2 and tl["dashed"] == tl["shaded"]
    (a0, a1), (b0, b1) = tl["shaded"]
    assert a0 < a1 < b0 < b1 == pytest.approx(tl["width"] - 14)
    bwd = units.nbytes(prof.memory["backward_peak_bytes"])
    assert (
        "Dashed: the live bytes when each of the 2 backward passes started; the most a "
        f"backward rose above its line is {bwd} (the Bwd peak over bwd start card)."
    ) in tl["legend"]
    assert tl["label"].startswith("highest ") and "\u00b7 backward of 0 (Linear)" in tl["label"]
    p.clean()


def test_a_recomputation_stays_in_the_backward(open_report: Any) -> None:
    """Activation checkpointing enters modules during the backward: still backward."""

    class Checkpointed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
            self.b = nn.Linear(16, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.b(checkpoint(self.a, x, use_reentrant=False))
            return out

    torch.manual_seed(0)
    prof = ls.profile(Checkpointed(), torch.randn(2, 8), backward=True, memory=True)
    events = prof.memory["timeline"]["event"]
    assert "enter" in events[events.index("backward") :]  # the recomputation
    p = open_report(prof)
    tl = _timeline(p)
    assert len(tl["shaded"]) == 1 and tl["shaded"][0][1] == pytest.approx(tl["width"] - 14)
    assert "backward of a.0 (Linear)" in tl["label"]
    bwd = units.nbytes(prof.memory["backward_peak_bytes"])
    assert f"the backward's highest point is {bwd} above it (the Bwd peak" in tl["legend"]
    p.clean()


def test_the_hover_says_backward_inside_a_backward_pass(open_report: Any) -> None:
    """Hovering the timeline: a module's peak inside the backward pass reads "backward:
    peak in ..." (it read as a forward one); the forward's events and the backward's own
    keep their words."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    prof = ls.profile(model, torch.randn(32, 16), backward=True, memory=True)
    p = open_report(prof)
    tips: list[str] = p.page.evaluate(
        """() => {
          const svg = document.getElementById('ls-timeline');
          const hit = [...svg.querySelectorAll('rect')]
            .filter(r => r.getAttribute('fill') === 'transparent').pop();
          const box = hit.getBoundingClientRect(), seen = [];
          for (let x = box.left + 1; x < box.right; x += 2) {
            const at = {clientX: x, clientY: box.top + 5, bubbles: true};
            hit.dispatchEvent(new MouseEvent('mousemove', at));
            const tip = [...document.querySelectorAll('.tip, [class*=tip]')].map(t => t.textContent)
              .find(t => t.includes(' live \\u00b7 op '));
            if (tip) seen.push(tip.split('\\n')[0]);
          }
          return seen;
        }"""
    )
    # the events: enter 0, exit 0, ..., exit, backward <outside>, backward 2, backward 1,
    # peak 1, backward 0, peak 0, end; every peak is the backward's here
    assert {"backward: peak in 0 (Linear)", "enter 0 (Linear)", "backward 2 (Linear)"} <= set(tips)
    assert all(t.startswith("backward: ") for t in tips if "peak in" in t)
    assert not any(t.startswith(("backward: backward", "backward: enter")) for t in tips)
