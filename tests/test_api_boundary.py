"""Every option of ``ls.profile`` and ``ls.Profiler`` is checked before any work is done.

A bad option is an ``InvalidInputError`` whose one-line message names the option, the
bad value and what is allowed, raised before the model's forward runs (``Counted`` counts
its forwards on the class, which layerscope's restore of the instance does not touch).
Also: ``mode=``, timing refused on meta, ops as ``flop_formulas`` keys, user formulas
that fail (``FlopFormulaError``) and observers that fail (``ObserverError``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import _get_current_dispatch_mode

import layerscope as ls
from helpers.snapshots import ModelSnapshot
from layerscope.collect.observer import Observer
from layerscope.collect.scopes import ScopeTracker
from layerscope.collect.timing import TimingOptions
from layerscope.errors import FlopFormulaError, InvalidInputError, ModelError, ObserverError
from layerscope.examples import EXAMPLES
from layerscope.metrics import flops
from layerscope.metrics.flops import FLOP_REGISTRY, Cost
from layerscope.profile import Node, Profile


class Counted(nn.Module):
    """Linear(4, 3) that counts its forward calls on the class."""

    forwards: ClassVar[int] = 0

    def __init__(self, device: str | None = None) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        type(self).forwards += 1
        out: torch.Tensor = self.fc(x)
        return out


@pytest.fixture(autouse=True)
def _reset_counter() -> Iterator[None]:
    Counted.forwards = 0
    yield


def x24() -> torch.Tensor:
    return torch.randn(2, 4)


# ---- 1. every option checked up front ------------------------------------------------
BAD_OPTIONS: list[tuple[dict[str, Any], list[str]]] = [
    ({"backward": "no"}, ["backward", "'no'", "True or False"]),
    ({"backward": 1}, ["backward", "1", "True or False"]),
    ({"memory": "yes"}, ["memory", "'yes'", "True or False"]),
    ({"record_shapes": "x"}, ["record_shapes", "'x'", "True or False"]),
    ({"count_flops": "x"}, ["count_flops", "'x'", "True or False"]),
    ({"numerics": "loud"}, ["numerics", "'loud'", "'record', 'warn', 'raise'"]),
    ({"numerics": {"stats": 1}}, ["numerics['stats']", "1", "True or False"]),
    ({"numerics": {"mode": "raise"}}, ["unknown option 'mode' in numerics", "nonfinite"]),
    ({"numerics": 3}, ["numerics", "3", "'record', 'warn', 'raise'", "mapping"]),
    ({"mode": "evaluation"}, ["mode", "'evaluation'", "'eval', 'train' or None"]),
    ({"mode": True}, ["mode", "True", "'eval', 'train' or None"]),
    ({"observers": 3}, ["observers", "3", "Observer"]),
    ({"observers": [3]}, ["observers[0]", "3", "Observer instance"]),
    ({"observers": [Observer]}, ["observers[0]", "class Observer", "Observer()"]),
    ({"observers": Observer()}, ["observers", "one observer", "observers=[it]"]),
    ({"loss_fn": 3, "backward": True}, ["loss_fn", "3", "callable"]),
    ({"timing": "yes"}, ["timing", "'yes'", "True, False or a mapping", "repeats"]),
    ({"timing": {"sync": "x"}}, ["sync", "'x'", "True or False"]),
    ({"timing": {"ops": 1, "timer": "fx"}}, ["ops", "1", "True or False"]),
    ({"timing": {"progress": "yes"}}, ["progress", "'yes'", "callable"]),
    ({"timing": {"repeats": 10**9}}, ["repeats", "1000000000", "from 1 to 10000"]),
    ({"timing": {"repeats": 10_001}}, ["repeats", "10001", "from 1 to 10000"]),
    ({"timing": {"repeats": 0}}, ["repeats", "0", "from 1 to 10000"]),
    ({"timing": {"repeats": 2.0}}, ["repeats", "2.0", "an int"]),
    ({"timing": {"repeats": True}}, ["repeats", "True", "an int"]),
    ({"timing": {"warmup": -1}}, ["warmup", "-1", "from 0 to 10000"]),
    ({"timing": {"warmup": 10_001}}, ["warmup", "10001", "from 0 to 10000"]),
    ({"timing": {"batch_size": 0}}, ["batch_size", "0", "an int >= 1"]),
    ({"timing": {"timer": "nope"}}, ["timer", "'nope'", "'hooks', 'kineto', 'fx'"]),
    (
        {"timing": {"grad_mode": "maybe"}},
        ["grad_mode", "'maybe'", "'enabled', 'no_grad', 'inference_mode'"],
    ),
    ({"timing": {"repeat": 3}}, ["unknown option 'repeat' in timing", "did you mean 'repeats'?"]),
    ({"timing": {"ops": True}}, ["ops=True", "timer='kineto'"]),
    (
        {"timing": {"grad_mode": "no_grad"}, "backward": True},
        ["backward=True", "grad_mode='no_grad'"],
    ),
    ({"flop_formulas": [1]}, ["flop_formulas", "[1]", "mapping"]),
    ({"input_shape": (2, 4), "input_dtype": "floaty"}, ["input_dtype", "'floaty'", "'float16'"]),
    ({"input_shape": (2, 4), "input_dtype": 3}, ["input_dtype", "3", "torch.dtype"]),
    ({"input_shape": (2.0, 4)}, ["input_shape", "(2.0, 4)", "ints"]),
    ({"input_shape": (True, 4)}, ["input_shape", "(True, 4)", "non-negative ints"]),
    ({"input_shape": (np.int64(-2), 4)}, ["input_shape", "-2", "non-negative ints"]),
    ({"input_shape": "abc"}, ["input_shape", "'abc'", "ints"]),
]


@pytest.mark.parametrize(("options", "words"), BAD_OPTIONS)
def test_bad_option_is_refused_before_the_model_runs(
    options: dict[str, Any], words: list[str]
) -> None:
    model = Counted()
    call_input: dict[str, Any] = {} if "input_shape" in options else {"args": (x24(),)}
    snap = ModelSnapshot.take(model)
    with pytest.raises(InvalidInputError) as info:
        ls.profile(model, **call_input, **options)
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message, (word, message)
    assert Counted.forwards == 0  # refused before the analysis pass (timing included)
    snap.assert_unchanged(model)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"memory": "yes"}, ["memory", "'yes'"]),
        ({"record_shapes": 0}, ["record_shapes", "0"]),
        ({"count_flops": None}, ["count_flops", "None"]),
        ({"observers": 3}, ["observers", "3"]),
        ({"numerics": "loud"}, ["numerics", "'loud'"]),
        ({"flop_formulas": {"aten::mm": lambda *a, **k: Cost()}}, ["'aten::mm'"]),
    ],
)
def test_profiler_options_are_checked_when_it_is_made(
    options: dict[str, Any], words: list[str]
) -> None:
    model = Counted()
    with pytest.raises(InvalidInputError) as info:
        ls.Profiler(model, **options)
    assert all(word in str(info.value) for word in words)
    assert Counted.forwards == 0


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("float16", "float16"),
        ("torch.float16", "float16"),
        ("half", "float16"),
        ("bfloat16", "bfloat16"),
        ("float64", "float64"),
        ("long", "int64"),
        ("int64", "int64"),
        (torch.float16, "float16"),
    ],
)
def test_string_dtypes_end_to_end(name: str | torch.dtype, expected: str) -> None:
    prof = ls.profile(nn.Sequential(nn.Identity()), input_shape=(2, 4), input_dtype=name)
    spec = prof.root.inputs[0][0]
    assert getattr(spec, "dtype", None) == expected
    assert getattr(spec, "shape", None) == (2, 4)


def test_numpy_ints_in_input_shape_give_the_exact_shape() -> None:
    prof = ls.profile(Counted(), input_shape=(np.int64(2), np.int32(4)))
    spec = prof.root.inputs[0][0]
    assert getattr(spec, "shape", None) == (2, 4)
    assert prof.root.metrics["macs"] == 2 * 4 * 3  # Linear(4, 3) on (2, 4): 24

    class Two(nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return a @ b

    prof = ls.profile(Two(), input_shape=[(np.int64(2), 3), (np.int16(3), np.uint8(5))])
    shapes = [getattr(s, "shape", None) for s in prof.root.inputs[0]]
    assert shapes == [(2, 3), (3, 5)]
    assert prof.root.metrics["macs"] == 2 * 3 * 5  # 30


def test_numpy_scalars_are_accepted_as_ints_and_bools() -> None:
    prof = ls.profile(
        Counted(),
        x24(),
        count_flops=np.bool_(True),  # type: ignore[arg-type]
        memory=np.bool_(False),  # type: ignore[arg-type]
        timing={"repeats": np.int64(2), "warmup": np.int64(0), "sync": np.bool_(False)},
    )
    assert prof.timing["repeats"] == 2 and type(prof.timing["repeats"]) is int
    assert prof.timing["warmup"] == 0
    assert prof.root.metrics["macs"] == 24


def test_repeat_bound_is_inclusive() -> None:
    assert TimingOptions(repeats=10_000, warmup=10_000).repeats == 10_000
    with pytest.raises(InvalidInputError, match="repeats must be an int from 1 to 10000"):
        TimingOptions(repeats=10_001)


# ---- 2. mode= ------------------------------------------------------------------------
class OpRecorder(Observer):
    """Remembers the name of every aten op that ran."""

    def __init__(self) -> None:
        self.ops: set[str] = set()

    def on_op(
        self,
        func: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        out: Any,
        node: Node,
        backward: bool,
    ) -> None:
        self.ops.add(str(func))


def _dropout_ops(rec: OpRecorder) -> list[str]:
    return sorted(op for op in rec.ops if "dropout" in op or "bernoulli" in op)


def test_mode_eval_runs_a_training_model_in_eval_and_restores_flags() -> None:
    ex = EXAMPLES["tiny_gpt"]
    model, x = ex.build().train(), ex.example_input()
    model.get_submodule("blocks.1.mlp").eval()  # mixed flags must come back exactly
    flags = [m.training for m in model.modules()]
    snap = ModelSnapshot.take(model)

    rec = OpRecorder()
    prof = ls.profile(model, x, observers=[rec])  # as the model is: dropout runs
    assert prof.model["training"] is True
    assert _dropout_ops(rec) == ["aten.bernoulli_.float"]

    rec = OpRecorder()
    prof = ls.profile(model, x, mode="eval", observers=[rec], timing={"repeats": 1, "warmup": 0})
    assert prof.model["training"] is False
    assert prof.timing["training"] is False  # the timing pass ran in eval too
    assert _dropout_ops(rec) == []  # no dropout masks drawn
    assert [m.training for m in model.modules()] == flags
    snap.assert_unchanged(model)


def test_mode_train_on_an_eval_model() -> None:
    ex = EXAMPLES["tiny_gpt"]
    model, x = ex.build().eval(), ex.example_input()
    snap = ModelSnapshot.take(model)
    rec = OpRecorder()
    prof = ls.profile(model, x, mode="train", observers=[rec])
    assert prof.model["training"] is True
    assert _dropout_ops(rec) == ["aten.bernoulli_.float"]
    assert not any(m.training for m in model.modules())
    snap.assert_unchanged(model)


def test_mode_flags_restored_when_the_model_raises() -> None:
    class Boom(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("boom")

    model = nn.Sequential(nn.Dropout(0.5), Boom()).train()
    with pytest.raises(ModelError, match="boom"):
        ls.profile(model, x24(), mode="eval")
    assert all(m.training for m in model.modules())


# ---- 3. no timing on meta ------------------------------------------------------------
def test_timing_on_a_meta_model_is_refused_before_the_analysis() -> None:
    model = Counted(device="meta")
    with pytest.raises(InvalidInputError) as info:
        ls.profile(model, input_shape=(2, 4), timing=True)
    message = str(info.value)
    assert "timing" in message and "meta" in message and "'fc.weight'" in message
    assert "no data" in message and "without timing" in message
    assert Counted.forwards == 0
    # Without timing, meta still analyses: Linear(4, 3) on (2, 4) is 24 MACs.
    assert ls.profile(model, input_shape=(2, 4)).root.metrics["macs"] == 24


def test_timing_with_meta_inputs_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="an input tensor is on the meta device"):
        ls.profile(nn.ReLU(), torch.empty(2, 4, device="meta"), timing=True)


# ---- 4. flop_formulas keys and user formulas -----------------------------------------
@torch.library.custom_op("lstest::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@twice.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class LinearTwice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = twice(self.fc(x))
        return out


def twice_cost(x: torch.Tensor, *, out: torch.Tensor) -> Cost:
    return Cost(flops=out.numel())  # one multiply per element


@pytest.mark.parametrize(
    ("key", "words"),
    [
        ("aten::mm", ["'aten::mm'", "string", "torch.ops.aten.mm "]),
        ("aten.mm.default", ["'aten.mm.default'", "torch.ops.aten.mm.default (this overload)"]),
        ("lstest::twice", ["torch.ops.lstest.twice"]),
        (3, ["3 (int)", "not an op", "torch.ops.aten.mm"]),
        (torch.matmul, ["torch.matmul", "not an op", "aten op it runs"]),
    ],
)
def test_flop_formula_keys_must_be_ops(key: object, words: list[str]) -> None:
    model = Counted()
    with pytest.raises(InvalidInputError) as info:
        ls.profile(model, x24(), flop_formulas={key: twice_cost})
    message = str(info.value)
    assert message.startswith("flop_formulas key ")
    assert all(word in message for word in words), message
    assert Counted.forwards == 0


def test_flop_formula_values_must_be_callables() -> None:
    with pytest.raises(InvalidInputError, match=r"flop_formulas\[aten\.mm\] must be a callable"):
        ls.profile(Counted(), x24(), flop_formulas={torch.ops.aten.mm: 3})  # type: ignore[dict-item]
    assert Counted.forwards == 0


@pytest.mark.parametrize(
    "key", [torch.ops.lstest.twice, torch.ops.lstest.twice.default], ids=["packet", "overload"]
)
def test_custom_op_keys_are_counted(key: Any) -> None:
    prof = ls.profile(LinearTwice(), x24(), flop_formulas={key: twice_cost})
    assert prof.unsupported_ops == {}
    assert prof.node("fc").self_metrics["macs"] == 2 * 4 * 3  # 24
    assert prof.root.self_metrics["flops"] == 2 * 3  # twice on the (2, 3) output: 6
    # addmm: 2 * 24 + 6 bias adds = 54, plus the 6 of twice
    assert prof.root.metrics["flops"] == 54 + 6


def _returns_int(x: torch.Tensor, *, out: torch.Tensor) -> Any:
    return 6


def _returns_none(x: torch.Tensor, *, out: torch.Tensor) -> Any:
    return None


def _returns_negative(x: torch.Tensor, *, out: torch.Tensor) -> Cost:
    return Cost(macs=-1)


def _returns_float(x: torch.Tensor, *, out: torch.Tensor) -> Cost:
    return Cost(flops=6.0)  # type: ignore[arg-type]


def _raises(x: torch.Tensor, *, out: torch.Tensor) -> Cost:
    raise ZeroDivisionError("bad formula")


@pytest.mark.parametrize(
    ("formula", "words"),
    [
        (_returns_int, ["returned 6 (int)", "Cost with non-negative int"]),
        (_returns_none, ["returned None (NoneType)"]),
        (_returns_negative, ["returned Cost(macs=-1, flops=0)"]),
        (_returns_float, ["returned Cost(macs=0, flops=6.0)"]),
        (_raises, ["raised ZeroDivisionError: bad formula"]),
    ],
)
def test_bad_user_formula_is_a_flop_formula_error(formula: Any, words: list[str]) -> None:
    model, x = LinearTwice(), x24()
    snap = ModelSnapshot.take(model)
    with pytest.raises(FlopFormulaError) as info:
        ls.profile(model, x, flop_formulas={torch.ops.lstest.twice: formula})
    err = info.value
    message = str(err)
    assert not isinstance(err, ModelError)
    assert isinstance(err, InvalidInputError) and isinstance(err, ls.LayerscopeError)
    assert f"the FLOP formula {formula.__qualname__} for lstest.twice.default" in message
    assert all(word in message for word in words), message
    assert err.op == "lstest.twice.default" and err.formula == formula.__qualname__
    if formula is _raises:
        assert isinstance(err.__cause__, ZeroDivisionError)
    snap.assert_unchanged(model)
    assert _get_current_dispatch_mode() is None


def test_bad_registered_formula_is_a_flop_formula_error_in_backward_too() -> None:
    op = torch.ops.lstest.twice.default
    ls.register_flop_formula(op)(_returns_int)
    try:
        x = torch.randn(2, 4, requires_grad=True)
        with pytest.raises(FlopFormulaError, match=r"_returns_int for lstest\.twice\.default"):
            ls.profile(LinearTwice(), x, backward=True)
    finally:
        del FLOP_REGISTRY[op]


def test_flop_formula_error_is_importable_from_both_places() -> None:
    assert flops.FlopFormulaError is FlopFormulaError
    assert issubclass(FlopFormulaError, InvalidInputError)


# ---- 5. a failing observer is not the model's error ----------------------------------
CALLBACKS = ["install", "on_enter", "on_exit", "on_op", "finish", "uninstall"]


def failing_observer(callback: str) -> Observer:
    def fail(self: Observer, *args: Any) -> None:
        raise KeyError(f"broken {callback}")

    cls = type("Flaky", (Observer,), {callback: fail})
    return cls()  # type: ignore[no-any-return]


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("callback", CALLBACKS)
def test_failing_observer_is_an_observer_error(callback: str, backward: bool) -> None:
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    x = torch.randn(2, 4, requires_grad=backward)
    snap = ModelSnapshot.take(model)
    with pytest.raises(ObserverError) as info:
        ls.profile(model, x, backward=backward, observers=[failing_observer(callback)])
    err = info.value
    assert not isinstance(err, ModelError)
    assert str(err) == f"observer Flaky raised KeyError in {callback}: 'broken {callback}'"
    assert err.observer == "Flaky" and err.callback == callback
    assert isinstance(err.__cause__, KeyError)
    snap.assert_unchanged(model)  # hooks removed, flags, grads and RNG restored
    assert _get_current_dispatch_mode() is None
    assert x.grad is None


def test_failing_observer_in_backward_only() -> None:
    class BackwardOnly(Observer):
        def on_op(
            self,
            func: Any,
            args: tuple[Any, ...],
            kwargs: dict[str, Any],
            out: Any,
            node: Node,
            backward: bool,
        ) -> None:
            if backward:
                raise RuntimeError("no backward here")

    model, x = nn.Linear(4, 3), x24()
    snap = ModelSnapshot.take(model)
    with pytest.raises(ObserverError, match="BackwardOnly raised RuntimeError in on_op"):
        ls.profile(model, x, backward=True, observers=[BackwardOnly()])
    snap.assert_unchanged(model)


def test_failing_observer_in_a_profiler_block_cleans_up() -> None:
    model, x = nn.Sequential(nn.Linear(4, 3)), x24()
    snap = ModelSnapshot.take(model)
    with (
        pytest.raises(ObserverError, match="in on_enter"),
        ls.Profiler(model, observers=[failing_observer("on_enter")]),
    ):
        model(x)
    snap.assert_unchanged(model)
    assert _get_current_dispatch_mode() is None


def test_every_observer_is_uninstalled_when_one_fails() -> None:
    class Tracks(Observer):
        installed = False

        def install(self, tracker: ScopeTracker) -> None:
            self.installed = True

        def uninstall(self) -> None:
            self.installed = False

        def finish(self, profile: Profile) -> None:
            pass

    first, second = Tracks(), Tracks()
    with pytest.raises(ObserverError, match="in uninstall"):
        ls.profile(nn.Linear(4, 3), x24(), observers=[first, failing_observer("uninstall"), second])
    assert not first.installed and not second.installed
