"""NumericsObserver: NaN/Inf first offender and origin, forward and backward; statistics.

Every expected number is derived by hand in the comment beside it.
"""

from __future__ import annotations

import json
import math
import warnings
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch._subclasses.fake_tensor import FakeTensorMode

import layerscope as ls
from helpers.snapshots import ModelSnapshot
from layerscope.examples import EXAMPLES
from layerscope.metrics import numerics
from layerscope.metrics.numerics import (
    BF16_MAX,
    NonFiniteError,
    NonFiniteWarning,
    NumericsObserver,
)

INF = math.inf
NAN = math.nan


class Scale(nn.Module):
    """y = x * k, with a Python float k (cast to the tensor's dtype, as torch does)."""

    def __init__(self, k: float) -> None:
        super().__init__()
        self.k = k

    def forward(self, x: Tensor) -> Tensor:
        return x * self.k


class Sqrt(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.sqrt()


class Net(nn.Module):
    """body.1 turns finite values into Inf; body.2 and head carry them on."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(Scale(2.0), Scale(1e39), nn.ReLU())
        self.head = Scale(0.0)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.head(self.body(x))
        return out


def event(path: str, call: int, where: str, shapes: Any, nan: int, inf: int) -> dict[str, Any]:
    """The fields of a first_nonfinite/origin entry that do not depend on the node id."""
    return {"path": path, "call": call, "where": where, "shapes": shapes, "nan": nan, "inf": inf}


def strip(ev: dict[str, Any] | None) -> dict[str, Any] | None:
    return (
        None
        if ev is None
        else {k: ev[k] for k in ("path", "call", "where", "shapes", "nan", "inf")}
    )


def profile(model: nn.Module, *args: Any, **kwargs: Any) -> ls.Profile:
    """ls.profile with a NumericsObserver, asserting the model is left unchanged."""
    observer = kwargs.pop("observer", None) or NumericsObserver()
    snap = ModelSnapshot.take(model)
    prof = ls.profile(model, *args, observers=[observer], **kwargs)
    snap.assert_unchanged(model)
    return prof


def sqrt_model() -> nn.Sequential:
    """a = identity Linear, b = sqrt, c = sum of both features: fixed, exact weights."""
    a, c = nn.Linear(2, 2), nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        a.weight.copy_(torch.eye(2))
        a.bias.zero_()
        c.weight.fill_(1.0)
    return nn.Sequential(a, Sqrt(), c)


# ---- arguments -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs",
    [
        {"nonfinite": "explode"},
        {"nonfinite": None},
        {"stats": 1},
        {"grads": "yes"},
        {"underflow": "no"},
    ],
)
def test_bad_arguments_are_rejected(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ls.InvalidInputError):
        NumericsObserver(**kwargs)


# ---- forward: first offender and origin ------------------------------------------------
def test_forward_origin_is_the_module_that_made_inf_from_finite_values() -> None:
    x = torch.tensor([[1.0, -1.0, 0.5, 2.0]])
    prof = profile(Net(), x)
    # body.0: x*2 = [2, -2, 1, 4] (finite); body.1: *1e39 overflows float32 (max 3.4e38):
    # [inf, -inf, inf, inf] = 4 Inf; body.2 relu: [inf, 0, inf, inf] = 3 Inf;
    # head: *0 -> inf*0 = nan: [nan, 0, nan, nan] = 3 NaN.
    expected = event("body.1", 0, "output", [[1, 4]], 0, 4)
    assert strip(prof.numerics["first_nonfinite"]) == expected
    assert strip(prof.numerics["origin"]) == expected
    assert prof.numerics["origin"]["node_id"] == prof.node("body.1").node_id == "1.2"
    assert prof.numerics["origin"]["type"] == "Scale"
    assert prof.numerics["origin"]["dtypes"] == ["float32"]
    # checked: root, body, body.0, body.1, body.2, head = 6 calls; all but body.0 bad = 5.
    assert prof.numerics["checked_calls"] == 6
    assert prof.numerics["nonfinite_calls"] == 5
    assert prof.numerics["mode"] == "record" and prof.numerics["skipped"] is None
    counts = {n.path: (n.numerics["nan"], n.numerics["inf"]) for n in prof.nodes()}
    # body (Sequential) returns body.2's tensor; root returns head's.
    assert counts == {
        "": (3, 0),
        "body": (0, 3),
        "body.0": (0, 0),
        "body.1": (0, 4),
        "body.2": (0, 3),
        "head": (3, 0),
    }
    assert prof.node("body.0").numerics["nonfinite_calls"] == []
    assert prof.node("body.2").numerics["nonfinite_calls"] == [0]
    # Statistics leave non-finite tensors out entirely: body.1 has none left.
    assert prof.node("body.1").numerics["elements"] == 0
    assert prof.node("body.1").numerics["mean"] is None
    # body.0 = [2, -2, 1, 4]: mean 5/4; deviations .75 -3.25 -.25 2.75 -> squares sum
    # .5625 + 10.5625 + .0625 + 7.5625 = 18.75; population var 18.75/4 = 4.6875.
    b0 = prof.node("body.0").numerics
    assert (b0["min"], b0["max"], b0["mean"], b0["absmax"]) == (-2.0, 4.0, 1.25, 4.0)
    assert b0["std"] == pytest.approx(math.sqrt(4.6875), rel=1e-12)


def test_nonfinite_input_has_no_origin() -> None:
    model = nn.Sequential(Scale(2.0), Scale(3.0))
    prof = profile(model, torch.tensor([[NAN, 1.0]]))
    # The first module already receives the NaN: it is the first offender (1 NaN in its
    # output [nan, 2]), but no module turned finite values into non-finite ones.
    assert strip(prof.numerics["first_nonfinite"]) == event("0", 0, "output", [[1, 2]], 1, 0)
    assert prof.numerics["origin"] is None
    assert prof.numerics["nonfinite_calls"] == 3  # "0", "1" and the root


def test_only_the_second_call_overflows() -> None:
    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.s = Scale(1e20)

        def forward(self, x: Tensor) -> Tensor:
            out: Tensor = self.s(self.s(x))
            return out

    prof = profile(Twice(), torch.tensor([1.0]))
    # call 0: 1 * 1e20 = 1e20 (finite in float32); call 1: 1e20 * 1e20 = 1e40 -> inf.
    expected = event("s", 1, "output", [[1]], 0, 1)
    assert strip(prof.numerics["first_nonfinite"]) == expected
    assert strip(prof.numerics["origin"]) == expected
    s = prof.node("s").numerics
    assert s["checked_calls"] == 2 and s["nonfinite_calls"] == [1]
    # Statistics cover call 0 only: the one value float32(1e20).
    f32_1e20 = float(torch.tensor(1e20, dtype=torch.float32))
    assert (s["elements"], s["min"], s["max"], s["std"]) == (1, f32_1e20, f32_1e20, 0.0)
    assert s["fp16_overflow"] is True and s["bf16_overflow"] is False  # 65504 < 1e20 < 3.4e38


def test_origin_in_a_parents_own_code() -> None:
    class Outside(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = Scale(2.0), Scale(3.0)

        def forward(self, x: Tensor) -> Tensor:
            out: Tensor = self.b(self.a(x) * 1e39)  # overflows in the root's own code
            return out

    prof = profile(Outside(), torch.tensor([1.0]))
    # a: 2 (finite). root: 2 * 1e39 -> inf. b receives inf: first offender, not origin.
    # The root had finite inputs and a non-finite output: it is the origin (its self work).
    assert strip(prof.numerics["first_nonfinite"]) == event("b", 0, "output", [[1]], 0, 1)
    assert strip(prof.numerics["origin"]) == event("", 0, "output", [[1]], 0, 1)


# ---- backward ----------------------------------------------------------------------------
def test_backward_origin_is_named() -> None:
    x = torch.tensor([[0.0, 4.0]])
    prof = profile(sqrt_model(), x, backward=True)
    # Forward: a = [0, 4], sqrt = [0, 2], c = 2; all finite.
    # Backward: d/d(c out) = 1; c's grad_input = W^T = [1, 1] (finite) = sqrt's
    # grad_output; sqrt's grad_input = 0.5 / sqrt([0, 4]) = [inf, 0.25]: 1 Inf.
    expected = event("1", 0, "grad_input", [[1, 2]], 0, 1)
    assert strip(prof.numerics["first_nonfinite"]) == expected
    assert strip(prof.numerics["origin"]) == expected
    assert prof.numerics["nonfinite_calls"] == 0
    # Hooked gradients: c's output (= root's), sqrt's output (= c's input), a's output
    # (= sqrt's input); x is a leaf and is never hooked: 3 gradients, 1 non-finite.
    assert prof.numerics["checked_grads"] == 3
    assert prof.numerics["nonfinite_grads"] == 1
    bad = {n.path: n.numerics["nonfinite_grad_calls"] for n in prof.nodes()}
    assert bad == {"": [], "0": [0], "1": [0], "2": []}  # a receives the inf as grad_output


def test_backward_nan_from_a_custom_function() -> None:
    class NanGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Tensor) -> Tensor:
            return x.clone()

        @staticmethod
        def backward(ctx: Any, g: Tensor) -> Tensor:
            return g * NAN

    class Bad(nn.Module):
        def forward(self, x: Tensor) -> Tensor:
            out: Tensor = NanGrad.apply(x)  # type: ignore[no-untyped-call]
            return out

    model = nn.Sequential(nn.Linear(3, 3), Bad(), nn.Linear(3, 1))
    prof = profile(model, torch.ones(2, 3), backward=True)
    # Bad's grad_output is finite, its grad_input is all NaN: 2 x 3 = 6 NaN.
    expected = event("1", 0, "grad_input", [[2, 3]], 6, 0)
    assert strip(prof.numerics["origin"]) == expected
    assert strip(prof.numerics["first_nonfinite"]) == expected


def test_shared_input_names_the_innermost_module() -> None:
    class Residual(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = Sqrt()

        def forward(self, x: Tensor) -> Tensor:
            out: Tensor = x + self.inner(x)
            return out

    a = nn.Linear(2, 2)
    with torch.no_grad():
        a.weight.copy_(torch.eye(2))
        a.bias.zero_()
    model = nn.Sequential(a, Residual())
    prof = profile(model, torch.tensor([[0.0, 4.0]]), backward=True)
    # The Residual and its inner Sqrt both take a's output; its gradient is
    # 1 + 0.5 / sqrt([0, 4]) = [inf, 1.25]. Both modules' output gradients are finite
    # (ones); the innermost one, whose backward made the inf, is named.
    assert strip(prof.numerics["origin"]) == event("1.inner", 0, "grad_input", [[1, 2]], 0, 1)


# ---- modes -------------------------------------------------------------------------------
def test_record_mode_does_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        profile(Net(), torch.tensor([[1.0, -1.0, 0.5, 2.0]]))


def test_warn_mode_warns_once_naming_the_origin() -> None:
    with pytest.warns(NonFiniteWarning) as record:
        prof = profile(
            Net(), torch.tensor([[1.0, -1.0, 0.5, 2.0]]), observer=NumericsObserver("warn")
        )
    ours = [w for w in record if issubclass(w.category, NonFiniteWarning)]
    assert len(ours) == 1
    message = str(ours[0].message)
    assert "'body.1' (Scale) call 0" in message and "origin" in message
    assert ours[0].filename == __file__  # points at the caller, not into layerscope
    assert prof.numerics["mode"] == "warn"


def test_warn_mode_is_silent_when_all_is_finite() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        profile(sqrt_model(), torch.tensor([[1.0, 4.0]]), observer=NumericsObserver("warn"))


def test_raise_mode_stops_at_the_forward_origin() -> None:
    model, x = Net(), torch.tensor([[1.0, -1.0, 0.5, 2.0]])
    snap = ModelSnapshot.take(model)
    with pytest.raises(NonFiniteError) as info:
        ls.profile(model, x, observers=[NumericsObserver("raise")])
    snap.assert_unchanged(model)  # hooks (module and global) removed, state restored
    err = info.value
    assert isinstance(err, ls.LayerscopeError)
    assert (err.path, err.call, err.where, err.shapes) == ("body.1", 0, "output", [[1, 4]])
    assert (err.nan, err.inf, err.origin) == (0, 4, True)
    assert "'body.1' (Scale) call 0" in str(err) and "[[1, 4]]" in str(err)
    assert "layerscope: raised in module 'body.1' (Scale)" in err.__notes__

    with (
        pytest.raises(NonFiniteError),
        ls.Profiler(model, observers=[NumericsObserver("raise")]) as p,
    ):
        model(x)
    calls = {n.path: n.calls for n in p.profile.nodes()}
    # Stopped inside body.1's call: body.2 and head never ran.
    assert calls == {"": 1, "body": 1, "body.0": 1, "body.1": 1, "body.2": 0, "head": 0}
    assert strip(p.profile.numerics["origin"]) == event("body.1", 0, "output", [[1, 4]], 0, 4)
    snap.assert_unchanged(model)


def test_raise_mode_stops_at_the_backward_origin() -> None:
    model, x = sqrt_model(), torch.tensor([[0.0, 4.0]])
    snap = ModelSnapshot.take(model)
    with pytest.raises(NonFiniteError) as info:
        ls.profile(model, x, backward=True, observers=[NumericsObserver("raise")])
    snap.assert_unchanged(model)  # grads restored too
    err = info.value
    assert (err.path, err.call, err.where, err.shapes, err.inf, err.origin) == (
        "1",
        0,
        "grad_input",
        [[1, 2]],
        1,
        True,
    )

    with ls.Profiler(model, observers=[NumericsObserver("raise")]):
        out = model(x)
        with pytest.raises(NonFiniteError):
            out.sum().backward()
    assert not out._backward_hooks  # our tensor hook is gone from the kept output
    snap.assert_unchanged(model, skip=("grads",))  # the user's own backward set grads


def test_raise_mode_with_nonfinite_inputs_stops_at_the_first_offender() -> None:
    model = nn.Sequential(Scale(2.0), Scale(3.0))
    with pytest.raises(NonFiniteError) as info:
        profile(model, torch.tensor([[NAN, 1.0]]), observer=NumericsObserver("raise"))
    assert (info.value.path, info.value.origin) == ("0", False)
    assert "already there" in str(info.value)


class NaNer(nn.Module):
    """Its own code makes NaN between two children: log(1 - 100) = log(-99) is NaN."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Identity(), nn.ReLU()

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.b(torch.log(self.a(x) - 100))
        return out


def test_raise_mode_names_the_parent_whose_own_code_made_the_values() -> None:
    x = torch.ones(2, 3)
    # record and warn: b's inputs were NaN (not the origin), the root's were finite
    origin = ls.profile(NaNer(), x, numerics="record").numerics["origin"]
    assert (origin["path"], origin["type"]) == ("", "NaNer")
    # raise stops at b (the first non-finite output, 2 * 3 = 6 NaN) and agrees
    with pytest.raises(NonFiniteError) as info:
        ls.profile(NaNer(), x, numerics="raise")
    assert str(info.value) == (
        "layerscope: module <root> (NaNer) call 0: its own code made non-finite values from "
        "finite inputs (origin); they reached module 'b' (ReLU) call 0, whose output has "
        "6 NaN, 0 Inf, shapes [[2, 3]]"
    )
    err = info.value
    assert (err.path, err.call, err.where, err.shapes, err.nan, err.inf, err.origin) == (
        "",
        0,
        "output",
        [[2, 3]],
        6,
        0,
        True,
    )


# ---- statistics ---------------------------------------------------------------------------
class Pass(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x * 1.0


class TwoCalls(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.p = Pass()

    def forward(self, a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
        return self.p(a), self.p(b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_statistics_of_one_call_are_exact(dtype: torch.dtype) -> None:
    observer = NumericsObserver(underflow=True)
    prof = profile(Pass(), torch.tensor([0.0, 1.0, -2.0, 3.0], dtype=dtype), observer=observer)
    s = prof.root.numerics
    # [0, 1, -2, 3]: mean 2/4 = 0.5; deviations -.5 .5 -2.5 2.5 -> squares sum 13;
    # population variance 13/4 = 3.25 (not the sample 13/3). One zero of 4 elements;
    # smallest nonzero magnitude 1.
    assert s["elements"] == 4
    assert (s["min"], s["max"], s["mean"], s["absmax"]) == (-2.0, 3.0, 0.5, 3.0)
    assert s["std"] == pytest.approx(math.sqrt(3.25), rel=1e-7)
    assert (s["zero_fraction"], s["min_abs_nonzero"]) == (0.25, 1.0)
    assert not (s["fp16_overflow"] or s["bf16_overflow"] or s["fp16_underflow"])


def test_statistics_combine_calls_exactly() -> None:
    a, b = torch.tensor([0.0, 1.0, -2.0, 3.0]), torch.tensor([4.0, 4.0])
    prof = profile(TwoCalls(), args=(a, b))
    # All 6 values [0, 1, -2, 3, 4, 4]: sum 10, mean 10/6 = 5/3; sum of squares
    # 0 + 1 + 4 + 9 + 16 + 16 = 46; variance 46/6 - 25/9 = 69/9 - 25/9 = 44/9.
    for path in ("p", ""):  # the root returns both calls' tensors: the same 6 values
        s = prof.node(path).numerics
        assert s["elements"] == 6 and s["checked_calls"] == (2 if path else 1)
        assert (s["min"], s["max"], s["absmax"]) == (-2.0, 4.0, 4.0)
        assert s["mean"] == pytest.approx(5 / 3, rel=1e-12)
        assert s["std"] == pytest.approx(math.sqrt(44 / 9), rel=1e-12)
        assert s["zero_fraction"] == pytest.approx(1 / 6, rel=1e-12)


@pytest.mark.parametrize(
    ("values", "dtype", "flags"),
    [
        # (fp16_overflow, bf16_overflow, fp16_underflow, bf16_underflow)
        ([65504.0, 1.0], torch.float32, (False, False, False, False)),  # fp16 max itself
        ([65505.0], torch.float32, (True, False, False, False)),
        ([3.38e38], torch.float32, (True, False, False, False)),  # < bf16 max 3.3895e38
        ([-3.4e38], torch.float32, (True, True, False, False)),  # |x| > bf16 max
        ([1e39], torch.float64, (True, True, False, False)),
        ([2.0**-24, 0.0], torch.float32, (False, False, False, False)),  # fp16 tiny; 0 ok
        ([2.0**-25, 1.0], torch.float32, (False, False, True, False)),  # below fp16 tiny
        ([2.0**-133], torch.float64, (False, False, True, False)),  # bf16 tiny itself
        ([-(2.0**-140)], torch.float32, (False, False, True, True)),  # f32 subnormal
    ],
)
def test_range_flags(values: list[float], dtype: torch.dtype, flags: tuple[bool, ...]) -> None:
    observer = NumericsObserver(underflow=True)
    prof = profile(Pass(), torch.tensor(values, dtype=dtype), observer=observer)
    s = prof.root.numerics
    got = (s["fp16_overflow"], s["bf16_overflow"], s["fp16_underflow"], s["bf16_underflow"])
    assert got == flags
    assert float(torch.finfo(torch.bfloat16).max) == BF16_MAX


def test_underflow_is_not_measured_by_default() -> None:
    # 2**-25 is below fp16's smallest subnormal, but without underflow=True the smallest
    # nonzero magnitude is not computed: the flags say "unknown", not "no".
    s = profile(Pass(), torch.tensor([2.0**-25, 1.0])).root.numerics
    assert (s["min_abs_nonzero"], s["fp16_underflow"], s["bf16_underflow"]) == (None, None, None)
    assert s["fp16_overflow"] is False and s["min"] == 2.0**-25


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_zeros_are_counted_for_every_sign_pattern(dtype: torch.dtype) -> None:
    rows = {
        "positive": ([1.0, 2.0, 3.0, 4.0], 0.0),  # min > 0: no zero possible
        "negative": ([-1.0, -2.0, -3.0, -4.0], 0.0),  # max < 0
        "relu": ([0.0, 0.0, 0.0, 5.0], 0.75),  # 3 zeros of 4
        "mixed": ([-0.0, 1.0, -1.0, 0.0], 0.5),  # -0.0 counts as zero: 2 of 4
    }
    for values, fraction in rows.values():
        s = profile(Pass(), torch.tensor(values, dtype=dtype)).root.numerics
        assert s["zero_fraction"] == fraction


def test_zeros_are_counted_across_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(numerics.values, "_CHUNK", 3)
    # 8 values in chunks of 3, 3, 2: zeros at 0, 4, 5 and 7 -> 4 of 8.
    x = torch.tensor([0.0, 1.0, -1.0, 2.0, 0.0, 0.0, 3.0, 0.0])
    assert profile(Pass(), x).root.numerics["zero_fraction"] == 0.5


def test_variance_of_a_near_constant_tensor_does_not_cancel() -> None:
    # 1000 + [0, .5, 1, ..., 4.5] in float64 (exact): mean 1002.25; deviations are
    # +-0.25, +-0.75, ..., +-2.25, squares sum 2*(0.0625+0.5625+1.5625+3.0625+5.0625)
    # = 20.625, population variance 20.625/10 = 2.0625. mean**2 = 1.0045e6 > 100 * var,
    # so the shifted two-pass form is used, and must be exact too.
    x = 1000.0 + 0.5 * torch.arange(10, dtype=torch.float64)
    s = profile(Pass(), x).root.numerics
    assert s["mean"] == 1002.25
    assert s["std"] == pytest.approx(math.sqrt(2.0625), rel=1e-12)
    # float32, 1e4 + [0, 1, 2, 3]: values exact in float32; mean 10001.5, variance
    # (2.25 + .25 + .25 + 2.25)/4 = 1.25. The float32 sum of squares (4.0015e8, ulp 32)
    # cannot resolve that variance (the plain form gives -2.25); the shifted form can.
    y = torch.tensor([1e4, 1e4 + 1, 1e4 + 2, 1e4 + 3])
    s = profile(Pass(), y).root.numerics
    assert (s["mean"], s["std"]) == (10001.5, math.sqrt(1.25))


def test_sum_of_squares_overflow_falls_back_to_float64() -> None:
    # 1e20 and -1e20 in float32 (finite, max 3.4e38): x*x = 1e40 overflows float32, so
    # the float32 dot product is inf; float64 gives mean 0, variance 1e40 (std 1e20).
    x = torch.tensor([1e20, -1e20])
    f32 = float(torch.tensor(1e20))
    s = profile(Pass(), x).root.numerics
    assert s["mean"] == 0.0 and s["std"] == f32


def test_stats_and_grads_can_be_turned_off() -> None:
    observer = NumericsObserver(stats=False, grads=False)
    prof = profile(sqrt_model(), torch.tensor([[0.0, 4.0]]), backward=True, observer=observer)
    assert prof.root.numerics == {"checked_calls": 1, "nan": 0, "inf": 0, "nonfinite_calls": []}
    assert prof.numerics["checked_grads"] == 0 and prof.numerics["origin"] is None


# ---- hooks and the rest of the session ------------------------------------------------
def test_inplace_relu_after_linear_forward_and_backward() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(inplace=True), nn.Linear(8, 2))
    x = torch.randn(3, 4)
    model(x).sum().backward()
    expected = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)

    snap = ModelSnapshot.take(model)
    with ls.Profiler(model, observers=[NumericsObserver()]) as p:
        model(x).sum().backward()
    snap.assert_unchanged(model, skip=("grads",))
    for k, param in model.named_parameters():
        assert param.grad is not None and torch.equal(param.grad, expected[k])  # unchanged
    prof = p.profile
    # Hooked values: Linear 0's output before the in-place ReLU (= ReLU's input), the
    # same tensor after it (ReLU's output = Linear 2's input), Linear 2's output: 3.
    assert prof.numerics["checked_grads"] == 3 and prof.numerics["first_nonfinite"] is None
    # Linear 0's statistics were taken before ReLU overwrote its output in place.
    assert prof.node("0").numerics["min"] < 0 and prof.node("1").numerics["min"] == 0.0


def test_no_hooks_left_on_user_tensors() -> None:
    model = sqrt_model()
    x = torch.tensor([[1.0, 4.0]], requires_grad=True)  # a leaf: never hooked
    snap = ModelSnapshot.take(model)
    with ls.Profiler(model, observers=[NumericsObserver()]):
        out = model(x)  # hooks registered on activations, no backward run
    assert x._backward_hooks is None
    assert not out._backward_hooks  # removed at the end of the session
    out.sum().backward()  # still works afterwards
    snap.assert_unchanged(model, skip=("grads",))


def test_flops_are_the_same_with_and_without_the_observer() -> None:
    ex = EXAMPLES["tiny_gpt"]
    keys = ("macs", "flops", "backward_macs", "backward_flops")
    x = ex.example_input()
    plain = ls.profile(ex.build(), x, backward=True)
    checked = profile(ex.build(), x, backward=True)
    assert [(n.path, [n.self_metrics[k] for k in keys]) for n in checked.nodes()] == [
        (n.path, [n.self_metrics[k] for k in keys]) for n in plain.nodes()
    ]
    assert checked.unsupported_ops == plain.unsupported_ops == {}
    assert checked.numerics["checked_calls"] > 0 and checked.numerics["checked_grads"] > 0


def test_each_value_is_reduced_once_and_nothing_is_read_from_a_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reduced: list[tuple[int, ...]] = []
    reads: list[tuple[int, ...]] = []
    real_parts, real_to_host = numerics.values._cpu_parts, numerics.values._to_host

    def parts(t: Tensor, *args: Any) -> list[float]:
        reduced.append(tuple(t.shape))
        return real_parts(t, *args)

    def to_host(t: Tensor) -> list[Any]:
        reads.append(tuple(t.shape))
        return real_to_host(t)

    monkeypatch.setattr(numerics.values, "_cpu_parts", parts)
    monkeypatch.setattr(numerics.values, "_to_host", to_host)
    model = sqrt_model()
    with ls.Profiler(model, observers=[NumericsObserver()]) as p:
        model(torch.tensor([[0.0, 4.0]])).sum().backward()
    # Each value is reduced once (the root's output is c's tensor, each input is the
    # previous output): x (1, 2), a's (1, 2), sqrt's (1, 2) and c's (1, 1) outputs, then
    # the gradients w.r.t. c's output (1, 1), sqrt's output and a's output (1, 2).
    assert reduced == [(1, 2)] * 3 + [(1, 1)] * 2 + [(1, 2)] * 2
    assert reads == []  # CPU rows are host numbers: no device transfer at all (CUDA: one)
    assert p.profile.numerics["origin"] is not None


def test_meta_model_is_skipped() -> None:
    model = sqrt_model().to("meta")
    prof = profile(model, torch.zeros(1, 2, device="meta"), backward=True)
    assert prof.numerics["skipped"] == "meta tensors have no values"
    assert prof.numerics["checked_calls"] == 0 and prof.numerics["first_nonfinite"] is None
    assert all(n.numerics == {} for n in prof.nodes())


def test_fake_tensors_are_skipped() -> None:
    model = sqrt_model()
    snap = ModelSnapshot.take(model)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        x = mode.from_tensor(torch.tensor([[0.0, 4.0]]))
        prof = ls.profile(model, x, backward=True, observers=[NumericsObserver("raise")])
    snap.assert_unchanged(model)
    assert prof.numerics["skipped"] == "fake tensors have no values"
    assert prof.numerics["checked_calls"] == 0 and prof.numerics["origin"] is None


def test_report_is_plain_json_and_round_trips() -> None:
    observer = NumericsObserver()
    first = profile(Net(), torch.tensor([[1.0, -1.0, 0.5, 2.0]]), observer=observer)
    again = profile(Net(), torch.tensor([[1.0, -1.0, 0.5, 2.0]]), observer=observer)
    assert again.numerics == first.numerics  # an observer can be reused: state is reset
    data = json.loads(json.dumps(first.to_dict(), allow_nan=False))
    loaded = ls.Profile.from_dict(data)
    assert loaded == first
    assert loaded.node("body.0").numerics == first.node("body.0").numerics


def test_inference_mode_tensors_are_checked() -> None:
    model = nn.Sequential(Scale(2.0), Scale(1e39))
    with torch.inference_mode():  # inference tensors have no version counter
        prof = profile(model, torch.tensor([1.0, 0.0]))
    # "0": [2, 0] finite; "1": [inf, 0 * inf = nan].
    assert strip(prof.numerics["origin"]) == event("1", 0, "output", [[2]], 1, 1)
    assert prof.node("0").numerics["zero_fraction"] == 0.5


@pytest.mark.cuda
def test_no_host_sync_during_the_run_on_cuda() -> None:
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)).cuda()
    x = torch.randn(4, 8, device="cuda")
    snap = ModelSnapshot.take(model)
    with ls.Profiler(model, count_flops=False, observers=[NumericsObserver()]) as p:
        torch.cuda.set_sync_debug_mode("error")  # any synchronizing call raises
        try:
            model(x).sum().backward()
        finally:
            torch.cuda.set_sync_debug_mode(0)
    snap.assert_unchanged(model, skip=("grads",))
    assert p.profile.numerics["checked_grads"] == 3
    assert p.profile.numerics["first_nonfinite"] is None


def test_a_raise_keeps_the_origin_it_named_in_the_report() -> None:
    """The root's own code (log of negative values) makes the NaN its submodule 'b'
    receives: the raise names the root as the origin, and so does the report after it
    (before, the report had no origin and said they came from the inputs)."""

    class Makes(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.b(torch.log(self.a(x) - 100))
            return out

    model = Makes()
    p = ls.Profiler(model, numerics="raise")
    with pytest.raises(ls.NonFiniteError, match=r"<root> \(Makes\) call 0: its own code made"), p:
        model(torch.randn(2, 4))
    origin = p.profile.numerics["origin"]
    assert origin is not None and (origin["path"], origin["call"]) == ("", 0)
    assert "this module produced them (origin)" in p.profile.render(width=200)
