"""A plan or an estimate of a model with real weights runs a meta copy of it, and nothing
in the copy may reach what the user holds: ``copy.deepcopy`` copies functions by
reference, so an instance-level ``forward`` or a hook whose closure or globals hold the
original module or the user's objects is left out of the copy (named in the notes);
what the deep copy rebinds (bound methods, ``functools.partial``) runs on the copy."""

from __future__ import annotations

import functools
import types
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import layerscope as ls
from helpers.models import tiny_llama
from helpers.snapshots import ModelSnapshot
from layerscope.collect.meta import NOT_RUN, meta_copy

#: the user's own dict, written by a hook that reaches it through the module's globals
ACTIVATIONS: dict[str, Any] = {}


def net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Linear(8, 8))


def plan(model: nn.Module) -> Any:
    return ls.plan(
        model, input_shape=(4, 8), target="h100", world_size=1, sharding="none",
        precision="fp32",
    )  # fmt: skip


def not_run(notes: list[str]) -> list[str]:
    return [n for n in notes if n.startswith(NOT_RUN)]


@pytest.fixture(scope="module")
def plain() -> Any:
    return plan(net())


def test_a_forward_wrapper_that_calls_the_users_batchnorm_is_left_out(plain: Any) -> None:
    model = net()  # train mode: a BatchNorm call would count a batch
    orig = model[1].forward
    model[1].forward = lambda x: orig(x)
    snap = ModelSnapshot.take(model)
    got = plan(model)
    snap.assert_unchanged(model)
    assert model[1].num_batches_tracked.item() == 0  # type: ignore[operator]
    assert not_run(got.notes) == [
        f"{NOT_RUN}: the instance-level forward '<lambda>' of module '1', which reaches the "
        "model's own BatchNorm1d '1'; BatchNorm1d.forward ran instead. To analyse it, plan "
        "from a profile of the model (ls.profile(..., backward=True, memory=True)), or "
        "remove the wrapper"
    ]
    # the class's forward ran in its place: the plan of the model without the wrapper
    assert got.peak_bytes == plain.peak_bytes
    assert got.to_dict()["plan"]["modules"] == plain.to_dict()["plan"]["modules"]


def test_a_hook_that_stores_activations_in_the_users_dict_is_left_out(plain: Any) -> None:
    model = net()

    def store(module: nn.Module, args: Any, out: torch.Tensor) -> None:
        ACTIVATIONS["first"] = out

    def log(module: nn.Module, args: Any) -> None:
        seen.append(type(module).__name__)

    seen: list[str] = []
    model[0].register_forward_hook(store)
    model[2].register_forward_pre_hook(log)
    snap = ModelSnapshot.take(model)
    got = plan(model)
    snap.assert_unchanged(model)
    assert ACTIVATIONS == {} and seen == []
    assert not_run(got.notes) == [
        f"{NOT_RUN}: the forward hook 'store' on module '0', which reaches a dict "
        "outside the model",
        f"{NOT_RUN}: the forward pre hook 'log' on module '2', which reaches a list "
        "outside the model",
    ]
    assert got.peak_bytes == plain.peak_bytes
    # the user's hooks are still there, and run on the user's model
    model.eval()(torch.randn(4, 8))
    assert set(ACTIVATIONS) == {"first"} and seen == ["Linear"]
    ACTIVATIONS.clear()


def test_a_partial_forward_runs_on_the_copy(plain: Any) -> None:
    model = net()
    model[2].forward = functools.partial(nn.Linear.forward, model[2])  # type: ignore[arg-type]
    snap = ModelSnapshot.take(model)
    got = plan(model)
    snap.assert_unchanged(model)
    assert not_run(got.notes) == []  # the deep copy binds the partial to the copy
    assert got.peak_bytes == plain.peak_bytes


def test_a_method_rebinding_runs_on_the_copy(plain: Any) -> None:
    model = net()

    def no_bias(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)

    model[2].forward = types.MethodType(no_bias, model[2])
    snap = ModelSnapshot.take(model)
    got = plan(model)
    snap.assert_unchanged(model)
    assert not_run(got.notes) == []
    flops = {n.path: n.metrics["flops"] for n in got.analysis.nodes()}
    # it ran: module 2 is 4 x 8 x 8 = 256 MACs, 512 FLOPs without the bias's 4 x 8 adds
    assert flops["2"] == 2 * 256
    assert flops["0"] == 2 * 256 + 4 * 8
    before = {n.path: n.metrics["flops"] for n in plain.analysis.nodes()}
    assert before["2"] == 2 * 256 + 4 * 8


def test_a_stateless_hook_still_runs_on_the_copy() -> None:
    model = net()

    def double(module: nn.Module, args: Any, out: torch.Tensor) -> torch.Tensor:
        return out * 2

    model[0].register_forward_hook(double)
    copied, notices = meta_copy(model)
    assert notices == []
    assert list(copied.get_submodule("0")._forward_hooks.values()) == [double]


def test_an_estimate_of_a_model_with_a_storing_hook_leaves_the_dict_alone() -> None:
    pytest.importorskip("transformers")
    model = tiny_llama()
    kept: dict[str, Any] = {}

    def store(module: nn.Module, args: Any, out: Any) -> None:
        kept["norm"] = out

    model.model.norm.register_forward_hook(store)
    snap = ModelSnapshot.take(model)
    est = ls.estimate_generate(model, target="h100", prompt=8, new_tokens=2, batch=1)
    snap.assert_unchanged(model)
    assert kept == {}
    assert not_run(est.notes) == [
        f"{NOT_RUN}: the forward hook 'store' on module 'model.norm', which reaches "
        "a dict outside the model"
    ]
