"""Inputs of every form and the shapes recorded per module."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch import nn

import layerscope as ls
from helpers.snapshots import ModelSnapshot
from layerscope import TensorSpec, ValueSpec


def f32(path: str, *shape: int) -> TensorSpec:
    return TensorSpec(path, tuple(shape), "float32", "cpu")


class KwModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(
        self, x: torch.Tensor, extra: dict[str, torch.Tensor], *, mask: torch.Tensor | None = None
    ) -> dict[str, object]:
        h = self.proj(x) + extra["bias"]
        if mask is not None:
            h = h * mask
        return {"h": h, "pair": (h.sum(), None), "n": 3}


def test_args_kwargs_nested_dict() -> None:
    model = KwModel()
    x, b, m = torch.randn(2, 4), torch.randn(4), torch.ones(2, 4)
    snap = ModelSnapshot.take(model)
    prof = ls.profile(model, args=(x, {"bias": b}), kwargs={"mask": m})
    snap.assert_unchanged(model)
    assert prof.root.inputs == [(f32("0", 2, 4), f32("1.bias", 4), f32("mask", 2, 4))]
    assert prof.root.outputs == [
        (
            f32("h", 2, 4),
            f32("pair.0"),  # a 0-d tensor: shape ()
            ValueSpec("pair.1", "NoneType", "None"),
            ValueSpec("n", "int", "3"),
        )
    ]
    assert prof.node("proj").inputs == [(f32("0", 2, 4),)]


@dataclass
class Batch:
    pixels: torch.Tensor
    labels: torch.Tensor


class DCModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, batch: Batch) -> Batch:
        return Batch(self.fc(batch.pixels), batch.labels)


def test_dataclass_in_and_out() -> None:
    prof = ls.profile(DCModel(), Batch(torch.randn(5, 3), torch.zeros(5, dtype=torch.long)))
    assert prof.root.inputs == [
        (f32("0.pixels", 5, 3), TensorSpec("0.labels", (5,), "int64", "cpu"))
    ]
    assert prof.root.outputs == [(f32("pixels", 5, 2), TensorSpec("labels", (5,), "int64", "cpu"))]


class VarLen(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, xs: list[torch.Tensor]) -> list[torch.Tensor]:
        return [self.fc(x) for x in xs]


def test_distinct_signatures_kept_per_call() -> None:
    prof = ls.profile(VarLen(), [torch.randn(1, 4), torch.randn(3, 4), torch.randn(1, 4)])
    fc = prof.node("fc")
    assert fc.calls == 3
    assert fc.inputs == [(f32("0", 1, 4),), (f32("0", 3, 4),)]  # (1,4) seen twice, kept once
    assert fc.outputs == [(f32("", 1, 4),), (f32("", 3, 4),)]


def test_packed_sequence_and_lstm_tuple_output() -> None:
    lstm = nn.LSTM(3, 5, batch_first=True)
    packed = nn.utils.rnn.pack_padded_sequence(
        torch.randn(2, 4, 3), torch.tensor([4, 2]), batch_first=True
    )
    prof = ls.profile(lstm, packed)
    out = prof.root.outputs[0]
    # output is (PackedSequence(data, batch_sizes, sorted_indices, unsorted_indices), (h, c))
    assert out[0] == f32("0.data", 6, 5)  # 4 + 2 valid steps
    assert out[-2:] == (f32("1.0", 1, 2, 5), f32("1.1", 1, 2, 5))


def test_hugging_face_model_output() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        vocab_size=100, n_positions=32, n_embd=16, n_layer=2, n_head=2, n_inner=32
    )
    model = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, 100, (2, 8))
    snap = ModelSnapshot.take(model)
    prof = ls.profile(model, kwargs={"input_ids": ids, "use_cache": False})
    snap.assert_unchanged(model)
    logits = prof.root.outputs[0][0]
    assert logits == f32("logits", 2, 8, 100)
    # GPT-2 ties lm_head to wte: each tensor counted once.
    assert prof.root.metrics["params"] == sum(p.numel() for p in model.parameters())
    assert prof.node("transformer.h.1").calls == 1
    prof.self_check()


def test_input_shape_uses_model_device_and_dtype() -> None:
    model = nn.Sequential(nn.Linear(8, 2)).to(torch.float64)
    prof = ls.profile(model, input_shape=(3, 8))
    assert prof.root.inputs == [(TensorSpec("0", (3, 8), "float64", "cpu"),)]


def test_input_shape_token_ids_for_embedding_models() -> None:
    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 2))
    prof = ls.profile(model, input_shape=(2, 7))
    assert prof.root.inputs == [(TensorSpec("0", (2, 7), "int64", "cpu"),)]
    assert prof.node("1").outputs == [(f32("", 2, 7, 2),)]


def test_input_shape_several_inputs() -> None:
    class Two(nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return a @ b

    prof = ls.profile(Two(), input_shape=[(2, 3), (3, 4)])
    assert prof.root.outputs == [(f32("", 2, 4),)]


def test_input_shape_does_not_move_rng() -> None:
    model = nn.Sequential(nn.Dropout(0.5), nn.Linear(4, 4)).train()
    before = torch.get_rng_state()
    ls.profile(model, input_shape=(2, 4))  # draws the input and dropout masks
    assert torch.equal(torch.get_rng_state(), before)


def test_no_input_structure_only() -> None:
    prof = ls.profile(nn.Sequential(nn.Linear(2, 3), nn.ReLU()))
    assert prof.model["ran"] is False
    assert [n.calls for n in prof.nodes()] == [0, 0, 0]
    assert prof.root.inputs == []
    assert prof.root.metrics["params"] == 2 * 3 + 3


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m: ls.profile(m, torch.ones(1, 2), input_shape=(1, 2)), "only one of"),
        (lambda m: ls.profile(m, input_shape="abc"), "input_shape"),
        (lambda m: ls.profile(m, input_shape=(1, -2)), "non-negative"),
        (lambda m: ls.profile(m, args=torch.ones(1, 2)), "args must be a tuple"),  # type: ignore[arg-type]
        (lambda m: ls.profile(m, input_dtype=torch.long), "input_dtype only applies"),
        (lambda m: ls.profile(object()), "expected a torch.nn.Module"),  # type: ignore[arg-type]
    ],
)
def test_bad_arguments_are_clear(call: object, message: str) -> None:
    model = nn.Linear(2, 2)
    with pytest.raises(ls.InvalidInputError, match=message):
        call(model)  # type: ignore[operator]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_torchscript_is_refused_clearly() -> None:
    scripted = torch.jit.script(nn.Linear(2, 2))
    with pytest.raises(ls.InvalidInputError, match="TorchScript"):
        ls.profile(scripted, torch.ones(1, 2))
