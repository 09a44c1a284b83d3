"""User regions: ``region`` as a with block, a decorator and an iterator, as tree nodes."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import layerscope as ls
from layerscope.collect.active import active
from layerscope.collect.regions import region
from layerscope.collect.timing import time_profile

B = 5  # batch


class Headed(nn.Module):
    """``body`` outside any region, ``proj`` (Linear(8, 4)) and a relu in region "head"."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(8, 8)
        self.proj = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.body(x)
        with region("head"):
            out: torch.Tensor = self.proj(x)
            return out.relu()


def _headed() -> tuple[Headed, torch.Tensor]:
    torch.manual_seed(0)
    return Headed(), torch.randn(B, 8)


def test_region_in_forward_is_a_node_with_the_ops_and_modules_inside() -> None:
    model, x = _headed()
    prof = ls.profile(model, x)
    prof.self_check()
    head = prof.node("[head]")
    assert (head.type, head.name, head.node_id, head.depth, head.calls) == (
        "region",
        "head",
        "2",
        1,
        1,
    )
    assert [c.path for c in prof.root.children] == ["body", "[head]"]
    # proj keeps its qualified path, and nests under the region it first ran in
    proj = prof.node("proj")
    assert proj.parent is head and proj.node_id == "2.1" and proj.depth == 2
    assert head.children == [proj]
    # Linear(8, 4): B*8*4 MACs; FLOPs 2 per MAC plus the bias add, B*4
    assert proj.metrics["macs"] == B * 8 * 4
    assert proj.metrics["flops"] == 2 * B * 8 * 4 + B * 4
    # the relu (B*4 FLOPs) runs in the region, not in a module below it
    assert head.self_metrics["macs"] == 0
    assert head.self_metrics["flops"] == B * 4
    assert head.metrics["macs"] == B * 8 * 4
    assert head.metrics["flops"] == 2 * B * 8 * 4 + B * 4 + B * 4
    # params roll up through the region: Linear(8, 4) has 8*4 + 4
    assert head.self_metrics["params"] == 0
    assert head.metrics["params"] == 8 * 4 + 4
    assert prof.root.metrics["macs"] == B * 8 * 8 + B * 8 * 4
    assert head.metrics["forward_time"] > 0
    assert "forward_time" not in head.self_metrics


def test_region_gets_the_backward_of_its_ops() -> None:
    model, x = _headed()
    prof = ls.profile(model, x, backward=True)
    prof.self_check()
    head, proj = prof.node("[head]"), prof.node("proj")
    # relu's backward (threshold_backward, B*4) is the region's own; proj's is proj's:
    # grad input B*4*8 MACs and grad weight 4*B*8 MACs (x requires no grad, but body's
    # output does)
    assert head.self_metrics["backward_flops"] == B * 4
    assert proj.metrics["backward_macs"] == 2 * B * 8 * 4
    assert head.metrics["backward_macs"] == 2 * B * 8 * 4


def test_module_first_called_before_the_region_stays_in_place() -> None:
    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.lin(x)
            with region("again"):
                out: torch.Tensor = self.lin(x)
                return out

    prof = ls.profile(Twice(), torch.randn(3, 4))
    prof.self_check()
    assert [c.path for c in prof.root.children] == ["lin", "[again]"]
    again = prof.node("[again]")
    assert again.children == [] and again.metrics["macs"] == 0
    assert prof.node("lin").calls == 2
    assert prof.node("lin").metrics["macs"] == 2 * 3 * 4 * 4


def test_nested_regions_and_region_inside_a_submodule() -> None:
    class Inner(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(6, 6)
            self.b = nn.Linear(6, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with region("outer"):
                x = self.a(x)
                with region("inner"):
                    out: torch.Tensor = self.b(x)
                    return out

    model = nn.Sequential(nn.Linear(6, 6), Inner())
    prof = ls.profile(model, torch.randn(B, 6))
    prof.self_check()
    outer, inner = prof.node("1.[outer]"), prof.node("1.[outer].[inner]")
    assert (outer.node_id, inner.node_id) == ("2.1", "2.1.2")
    assert [c.path for c in outer.children] == ["1.a", "1.[outer].[inner]"]
    assert [c.path for c in inner.children] == ["1.b"]
    assert inner.metrics["macs"] == B * 6 * 2
    assert outer.metrics["macs"] == B * 6 * 6 + B * 6 * 2
    assert prof.node("1").metrics["macs"] == outer.metrics["macs"]


def test_decorator_and_iter_forms_count_calls() -> None:
    model, x = _headed()

    @region("step")
    def step(batch: torch.Tensor) -> torch.Tensor:
        """One step."""
        out: torch.Tensor = model(batch)
        return out

    assert step.__name__ == "step" and step.__doc__ == "One step."
    with ls.Profiler(model) as p:
        for batch in region.iter([x, x, x], "data"):
            step(batch)
    prof = p.profile
    prof.self_check()
    out = {r.path: r for r in region.outside(prof)}
    assert list(out) == ["<outside>.[data]", "<outside>.[step]"]
    # three items: three counted next() calls (the last, empty one is not counted)
    assert out["<outside>.[data]"].calls == 3
    assert out["<outside>.[step]"].calls == 3
    assert [r.node_id for r in out.values()] == ["o1", "o2"]
    # the model's calls inside an outside region stay in the model tree
    assert prof.root.calls == 3
    assert prof.root.metrics["macs"] == 3 * (B * 8 * 8 + B * 8 * 4)
    assert prof.node("[head]").calls == 3


def test_region_around_the_loss_is_outside_the_model() -> None:
    model, x = _headed()
    with ls.Profiler(model) as p:
        out = model(x)
        with region("loss"):
            loss = (out * out).sum()  # mul: B*4 FLOPs, sum: B*4 (one per element)
        loss.backward()
    prof = p.profile
    prof.self_check()
    (loss_node,) = region.outside(prof)
    assert (loss_node.path, loss_node.type, loss_node.calls) == ("<outside>.[loss]", "region", 1)
    assert loss_node.metrics["flops"] == B * 4 + B * 4
    # outside totals still hold all the work done outside the model, regions included
    assert prof.outside["flops"] == loss_node.metrics["flops"]
    assert prof.outside["backward_flops"] == loss_node.metrics["backward_flops"]
    assert prof.root.metrics["flops"] == (2 * B * 8 * 8 + B * 8) + (2 * B * 8 * 4 + B * 4) + B * 4
    assert not any(n.type == "region" and n.path.startswith("<outside>") for n in prof.nodes())
    assert any("[loss] ×1" in n for n in prof.notices)


def test_region_exited_by_an_exception_pops() -> None:
    class Boom(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with region("fails"):
                self.lin(x)
                raise ValueError("boom")

    model = Boom()
    with pytest.raises(ValueError, match="boom") as info, ls.Profiler(model) as p:
        try:
            model(torch.ones(1, 2))
        finally:
            assert p.tracker.stack == []
            assert p.tracker.current is p.tracker.outside
    assert any("'[fails]' (region)" in note for note in getattr(info.value, "__notes__", []))
    prof = p.profile
    prof.self_check()
    assert prof.node("[fails]").calls == 1
    assert prof.node("lin").parent is prof.node("[fails]")


def test_decorated_function_that_raises_still_pops() -> None:
    model, x = _headed()

    @region("bad")
    def bad() -> None:
        model(x)
        raise KeyError("k")

    with ls.Profiler(model) as p:
        with pytest.raises(KeyError):
            bad()
        assert p.tracker.stack == [] and p.tracker.current is p.tracker.outside
        model(x)
    assert [r.calls for r in region.outside(p.profile)] == [1]


def test_regions_outside_a_session_do_nothing() -> None:
    trackers = active.trackers
    before = dict(vars(active))
    r = region("idle")
    with r, region("idle2"):
        pass
    assert r._tokens == []

    @region("f")
    def f(a: int) -> int:
        return a + 1

    assert f(1) == 2
    assert list(region.iter(range(3), "it")) == [0, 1, 2]
    # nothing registered, nothing created: the thread-local is as it was
    assert dict(vars(active)) == before
    assert active.trackers is trackers and trackers == []
    # and a later session sees none of it
    model, x = _headed()
    with ls.Profiler(model) as p:
        model(x)
    assert region.outside(p.profile) == []


def test_session_ends_the_active_registration() -> None:
    model, _ = _headed()
    with ls.Profiler(model) as p:
        assert active.trackers[-1] is p.tracker
    assert p.tracker not in active.trackers


def test_region_open_across_the_end_of_a_session_is_harmless() -> None:
    model, x = _headed()
    with region("long"), ls.Profiler(model) as p:
        model(x)
    with ls.Profiler(model) as q, region("spans"):
        model(x)
    assert region.outside(p.profile) == []
    assert [r.calls for r in region.outside(q.profile)] == [1]


def test_json_round_trip_and_render(tmp_path: object) -> None:
    import pathlib

    model, x = _headed()
    with ls.Profiler(model) as p:
        model(x).sum()
        with region("loss"):
            model(x).sum()
    prof = p.profile
    path = pathlib.Path(str(tmp_path)) / "p.json"
    prof.save(path)
    loaded = ls.load(path)
    assert loaded == prof
    assert loaded.node("[head]").type == "region"
    assert [r.path for r in region.outside(loaded)] == ["<outside>.[loss]"]
    loaded.self_check()
    text = prof.render(width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "(2) head region" in text


class _Ticks:
    """A clock that moves 1 µs per read: a wall time is the number of reads in it."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        self.now += 1000
        return self.now


US = 1e-6


def test_timing_pass_times_regions_with_its_own_timers() -> None:
    """Rule 4: the region's time comes from the timing pass, not the analysed run. With a
    clock that ticks once per read and no overhead correction, a call of [head] spans
    its own enter stamp, proj's pre and post stamps and its exit stamp: 4 reads, 3 µs."""
    model, x = _headed()
    prof = ls.profile(model, x)
    assert prof.node("[head]").metrics["forward_time"] > 0  # the analysed run's
    time_profile(prof, model, (x,), warmup=1, repeats=3, clock=_Ticks(), correct_overhead=False)
    prof.self_check()
    head = prof.node("[head]")
    assert head.metrics["forward_time"] == pytest.approx(3 * US)
    assert "forward_time" not in head.self_metrics  # a region has no self time
    assert head.metrics["macs"] == B * 8 * 4
    assert prof.node("proj").metrics["forward_time"] == pytest.approx(1 * US)


def test_kineto_timer_times_regions() -> None:
    """Under the kineto timer a region's time is its range's; one repeat, so the self
    times (root, body, proj: a region has none) add up exactly to the root's time."""
    model, x = _headed()
    prof = ls.profile(model, x, timing={"repeats": 1, "warmup": 0, "timer": "kineto"})
    prof.self_check()
    head = prof.node("[head]")
    proj = prof.node("proj")
    assert head.parent is prof.root and proj.parent is head
    assert "forward_time" not in head.self_metrics  # a region has no self time
    root_time = prof.root.metrics["forward_time"]
    assert proj.metrics["forward_time"] <= head.metrics["forward_time"] <= root_time
    own = [n.self_metrics["forward_time"] for n in (prof.root, prof.node("body"), proj)]
    assert sum(own) == pytest.approx(root_time, rel=1e-9)


def test_loop_timed_steps_time_regions_outside_the_model() -> None:
    """In a Profiler loop the first active step is analysed and the others are timed:
    the data region's time is the timed steps' (one tick from its enter stamp to its
    exit stamp: 1 µs), replacing the analysed step's, in the node and in the notice."""
    model, x = _headed()
    loader = [x] * 3
    timing = {"clock": _Ticks(), "correct_overhead": False}
    p = ls.Profiler(model, timing=timing, schedule=ls.schedule(active=3, repeat=1))
    with p:
        for batch in region.iter(loader, "data"):
            model(batch).sum().backward()
            p.step()
    prof = p.profile
    (data,) = region.outside(prof)
    assert (data.path, data.calls) == ("<outside>.[data]", 1)  # counted in the analysed step
    assert data.metrics["forward_time"] == pytest.approx(1 * US)
    assert any("[data] ×1 1 µs/call" in n for n in prof.notices)
    assert prof.node("[head]").metrics["forward_time"] == pytest.approx(3 * US)


def test_a_region_inside_the_model_under_a_region_around_its_call_is_timed() -> None:
    """The model's call inside an outer region ("fwd"): the model's own region "[head]"
    is still timed as the model's (3 ticks, as without the outer region), not filed under
    the outer one where the analysed profile has no node (before: no time at all)."""
    model, x = _headed()
    timing = {"clock": _Ticks(), "correct_overhead": False}
    p = ls.Profiler(model, timing=timing, schedule=ls.schedule(active=3, repeat=1))
    with p:
        for _ in range(3):
            with region("fwd"):
                y = model(x)
            y.sum().backward()
            p.step()
    assert p.profile.node("[head]").metrics["forward_time"] == pytest.approx(3 * US)


def test_bad_names() -> None:
    for bad in ("", "a.b", 3):
        with pytest.raises(ls.InvalidInputError):
            region(bad)  # type: ignore[arg-type]
    with pytest.raises(ls.InvalidInputError):
        region.iter([], "x.y")
