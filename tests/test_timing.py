"""The timing pass (``layerscope.collect.timing``, default ``hooks`` timer).

Exact arithmetic comes from a FAKE CLOCK: modules advance it by programmed nanoseconds,
so every window, median and IQR is known in advance. A *ticking* fake clock also costs
``tick`` ns per read, which the overhead calibration must remove exactly. Real-clock tests
check only structure and invariants.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
import torch
from torch import Tensor, nn

import layerscope as ls
from helpers.models import Burn
from helpers.snapshots import ModelSnapshot
from layerscope import examples
from layerscope.analysis.fold import fold
from layerscope.collect.timing import (
    BACKWARD_TIME,
    FORWARD_TIME,
    TIME_METRICS,
    TimingResult,
    summarize,
    time_profile,
)
from layerscope.errors import InvalidInputError, ModelError
from layerscope.profile import Profile

NS = 1e-9  # one nanosecond in seconds: expected values are written in ns


def approx(ns: float) -> Any:
    return pytest.approx(ns * NS, rel=1e-9, abs=1e-15)


pytestmark = pytest.mark.usefixtures("seeded_one_thread")


class FakeClock:
    """Integer nanoseconds that move only when told to, plus ``tick`` per read."""

    def __init__(self, tick: int = 0) -> None:
        self.now = 0
        self.tick = tick

    def __call__(self) -> int:
        t = self.now
        self.now += self.tick
        return t

    def advance(self, ns: int) -> None:
        self.now += ns


class Cycle:
    """Values handed out in order, each ``each`` times, cycling (kept outside module state
    on purpose). ``each=2`` gives the bare and the instrumented run of one repeat the same
    value: the timing pass interleaves them."""

    def __init__(self, *values: int, each: int = 1) -> None:
        self.values = values
        self.each = each
        self.i = 0

    def next(self) -> int:
        v = self.values[(self.i // self.each) % len(self.values)]
        self.i += 1
        return v


class Work(nn.Module):
    """Forward takes the next of ``durations`` ns; backward ``backward_ns`` (if given)."""

    def __init__(
        self, clock: FakeClock, *durations: int, backward_ns: int | None = None, each: int = 1
    ) -> None:
        super().__init__()
        self.clock = clock
        self.durations = Cycle(*durations, each=each)
        self.backward_ns = backward_ns

    def forward(self, x: Tensor) -> Tensor:
        self.clock.advance(self.durations.next())
        if self.backward_ns is not None:
            out: Tensor = Burn.apply(  # type: ignore[no-untyped-call]
                x, self.clock, self.backward_ns
            )
            return out
        return x


class Net(nn.Module):
    """root (5 ns own work) -> a (100) -> b = Sequential(30, 20); backward 7/1000/300/200."""

    def __init__(self, clock: FakeClock, a: tuple[int, ...] = (100,)) -> None:
        super().__init__()
        self.clock = clock
        self.scale = nn.Parameter(torch.ones(()))
        self.a = Work(clock, *a, backward_ns=1000, each=2)
        self.b = nn.Sequential(Work(clock, 30, backward_ns=300), Work(clock, 20, backward_ns=200))

    def forward(self, x: Tensor) -> Tensor:
        self.clock.advance(5)
        y = self.b(self.a(x * self.scale))
        out: Tensor = Burn.apply(  # type: ignore[no-untyped-call]
            y, self.clock, 7
        )
        return out


def reset(model: nn.Module) -> None:
    """Restart every duration cycle (the analysis pass consumed some)."""
    for m in model.modules():
        if isinstance(m, Work):
            m.durations.i = 0


def timed(model: nn.Module, x: Tensor, **options: Any) -> tuple[Profile, TimingResult]:
    prof = ls.profile(model, x)
    reset(model)
    result = time_profile(prof, model, (x,), progress=False, **options)
    prof.self_check()
    return prof, result


# ---- exact arithmetic with the fake clock -------------------------------------------


@pytest.mark.parametrize("tick", [0, 7])
def test_inclusive_and_self_are_exact(tick: int) -> None:
    clock = FakeClock(tick)
    model = Net(clock)
    x = torch.randn(4, 3)
    prof, _ = timed(model, x, warmup=0, repeats=3, clock=clock)
    expected = {  # path: (inclusive, self), ns per call
        "": (5 + 100 + 30 + 20, 5),
        "a": (100, 100),
        "b": (30 + 20, 0),
        "b.0": (30, 30),
        "b.1": (20, 20),
    }
    for path, (incl, own) in expected.items():
        node = prof.node(path)
        assert node.metrics[FORWARD_TIME] == approx(incl), path
        assert node.self_metrics[FORWARD_TIME] == approx(own), path
        assert node.metrics[FORWARD_TIME + "_min"] == approx(incl)
        assert node.metrics[FORWARD_TIME + "_iqr"] == approx(0)
        assert BACKWARD_TIME not in node.metrics
    timing = prof.timing
    assert timing["forward_latency"]["median"] == approx(155)
    assert timing["latency"]["median"] == approx(155)
    assert timing["batch_size"] == 4
    assert timing["batch_source"] == "args[0].shape[0]"
    assert timing["throughput"] == pytest.approx(4 / (155 * NS))
    assert timing["overhead"]["corrected"] is True
    assert timing["overhead"]["forward_hook_inner"] == approx(tick)  # one read inside
    assert timing["overhead"]["forward_hook_outer"] == approx(2 * tick)  # both reads


def test_median_min_iqr_over_repeats() -> None:
    clock = FakeClock()
    model = Net(clock, a=(10, 40, 20, 30))
    prof, result = timed(model, torch.randn(2, 3), warmup=0, repeats=4, clock=clock)
    a = prof.node("a")
    # sorted per-repeat values [10, 20, 30, 40]: median 25; p25 = 17.5, p75 = 32.5
    assert a.metrics[FORWARD_TIME] == approx(25)
    assert a.metrics[FORWARD_TIME + "_min"] == approx(10)
    assert a.metrics[FORWARD_TIME + "_iqr"] == approx(15)
    assert a.self_metrics[FORWARD_TIME] == approx(25)
    root = prof.node("")
    # root per repeat: 5 + a + 50 -> [65, 75, 85, 95]
    assert root.metrics[FORWARD_TIME] == approx(80)
    assert root.self_metrics[FORWARD_TIME] == approx(5)
    assert sorted(result.modules[""].series[FORWARD_TIME].inclusive) == [65, 75, 85, 95]
    # whole-model latency from the uninstrumented runs: same values
    lat = prof.timing["latency"]
    assert lat["median"] == approx(80)
    assert lat["min"] == approx(65)
    assert lat["max"] == approx(95)
    assert lat["p90"] == approx(85 + 0.7 * 10)  # rank 0.9 * 3 = 2.7
    assert lat["iqr"] == approx(15)
    assert lat["n"] == 4


class Twice(nn.Module):
    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.block = Work(clock, 10, 30)  # first call 10 ns, second 30 ns

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.block(self.block(x))
        return out


def test_module_called_twice_is_timed_per_call() -> None:
    clock = FakeClock(tick=3)
    model = Twice(clock)
    prof, result = timed(model, torch.randn(2), warmup=0, repeats=2, clock=clock)
    block = prof.node("block")
    assert block.calls == 2
    assert result.modules["block"].calls == 2
    assert block.metrics[FORWARD_TIME] == approx((10 + 30) / 2)
    assert block.self_metrics[FORWARD_TIME] == approx(20)
    assert prof.root.metrics[FORWARD_TIME] == approx(40)
    assert prof.root.self_metrics[FORWARD_TIME] == approx(0)


@pytest.mark.parametrize("tick", [0, 5])
def test_backward_time_is_attributed_to_the_creating_module(tick: int) -> None:
    clock = FakeClock(tick)
    model = Net(clock)
    x = torch.randn(2, 3, requires_grad=True)
    prof, _ = timed(model, x, warmup=0, repeats=3, clock=clock, backward=True)
    expected = {
        "": (7 + 1000 + 300 + 200, 7),
        "a": (1000, 1000),
        "b": (500, 0),
        "b.0": (300, 300),
        "b.1": (200, 200),
    }
    for path, (incl, own) in expected.items():
        node = prof.node(path)
        assert node.metrics[BACKWARD_TIME] == approx(incl), path
        assert node.self_metrics[BACKWARD_TIME] == approx(own), path
        assert node.metrics[FORWARD_TIME] == approx(
            {"": 155, "a": 100, "b": 50, "b.0": 30, "b.1": 20}[path]
        )
    t = prof.timing
    assert t["backward_latency"]["median"] == approx(1507)
    assert t["latency"]["median"] == approx(155 + 1507)
    assert t["overhead"]["backward_hook"] == approx(tick)
    assert x.grad is None  # the input's grad is left as found


def test_warmup_and_repeat_counts() -> None:
    clock = FakeClock()
    model = Net(clock)
    x = torch.randn(1, 3)
    prof = ls.profile(model, x)
    a = model.a
    assert isinstance(a, Work)
    a.durations.i = 0
    seen: list[tuple[int, int]] = []
    result = time_profile(
        prof,
        model,
        (x,),
        warmup=2,
        repeats=3,
        clock=clock,
        progress=lambda d, t: seen.append((d, t)),
    )
    # warmup + repeats uninstrumented runs, one instrumented warm run, repeats timed runs
    assert a.durations.i == 2 + 3 + 1 + 3
    assert seen == [(i, 9) for i in range(1, 10)]
    assert len(result.whole["latency"]) == 3
    assert len(result.modules["a"].series[FORWARD_TIME].inclusive) == 3
    assert len(result.spans) == 3  # a timeline per timed repeat, the warm run not kept
    assert prof.timing["trace"] == result.trace
    assert result.trace is not None and result.trace["repeats"] == 3
    assert prof.timing["warmup"] == 2 and prof.timing["repeats"] == 3


def test_summarize_quantiles() -> None:
    # [1, 2, 3, 4]: median 2.5; p25 = 1.75, p75 = 3.25 -> iqr 1.5; p90 at rank 2.7 -> 3.7
    expected = {"median": 2.5, "mean": 2.5, "min": 1.0, "max": 4.0, "p90": 3.7, "iqr": 1.5}
    assert summarize([4.0, 1.0, 3.0, 2.0]) == pytest.approx(expected | {"n": 4})
    assert summarize([5.0])["iqr"] == 0.0
    assert summarize([1.0, 3.0], scale=2.0)["median"] == 4.0


# ---- real clock: structure, invariants, and the model left as found -----------------


def test_real_clock_invariants() -> None:
    ex = examples.get("tiny_resnet")
    model = ex.build().eval()
    x = ex.example_input()
    prof, result = timed(model, x, warmup=1, repeats=3)
    for node in prof.nodes():
        if not node.called:
            assert FORWARD_TIME not in node.metrics
            continue
        incl, own = node.metrics[FORWARD_TIME], node.self_metrics[FORWARD_TIME]
        assert 0 <= own <= incl, node.path
        assert node.metrics[FORWARD_TIME + "_min"] <= incl
        assert node.metrics[FORWARD_TIME + "_iqr"] >= 0
    assert prof.root.metrics[FORWARD_TIME] > 0
    assert prof.node("layer1.0.conv1").metrics[FORWARD_TIME] > 0
    # Per repeat, exactly: a parent's time covers its children's (totals = per call x calls)
    for node in prof.nodes():
        row = result.modules.get(node.path)
        kids = [result.modules[c.path] for c in node.children if c.path in result.modules]
        if row is None or not kids:
            continue
        for r, parent in enumerate(row.series[FORWARD_TIME].inclusive):
            children = sum(k.series[FORWARD_TIME].inclusive[r] * k.calls for k in kids)
            assert children <= parent * row.calls + 1e-6, (node.path, r)
    # and the medians, up to the noise medians allow
    for node in prof.nodes():
        if node.called and node.children:
            inside = sum(c.metrics.get(FORWARD_TIME, 0) * c.calls for c in node.children)
            assert inside <= node.metrics[FORWARD_TIME] * node.calls * 1.2 + 20e-6
    assert set(prof.timing) >= {"latency", "forward_latency", "throughput", "overhead"}


@pytest.mark.parametrize("name", ["tiny_resnet", "tiny_gpt", "shared_mlp"])
def test_timing_leaves_model_unchanged_in_train_mode(name: str) -> None:
    ex = examples.get(name)
    model = ex.build().train()
    x = ex.example_input()
    model(x).float().sum().backward()  # existing grads must survive the timing backward
    calls: list[str] = []
    model.register_forward_hook(lambda m, a, o: calls.append("hook"))
    prof = ls.profile(model, x)
    calls.clear()
    snap = ModelSnapshot.take(model)
    time_profile(prof, model, (x,), warmup=1, repeats=2, backward=True, progress=False)
    snap.assert_unchanged(model)
    assert len(calls) == (1 + 2) + (1 + 2)  # the user's hook ran on every run
    assert prof.root.metrics[BACKWARD_TIME] > 0


def test_batchnorm_and_dropout_state_restored() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Dropout(0.5), nn.Linear(8, 2))
    model.train()
    x = torch.randn(6, 4)
    bn = model[1]
    assert isinstance(bn, nn.BatchNorm1d)
    prof = ls.profile(model, x)
    snap = ModelSnapshot.take(model)
    rng = torch.get_rng_state()
    time_profile(prof, model, (x,), warmup=2, repeats=3, backward=True, progress=False)
    snap.assert_unchanged(model)
    assert bn.num_batches_tracked is not None and int(bn.num_batches_tracked) == 0
    assert torch.equal(torch.get_rng_state(), rng)
    assert prof.node("2").metrics[FORWARD_TIME] >= 0


@pytest.mark.parametrize("grad_mode", ["no_grad", "inference_mode"])
def test_grad_modes(grad_mode: str) -> None:
    ex = examples.get("shared_mlp")
    model = ex.build()
    x = ex.example_input()
    prof = ls.profile(model, x)
    snap = ModelSnapshot.take(model)
    time_profile(prof, model, (x,), warmup=1, repeats=2, grad_mode=grad_mode, progress=False)
    snap.assert_unchanged(model)
    assert prof.timing["grad_mode"] == grad_mode
    assert prof.node("block").metrics[FORWARD_TIME] > 0


def test_no_progress_output_and_json_round_trip(capsys: pytest.CaptureFixture[str]) -> None:
    ex = examples.get("shared_mlp")
    model = ex.build()
    x = ex.example_input()
    prof = ls.profile(model, x)
    time_profile(prof, model, (x,), warmup=1, repeats=2)  # progress=None: auto
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""
    again = Profile.from_dict(prof.to_dict())
    assert again == prof
    assert again.timing["timer"] == "hooks"


def test_reapplying_replaces_previous_results() -> None:
    clock = FakeClock()
    model = Net(clock)
    x = torch.randn(1, 3)
    prof, _ = timed(model, x, warmup=0, repeats=1, clock=clock, backward=True)
    assert BACKWARD_TIME in prof.root.metrics
    reset(model)
    time_profile(prof, model, (x,), warmup=0, repeats=1, clock=clock, progress=False)
    assert BACKWARD_TIME not in prof.root.metrics
    assert prof.root.metrics[FORWARD_TIME] == approx(155)
    keys = {k for n in prof.nodes() for k in (*n.metrics, *n.self_metrics)}
    assert keys & set(TIME_METRICS) == {FORWARD_TIME, FORWARD_TIME + "_min", FORWARD_TIME + "_iqr"}
    assert prof.timing["trace"]["backward"] == []  # the new pass's timeline, forward only


class Flaky(nn.Module):
    """Raises on its ``fail_at``-th call (the analysis pass is call 1)."""

    def __init__(self, fail_at: int) -> None:
        super().__init__()
        self.counter = Cycle(*range(1, 1000))
        self.fail_at = fail_at

    def forward(self, x: Tensor) -> Tensor:
        if self.counter.next() == self.fail_at:
            raise RuntimeError("boom")
        return x


@pytest.mark.parametrize("fail_at", [2, 6])  # in the bare runs; in the instrumented runs
def test_model_error_names_the_module(fail_at: int) -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU(), Flaky(fail_at)))
    x = torch.randn(1, 2)
    prof = ls.profile(model, x)
    snap = ModelSnapshot.take(model)
    with pytest.raises(ModelError, match="boom") as info:
        time_profile(prof, model, (x,), warmup=2, repeats=2, progress=False)
    assert info.value.path == "1.1"
    assert info.value.module_type == "Flaky"
    snap.assert_unchanged(model)


def test_invalid_options() -> None:
    model = nn.Linear(2, 2)
    x = torch.randn(1, 2)
    prof = ls.profile(model, x)
    bad: list[dict[str, Any]] = [
        {"timer": "nope"},
        {"repeats": 0},
        {"warmup": -1},
        {"grad_mode": "maybe"},
        {"backward": True, "grad_mode": "no_grad"},
        {"loss_fn": lambda out: out.sum()},
        {"ops": True},  # the hooks timer has no op rows
        {"batch_size": 0},
        {"progress": "yes"},
    ]
    for options in bad:
        with pytest.raises(InvalidInputError):
            time_profile(prof, model, (x,), **options)
    with pytest.raises(InvalidInputError, match="folded"):
        time_profile(fold(ls.profile(nn.Sequential(nn.ReLU(), nn.ReLU()), x)), model, (x,))
    assert FORWARD_TIME not in prof.root.metrics


def test_batch_size_given_and_kwargs_inputs() -> None:
    class KwModel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x: Tensor, *, mask: Tensor) -> Tensor:
            out: Tensor = self.lin(x) * mask
            return out

    model = KwModel()
    x, mask = torch.randn(5, 3), torch.ones(5, 3)
    prof = ls.profile(model, kwargs={"x": x, "mask": mask})
    time_profile(prof, model, (), {"x": x, "mask": mask}, warmup=0, repeats=2, progress=False)
    assert prof.timing["batch_size"] == 5
    assert prof.timing["batch_source"] == "kwargs['x'].shape[0]"
    time_profile(prof, model, (), {"x": x, "mask": mask}, repeats=1, batch_size=64, progress=False)
    assert prof.timing["batch_size"] == 64 and prof.timing["batch_source"] == "given"


# ---- the CUDA-event code path, exercised on CPU with fake events ---------------------


class FakeEvent:
    """Stands in for ``torch.cuda.Event``: records the fake clock's time."""

    clock = FakeClock()
    #: the stream each record went to
    streams: ClassVar[list[Any]] = []

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        self.t: int | None = None

    def record(self, stream: Any = None) -> None:
        self.t = FakeEvent.clock.now
        FakeEvent.streams.append(stream)

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.t is not None and end.t is not None
        return (end.t - self.t) / 1e6  # milliseconds, like CUDA


@pytest.mark.parametrize("sync", [False, True])
def test_event_path_with_fake_events(sync: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    import layerscope.collect.timing.runner as timing_module

    clock = FakeClock()
    FakeEvent.clock = clock
    syncs: list[int] = []
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: syncs.append(1))
    # every stamp goes to the stream current when its repeat began, found once a repeat
    stream, found = object(), []

    def current_stream(device: Any = None) -> object:
        found.append(device)
        return stream

    monkeypatch.setattr(torch.cuda, "current_stream", current_stream)
    FakeEvent.streams = []
    monkeypatch.setattr(timing_module, "_input_device", lambda *a: torch.device("cuda"))
    model = Net(clock)
    x = torch.randn(2, 3)
    prof = ls.profile(model, x)
    reset(model)
    time_profile(prof, model, (x,), warmup=0, repeats=2, backward=True, sync=sync, progress=False)
    assert prof.timing["clock"] == "cuda_event"
    assert prof.timing["overhead"]["corrected"] is False
    assert prof.node("a").metrics[FORWARD_TIME] == approx(100)
    assert prof.node("b").self_metrics[FORWARD_TIME] == approx(0)
    assert prof.root.metrics[FORWARD_TIME] == approx(155)
    assert prof.root.metrics[BACKWARD_TIME] == approx(1507)
    assert prof.node("b.1").metrics[BACKWARD_TIME] == approx(200)
    assert prof.timing["latency"]["median"] == approx(155 + 1507)
    # one synchronize per run (2 bare + 2 instrumented), plus one per module entry with sync
    calls_per_forward = 5
    assert len(syncs) == 4 + (2 * calls_per_forward if sync else 0)
    assert FakeEvent.streams and all(s is stream for s in FakeEvent.streams)
    assert len(found) < len(FakeEvent.streams) // 4


# ---- CUDA ---------------------------------------------------------------------------


@pytest.mark.cuda
@pytest.mark.parametrize("sync", [False, True])
def test_cuda_events(sync: bool) -> None:
    ex = examples.get("tiny_resnet")
    model = ex.build().cuda().train()
    x = ex.example_input().cuda()
    prof = ls.profile(model, x)
    snap = ModelSnapshot.take(model)
    time_profile(prof, model, (x,), warmup=2, repeats=3, sync=sync, backward=True, progress=False)
    snap.assert_unchanged(model)
    assert prof.timing["clock"] == "cuda_event"
    assert prof.timing["device"].startswith("cuda")
    for node in prof.nodes():
        if node.called:
            assert 0 <= node.self_metrics[FORWARD_TIME] <= node.metrics[FORWARD_TIME]
    assert prof.root.metrics[FORWARD_TIME] > 0
    assert prof.root.metrics[BACKWARD_TIME] > 0


class _InterruptedOnCall(nn.Module):
    """Raises KeyboardInterrupt on its ``at``-th call (1 = the first)."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at, self.calls = at, 0

    def forward(self, x: Tensor) -> Tensor:
        self.calls += 1
        if self.calls == self.at:
            raise KeyboardInterrupt
        return x


def test_an_interrupt_in_the_timing_pass_gets_a_note_naming_the_module() -> None:
    # call 1 is the analysis pass's; call 2 the timing pass's first
    model = nn.Sequential(nn.Linear(4, 4), _InterruptedOnCall(at=2))
    with pytest.raises(KeyboardInterrupt) as info:
        ls.profile(model, torch.ones(2, 4), timing={"warmup": 1, "repeats": 1})
    assert info.value.__notes__ == [
        "layerscope: raised in module '1' (_InterruptedOnCall) during the timing pass"
    ]


def test_each_timed_run_takes_the_inputs_as_given() -> None:
    """A cache the model appends to: every timed run starts from the empty cache the
    analysis started from (each run does the same work), and the user's cache holds the
    analysis pass's one call, 4 tokens; a tensor changed in place is said in a notice."""

    class Cache:
        def __init__(self) -> None:
            self.held: list[torch.Tensor] = []

    seen: list[int] = []

    class Appends(nn.Module):
        def forward(self, x: torch.Tensor, cache: Cache) -> torch.Tensor:
            seen.append(len(cache.held))
            cache.held.append(x)
            return torch.cat(cache.held).sum(0)

    cache = Cache()
    ls.profile(Appends(), args=(torch.randn(4, 8), cache), timing={"repeats": 3, "warmup": 2})
    assert len(cache.held) == 1
    assert seen and set(seen) == {0}  # every run, the analysis's included, saw none held

    class Increments(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.add_(1) * 2

    x = torch.zeros(3)
    prof = ls.profile(Increments(), x, timing={"repeats": 1, "warmup": 0})
    assert any("changed its input tensors in place" in n for n in prof.notices)
    plain = ls.profile(nn.Linear(3, 3), torch.zeros(3), timing={"repeats": 1, "warmup": 0})
    assert not any("in place" in n for n in plain.notices)
