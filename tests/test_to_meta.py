"""``to_meta``: a meta copy that keeps tied weights tied and leaves the original alone."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import nn

from layerscope.collect.meta import to_meta
from layerscope.examples import tiny_gpt


def unique_params(model: nn.Module) -> int:
    """Elements of the distinct parameters (a tied weight counts once)."""
    return sum(p.numel() for p in model.parameters())  # parameters() dedups by identity


def all_params(model: nn.Module) -> int:
    """Elements of every parameter slot, a tied weight once per holder."""
    return sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False))


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.emb.weight  # tied: one (10, 4) Parameter in two modules

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.emb(ids))
        return out


def test_tied_weights_stay_tied() -> None:
    model = Tied()
    assert unique_params(model) == 40  # 10*4, once
    assert all_params(model) == 80  # the same 40 in emb and head
    meta: Any = to_meta(model)
    assert meta.head.weight is meta.emb.weight
    assert meta.emb.weight.device.type == "meta"
    assert unique_params(meta) == 40
    # what to_meta is for: .to("meta") unties (torch replaces each slot on its own)
    untied: Any = copy.deepcopy(model).to("meta")
    assert untied.head.weight is not untied.emb.weight
    assert unique_params(untied) == 80


def test_tiny_gpt_keeps_its_tied_head_and_runs_on_meta() -> None:
    model = tiny_gpt()
    before = unique_params(model)
    meta: Any = to_meta(model)
    assert meta.lm_head.weight is meta.tok_emb.weight
    assert unique_params(meta) == before
    assert {p.device.type for p in meta.parameters()} == {"meta"}
    ids = torch.zeros(2, 16, dtype=torch.long, device="meta")
    assert meta(ids).shape == (2, 16, 64)  # (batch, T, vocab 64)


def test_gpt2_lm_head_stays_tied() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, n_positions=8)
    model = transformers.GPT2LMHeadModel(config)
    meta: Any = to_meta(model)
    assert meta.lm_head.weight is meta.transformer.wte.weight
    assert unique_params(meta) == unique_params(model)


def test_original_is_untouched() -> None:
    model = tiny_gpt()
    ids_before = {name: id(p) for name, p in model.named_parameters()}
    state = {k: v.clone() for k, v in model.state_dict().items()}
    meta: Any = to_meta(model)
    assert meta is not model
    assert {name: id(p) for name, p in model.named_parameters()} == ids_before
    for key, value in model.state_dict().items():
        assert value.device.type == "cpu"
        assert torch.equal(value, state[key]), key
    assert all(p.device.type == "meta" for p in meta.parameters())
    assert not set(map(id, meta.parameters())) & set(ids_before.values())


def test_requires_grad_dtype_and_shape_kept() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2).half())
    model[0].weight.requires_grad_(False)
    meta: Any = to_meta(model)
    flags = [(n, p.requires_grad, p.dtype, tuple(p.shape)) for n, p in meta.named_parameters()]
    assert flags == [
        ("0.weight", False, torch.float32, (4, 3)),
        ("0.bias", True, torch.float32, (4,)),
        ("1.weight", True, torch.float16, (2, 4)),
        ("1.bias", True, torch.float16, (2,)),
    ]
    assert all(type(p) is nn.Parameter for p in meta.parameters())


def test_buffers_are_converted() -> None:
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))
    model[1].register_buffer("empty_slot", None)
    meta: Any = to_meta(model)
    buffers = {name: (b.device.type, b.dtype, tuple(b.shape)) for name, b in meta.named_buffers()}
    assert buffers == {
        "1.running_mean": ("meta", torch.float32, (8,)),
        "1.running_var": ("meta", torch.float32, (8,)),
        "1.num_batches_tracked": ("meta", torch.int64, ()),
    }
    assert meta[1].empty_slot is None
    assert all(b.device.type == "cpu" for b in model.buffers())


def test_train_eval_flags_and_hooks_kept() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5), nn.Linear(2, 2))
    model.train()
    model[1].eval()
    model[2].register_forward_hook(lambda m, i, o: None)
    meta: Any = to_meta(model)
    assert [m.training for m in meta.modules()] == [True, True, False, True]
    assert len(meta[2]._forward_hooks) == 1
    assert [m.training for m in model.modules()] == [True, True, False, True]


def test_a_parameter_used_by_two_modules_stays_one_object() -> None:
    shared = nn.Parameter(torch.randn(3, 3))
    a, b = nn.Linear(3, 3), nn.Linear(3, 3)
    a.weight = shared
    b.weight = shared
    block = nn.Linear(3, 3)
    model = nn.ModuleDict({"a": a, "b": b, "x": block, "y": block})  # a module held twice too
    meta: Any = to_meta(model)
    assert meta["a"].weight is meta["b"].weight
    assert meta["x"] is meta["y"]
    # distinct: shared (9), a.bias, b.bias, block.weight, block.bias: 9 + 3 + 3 + 9 + 3
    assert unique_params(meta) == unique_params(model) == 27


class Scaled(nn.Parameter):
    """A Parameter subclass with an attribute of its own."""


def test_parameter_subclass_and_its_attributes_kept() -> None:
    model = nn.Linear(2, 2)
    weight = Scaled(torch.ones(2, 2))
    weight.tag = "w"  # type: ignore[attr-defined]
    model.weight = weight
    meta: Any = to_meta(model)
    assert type(meta.weight) is Scaled
    assert meta.weight.tag == "w"  # type: ignore[attr-defined]
    assert meta.weight.device.type == "meta"


def test_plain_tensor_attributes_become_meta() -> None:
    model = nn.Linear(2, 2)
    model.table = torch.arange(6.0)  # not registered: neither parameter nor buffer
    meta: Any = to_meta(model)
    assert meta.table.device.type == "meta"
    assert tuple(meta.table.shape) == (6,)
    assert model.table.device.type == "cpu"


def test_grads_are_not_copied() -> None:
    model = nn.Linear(2, 2)
    model(torch.ones(1, 2)).sum().backward()
    meta: Any = to_meta(model)
    assert meta.weight.grad is None
    assert model.weight.grad is not None
