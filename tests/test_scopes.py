"""The scope stack: current module, balance under exceptions, error sites, call order."""

from __future__ import annotations

import gc
import inspect
import weakref
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import layerscope as ls
from helpers.snapshots import ModelSnapshot


class Probe(nn.Module):
    """Records which node the tracker reports as running during its own forward."""

    def __init__(self, seen: list[str], tracker: Callable[[], ls.Profiler | None]) -> None:
        super().__init__()
        self.seen = seen
        self.tracker = tracker

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.tracker()
        if p is not None:
            self.seen.append(p.tracker.current.path)
        return x


def test_current_is_innermost_running_module() -> None:
    seen: list[str] = []
    holder: list[ls.Profiler] = []
    probe = Probe(seen, lambda: holder[0])
    model = nn.Sequential(nn.Sequential(probe), Probe(seen, lambda: holder[0]))
    with ls.Profiler(model) as p:
        holder.append(p)
        model(torch.ones(1))
        assert p.tracker.current is p.tracker.outside  # no module running: prof.outside
    assert seen == ["0.0", "1"]
    assert p.tracker.stack == []


class Fallback(nn.Module):
    """Catches an error of one submodule and falls back to another."""

    def __init__(self) -> None:
        super().__init__()
        self.bad = nn.Linear(3, 3)
        self.good = nn.Linear(2, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        try:
            out: torch.Tensor = self.bad(x)
        except RuntimeError:
            out = self.good(x)
        return out


def test_error_caught_inside_model_is_not_an_error() -> None:
    prof = ls.profile(Fallback(), torch.ones(1, 2))
    assert prof.node("bad").calls == 1
    assert prof.node("good").calls == 1
    assert prof.node("bad").outputs == []  # it never returned
    assert prof.root.outputs[0][0].shape == (1, 3)  # type: ignore[union-attr]


class RootRaises(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.fc(x)
        raise KeyError("missing")


def test_error_in_root_forward_names_the_root() -> None:
    model = RootRaises()
    x = torch.ones(1, 2)
    snap = ModelSnapshot.take(model)
    with pytest.raises(ls.ModelError, match=r"<root> \(RootRaises\)") as info:
        ls.profile(model, x)
    assert info.value.path == ""
    assert isinstance(info.value.__cause__, KeyError)
    snap.assert_unchanged(model)


def test_user_pre_hook_that_raises_keeps_stack_balanced() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())

    def bad_hook(module: nn.Module, args: tuple[object, ...]) -> None:
        raise ValueError("hook failed")

    handle = model[1].register_forward_pre_hook(bad_hook)
    x = torch.ones(1, 2)
    snap = ModelSnapshot.take(model)
    p = ls.Profiler(model)
    with pytest.raises(ValueError, match="hook failed") as info, p:
        model(x)
    assert p.tracker.stack == []
    assert any("'1' (ReLU)" in note for note in info.value.__notes__)
    snap.assert_unchanged(model)
    handle.remove()


def test_children_in_execution_order_uncalled_last() -> None:
    class Reordered(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(2, 2)
            self.unused = nn.Linear(2, 2)
            self.b = nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.a(self.b(x))
            return out

    prof = ls.profile(Reordered(), torch.ones(1, 2))
    assert [(n.node_id, n.path, n.calls) for n in prof.nodes()] == [
        ("0", "", 1),
        ("1", "b", 1),
        ("2", "a", 1),
        ("3", "unused", 0),
    ]


def test_profiler_block_is_reusable_only_once() -> None:
    model = nn.Linear(2, 2)
    p = ls.Profiler(model)
    with pytest.raises(ls.LayerscopeError, match="after the `with` block"):
        _ = p.profile
    with p:
        model(torch.ones(1, 2))
        model(torch.ones(1, 2))
    assert p.profile.root.calls == 2
    with pytest.raises(ls.LayerscopeError, match="entered twice"), p:
        pass


def test_gc_state_is_restored() -> None:
    import gc

    model, x = nn.Linear(2, 2), torch.ones(1, 2)
    assert gc.isenabled()
    ls.profile(model, x)
    assert gc.isenabled()
    gc.disable()
    try:
        ls.profile(model, x)
        assert not gc.isenabled()
    finally:
        gc.enable()


SIGNATURES: list[list[str]] = []


class SignatureProbe(nn.Module):
    """Reads its own forward's signature while running, as some libraries do."""

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        SIGNATURES.append(list(inspect.signature(self.forward).parameters))
        return x * scale


def test_forward_signature_is_the_modules_own_during_a_session() -> None:
    probe = SignatureProbe()
    model = nn.Sequential(probe)
    snap = ModelSnapshot.take(model)
    SIGNATURES.clear()
    prof = ls.profile(model, torch.ones(1, 2))
    snap.assert_unchanged(model)
    assert SIGNATURES == [["x", "scale"]]
    assert prof.node("0").calls == 1
    assert "forward" not in probe.__dict__


def test_forward_set_on_the_instance_is_tracked_and_put_back() -> None:
    model = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
    relu = model[1]
    own = relu.forward  # a bound method stored on the instance by the user

    def doubled(x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = own(x) * 2
        return out

    relu.forward = doubled
    prof = ls.profile(model, torch.ones(1, 2))
    assert relu.__dict__["forward"] is doubled
    assert prof.node("1").calls == 1 and prof.node("1").metrics["flops"] == 3 + 3  # relu, *2


def test_modules_with_hooks_and_without_are_both_tracked() -> None:
    model = nn.Sequential(nn.Linear(2, 4), nn.Linear(4, 3))
    seen: list[tuple[int, ...]] = []

    def hook(module: nn.Module, args: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        seen.append(tuple(out.shape))
        out.mul_(2.0)

    handle = model[0].register_forward_hook(hook)
    try:
        snap = ModelSnapshot.take(model)
        prof = ls.profile(model, torch.ones(5, 2))
        snap.assert_unchanged(model)
    finally:
        handle.remove()
    assert seen == [(5, 4)]
    # 0 (hooked): addmm 5*2*4 = 40 MACs, 2*40 + 5*4 bias adds = 100 FLOPs. 1 (wrapped):
    # 5*4*3 = 60 MACs. The user's forward hook runs inside the module's scope (as its pre
    # hooks do), so its 5*4 = 20 multiplies are module 0's: 100 + 20 = 120, root self 0.
    assert (prof.node("0").metrics["macs"], prof.node("1").metrics["macs"]) == (40, 60)
    assert (prof.node("0").metrics["flops"], prof.root.self_metrics["flops"]) == (120, 0)


def test_base_exception_in_a_module_keeps_the_stack_balanced() -> None:
    class Interrupts(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise KeyboardInterrupt

    model = nn.Sequential(nn.Linear(2, 2), Interrupts())
    snap = ModelSnapshot.take(model)
    p = ls.Profiler(model)
    with pytest.raises(KeyboardInterrupt) as info, p:
        model(torch.ones(1, 2))
    assert p.tracker.stack == []
    site = p.tracker.site_of(info.value)
    assert site is not None and site.path == "1"
    snap.assert_unchanged(model)
    assert all("forward" not in m.__dict__ for m in model.modules())


def test_distinct_signatures_are_kept_up_to_the_bound_and_counted_beyond() -> None:
    from layerscope.collect.scopes import MAX_SIGNATURES

    class Loop(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.relu = nn.ReLU()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for n in range(1, MAX_SIGNATURES + 5):  # 20 distinct lengths, each twice
                self.relu(x[:, :n])
                self.relu(x[:, :n])
            return x

    prof = ls.profile(Loop(), torch.ones(1, MAX_SIGNATURES + 4))
    relu = prof.node("relu")
    assert relu.calls == 2 * (MAX_SIGNATURES + 4)
    # The first 16 distinct input shapes are kept, in call order; the other 4 are
    # counted once each however often they recur.
    assert [s[0].shape for s in relu.inputs] == [  # type: ignore[union-attr]
        (1, n) for n in range(1, MAX_SIGNATURES + 1)
    ]
    assert len(relu.outputs) == MAX_SIGNATURES
    notice = "relu: 4 more distinct inputs and 4 more distinct outputs not kept (the first 16"
    assert any(n.startswith(notice) for n in prof.notices)


def test_direct_forward_call_is_seen_when_the_module_has_no_hooks() -> None:
    class Direct(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(2, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.fc.forward(x)  # bypasses nn.Module.__call__
            return out

    model = Direct()
    prof = ls.profile(model, torch.ones(4, 2))
    assert prof.node("fc").calls == 1
    assert prof.node("fc").metrics["macs"] == 4 * 2 * 3  # 24, in fc, not in the root
    handle = model.fc.register_forward_pre_hook(lambda m, a: None)
    try:
        prof = ls.profile(model, torch.ones(4, 2))
    finally:
        handle.remove()
    # With a hook, fc is instrumented by hooks, which a direct forward call bypasses.
    assert prof.node("fc").calls == 0 and prof.root.self_metrics["macs"] == 24


def test_a_copy_made_during_a_session_runs_its_own_weights() -> None:
    import copy

    model = nn.Sequential(nn.Linear(2, 2))
    x = torch.ones(1, 2)
    with ls.Profiler(model) as p:
        model(x)
        twin = copy.deepcopy(model)  # copies the instrumented __dict__ too
        lin = twin[0]
        assert isinstance(lin, nn.Linear)
        with torch.no_grad():
            lin.weight.zero_()
            lin.bias.fill_(3.0)
        during = twin(x)
    after = twin(x)
    # The twin computes with its own weights (0 * x + 3), never with the original's, and
    # its calls are not the profiled model's: the Linear ran once.
    assert during.tolist() == after.tolist() == [[3.0, 3.0]]
    assert p.profile.node("0").calls == 1
    assert "forward" not in model[0].__dict__
    # The twin keeps a pass-through forward, but neither the session nor the original.
    session, original = weakref.ref(p.tracker), weakref.ref(model)
    del p, model
    gc.collect()
    assert session() is None and original() is None
    assert twin(x).tolist() == [[3.0, 3.0]]


def test_recorded_signatures_match_flattening_each_call() -> None:
    """Calls are told apart by cheap keys and turned into Signatures after the run; the
    result must be what flattening every call would give, deduplicated in call order."""
    from layerscope.collect.signature import MAX_LEAVES, flatten, flatten_call

    class Many(nn.Module):
        def forward(self, *xs: torch.Tensor, scale: float = 1.0) -> tuple[torch.Tensor, ...]:
            return xs[:2]

    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.many = Many()
            self.relu = nn.ReLU()
            self.w = nn.Parameter(torch.ones(2, 3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.many(x, x[0])  # plain tensors: keyed; the output tuple too
            self.many(x, x[0], scale=2.0)  # kwargs: flattened
            self.many(self.w, x[0])  # a Parameter: flattened, same Signature as above
            self.many(*[x] * (MAX_LEAVES + 1))  # too many leaves: flattened, truncated
            self.many(x, x[0])  # a repeat
            self.relu(x.to(torch.float64))  # a bare tensor output: keyed
            out: torch.Tensor = self.relu(x)
            return out

    x = torch.ones(2, 3)
    calls = [((x, x[0]), {}), ((x, x[0]), {"scale": 2.0}), (tuple([x] * (MAX_LEAVES + 1)), {})]
    prof = ls.profile(Outer(), x)
    many = prof.node("many")
    assert many.calls == 5
    # distinct: call 1 (= call 3 = call 5), call 2 (kwargs), call 4 (truncated to 64 leaves)
    assert many.inputs == [flatten_call(*calls[i]) for i in (0, 1, 2)]
    assert len(many.inputs[2]) == MAX_LEAVES + 1 and many.inputs[2][-1].path == "..."
    # (x, x[0]) from every call but the fourth, which returns (x, x)
    assert many.outputs == [flatten((x, x[0])), flatten((x, x))]
    relu = prof.node("relu")
    assert relu.outputs == [flatten(x.to(torch.float64)), flatten(x)]
    assert [s[0].path for s in relu.outputs] == ["", ""]


def test_a_call_whose_key_cannot_be_hashed_is_recorded_by_its_signature(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Symbolic sizes do not hash; a key that does not hash stands in for them here.
    from layerscope.collect import scopes
    from layerscope.collect.signature import flatten, flatten_call

    monkeypatch.setattr(scopes, "tensor_key", lambda values: ([1],))
    x = torch.ones(2, 3)
    prof = ls.profile(nn.Sequential(nn.ReLU()), x)
    relu = prof.node("0")
    # inputs: the key does not hash, so the Signature; outputs: a bare tensor's key
    assert relu.inputs == [flatten_call((x,), {})] and relu.outputs == [flatten(x)]


class _FailingBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("boom in backward")


class _UsesFunction(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _FailingBackward.apply(x)  # type: ignore[no-any-return,no-untyped-call]


class _Double(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def _two_level(inner: nn.Module) -> nn.Sequential:
    return nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 4), inner))


def test_error_in_a_custom_function_backward_names_the_module_that_created_it() -> None:
    model = _two_level(_UsesFunction())
    with pytest.raises(ls.ModelError) as info:
        ls.profile(model, torch.ones(2, 4), backward=True)
    assert str(info.value) == (
        "the model raised RuntimeError in the backward of module '1.1' (_UsesFunction): "
        "boom in backward"
    )
    assert (info.value.path, info.value.module_type) == ("1.1", "_UsesFunction")


def test_error_in_a_full_backward_hook_names_its_module() -> None:
    model = _two_level(_Double())

    def hook(module: nn.Module, grad_in: Any, grad_out: Any) -> None:
        raise ValueError("bad gradient")

    handle = model[1][1].register_full_backward_hook(hook)  # type: ignore[index]
    try:
        with pytest.raises(ls.ModelError) as info:
            ls.profile(model, torch.ones(2, 4), backward=True)
    finally:
        handle.remove()
    assert str(info.value) == (
        "the model raised ValueError in the backward of module '1.1' (_Double): bad gradient"
    )


def test_error_in_backward_inside_a_profiler_block_gets_a_note() -> None:
    model = _two_level(_UsesFunction())
    with pytest.raises(RuntimeError, match="boom in backward") as info, ls.Profiler(model):
        model(torch.ones(2, 4)).sum().backward()
    assert info.value.__notes__ == [
        "layerscope: raised in the backward of module '1.1' (_UsesFunction)"
    ]


def test_failing_forward_hook_names_its_own_module() -> None:
    model = _two_level(nn.ReLU())

    def hook(module: nn.Module, args: Any, out: Any) -> None:
        raise ValueError("bad output")

    handle = model[1][1].register_forward_hook(hook)  # type: ignore[index]
    try:
        with pytest.raises(ls.ModelError) as info:
            ls.profile(model, torch.ones(2, 4))
    finally:
        handle.remove()
    assert str(info.value) == "the model raised ValueError in module '1.1' (ReLU): bad output"


class _HookedTensor(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 3

        def hook(grad: torch.Tensor) -> None:
            raise ValueError("bad tensor gradient")

        y.register_hook(hook)  # type: ignore[no-untyped-call]
        return y


def test_error_in_a_tensor_hook_names_the_module_that_made_the_tensor() -> None:
    original = torch.Tensor.register_hook
    model = _two_level(_HookedTensor())
    with pytest.raises(ls.ModelError) as info:
        ls.profile(model, torch.ones(2, 4), backward=True)
    assert str(info.value) == (
        "the model raised ValueError in the backward of module '1.1' (_HookedTensor): "
        "bad tensor gradient"
    )
    assert torch.Tensor.register_hook is original  # put back when the session ended
    # outside a session a hook is registered as it is, unwrapped
    y = torch.ones(2, requires_grad=True) * 3
    y.register_hook(lambda g: None)  # type: ignore[no-untyped-call]
    hooks = y._backward_hooks
    assert hooks is not None and [h.__name__ for h in hooks.values()] == ["<lambda>"]


class _ModifiedInPlace(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.sigmoid(self.l(x))
        y.add_(1)  # sigmoid's backward needs y as it was: the engine refuses to run it
        return y


def _in_place_model() -> nn.Sequential:
    model = nn.Sequential(nn.Linear(4, 4))
    model.add_module("bad", _ModifiedInPlace())
    return model


_IN_PLACE = "one of the variables needed for gradient computation has been modified by an inplace"


def test_a_tensor_modified_in_place_names_the_module_whose_backward_failed() -> None:
    with pytest.raises(ls.ModelError) as info:
        ls.profile(_in_place_model(), torch.ones(2, 4), backward=True)
    assert info.value.path == "bad"
    assert info.value.module_type == "_ModifiedInPlace"
    assert str(info.value).startswith(
        "the model raised RuntimeError in the backward of module 'bad' (_ModifiedInPlace): "
        + _IN_PLACE
    )


def test_a_tensor_modified_in_place_gets_a_note_in_a_profiler() -> None:
    model = _in_place_model()
    with pytest.raises(RuntimeError, match=_IN_PLACE) as info, ls.Profiler(model):
        model(torch.ones(2, 4)).sum().backward()
    assert info.value.__notes__ == [
        "layerscope: raised in the backward of module 'bad' (_ModifiedInPlace)"
    ]


class _Square(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.l(x)
        out: torch.Tensor = h * h  # MulBackward0 runs two muls: grad * h, then h * grad
        return out


def test_an_op_failing_in_backward_names_the_module_whose_node_ran_it() -> None:
    from torch.utils._python_dispatch import TorchDispatchMode

    class SecondMulFails(TorchDispatchMode):  # type: ignore[no-untyped-call]
        muls = 0

        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            if func is torch.ops.aten.mul.Tensor and torch._C._current_autograd_node():
                self.muls += 1
                if self.muls == 2:
                    raise RuntimeError("no kernel")
            return func(*args, **(kwargs or {}))

    model = nn.Sequential(nn.Linear(4, 4))
    model.add_module("sq", _Square())
    # under the session's dispatch mode, as a device's kernel that fails would be
    below = SecondMulFails()  # type: ignore[no-untyped-call]
    with below, pytest.raises(RuntimeError, match="no kernel") as info, ls.Profiler(model):
        model(torch.ones(2, 4)).sum().backward()
    assert info.value.__notes__ == ["layerscope: raised in the backward of module 'sq' (_Square)"]


@pytest.mark.parametrize("kind", ["forward", "pre"])
def test_a_global_forward_hook_raising_names_the_module_it_ran_for(kind: str) -> None:
    model = _two_level(nn.ReLU())
    relu = model[1][1]  # type: ignore[index]

    def hook(module: nn.Module, *args: Any) -> None:
        if module is relu:
            raise ValueError("bad module")

    register = (
        nn.modules.module.register_module_forward_hook
        if kind == "forward"
        else nn.modules.module.register_module_forward_pre_hook
    )
    handle = register(hook)
    try:
        with pytest.raises(ls.ModelError) as info:
            ls.profile(model, torch.ones(2, 4))
    finally:
        handle.remove()
    assert str(info.value) == "the model raised ValueError in module '1.1' (ReLU): bad module"
    assert info.value.path == "1.1"
