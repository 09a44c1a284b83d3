"""The timeline the timing pass keeps (``Profile.timing["trace"]``) and its Chrome/Perfetto
export (``layerscope.export.trace``).

Every trace is read back with ``json.load`` and checked as Trace Event Format: keys,
types, ``ph`` values, spans that nest on each track, one forward span per module call
(counted here with plain hooks on an uninstrumented forward), backward spans, and args
equal to the profile's numbers. A fake clock makes the spans of the hooks timer exact.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn

import layerscope as ls
from helpers.models import Burn
from layerscope import examples
from layerscope.collect.timing import time_profile
from layerscope.collect.timing.index import ModuleIndex
from layerscope.collect.timing.spans import RepeatSpans, median_repeat, nest_backward
from layerscope.errors import ExportError
from layerscope.export.trace import to_trace, trace_events
from layerscope.profile import Profile

pytestmark = pytest.mark.usefixtures("seeded_one_thread")

EPS = 1e-6  # microseconds: the trace rounds times to the ns, so compare to well below it
FORWARD, BACKWARD = 1, 2  # tids


# ---- reading and checking a trace ---------------------------------------------------


def _no_constants(name: str) -> Any:
    raise AssertionError(f"{name} is not valid JSON")


def load_trace(path: Path) -> dict[str, Any]:
    """The file, parsed strictly, after checking it is Trace Event Format (object form)."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f, parse_constant=_no_constants)
    assert isinstance(data, dict)
    assert set(data) == {"traceEvents", "displayTimeUnit", "otherData"}
    assert data["displayTimeUnit"] == "ms"
    assert isinstance(data["otherData"], dict)
    events = data["traceEvents"]
    assert isinstance(events, list) and events
    for e in events:
        assert e["ph"] in ("X", "M"), e
        assert isinstance(e["name"], str) and e["name"], e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        assert isinstance(e["args"], dict)
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "thread_name", "thread_sort_index")
            assert set(e) == {"name", "ph", "pid", "tid", "args"}
        else:
            assert set(e) == {"name", "cat", "ph", "ts", "dur", "pid", "tid", "args"}
            assert isinstance(e["cat"], str)
            for key in ("ts", "dur"):
                assert isinstance(e[key], int | float) and not isinstance(e[key], bool)
                assert e[key] >= 0
            assert e["tid"] in (FORWARD, BACKWARD)
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert names[FORWARD] == "forward"
    if any(e["ph"] == "X" and e["tid"] == BACKWARD for e in events):
        assert names[BACKWARD] == "backward"
    return data


def spans(data: dict[str, Any], tid: int) -> list[dict[str, Any]]:
    return [e for e in data["traceEvents"] if e["ph"] == "X" and e["tid"] == tid]


def modules(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if "::" not in e["cat"]]


def end(e: dict[str, Any]) -> float:
    return float(e["ts"] + e["dur"])


def check_laminar(events: list[dict[str, Any]]) -> None:
    """Any two spans of a track are disjoint (touching ends allowed) or one holds the
    other: spans nest and siblings do not overlap. Needs no ordering, so it also holds
    for the zero-length spans a coarse clock (CUDA events) gives."""
    for i, a in enumerate(events):
        for b in events[i + 1 :]:
            disjoint = end(a) <= b["ts"] + EPS or end(b) <= a["ts"] + EPS
            a_in_b = b["ts"] <= a["ts"] + EPS and end(a) <= end(b) + EPS
            b_in_a = a["ts"] <= b["ts"] + EPS and end(b) <= end(a) + EPS
            assert disjoint or a_in_b or b_in_a, (a, b)


def enclosing(events: list[dict[str, Any]]) -> dict[int, dict[str, Any] | None]:
    """Check that the spans of one track nest, and return per span the innermost span
    around it, reading the track in file order (by start; an enclosing span first)."""
    check_laminar(events)
    assert [e["ts"] for e in events] == sorted(e["ts"] for e in events)
    stack: list[dict[str, Any]] = []
    parent: dict[int, dict[str, Any] | None] = {}
    for e in events:
        while stack and end(stack[-1]) <= e["ts"] + EPS:
            stack.pop()
        if stack:
            top = stack[-1]
            assert e["ts"] >= top["ts"] - EPS and end(e) <= end(top) + EPS, (e, top)
        parent[id(e)] = stack[-1] if stack else None
        stack.append(e)
    return parent


def tree_parent(prof: Profile, path: str) -> str:
    node = prof.node(path)
    assert node.parent is not None
    return node.parent.path


def check_forward_nesting(prof: Profile, data: dict[str, Any], strict: bool = True) -> None:
    """Forward module spans sit in the span of their parent module, op spans in their
    module's span, one root span holds everything. ``strict``: the parent is the
    *innermost* span around each (times with ns resolution, no zero-length spans);
    otherwise only that a span of the parent holds it (coarse clocks)."""
    track = spans(data, FORWARD)
    roots = [e for e in track if e["args"]["path"] == "" and "::" not in e["cat"]]
    assert len(roots) == 1
    parent = enclosing(track) if strict else {}
    if not strict:
        check_laminar(track)
    for e in track:
        if e is roots[0]:
            assert parent.get(id(e)) is None
            continue
        is_op = "::" in e["cat"]  # an op span: in its module's span
        expected = e["args"]["module"] if is_op else tree_parent(prof, e["args"]["path"])
        if strict:
            around = parent[id(e)]
            assert around is not None and around["args"]["path"] == expected, e
            assert e["dur"] > 0
        else:
            assert any(
                p["args"]["path"] == expected
                and "::" not in p["cat"]
                and p["ts"] <= e["ts"] + EPS
                and end(e) <= end(p) + EPS
                for p in track
            ), e


def call_counts(model: nn.Module, *args: Any) -> Counter[str]:
    """Calls per module path in one plain forward, counted with our own hooks."""
    counts: Counter[str] = Counter()
    handles = [
        m.register_forward_pre_hook(lambda mod, a, p=path: counts.update([p]))
        for path, m in model.named_modules()
    ]
    try:
        with torch.no_grad():
            model(*args)
    finally:
        for h in handles:
            h.remove()
    return counts


def mlp() -> nn.Sequential:
    return nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 2))


# ---- the hooks timer ------------------------------------------------------------------


def test_hooks_trace_of_an_mlp(tmp_path: Path) -> None:
    model = mlp()
    x = torch.randn(2, 8)
    prof = ls.profile(
        model, x, backward=True, timing={"warmup": 1, "repeats": 3, "progress": False}
    )
    stored = prof.timing["trace"]
    assert stored["clock"] == "perf_counter_ns"
    assert stored["repeats"] == 3 and 0 <= stored["repeat"] < 3
    assert stored["paths"][:4] == ["", "0", "1", "2"]
    assert all(len(row) == 4 for key in ("forward", "backward", "ops") for row in stored[key])
    json.dumps(stored, allow_nan=False)  # plain JSON

    prof.to_trace(tmp_path / "mlp.trace.json")
    data = load_trace(tmp_path / "mlp.trace.json")
    forward = spans(data, FORWARD)
    # root + 3 layers, each called once
    assert len(forward) == 4 == sum(call_counts(model, x).values())
    assert sorted(e["args"]["path"] for e in forward) == ["", "0", "1", "2"]
    check_forward_nesting(prof, data)
    first = {e["args"]["path"]: e for e in forward}
    assert first[""]["name"] == "<root>" and first[""]["cat"] == "Sequential"
    assert first["0"]["name"] == "0" and first["0"]["cat"] == "Linear"
    # layers run one after the other inside the root
    assert end(first["0"]) <= first["1"]["ts"] + EPS and end(first["1"]) <= first["2"]["ts"] + EPS

    # args: the profile's numbers, exactly
    lin = first["0"]["args"]
    # Linear(8, 4) on (2, 8): 2*8*4 MACs = 64; FLOPs 2*64 for the matmul + 2*4 bias adds = 136
    assert lin["macs"] == 64 and lin["flops"] == 136
    assert lin["params"] == 8 * 4 + 4
    assert lin["calls"] == 1 and lin["call"] == 0
    node = prof.node("0")
    for key in ("flops", "macs", "params", "param_bytes", "forward_time", "forward_time_min"):
        assert lin[key] == node.metrics[key], key
    assert lin["forward_time_iqr"] == node.metrics["forward_time_iqr"]
    assert lin["self_forward_time"] == node.self_metrics["forward_time"]
    assert first[""]["args"]["flops"] == prof.root.metrics["flops"]

    # backward: one track, nested the same way, every module that did backward work on it
    backward = spans(data, BACKWARD)
    enclosing(backward)
    assert {e["args"]["path"] for e in backward} == {"", "0", "1", "2"}
    for e in backward:
        assert e["args"]["phase"] == "backward"
        n = prof.node(e["args"]["path"])
        assert e["args"]["backward_flops"] == n.metrics["backward_flops"]
        assert e["args"]["backward_time"] == n.metrics["backward_time"]
    (root_bwd,) = [e for e in backward if e["args"]["path"] == ""]
    # backward runs after the forward, the last layer's first
    assert root_bwd["ts"] >= end(first[""]) - EPS
    starts = {p: min(e["ts"] for e in backward if e["args"]["path"] == p) for p in ("0", "2")}
    assert starts["2"] <= starts["0"]
    other = data["otherData"]
    assert other["timer"] == "hooks" and other["repeat"] == stored["repeat"]
    assert other["repeats"] == 3 and other["model"] == "Sequential"


def test_module_called_twice_gives_two_spans(tmp_path: Path) -> None:
    ex = examples.get("shared_mlp")
    model = ex.build()
    x = ex.example_input()
    prof = ls.profile(
        model, x, backward=True, timing={"warmup": 0, "repeats": 2, "progress": False}
    )
    prof.to_trace(tmp_path / "t.trace.json")
    data = load_trace(tmp_path / "t.trace.json")
    forward = spans(data, FORWARD)
    expected = call_counts(model, x)
    # root 1, block 2, block.0 2, block.1 2, head 1
    assert sum(expected.values()) == 8
    assert Counter(e["args"]["path"] for e in forward) == expected
    assert sorted(e["args"]["call"] for e in forward if e["args"]["path"] == "block") == [0, 1]
    check_forward_nesting(prof, data)
    calls = [e for e in forward if e["args"]["path"] == "block"]
    assert end(calls[0]) <= calls[1]["ts"] + EPS  # the two calls one after the other
    backward = spans(data, BACKWARD)
    enclosing(backward)
    assert {"", "block", "block.0", "block.1", "head"} <= {e["args"]["path"] for e in backward}


# ---- exact spans with a fake clock ------------------------------------------------------


class Clock:
    """Integer nanoseconds that move only when a module says so."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now

    def advance(self, ns: int) -> None:
        self.now += ns


class Work(nn.Module):
    """Forward takes the next of ``durations`` (each handed out twice: the bare and the
    instrumented run of one repeat), backward ``backward_ns``."""

    def __init__(self, clock: Clock, durations: tuple[int, ...], backward_ns: int) -> None:
        super().__init__()
        self.clock = clock
        self.durations = durations
        self.i = 0
        self.backward_ns = backward_ns

    def forward(self, x: Tensor) -> Tensor:
        self.clock.advance(self.durations[(self.i // 2) % len(self.durations)])
        self.i += 1
        out: Tensor = Burn.apply(x, self.clock, self.backward_ns)  # type: ignore[no-untyped-call]
        return out


class Net(nn.Module):
    """root (5 ns) -> a -> b = Sequential(30, 20); backward root 7, a 1000, b.0 300, b.1 200."""

    def __init__(self, clock: Clock, a: tuple[int, ...]) -> None:
        super().__init__()
        self.clock = clock
        self.scale = nn.Parameter(torch.ones(()))
        self.a = Work(clock, a, 1000)
        self.b = nn.Sequential(Work(clock, (30,), 300), Work(clock, (20,), 200))

    def forward(self, x: Tensor) -> Tensor:
        self.clock.advance(5)
        y = self.b(self.a(x * self.scale))
        out: Tensor = Burn.apply(y, self.clock, 7)  # type: ignore[no-untyped-call]
        return out


def rows(stored: dict[str, Any], key: str) -> dict[tuple[str, int], tuple[float, float]]:
    paths = stored["paths"]
    return {(paths[p], n): (s, e) for p, n, s, e in stored[key]}


def ns(*values: float) -> Any:
    return pytest.approx(tuple(v * 1e-9 for v in values), abs=1e-13)


def fake_clock_profile(clock: Clock) -> Profile:
    # a takes 10, 40, 20 ns in repeats 0, 1, 2: whole runs 65 + 1507, 95 + 1507, 75 + 1507
    model = Net(clock, a=(10, 40, 20))
    x = torch.randn(2, 3)
    prof = ls.profile(model, x)
    for m in model.modules():
        if isinstance(m, Work):
            m.i = 0
    time_profile(prof, model, (x,), warmup=0, repeats=3, backward=True, clock=clock, progress=False)
    return prof


def check_fake_clock_trace(prof: Profile) -> None:
    stored = prof.timing["trace"]
    assert stored["repeat"] == 2  # the median whole run (75 ns of forward)
    assert stored["duration"] == pytest.approx((75 + 1507) * 1e-9, abs=1e-13)
    forward = rows(stored, "forward")
    assert forward == {
        ("", 0): ns(0, 75),
        ("a", 0): ns(5, 25),
        ("b", 0): ns(25, 75),
        ("b.0", 0): ns(25, 55),
        ("b.1", 0): ns(55, 75),
    }
    # Backward starts at 75 (the loss takes no fake time): the root's own node (7 ns),
    # then b.1, b.0, a; the nodes of x * scale and AccumulateGrad take no time.
    backward = rows(stored, "backward")
    assert backward == {
        ("", 0): ns(75, 1582),
        ("b", 0): ns(82, 582),
        ("b.1", 0): ns(82, 282),
        ("b.0", 0): ns(282, 582),
        ("a", 0): ns(582, 1582),
    }
    assert stored["ops"] == []


def test_fake_clock_spans_are_exact(tmp_path: Path) -> None:
    clock = Clock()
    prof = fake_clock_profile(clock)
    assert prof.timing["trace"]["clock"] == "custom"  # a clock without a __name__
    check_fake_clock_trace(prof)
    # the per-module statistics are over all repeats, the spans from one
    assert prof.node("a").metrics["forward_time"] == pytest.approx(20e-9)
    prof.to_trace(tmp_path / "t.trace.json")
    data = load_trace(tmp_path / "t.trace.json")
    check_forward_nesting(prof, data)
    by = {(e["tid"], e["args"]["path"]): e for e in spans(data, FORWARD) + spans(data, BACKWARD)}
    assert (by[(FORWARD, "a")]["ts"], by[(FORWARD, "a")]["dur"]) == (0.005, 0.02)  # us
    assert (by[(BACKWARD, "a")]["ts"], by[(BACKWARD, "a")]["dur"]) == (0.582, 1.0)
    assert by[(FORWARD, "a")]["args"]["forward_time_min"] == pytest.approx(10e-9)


class FakeEvent:
    """Stands in for ``torch.cuda.Event``: records the fake clock's time."""

    clock = Clock()

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        self.t: int | None = None

    def record(self, stream: Any = None) -> None:
        self.t = FakeEvent.clock.now

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.t is not None and end.t is not None
        return (end.t - self.t) / 1e6  # milliseconds, like CUDA


def test_cuda_event_spans_with_fake_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA-event code path (spans from elapsed times to a start event), on CPU."""
    import layerscope.collect.timing.runner as runner

    clock = Clock()
    FakeEvent.clock = clock
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: None)
    monkeypatch.setattr(runner, "_input_device", lambda *a: torch.device("cuda"))
    model = Net(clock, a=(10, 40, 20))
    x = torch.randn(2, 3)
    prof = ls.profile(model, x)
    for m in model.modules():
        if isinstance(m, Work):
            m.i = 0
    time_profile(prof, model, (x,), warmup=0, repeats=3, backward=True, progress=False)
    assert prof.timing["trace"]["clock"] == "cuda_event"
    check_fake_clock_trace(prof)


def test_nest_backward_and_median_repeat() -> None:
    """Stretches owned by modules become nested spans; an outside stretch splits them."""
    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU(), nn.ReLU()))
    index = ModuleIndex.build(model)
    node = index.by_path
    called = [True] * len(index)
    stretches = [
        (node["1.1"], 0.0, 2.0),
        (node["1.0"], 2.0, 3.0),
        (node[""], 3.0, 4.0),  # the root's own work between: ends the span of "1"
        (node["1.0"], 4.0, 5.0),
        (node["0"], 6.0, 8.0),  # a gap before it (kineto): "1" ends at 5
    ]
    out = [(index.paths[n], s, e) for n, s, e in nest_backward(index, called, stretches)]
    assert out == [
        ("", 0.0, 8.0),
        ("1", 0.0, 3.0),
        ("1.1", 0.0, 2.0),
        ("1.0", 2.0, 3.0),
        ("1", 4.0, 5.0),
        ("1.0", 4.0, 5.0),
        ("0", 6.0, 8.0),
    ]
    called[node["1"]] = False  # a container that never ran (ModuleList): skipped
    out = [(index.paths[n], s, e) for n, s, e in nest_backward(index, called, stretches[:2])]
    assert out == [("", 0.0, 3.0), ("1.1", 0.0, 2.0), ("1.0", 2.0, 3.0)]
    reps = [RepeatSpans(end=v) for v in (5.0, 1.0, 4.0, 2.0)]
    assert median_repeat(reps) == 3  # sorted 1, 2, 4, 5: the lower median, 2
    assert median_repeat(reps[:3]) == 2


# ---- kineto and fx ------------------------------------------------------------------------


def test_kineto_trace_with_op_spans(tmp_path: Path) -> None:
    model = mlp()
    x = torch.randn(2, 8)
    prof = ls.profile(model, x)
    time_profile(
        prof, model, (x,), timer="kineto", ops=True, backward=True, warmup=0, repeats=2,
        progress=False,
    )  # fmt: skip
    assert prof.timing["trace"]["clock"] == "torch.profiler"
    prof.to_trace(tmp_path / "k.trace.json")
    data = load_trace(tmp_path / "k.trace.json")
    forward = spans(data, FORWARD)
    assert Counter(e["args"]["path"] for e in modules(forward)) == call_counts(model, x)
    check_forward_nesting(prof, data)
    ops = [e for e in forward if "::" in e["cat"]]
    # the top-level op of each layer, inside it
    assert sorted((e["args"]["module"], e["name"]) for e in ops) == [
        ("0", "aten::linear"),
        ("1", "aten::relu"),
        ("2", "aten::linear"),
    ]
    row = prof.node("0/aten::linear")
    (op,) = [e for e in ops if e["args"]["path"] == "0/aten::linear"]
    assert op["cat"] == "aten::linear" and op["args"]["forward_time"] == row.metrics["forward_time"]
    lin = next(e for e in forward if e["args"]["path"] == "0")
    assert lin["args"]["flops"] == 136 == prof.node("0").metrics["flops"]
    backward = spans(data, BACKWARD)
    enclosing(backward)
    assert {e["args"]["path"] for e in backward} == {"", "0", "1", "2"}


def test_kineto_ignores_device_side_annotations(monkeypatch: pytest.MonkeyPatch) -> None:
    """With CUDA activities kineto lists each ``record_function`` range twice: on the CPU
    and as a device-side annotation of the same name without children. The copies are
    no repeats and no module calls: the same spans and times as without them."""
    from torch._C._autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEvent

    def timed(copies: bool) -> Profile:
        original = torch.profiler.profile.events

        def events(self: Any) -> Any:
            got = original(self)  # type: ignore[no-untyped-call]
            if copies:
                got.extend(
                    FunctionEvent(  # type: ignore[no-untyped-call]
                        id=10**6 + i,
                        name=e.name,
                        thread=0,
                        start_us=e.time_range.start,
                        end_us=e.time_range.end,
                        device_type=DeviceType.CUDA,
                        is_user_annotation=True,
                    )
                    for i, e in enumerate(list(got))
                    if e.name.startswith("layerscope::")
                )
            return got

        monkeypatch.setattr(torch.profiler.profile, "events", events)
        model, x = mlp(), torch.randn(2, 8)
        prof = ls.profile(model, x)
        time_profile(
            prof, model, (x,), timer="kineto", backward=True, warmup=1, repeats=2,
            progress=False,
        )  # fmt: skip
        return prof

    plain, doubled = timed(False), timed(True)
    trace = doubled.timing["trace"]
    assert trace["repeats"] == 2 and len(trace["forward"]) == 4  # <root>, 0, 1, 2
    assert [(p, n) for p, n, _, _ in trace["forward"]] == [
        (p, n) for p, n, _, _ in plain.timing["trace"]["forward"]
    ]
    # every repeat saw every call: self times add up to the root's time
    root = doubled.root.metrics["forward_time"]
    assert sum(n.self_metrics["forward_time"] for n in doubled.nodes()) == pytest.approx(root)


def test_fx_trace_with_op_spans(tmp_path: Path) -> None:
    ex = examples.get("shared_mlp")
    model = ex.build()
    x = ex.example_input()
    prof = ls.profile(model, x)
    time_profile(
        prof, model, (x,), timer="fx", ops=True, backward=True, warmup=0, repeats=2,
        progress=False,
    )  # fmt: skip
    prof.to_trace(tmp_path / "f.trace.json")
    data = load_trace(tmp_path / "f.trace.json")
    forward = spans(data, FORWARD)
    assert Counter(e["args"]["path"] for e in modules(forward)) == call_counts(model, x)
    check_forward_nesting(prof, data)
    ops = [e for e in forward if "::" in e["cat"]]
    # the root's functional code: matmul, relu, add, softmax (one op span per call site)
    assert [e["cat"] for e in sorted(ops, key=lambda e: e["ts"])] == [
        "fx::matmul",
        "fx::relu",
        "fx::add",
        "fx::softmax",
    ]
    assert all(e["args"]["module"] == "" for e in ops)
    backward = spans(data, BACKWARD)
    enclosing(backward)
    assert {"", "block", "head"} <= {e["args"]["path"] for e in backward}


# ---- round trip, errors ---------------------------------------------------------------


def test_saved_and_loaded_profile_gives_the_same_trace(tmp_path: Path) -> None:
    model = mlp()
    x = torch.randn(2, 8)
    prof = ls.profile(
        model, x, backward=True, timing={"warmup": 0, "repeats": 2, "progress": False}
    )
    prof.save(tmp_path / "p.json")
    again = ls.load(tmp_path / "p.json")
    assert again.timing["trace"] == prof.timing["trace"]
    to_trace(prof, tmp_path / "a.trace.json")
    to_trace(again, tmp_path / "b.trace.json")
    a = (tmp_path / "a.trace.json").read_bytes()
    assert a == (tmp_path / "b.trace.json").read_bytes()
    prof.export(tmp_path / "c.trace.json")  # the format from the extension
    assert (tmp_path / "c.trace.json").read_bytes() == a
    assert trace_events(again) == json.loads(a)


def test_profile_without_a_timeline_is_an_export_error(tmp_path: Path) -> None:
    prof = ls.profile(mlp(), torch.randn(2, 8))
    target = tmp_path / "t.trace.json"
    with pytest.raises(ExportError, match=r"timing=True") as info:
        prof.to_trace(target)
    assert str(target) in str(info.value)
    assert not target.exists()
    # saved by a layerscope that did not keep the timeline: timing, but no trace
    timed = ls.profile(mlp(), torch.randn(2, 8), timing={"warmup": 0, "repeats": 1})
    data = timed.to_dict()
    del data["timing"]["trace"]
    (tmp_path / "old.json").write_text(json.dumps(data), encoding="utf-8")
    old = ls.load(tmp_path / "old.json")
    assert old.timing["latency"] and "trace" not in old.timing
    with pytest.raises(ExportError, match=r"timing=True"):
        old.to_trace(target)
    assert not target.exists()
    bad = ls.profile(mlp(), torch.randn(2, 8), timing={"warmup": 0, "repeats": 1})
    bad.timing["trace"]["forward"][0] = ["x"]
    with pytest.raises(ExportError, match="malformed"):
        bad.to_trace(target)


# ---- CUDA -----------------------------------------------------------------------------


@pytest.mark.cuda
@pytest.mark.parametrize("timer", ["hooks", "kineto"])
def test_cuda_trace(timer: str, tmp_path: Path) -> None:
    ex = examples.get("tiny_resnet")
    model = ex.build().cuda().train()
    x = ex.example_input().cuda()
    prof = ls.profile(model, x)
    time_profile(
        prof, model, (x,), timer=timer, ops=timer == "kineto", backward=True, warmup=1,
        repeats=3, progress=False,
    )  # fmt: skip
    expected_clock = "cuda_event" if timer == "hooks" else "torch.profiler"
    assert prof.timing["trace"]["clock"] == expected_clock
    prof.to_trace(tmp_path / "cuda.trace.json")
    data = load_trace(tmp_path / "cuda.trace.json")
    forward = spans(data, FORWARD)
    assert Counter(e["args"]["path"] for e in modules(forward)) == call_counts(model, x)
    check_forward_nesting(prof, data, strict=timer != "hooks")  # events: 0.5 us steps
    check_laminar(spans(data, BACKWARD))
    backward = spans(data, BACKWARD)
    assert "layer1.0.conv1" in {e["args"]["path"] for e in backward}
