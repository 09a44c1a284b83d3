"""``ls.Profiler`` in a user's loop: ``start``/``step``/``stop``, ``schedule`` cycles,
the merge of a cycle's analysed steps, and timed steps (``timing=True``).

The model is ``Linear(8, 16) - ReLU - Linear(16, 4)`` on a batch of 2: per forward
2*8*16 + 2*16*4 = 256 + 128 = 384 MACs; FLOPs 2*256 + 32 (bias) + 32 (ReLU) + 2*128 + 8
(bias) = 840; backward (the input needs no grad) weight grad 2*8*16 = 256 of Linear 1,
input and weight grads 2*4*16 + 2*4*16 = 256 of Linear 2: 512 MACs.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

import layerscope as ls
from helpers.snapshots import ModelSnapshot
from layerscope.analysis.merge import merge_profiles
from layerscope.collect.timing import FORWARD_TIME, IQR_SUFFIX, MIN_SUFFIX
from layerscope.export.trace import trace_events
from layerscope.session.schedule import Action, Schedule, schedule

MACS = 2 * 8 * 16 + 2 * 16 * 4  # 384 per forward
FLOPS = 2 * 256 + 32 + 32 + 2 * 128 + 8  # 840 per forward
BACKWARD_MACS = 2 * 8 * 16 + 2 * 4 * 16 + 2 * 4 * 16  # 512 per backward
PARAMS = 8 * 16 + 16 + 16 * 4 + 4  # 212


def _mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _x() -> torch.Tensor:
    return torch.randn(2, 8)


def _train(model: nn.Module, p: ls.Profiler, steps: int, micro: int = 1) -> None:
    """A plain loop with SGD; ``micro`` forward/backward per step (gradient accumulation)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = _x()
    for _ in range(steps):
        opt.zero_grad()
        for _ in range(micro):
            model(x).sum().backward()
        opt.step()
        p.step()


def _no_hooks(model: nn.Module) -> bool:
    return _get_current_dispatch_mode_stack() == [] and all(
        not m._forward_hooks and not m._forward_pre_hooks for m in model.modules()
    )


# ---- schedule ---------------------------------------------------------------------------
def test_schedule_actions() -> None:
    s = schedule(wait=1, warmup=1, active=2, repeat=2)
    assert s == Schedule(1, 1, 2, 2) and s.cycle == 4
    W, U, A, T, D = Action.WAIT, Action.WARMUP, Action.ANALYSE, Action.TIME, Action.DONE
    assert [s.action(i) for i in range(10)] == [W, U, A, A, W, U, A, A, D, D]
    assert [s.action(i, timing=True) for i in range(8)] == [W, U, A, T, W, U, A, T]
    forever = schedule(active=3)
    assert [forever.action(i, True) for i in range(7)] == [A, T, T, A, T, T, A]
    assert [s.last_of_cycle(i) for i in range(5)] == [False, False, False, True, False]


@pytest.mark.parametrize(
    "kwargs",
    [{"wait": -1}, {"warmup": -2}, {"active": 0}, {"repeat": -1}, {"wait": True}, {"active": 1.5}],
)
def test_schedule_is_validated(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ls.InvalidInputError):
        schedule(**kwargs)


def test_schedule_is_frozen() -> None:
    s = schedule(active=2)
    with pytest.raises(AttributeError):
        s.active = 3  # type: ignore[misc]


# ---- analysed cycles -------------------------------------------------------------------
def test_cycles_sum_their_active_steps_exactly() -> None:
    model = _mlp()
    ready: list[ls.Profile] = []
    p = ls.Profiler(
        model, schedule=schedule(wait=1, warmup=1, active=3, repeat=2), on_ready=ready.append
    )
    p.start()
    _train(model, p, 12)  # cycles: steps 0-4 and 5-9; 10, 11 after the last cycle
    p.stop()
    assert len(ready) == 2 and p.profile is ready[-1]
    for k, prof in enumerate(ready):
        root = prof.root
        assert root.calls == 3
        assert root.metrics["macs"] == 3 * MACS == 1152
        assert root.metrics["flops"] == 3 * FLOPS
        assert root.metrics["backward_macs"] == 3 * BACKWARD_MACS
        assert prof.node("0").metrics["macs"] == 3 * 2 * 8 * 16
        assert prof.node("0").calls == 3
        assert root.metrics["params"] == PARAMS  # a fact of the model: not summed
        prof.self_check()
        loop = prof.model["loop"]
        assert loop["analysed_steps"] == loop["steps"] == 3 and loop["timed_steps"] == 0
        assert (loop["first_step"], loop["last_step"]) == (5 * k + 2, 5 * k + 4)
        assert loop["cycle"] == k and loop["complete"] is True
    assert _no_hooks(model)


def test_wait_and_warmup_steps_install_nothing() -> None:
    model = _mlp()
    seen: list[bool] = []
    p = ls.Profiler(model, schedule=schedule(wait=2, warmup=1, active=1, repeat=1))
    with p:
        for _ in range(5):
            seen.append(_no_hooks(model))
            model(_x())
            p.step()
    assert seen == [True, True, True, False, True]
    assert p.profile.root.calls == 1


def test_on_ready_once_per_cycle_forever() -> None:
    model = _mlp()
    ready: list[ls.Profile] = []
    p = ls.Profiler(model, schedule=schedule(wait=1, active=2), on_ready=ready.append)
    with p:
        _train(model, p, 9)  # 3 cycles of 3 steps
    assert len(ready) == 3  # the step begun after the last step() never ran: no 4th
    assert [r.model["loop"]["cycle"] for r in ready] == [0, 1, 2]
    assert all(r.root.metrics["macs"] == 2 * MACS for r in ready)


def test_stop_mid_cycle_builds_the_partial_cycle() -> None:
    model = _mlp()
    ready: list[ls.Profile] = []
    p = ls.Profiler(model, schedule=schedule(active=3, repeat=1), on_ready=ready.append)
    with p:
        _train(model, p, 2)
    assert len(ready) == 1
    loop = p.profile.model["loop"]
    assert loop["steps"] == 2 and loop["complete"] is False
    assert p.profile.root.metrics["macs"] == 2 * MACS


def test_gradient_accumulation() -> None:
    model = _mlp()
    p = ls.Profiler(model, schedule=schedule(wait=1, active=2, repeat=1))
    with p:
        _train(model, p, 4, micro=3)
    root = p.profile.root
    assert root.calls == 2 * 3  # 2 active steps, 3 micro-batches each
    assert root.metrics["macs"] == 6 * MACS
    assert root.metrics["backward_macs"] == 6 * BACKWARD_MACS


def test_generate_style_loop_counts_every_call() -> None:
    model = _mlp().eval()
    p = ls.Profiler(model, schedule=schedule(active=2, repeat=1))
    with p, torch.no_grad():
        for _ in range(3):
            x = _x()
            for _ in range(5):  # five decoding calls per step
                model(x)
            p.step()
    prof = p.profile
    assert prof.root.calls == 10 and prof.node("2").calls == 10
    assert prof.root.metrics["macs"] == 10 * MACS
    assert prof.model["loop"]["steps"] == 2


def test_without_schedule_the_block_is_one_span() -> None:
    model = _mlp()
    ready: list[ls.Profile] = []
    with ls.Profiler(model, on_ready=ready.append) as p:
        _train(model, p, 3)
    assert ready == [p.profile]
    assert p.profile.root.metrics["macs"] == 3 * MACS
    assert p.profile.model["loop"] == {
        "cycle": 0,
        "steps": 3,
        "analysed_steps": 1,
        "timed_steps": 0,
        "first_step": 0,
        "last_step": 2,
        "steps_seen": 3,
        "complete": True,
        "schedule": None,
        "optimizer_states": False,  # plain SGD keeps no state
        "ddp_rebuilt_buckets": None,  # no DDP
    }


def test_plain_block_has_no_loop_section() -> None:
    model = _mlp()
    with ls.Profiler(model) as p:
        model(_x())
    assert "loop" not in p.profile.model


# ---- misuse -------------------------------------------------------------------------------
def test_start_stop_step_misuse_is_a_clear_error() -> None:
    model = _mlp()
    p = ls.Profiler(model, schedule=schedule(active=1))
    with pytest.raises(ls.LayerscopeError, match="before start"):
        p.stop()
    with pytest.raises(ls.LayerscopeError, match="call start"):
        p.step()
    with pytest.raises(ls.LayerscopeError, match="no profile yet"):
        _ = p.profile
    p.start()
    with pytest.raises(ls.LayerscopeError, match="entered twice"):
        p.start()
    p.stop()
    assert _no_hooks(model)
    with pytest.raises(ls.LayerscopeError, match="already stopped"):
        p.stop()
    with pytest.raises(ls.LayerscopeError, match="after stop"):
        p.step()
    with pytest.raises(ls.LayerscopeError, match="started again"):
        p.start()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"schedule": {"active": 2}},
        {"on_ready": 3},
        {"timing": "yes"},
        {"timing": {"repeats": 5}},
    ],
)
def test_bad_options(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ls.InvalidInputError):
        ls.Profiler(_mlp(), **kwargs)


def test_a_raising_step_cleans_up_and_skips_on_ready() -> None:
    model = _mlp()
    ready: list[ls.Profile] = []
    p = ls.Profiler(model, timing=True, schedule=schedule(active=3), on_ready=ready.append)
    with pytest.raises(RuntimeError, match="boom"), p:
        model(_x())
        p.step()
        model(_x())
        raise RuntimeError("boom")
    assert ready == []
    assert _no_hooks(model)
    assert p.profile.model["loop"]["complete"] is False


def test_on_ready_error_propagates_and_the_loop_goes_on() -> None:
    model = _mlp()

    def fail(_: ls.Profile) -> None:
        raise ValueError("callback")

    p = ls.Profiler(model, schedule=schedule(active=1), on_ready=fail)
    p.start()
    model(_x())
    with pytest.raises(ValueError, match="callback"):
        p.step()
    assert not _no_hooks(model)  # the next active step began
    p.on_ready = None
    model(_x())
    p.stop()
    assert _no_hooks(model)
    assert p.profile.model["loop"]["cycle"] == 1


# ---- timed steps --------------------------------------------------------------------------
def test_timed_steps_give_every_called_module_a_forward_time() -> None:
    model = _mlp()
    p = ls.Profiler(model, timing=True, schedule=schedule(wait=1, active=4, repeat=1))
    with p:
        _train(model, p, 6)
    prof = p.profile
    loop = prof.model["loop"]
    assert (loop["analysed_steps"], loop["timed_steps"], loop["steps"]) == (1, 3, 4)
    # the analysis is the first active step's
    assert prof.root.calls == 1 and prof.root.metrics["macs"] == MACS
    for node in prof.nodes():
        for d in (node.metrics, node.self_metrics):
            for key in (FORWARD_TIME, FORWARD_TIME + MIN_SUFFIX, FORWARD_TIME + IQR_SUFFIX):
                assert d[key] >= 0, (node.path, key)
        assert node.metrics[FORWARD_TIME] > 0
    assert prof.root.metrics[FORWARD_TIME] >= prof.node("0").metrics[FORWARD_TIME]
    timing = prof.timing
    assert timing["source"] == "loop" and timing["timed_steps"] == 3
    for key in ("step_time", "step_forward", "step_other"):
        assert timing[key]["n"] == 3
    assert timing["step_time"]["min"] >= timing["step_forward"]["min"] > 0
    text = prof.render(columns=["macs", "forward_time", "flops_per_s"], width=100)
    assert "FLOP/s" in text
    prof.self_check()
    assert _no_hooks(model)


def test_timing_step_split_adds_up() -> None:
    model = _mlp()
    p = ls.Profiler(model, timing=True, schedule=schedule(active=3, repeat=1))
    with p:
        _train(model, p, 3)
    prof = p.profile
    # per timed step: step = forward + backward + optimizer + other, so their means add up
    keys = ("step_forward", "step_backward", "step_optimizer", "step_other")
    st, *parts = (prof.timing[k] for k in ("step_time", *keys))
    assert st["n"] == 2 and all(part["n"] == 2 for part in parts)
    assert sum(part["mean"] for part in parts) == pytest.approx(st["mean"])
    assert all(part["min"] > 0 for part in parts[:3])
    assert "Step (median of 2 timed steps): " in prof.render(width=200)


class _Ticks:
    """A clock that moves 1 µs per read: an interval is the number of reads in it."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        self.now += 1000
        return self.now


def test_timed_steps_time_each_modules_backward_node_by_node() -> None:
    """With a clock that ticks once per read and no overhead correction, a module's self
    backward time is the number of its autograd nodes (each node's hook reads the clock
    once; the interval from a node's stamp to the next is the node's).

    Linear(16, 4) (2): AddmmBackward0, TBackward0 (weight.t()) and the AccumulateGrad
    nodes of its weight and bias, 4 nodes; ReLU: ReluBackward0, 1; Linear(8, 16) (0):
    4 nodes likewise (its input needs no grad, so nothing flows further). The loss's own
    SumBackward0 has no hook: it is not the model's. Root self 0, inclusive 4 + 1 + 4 = 9.
    """
    model = _mlp()
    timing = {"clock": _Ticks(), "correct_overhead": False}
    p = ls.Profiler(model, timing=timing, schedule=schedule(active=2, repeat=1))
    with p:
        _train(model, p, 2)
    prof = p.profile
    assert prof.timing["backward"] is True and prof.timing["backward_steps"] == 1
    us = 1e-6
    got = {n.path: n.self_metrics["backward_time"] for n in prof.root.walk()}
    assert got == pytest.approx({"": 0.0, "0": 4 * us, "1": 1 * us, "2": 4 * us})
    assert prof.root.metrics["backward_time"] == pytest.approx(9 * us)
    # the pass: from the first model node's stamp to the end-of-backward callback's
    assert prof.timing["step_backward"]["median"] == pytest.approx(9 * us)
    # the timeline has the backward too: one inclusive span per module, in µs
    spans = {
        e["name"]: e["dur"]
        for e in trace_events(prof)["traceEvents"]
        if e.get("ph") == "X" and e["args"].get("phase") == "backward"
    }
    assert spans == pytest.approx({"<root>": 9.0, "2": 4.0, "1": 1.0, "0": 4.0})


def test_timed_steps_without_backward_have_no_backward_time() -> None:
    model = _mlp()
    p = ls.Profiler(model, timing=True, schedule=schedule(active=2, repeat=1))
    with p, torch.no_grad():
        for _ in range(2):
            model(_x())
            p.step()
    prof = p.profile
    assert prof.timing["backward"] is False and "backward_time" not in prof.root.metrics
    assert prof.timing["step_backward"]["max"] == 0.0
    assert _no_hooks(model)


def test_timed_step_hooks_leave_the_graph() -> None:
    """A graph built in a timed step and run backward after the step ended logs nothing."""
    model = _mlp()
    p = ls.Profiler(model, timing=True)
    p.start()
    out = model(_x())
    p.stop()
    timer = p._timer
    assert timer is not None
    out.sum().backward()
    assert timer._bwd_log == [] and not timer._bwd_open


def test_timing_only_cycle_with_active_one_says_so() -> None:
    model = _mlp()
    p = ls.Profiler(model, timing=True, schedule=schedule(active=1, repeat=1))
    with p:
        _train(model, p, 2)
    assert any("no step was timed" in n for n in p.profile.notices)
    assert FORWARD_TIME not in p.profile.root.metrics


def test_timing_without_schedule_times_every_call() -> None:
    model = _mlp()
    with ls.Profiler(model, timing={"batch_size": 2}) as p:
        _train(model, p, 3, micro=2)
    prof = p.profile
    assert prof.root.calls == 6 and prof.node("1").calls == 6
    assert "macs" not in prof.root.metrics  # nothing analysed
    assert any("timed only" in n for n in prof.notices)
    assert prof.model["loop"]["timed_steps"] == 3
    assert prof.timing["throughput"] > 0
    assert all(n.metrics[FORWARD_TIME] > 0 for n in prof.nodes())


def test_model_left_as_found() -> None:
    model = _mlp().eval()
    snap = ModelSnapshot.take(model)
    p = ls.Profiler(
        model, timing=True, memory=True, schedule=schedule(wait=1, warmup=1, active=3, repeat=2)
    )
    with p, torch.no_grad():
        for _ in range(12):
            model(_x())
            p.step()
    snap.assert_unchanged(model, skip=("rng",))  # the loop's own randn moves the RNG


def test_training_loop_changes_only_what_it_changes() -> None:
    model = _mlp()
    snap = ModelSnapshot.take(model)
    p = ls.Profiler(model, timing=True, schedule=schedule(active=3))
    with p:
        _train(model, p, 7)
    snap.assert_unchanged(model, skip=("state_dict", "params", "grads", "rng"))


# ---- merge -----------------------------------------------------------------------------------
def test_merge_profiles() -> None:
    model = _mlp()
    a = ls.profile(model, torch.randn(2, 8), memory=True, backward=True)
    b = ls.profile(model, torch.randn(3, 8), memory=True)
    peak_a, peak_b = a.root.metrics["peak_bytes"], b.root.metrics["peak_bytes"]
    merged = merge_profiles([a, b])
    assert merged is b
    root = merged.root
    assert root.calls == 2
    assert root.metrics["macs"] == MACS + 3 * (8 * 16 + 16 * 4)  # 384 + 576
    assert root.self_metrics["macs"] == 0
    assert merged.node("0").self_metrics["macs"] == 2 * 8 * 16 + 3 * 8 * 16
    assert root.metrics["backward_macs"] == BACKWARD_MACS  # only a ran a backward
    assert root.metrics["params"] == PARAMS
    assert root.metrics["peak_bytes"] == max(peak_a, peak_b)
    assert [s[0].shape for s in root.inputs] == [(2, 8), (3, 8)]  # type: ignore[union-attr]
    merged.self_check()
    assert merge_profiles([a]) is a
    with pytest.raises(ValueError):
        merge_profiles([])


class _Interrupts(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise KeyboardInterrupt


def test_an_interrupt_in_a_timed_step_gets_a_note_naming_the_module() -> None:
    model = nn.Sequential(nn.Linear(2, 2), _Interrupts())
    with pytest.raises(KeyboardInterrupt) as info, ls.Profiler(model, timing=True):
        model(torch.ones(1, 2))
    assert info.value.__notes__ == ["layerscope: raised in module '1' (_Interrupts)"]


def test_a_cycles_absolute_peak_is_one_steps() -> None:
    """Two analysed SGD steps of a 128 -> 256 -> 10 MLP (35,594 parameters, 142,376 B):
    the first starts without gradients and peaks 175,152 B above its start, the second
    starts with them (284,752 B held) and peaks 32,776 B above: both reach 317,528 B,
    which is the cycle's absolute peak (before, the second's baseline and the first's
    peak were added: 459,904 B)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(32, 128)
    p = ls.Profiler(model, memory=True, optimizer=opt, schedule=schedule(active=2, repeat=1))
    with p:
        for _ in range(2):
            opt.zero_grad(set_to_none=True)
            model(x).sum().backward()
            opt.step()
            p.step()
    mem = p.profile.memory
    params = (128 * 256 + 256 + 256 * 10 + 10) * 4
    assert params == 142_376
    assert mem["baseline_bytes"] + mem["session_peak_bytes"] == 317_528
    assert mem["baseline"]["parameters"] == params


def test_the_notices_say_what_a_timed_loop_left_out_and_why() -> None:
    """Timing without a schedule analyses no step: memory= and numerics= are named as
    unused; a schedule of 5 active steps that ends after the analysed one says the loop
    ended, not that active must be 2 or more."""
    model = nn.Linear(4, 4)
    p = ls.Profiler(model, timing=True, memory=True, numerics="raise")
    with p:
        for _ in range(3):
            model(torch.randn(2, 4))
            p.step()
    said = " ".join(p.profile.notices)
    assert "(memory= and numerics= not used)" in said
    p = ls.Profiler(model, timing=True, schedule=schedule(active=5, repeat=1))
    with p:
        model(torch.randn(2, 4))
        p.step()
    said = " ".join(p.profile.notices)
    assert "the loop ended before a step after the analysed one ran" in said
    assert "active >= 2" not in said


def test_a_timed_loop_prints_its_throughput_on_the_step_line() -> None:
    """With a batch size, a loop's timing has a throughput (the batch over the median
    step); the Step line says it, as the timing pass's Latency line does."""
    from layerscope.render import units

    model = nn.Linear(8, 8)
    p = ls.Profiler(model, timing={"batch_size": 32}, schedule=schedule(active=3, repeat=1))
    with p:
        for _ in range(3):
            model(torch.randn(32, 8)).sum().backward()
            p.step()
    t = p.profile.timing
    assert t["throughput"] == pytest.approx(32 / t["step_time"]["median"])
    said = p.profile.render(width=200)
    assert f"throughput {units.inputs_per_second(t['throughput'])} (batch 32, given)" in said


def test_a_cycles_numerics_count_calls_over_the_cycle() -> None:
    """Three analysed steps, the NaN in the second's input: the first non-finite call is
    the linear's call 1 of the cycle (its node has 3 calls), not call 0 of that step."""
    model = nn.Sequential(nn.Linear(4, 3))
    p = ls.Profiler(model, numerics="record", schedule=schedule(active=3, repeat=1))
    with p:
        for i in range(3):
            x = torch.randn(2, 4)
            if i == 1:
                x[0, 0] = float("nan")
            model(x)
            p.step()
    first = p.profile.numerics["first_nonfinite"]
    assert (first["path"], first["call"], first["nan"]) == ("0", 1, 3)
    assert p.profile.node("0").calls == 3
