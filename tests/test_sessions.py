"""Sessions that must hold up outside the one-model, one-thread, one-session case: RNG
streams other than torch's, deep module nesting, sessions ending out of order, calls of
the model from other threads, and ``ls.profile`` on one model from several threads."""

from __future__ import annotations

import random
import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.utils._python_dispatch as python_dispatch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack
from torch.utils.checkpoint import checkpoint

import layerscope as ls
from helpers.snapshots import ModelSnapshot
from layerscope.errors import LayerscopeError

#: Linear(4, 3) on a (2, 4) input: 2*4*3 = 24 MACs = 48 FLOPs, plus 2*3 = 6 bias adds.
LINEAR_FLOPS = 2 * (2 * 4 * 3) + 2 * 3


def _x() -> torch.Tensor:
    return torch.randn(2, 4)


def _assert_no_session_left(*models: nn.Module) -> None:
    assert _get_current_dispatch_mode_stack() == []
    assert not python_dispatch._is_in_torch_dispatch_mode
    for model in models:
        for m in model.modules():
            assert "forward" not in m.__dict__
            assert not m._forward_hooks and not m._forward_pre_hooks


# ---- RNG --------------------------------------------------------------------------------
class _Draws(nn.Module):
    """Draws from Python's and numpy's global RNGs in its forward."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = random.random() * float(np.random.rand()) * float(np.random.randn())
        out: torch.Tensor = self.lin(x) * scale
        return out


def _draws() -> tuple[Any, ...]:
    return random.random(), float(np.random.rand()), float(np.random.randn()), torch.rand(3)


@pytest.mark.parametrize("cached_gaussian", [False, True])
def test_python_and_numpy_rng_states_are_restored(cached_gaussian: bool) -> None:
    random.seed(1)
    np.random.seed(2)
    if cached_gaussian:  # one normal drawn of a pair: numpy keeps the other for later
        np.random.randn()
    model, x = _Draws(), _x()
    saved = random.getstate(), np.random.get_state(), torch.get_rng_state()
    ls.profile(model, x, backward=True, timing={"warmup": 1, "repeats": 2})
    after = _draws()
    random.setstate(saved[0])
    np.random.set_state(saved[1])
    torch.set_rng_state(saved[2])
    expected = _draws()
    assert after[:3] == expected[:3]
    assert torch.equal(after[3], expected[3])


def test_numpy_rng_is_restored_across_profiles_and_draws_between_them() -> None:
    model, x = _Draws(), _x()

    def scenario(run: Callable[[], object]) -> list[float]:
        np.random.seed(6)
        np.random.randn()  # leaves a cached gaussian
        run()
        drawn = [float(np.random.randn())]  # uses it up: same key and position, none cached
        run()
        run()  # nothing drawn since the last capture
        drawn += [float(np.random.rand()), float(np.random.randn())]
        run()
        return [*drawn, float(np.random.rand())]

    assert scenario(lambda: ls.profile(model, x)) == scenario(lambda: None)


def test_a_model_that_draws_nothing_leaves_numpy_as_it_was() -> None:
    np.random.seed(3)
    saved = np.random.get_state()
    ls.profile(nn.Linear(4, 3), _x())
    assert float(np.random.rand()) == (np.random.set_state(saved), float(np.random.rand()))[1]


# ---- deep nesting -----------------------------------------------------------------------
def _chain(depth: int) -> nn.Module:
    """``depth`` Sequentials, each holding the next; a Linear innermost."""
    m: nn.Module = nn.Linear(2, 2)
    for _ in range(depth):
        m = nn.Sequential(m)
    return m


def _runs(depth: int, run: Callable[[nn.Module, torch.Tensor], object]) -> bool:
    try:
        run(_chain(depth), torch.randn(1, 2))
    except RecursionError:
        return False
    except LayerscopeError as e:  # the model's error, or an observer's, at the limit
        if isinstance(e.__cause__, RecursionError):
            return False
        raise
    return True


def _deepest(run: Callable[[nn.Module, torch.Tensor], object], low: int, high: int) -> int:
    """The largest depth in ``low..high`` that runs (``low`` must)."""
    assert _runs(low, run)
    while low < high:
        mid = (low + high + 1) // 2
        if _runs(mid, run):
            low = mid
        else:
            high = mid - 1
    return low


@pytest.mark.parametrize(
    "options",
    [{}, {"memory": True, "numerics": "record"}],
    ids=["default", "memory+numerics"],
)
def test_a_model_as_deep_as_runs_bare_runs_under_profile(options: dict[str, Any]) -> None:
    limit = sys.getrecursionlimit()
    bare = _deepest(lambda m, x: m(x), 8, limit)
    profiled = _deepest(lambda m, x: ls.profile(m, x, **options), bare // 2, 2 * bare)
    assert abs(profiled - bare) <= 0.1 * bare, (bare, profiled)
    assert sys.getrecursionlimit() == limit


def test_the_recursion_limit_is_only_ever_raised() -> None:
    limit = sys.getrecursionlimit()
    m = _chain(3)
    with ls.Profiler(m):
        assert sys.getrecursionlimit() > limit
        m(torch.randn(1, 2))
    assert sys.getrecursionlimit() == limit
    try:
        with ls.Profiler(m):
            sys.setrecursionlimit(limit + 5000)  # the user's, inside the block: it stays
        assert sys.getrecursionlimit() == limit + 5000
    finally:
        sys.setrecursionlimit(limit)


# ---- sessions ending out of order ---------------------------------------------------------
def test_sessions_on_one_model_end_in_any_order() -> None:
    m, x = nn.Linear(4, 3), _x()
    p1, p2 = ls.Profiler(m), ls.Profiler(m)
    p1.__enter__()
    p2.__enter__()  # p1's forward wrapper is on the module: p2 hooks it
    m(x)
    p1.__exit__(None, None, None)
    m(x)  # p2 alone
    p2.__exit__(None, None, None)
    m(x)  # nobody
    assert p1.profile.root.calls == 1
    assert p1.profile.root.metrics["flops"] == LINEAR_FLOPS
    assert p2.profile.root.calls == 2
    assert p2.profile.root.metrics["flops"] == 2 * LINEAR_FLOPS
    _assert_no_session_left(m)


def test_sessions_on_two_models_end_in_any_order() -> None:
    a, b, x = nn.Sequential(nn.Linear(4, 3)), nn.Sequential(nn.Linear(4, 3)), _x()
    p1, p2 = ls.Profiler(a), ls.Profiler(b)
    p1.__enter__()
    p2.__enter__()
    a(x), b(x)
    p1.__exit__(None, None, None)
    a(x), b(x), b(x)
    p2.__exit__(None, None, None)
    assert p1.profile.node("0").calls == 1
    assert p1.profile.root.metrics["flops"] == LINEAR_FLOPS
    assert p2.profile.node("0").calls == 3
    assert p2.profile.root.metrics["flops"] == 3 * LINEAR_FLOPS
    _assert_no_session_left(a, b)


def test_a_session_on_a_submodule_ends_inside_one_on_the_whole_model() -> None:
    m, x = nn.Sequential(nn.Linear(4, 3), nn.ReLU()), _x()
    inner, outer = ls.Profiler(m[0]), ls.Profiler(m)
    inner.__enter__()  # wraps m[0]'s forward
    outer.__enter__()  # wraps m's and m[1]'s, hooks m[0]
    m(x)
    inner.__exit__(None, None, None)  # takes back its wrapper only
    m(x)
    outer.__exit__(None, None, None)
    assert inner.profile.root.calls == 1
    assert inner.profile.root.metrics["flops"] == LINEAR_FLOPS
    assert outer.profile.node("0").calls == 2
    assert outer.profile.node("0").metrics["flops"] == 2 * LINEAR_FLOPS
    _assert_no_session_left(m)


class _CountingMode(TorchDispatchMode):  # type: ignore[no-untyped-call]
    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.ops = 0
        self.exits = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops += 1
        return func(*args, **(kwargs or {}))

    def __exit__(self, *exc: Any) -> None:
        self.exits += 1
        super().__exit__(*exc)  # type: ignore[no-untyped-call]


def test_a_session_that_ends_under_a_users_mode_leaves_that_mode_running() -> None:
    m, x = nn.Linear(4, 3), _x()
    p = ls.Profiler(m)
    p.__enter__()
    with _CountingMode() as mode:
        m(x)
        p.__exit__(None, None, None)
        assert _get_current_dispatch_mode_stack() == [mode]
        assert mode.exits == 0  # taken off and put back without being told
        ops = mode.ops
        m(x)
        assert mode.ops > ops
    assert p.profile.root.metrics["flops"] == LINEAR_FLOPS
    _assert_no_session_left(m)


# ---- threads ----------------------------------------------------------------------------
class _Gate(nn.Module):
    """Holds the profiling thread's call until the other thread has made its calls."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.profiling_thread = threading.get_ident()
        self.started, self.done = threading.Event(), threading.Event()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if threading.get_ident() == self.profiling_thread:
            self.started.set()
            assert self.done.wait(10)
        out: torch.Tensor = self.lin(x)
        return out


@pytest.mark.parametrize("hooked", [False, True], ids=["wrapped", "hooked"])
def test_calls_from_other_threads_are_not_counted(hooked: bool) -> None:
    m, x = _Gate(), _x()
    if hooked:  # modules with hooks of their own are tracked by hooks, not a wrapper
        for module in m.modules():
            module.register_forward_hook(lambda *_: None)

    def other() -> None:
        assert m.started.wait(10)
        for _ in range(20):
            m(x)
        m.done.set()

    thread = threading.Thread(target=other)
    thread.start()
    try:
        prof = ls.profile(m, x)
    finally:
        m.done.set()
        thread.join()
    assert prof.root.calls == 1 and prof.node("lin").calls == 1
    assert prof.root.metrics["flops"] == LINEAR_FLOPS
    # 20 calls of the model, each also calling lin
    assert "40 module calls from threads other than the profiling one" in " ".join(prof.notices)


def test_a_checkpoint_recomputed_by_a_backward_in_another_thread_is_counted() -> None:
    m, x = nn.Sequential(nn.Linear(4, 3)), _x().requires_grad_()
    with ls.Profiler(m) as p:
        out = checkpoint(m[0], x, use_reentrant=False)
        thread = threading.Thread(target=lambda: out.sum().backward())
        thread.start()
        thread.join()
    assert p.profile.node("0").calls == 2  # the forward and its recomputation
    assert "other threads" not in " ".join(p.profile.notices)


def _from_another_thread(call: Callable[[], object]) -> BaseException | None:
    """What ``call`` raised when run in a thread of its own (None if nothing)."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as e:
            raised.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(10)
    return raised[0] if raised else None


@pytest.mark.parametrize("timing", [False, True], ids=["analysed", "timed"])
def test_a_profiler_stopped_from_another_thread_changes_nothing(timing: bool) -> None:
    """``step()``, ``stop()`` and ``__exit__`` from a thread other than the one that
    started the Profiler are refused before anything is touched (a second ``start()``
    says it was entered twice); the starting thread then stops it as usual: its dispatch
    mode off the stack, its hooks and wrappers gone, the model free for a new session."""
    m, x = nn.Sequential(nn.Linear(4, 3)), _x()
    depth = torch._C._len_torch_dispatch_stack()
    snap = ModelSnapshot.take(m)
    p = ls.Profiler(m, timing=timing)
    p.__enter__()
    m(x)
    for name, call in [
        ("step()", p.step),
        ("stop()", p.stop),
        ("__exit__()", lambda: p.__exit__(None, None, None)),
    ]:
        e = _from_another_thread(call)
        assert isinstance(e, LayerscopeError) and str(e) == (
            f"{name} must be called in the thread that started the Profiler (its "
            "instrumentation belongs to that thread); nothing was changed: call it there"
        )
    e = _from_another_thread(p.start)
    assert isinstance(e, LayerscopeError) and "entered twice" in str(e)
    # the analysis session's dispatch mode is still on this thread's stack, and counts
    assert torch._C._len_torch_dispatch_stack() == depth + (0 if timing else 1)
    m(x)
    p.__exit__(None, None, None)
    assert torch._C._len_torch_dispatch_stack() == depth
    assert snap.differences(m) == []
    assert p.profile.root.calls == 2  # both calls of this thread
    if not timing:
        assert p.profile.root.metrics["flops"] == 2 * LINEAR_FLOPS
    assert ls.profile(m, x).root.metrics["flops"] == LINEAR_FLOPS
    _assert_no_session_left(m)


# ---- ls.profile from several threads -------------------------------------------------------
def _bn_model() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2)).train()


def test_profiles_of_one_model_from_two_threads_do_not_mix() -> None:
    m, x = _bn_model(), torch.randn(16, 4)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    results: list[tuple[int, float, float, int]] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(5):
                prof = ls.profile(m, x, backward=True)
                r = prof.root
                results.append(
                    (r.calls, r.metrics["flops"], r.metrics["backward_flops"], len(prof.nodes()))
                )
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(results) == 10
    assert len(set(results)) == 1, results
    assert results[0][0] == 1
    after = m.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(p.grad is None for p in m.parameters())


def test_a_submodule_and_its_parent_are_not_profiled_from_two_threads_at_once() -> None:
    """The claim covers every module of the profiled model: a thread profiling the head
    alone waits (``ls.profile``) or is refused (``Profiler``) while another profiles the
    whole model, and a sibling module stays free."""
    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 3))
    head, other = model[1], nn.Linear(4, 3)
    entered, leave = threading.Event(), threading.Event()

    def hold() -> None:
        with ls.Profiler(model[0]):
            entered.set()
            leave.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert entered.wait(10)
        ls.profile(head, torch.randn(2, 3))  # not part of model[0]: runs at once
        ls.profile(other, _x())
        with pytest.raises(LayerscopeError, match="or a module of it is being profiled"):
            ls.Profiler(model).__enter__()
        waited: list[Any] = []
        waiter = threading.Thread(target=lambda: waited.append(ls.profile(model, _x())))
        waiter.start()
        waiter.join(0.2)
        assert waiter.is_alive() and not waited
    finally:
        leave.set()
        holder.join()
    waiter.join(10)
    # Linear(4, 3) then Linear(3, 3) on (2, ·): 48 + 6, then 2*(2*3*3) + 6 = 42 FLOPs
    assert waited and waited[0].root.metrics["flops"] == LINEAR_FLOPS + 42
    _assert_no_session_left(model)


def test_a_profiler_refuses_a_model_another_thread_is_profiling() -> None:
    m, x = nn.Linear(4, 3), _x()
    entered, leave = threading.Event(), threading.Event()

    def hold() -> None:
        with ls.Profiler(m):
            entered.set()
            leave.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert entered.wait(10)
        with pytest.raises(LayerscopeError, match="being profiled in another thread"):
            ls.Profiler(m).__enter__()
        waited: list[Any] = []
        waiter = threading.Thread(target=lambda: waited.append(ls.profile(m, x)))
        waiter.start()
        waiter.join(0.2)
        assert waiter.is_alive() and not waited  # ls.profile waits its turn
    finally:
        leave.set()
        holder.join()
    waiter.join(10)
    assert waited and waited[0].root.metrics["flops"] == LINEAR_FLOPS
    with ls.Profiler(m), ls.Profiler(m):  # sessions nest in one thread
        m(x)


def test_memory_sessions_ending_out_of_order_keep_their_saved_tensor_hooks() -> None:
    """p1 ending first takes off only its own saved-tensor hooks: p2 still measures."""
    torch.manual_seed(0)
    a = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
    b = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
    xa, xb = torch.randn(2, 4), torch.randn(2, 4)
    p1, p2 = ls.Profiler(a, memory=True), ls.Profiler(b, memory=True)
    p1.__enter__()
    p2.__enter__()
    a(xa)
    p1.__exit__(None, None, None)
    b(xb)
    p2.__exit__(None, None, None)
    # Linear saves its 2x4 input (32 B), ReLU its 2x8 output (64 B)
    assert p1.profile.root.metrics["activation_bytes"] == 32 + 64
    assert p2.profile.root.metrics["activation_bytes"] == 32 + 64
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None


def test_timers_do_not_log_other_threads_calls() -> None:
    """The timing pass's (and a loop's timed steps') forward hooks log only the calls of
    the thread that installed them: another thread's call of the model adds nothing."""
    from layerscope.collect.timing.clock import Stamper
    from layerscope.collect.timing.forward import ForwardHooks
    from layerscope.collect.timing.index import ModuleIndex

    m = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    index = ModuleIndex.build(m)
    hooks = ForwardHooks(index, Stamper(None, torch.device("cpu"), False), record_seq=False)
    hooks.install()
    try:
        other = threading.Thread(target=lambda: m(_x()))
        other.start()
        other.join()
        assert hooks.take() == []
        m(_x())
        # the root, then 0 and 1, each entered (code i) and left (code ~i)
        assert [code for code, _, _ in hooks.take()] == [0, 1, ~1, 2, ~2, ~0]
    finally:
        hooks.uninstall()


def _no_labels(out: Any) -> torch.Tensor:
    raise ValueError("no labels")


@pytest.mark.parametrize(
    ("loss_fn", "error", "message"),
    [
        (
            lambda out: None,
            ls.InvalidInputError,
            "loss_fn must return the loss, a tensor of one element; it returned None",
        ),
        (
            lambda out: out,  # Linear(4, 2) on 3 rows: shape [3, 2], 6 elements
            ls.InvalidInputError,
            "loss_fn must return the loss, a tensor of one element; it returned shape [3, 2]",
        ),
        (_no_labels, ls.ModelError, "loss_fn raised ValueError: no labels"),
    ],
)
def test_a_failing_loss_fn_is_named(
    loss_fn: Callable[[Any], Any], error: type[Exception], message: str
) -> None:
    model = nn.Sequential(nn.Linear(4, 2))
    with pytest.raises(error) as info:
        ls.profile(model, torch.ones(3, 4), backward=True, loss_fn=loss_fn)
    assert str(info.value) == message
    assert all(p.grad is None for p in model.parameters())
