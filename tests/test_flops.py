"""FLOPs and MACs end to end: per-module attribution, forward and backward, any device."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

import layerscope as ls
from helpers.snapshots import ModelSnapshot
from layerscope.examples import EXAMPLES
from layerscope.metrics import flop_counter
from layerscope.metrics.flops import Cost, FlopFormulaError


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10))


def test_linear_forward_per_module() -> None:
    model, x = mlp(), torch.randn(32, 128)
    prof = ls.profile(model, x)
    fc1, fc2 = prof.node("0"), prof.node("2")
    assert fc1.self_metrics["macs"] == 32 * 128 * 256  # 1,048,576
    assert fc1.self_metrics["flops"] == 2 * 32 * 128 * 256 + 32 * 256  # + bias adds
    assert fc2.self_metrics["macs"] == 32 * 256 * 10  # 81,920
    assert fc2.self_metrics["flops"] == 2 * 32 * 256 * 10 + 32 * 10
    assert prof.node("1").self_metrics["macs"] == 0
    assert prof.root.metrics["macs"] == 32 * 128 * 256 + 32 * 256 * 10  # 1,130,496
    assert prof.root.self_metrics["macs"] == 0
    assert "backward_macs" not in prof.root.metrics  # not measured: absent, not 0
    assert prof.unsupported_ops == {} and prof.partial_metrics == []
    prof.self_check()


def test_linear_backward_attributed_to_creating_module() -> None:
    model, x = mlp(), torch.randn(32, 128)  # x does not require grad
    snap = ModelSnapshot.take(model)
    prof = ls.profile(model, x, backward=True)
    snap.assert_unchanged(model)  # grads set by the backward pass are undone
    # fc1: only grad_weight = grad_out^T (256x32) @ x (32x128); no grad_input needed.
    assert prof.node("0").self_metrics["backward_macs"] == 256 * 32 * 128
    # fc2: grad_input (32x10)@(10x256) + grad_weight (10x32)@(32x256).
    assert prof.node("2").self_metrics["backward_macs"] == 32 * 10 * 256 + 10 * 32 * 256
    assert prof.root.metrics["backward_macs"] == 256 * 32 * 128 + 2 * 32 * 10 * 256
    prof.self_check()


def test_grouped_conv_backward_is_not_multiplied_by_groups() -> None:
    conv = nn.Conv2d(8, 16, 3, padding=1, groups=4, bias=False)
    x = torch.randn(2, 8, 10, 10, requires_grad=True)
    prof = ls.profile(conv, x, backward=True)
    fwd = 2 * 16 * 10 * 10 * (8 // 4) * 3 * 3  # N*Cout*H*W*(Cin/g)*k*k = 57,600
    assert prof.root.metrics["macs"] == fwd
    assert prof.root.metrics["backward_macs"] == 2 * fwd  # grad_input + grad_weight


class Twice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Linear(16, 16)
        self.w = nn.Parameter(torch.randn(16, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.block(torch.relu(self.block(x)))
        out: torch.Tensor = h @ self.w  # functional work in the root's self
        return out


def test_module_called_twice_and_operator_in_root() -> None:
    prof = ls.profile(Twice(), torch.randn(8, 16), backward=True)
    assert prof.node("block").calls == 2
    assert prof.node("block").self_metrics["macs"] == 2 * 8 * 16 * 16  # two calls summed
    assert prof.root.self_metrics["macs"] == 8 * 16 * 4  # h @ w
    # backward of h @ w (root): grad_h (8x4)@(4x16) and grad_w (16x8)@(8x4)
    assert prof.root.self_metrics["backward_macs"] == 8 * 4 * 16 + 16 * 8 * 4
    # block, twice: grad_weight (16x8)@(8x16) each call, grad_input (8x16)@(16x16) only for
    # the second call (the first call's input x does not require grad)
    assert prof.node("block").self_metrics["backward_macs"] == 2 * 16 * 8 * 16 + 8 * 16 * 16


class Attention(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = F.scaled_dot_product_attention(q, k, v)
        return out


#: Autograd on, and inference mode, where composite ops reach the dispatch mode whole.
GRAD_MODES = [contextlib.nullcontext, torch.inference_mode]


@pytest.mark.parametrize("grad_mode", GRAD_MODES)
def test_sdpa_cpu_is_counted(grad_mode: Callable[[], Any]) -> None:
    b, h, lq, lk, d = 2, 4, 16, 16, 8
    q, k, v = (torch.randn(b, h, n, d) for n in (lq, lk, lk))
    with grad_mode():
        prof = ls.profile(Attention(), args=(q, k, v))
    assert prof.root.metrics["macs"] == b * h * lq * lk * d * 2  # QK^T and PV
    assert prof.unsupported_ops == {}


@pytest.mark.parametrize("grad_mode", GRAD_MODES)
def test_lstm_is_counted(grad_mode: Callable[[], Any]) -> None:
    lstm = nn.LSTM(8, 16, batch_first=True)
    with grad_mode():
        prof = ls.profile(lstm, torch.randn(3, 5, 8))
    # per step and sequence: 4 gates x H x (I + H) MACs; N=3 sequences, T=5 steps
    assert prof.root.metrics["macs"] == 3 * 5 * 4 * 16 * (8 + 16)
    assert prof.unsupported_ops == {}


KEYS = ("macs", "flops", "backward_macs", "backward_flops")


def counts(p: ls.Profile) -> list[tuple[str, list[float]]]:
    return [(n.path, [n.self_metrics[k] for k in KEYS]) for n in p.nodes()]


def on_meta(name: str) -> ls.Profile:
    ex = EXAMPLES[name]
    return ls.profile(ex.build().to("meta"), ex.example_input().to("meta"), backward=True)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_fake_tensors_give_the_real_counts(name: str) -> None:
    ex = EXAMPLES[name]
    x = ex.example_input()
    real = ls.profile(ex.build(), x, backward=True)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake = ls.profile(ex.build(), mode.from_tensor(x), backward=True)
    assert counts(fake) == counts(real)
    assert real.unsupported_ops == {} and fake.unsupported_ops == {}
    assert real.root.metrics["flops"] > 0 and real.root.metrics["backward_flops"] > 0


@pytest.mark.parametrize("name", ["tiny_resnet", "shared_mlp"])
def test_meta_gives_the_real_counts(name: str) -> None:
    ex = EXAMPLES[name]
    real = ls.profile(ex.build(), ex.example_input(), backward=True)
    assert counts(on_meta(name)) == counts(real)


def test_meta_follows_the_cpu_attention_kernel() -> None:
    """CPU runs fused flash attention (causal: lower triangle only). On meta, torch alone
    would run the math path (the whole score matrix, b*h*t*t*d*2 MACs); layerscope's
    default target="cpu" steers it to the CPU's flash kernel, so the counts agree."""
    ex = EXAMPLES["tiny_gpt"]
    real = ls.profile(ex.build(), ex.example_input(), backward=True)
    meta = on_meta("tiny_gpt")
    b, h, t, d = 2, 2, 16, 16  # batch, heads, tokens, head dim
    triangle = b * h * (t * (t + 1) // 2) * d * 2
    assert real.node("blocks.0.attn").self_metrics["macs"] == triangle
    assert meta.node("blocks.0.attn").self_metrics["macs"] == triangle
    for path in ("blocks.0.mlp", "blocks.1.attn.qkv", "lm_head"):  # elsewhere: identical
        assert [real.node(path).metrics[k] for k in KEYS] == [
            meta.node(path).metrics[k] for k in KEYS
        ]


def test_meta_follows_the_onednn_lstm() -> None:
    """CPU runs the fused oneDNN LSTM kernel, whose backward also computes the gradient of
    the initial state h0; torch alone on meta runs the op-by-op cells, which skip it (h0
    needs none). The default target="cpu" steers meta to oneDNN's kernel."""
    ex = EXAMPLES["lstm_tagger"]
    real = ls.profile(ex.build(), ex.example_input(), backward=True).node("lstm").metrics
    meta = on_meta("lstm_tagger")
    assert meta.model["kernels"] == {"lstm": {"onednn": 1}}
    steered = meta.node("lstm").metrics
    with mock.patch("layerscope.session.instrument.steering_active", return_value=True):
        cells = on_meta("lstm_tagger").node("lstm").metrics
    for m in (steered, cells):
        assert real["macs"] == m["macs"] and real["flops"] == m["flops"]
    assert real["backward_macs"] == steered["backward_macs"]
    n, directions, hidden = 2, 2, 16
    assert real["backward_macs"] - cells["backward_macs"] == n * directions * 4 * hidden * hidden


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_inference_mode_counts_what_runs_with_autograd_on(name: str) -> None:
    """Under inference_mode, linear, conv2d, batch_norm, layer_norm, SDPA, lstm, ... reach
    the session's dispatch mode undecomposed; it decomposes them, so every module gets the
    counts of the ops that run with autograd on."""
    ex = EXAMPLES[name]
    model, x = ex.build(), ex.example_input()
    with torch.no_grad():
        expected = ls.profile(model, x)
    with torch.inference_mode():
        got = ls.profile(model, x)
    assert got.unsupported_ops == {} and expected.unsupported_ops == {}
    assert [(n.path, n.self_metrics["macs"], n.self_metrics["flops"]) for n in got.nodes()] == [
        (n.path, n.self_metrics["macs"], n.self_metrics["flops"]) for n in expected.nodes()
    ]
    assert got.root.metrics["macs"] > 0


class Checkpointed(nn.Module):
    """Two Linear+ReLU blocks; the first one's forward is recomputed in the backward pass
    (ReLU saves its output, so the recomputation runs the Linear again)."""

    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        self.b1 = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
        self.b2 = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
        self.reentrant = reentrant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.utils.checkpoint.checkpoint(self.b1, x, use_reentrant=self.reentrant)
        out: torch.Tensor = self.b2(h)
        return out


@pytest.mark.parametrize("reentrant", [False, True])
def test_activation_checkpointing_recompute_is_backward_work_of_its_module(
    reentrant: bool,
) -> None:
    x = torch.randn(4, 8, requires_grad=True)
    prof = ls.profile(Checkpointed(reentrant), x, backward=True)
    linear = 4 * 8 * 8  # one Linear(8, 8) on a batch of 4: 256 MACs
    first, second = prof.node("b1.0"), prof.node("b2.0")
    assert first.calls == 2 and second.calls == 1  # the forward, and its recomputation
    assert first.metrics["macs"] == second.metrics["macs"] == linear
    assert second.metrics["backward_macs"] == 2 * linear  # input and weight gradients
    assert first.metrics["backward_macs"] == 2 * linear + linear  # + the recomputation
    assert (
        prof.root.self_metrics["backward_macs"]
        == prof.node("b1").self_metrics["backward_macs"]
        == 0
    )
    assert prof.root.metrics["backward_macs"] == 5 * linear  # 1,280


@torch.library.custom_op("layerscope_test::scale", mutates_args=())
def scale(x: torch.Tensor) -> torch.Tensor:
    return x * 3


@scale.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class UsesCustomOp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = scale(self.fc(x))
        return out


def test_unsupported_op_is_listed_and_totals_marked_partial() -> None:
    prof = ls.profile(UsesCustomOp(), torch.randn(2, 4))
    key = "layerscope_test.scale.default"
    assert prof.unsupported_ops == {
        key: {"count": 1, "forward": 1, "backward": 0, "modules": {"<root>": 1}}
    }
    assert prof.partial_metrics == ["macs", "flops"]
    assert "Partial macs, flops" in str(prof) and "FLOPs*" in str(prof)
    assert prof.to_dict()["partial_metrics"] == ["macs", "flops"]
    again = ls.Profile.from_dict(prof.to_dict())
    assert again.partial_metrics == ["macs", "flops"] and again == prof


def test_per_call_override_and_registration() -> None:
    op = torch.ops.layerscope_test.scale.default

    def scale_cost(x: torch.Tensor, *, out: torch.Tensor) -> Cost:
        return Cost(flops=out.numel())  # one multiply per element

    prof = ls.profile(UsesCustomOp(), torch.randn(2, 4), flop_formulas={op: scale_cost})
    assert prof.unsupported_ops == {}
    assert prof.root.self_metrics["flops"] == 2 * 4  # the scale op, in the root's forward
    registry: dict[Any, Any] = {}
    ls.register_flop_formula(op, registry=registry)(scale_cost)
    assert registry[op] is scale_cost


def test_profiler_block_with_user_backward_matches_profile() -> None:
    model, x = mlp(), torch.randn(32, 128)
    with ls.Profiler(model) as p:
        loss = F.cross_entropy(model(x), torch.zeros(32, dtype=torch.long))
        loss.backward()  # type: ignore[no-untyped-call]
    fc1 = p.profile.node("0")
    assert fc1.self_metrics["macs"] == 32 * 128 * 256
    assert fc1.self_metrics["backward_macs"] == 256 * 32 * 128
    assert model.get_submodule("0").weight.grad is not None  # the user's backward keeps them


def test_no_grad_forward_has_no_backward_keys() -> None:
    model, x = mlp(), torch.randn(4, 128)
    with torch.no_grad():
        prof = ls.profile(model, x)
    assert prof.root.metrics["macs"] == 4 * 128 * 256 + 4 * 256 * 10
    with (
        pytest.raises(ls.InvalidInputError, match="no output tensor requires grad"),
        torch.no_grad(),
    ):
        ls.profile(model, x, backward=True)


def test_user_formula_that_raises_stops_the_run() -> None:
    op = torch.ops.layerscope_test.scale.default

    def broken(x: torch.Tensor, *, out: torch.Tensor) -> Cost:
        raise ZeroDivisionError("bad formula")

    with pytest.raises(FlopFormulaError, match=r"broken for layerscope_test\.scale\.default"):
        ls.profile(UsesCustomOp(), torch.randn(2, 4), flop_formulas={op: broken})


def test_builtin_formula_that_raises_is_reported_not_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    op = torch.ops.layerscope_test.scale.default

    def broken(x: torch.Tensor, *, out: torch.Tensor) -> Cost:
        raise ZeroDivisionError("bad formula")

    # A failing formula of layerscope's own must not stop the user's run.
    monkeypatch.setattr(flop_counter, "is_builtin_formula", lambda formula: formula is broken)
    prof = ls.profile(UsesCustomOp(), torch.randn(2, 4), flop_formulas={op: broken})
    entry = prof.unsupported_ops["layerscope_test.scale.default"]
    assert entry["count"] == 1 and "bad formula" in entry["error"]
    assert prof.partial_metrics == ["macs", "flops"]
    assert prof.node("fc").self_metrics["macs"] == 2 * 4 * 4  # the rest is still counted


def test_multihead_attention_fast_path_matches_hand_count() -> None:
    n, length, embed, heads = 3, 5, 16, 2
    mha = nn.MultiheadAttention(embed, heads, batch_first=True).eval()
    x = torch.randn(n, length, embed)
    in_proj = 3 * n * length * embed * embed  # q, k, v projections: 11,520
    scores = n * heads * length * length * (embed // heads)  # Q K^T: 1,200
    mix = n * heads * length * length * (embed // heads)  # P V: 1,200
    out_proj = n * length * embed * embed  # 3,840
    expected = in_proj + scores + mix + out_proj  # 17,760
    with torch.no_grad():  # the inference fast path (aten._native_multi_head_attention)
        fast = ls.profile(mha, args=(x, x, x), kwargs={"need_weights": False})
    slow = ls.profile(mha.train(), args=(x, x, x), kwargs={"need_weights": False})
    assert fast.root.metrics["macs"] == expected
    assert slow.root.metrics["macs"] == expected
    assert fast.unsupported_ops == {} and slow.unsupported_ops == {}


def test_gru_and_packed_lstm() -> None:
    gru = nn.GRU(8, 16, num_layers=2)
    prof = ls.profile(gru, torch.randn(7, 3, 8))  # T=7, N=3
    layer0 = 3 * 16 * (8 + 16)  # 3 gates x H x (I + H) per step and sequence
    layer1 = 3 * 16 * (16 + 16)
    assert prof.root.metrics["macs"] == 7 * 3 * (layer0 + layer1)
    lstm = nn.LSTM(8, 16, batch_first=True)
    lengths = torch.tensor([5, 3, 2])
    packed = nn.utils.rnn.pack_padded_sequence(torch.randn(3, 5, 8), lengths, batch_first=True)
    prof = ls.profile(lstm, packed)
    assert prof.root.metrics["macs"] == (5 + 3 + 2) * 4 * 16 * (8 + 16)  # valid steps only


def test_model_built_on_meta_with_input_shape() -> None:
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024))
    prof = ls.profile(model, input_shape=(8, 1024), backward=True)
    fwd = 8 * 1024 * 4096 * 2  # two matmuls of the same size
    assert prof.root.metrics["macs"] == fwd
    # backward: grad_weight for both layers, grad_input only for the second layer
    assert prof.root.metrics["backward_macs"] == 3 * 8 * 1024 * 4096


def test_compiled_model_is_profiled_through_its_original_module() -> None:
    model = mlp()
    compiled = torch.compile(model)
    prof = ls.profile(compiled, torch.randn(2, 128))  # type: ignore[arg-type]
    assert prof.root.metrics["macs"] == 2 * 128 * 256 + 2 * 256 * 10
    assert any("torch.compile" in n for n in prof.notices)


def test_compiled_function_inside_the_model_runs_and_is_counted() -> None:
    from torch._dynamo.utils import counters

    @torch.compile(backend="eager")
    def project(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x @ w

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(16, 8))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return project(x, self.w)

    torch._dynamo.reset()
    counters.clear()
    prof = ls.profile(Net(), torch.randn(4, 16))
    # Under the session's dispatch mode Dynamo runs the function eagerly; it must not
    # trace the mode's __torch_dispatch__ or the observers it calls: no frame compiled.
    assert prof.root.metrics["macs"] == 4 * 16 * 8
    assert dict(counters["frames"]) == {}


def test_sdpa_backward_counts_five_matmuls() -> None:
    b, h, length, d = 2, 4, 16, 8
    q, k, v = (torch.randn(b, h, length, d, requires_grad=True) for _ in range(3))
    prof = ls.profile(Attention(), args=(q, k, v), backward=True)
    scores = b * h * length * length  # entries of the score matrix: 2,048
    # the fused kernel recomputes S = QK^T (d), then dV = P^T dO (d), dP = dO V^T (d),
    # dQ = dS K (d), dK = dS^T Q (d): five matmuls over every score entry
    assert prof.root.metrics["backward_macs"] == scores * 5 * d  # 81,920


def test_lstm_backward_on_cpu() -> None:
    n, t, i, hidden = 3, 5, 8, 16
    lstm = nn.LSTM(i, hidden, batch_first=True)
    x = torch.randn(n, t, i, requires_grad=True)
    prof = ls.profile(lstm, x, backward=True)
    forward = n * t * 4 * hidden * (i + hidden)  # 23,040
    assert prof.root.metrics["macs"] == forward
    # every step: input and recurrent-state gradients (dG W) plus weight gradients (dG^T x)
    assert prof.root.metrics["backward_macs"] == 2 * forward


def _jagged(values: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """A jagged nested tensor of ``len(lengths)`` sequences cut from ``values``."""
    offsets = torch.tensor([0, *itertools.accumulate(lengths)])
    return torch.nested.nested_tensor_from_jagged(values, offsets)


class JaggedContiguity(nn.Module):
    def __init__(self, answer: Callable[[bool], None]) -> None:
        super().__init__()
        self.answer = answer

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        self.answer(_jagged(v, [3, 5]).is_contiguous())
        return v * 2


def test_a_jagged_tensor_answers_is_contiguous_inside_a_session() -> None:
    """``sym_is_contiguous`` has only a composite kernel, which asks the tensor, whose
    Python subclass sends the op back to the mode: the mode used to decompose it again,
    forever (RecursionError). Now the subclass answers, as without layerscope."""
    answers: list[bool] = []
    prof = ls.profile(JaggedContiguity(answers.append), torch.randn(8, 4))
    assert answers == [True]
    assert prof.root.metrics["flops"] == 8 * 4  # v * 2
    assert prof.unsupported_ops == {}


class JaggedAttention(nn.Module):
    """SDPA over two sequences of lengths 3 and 5, 2 heads of dim 4 (jagged q, k, v)."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        nq, nk, nv = (_jagged(t, [3, 5]).transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(nq, nk, nv)
        values: torch.Tensor = out.transpose(1, 2).values()
        return values


def test_jagged_sdpa_counts_each_sequences_own_tokens() -> None:
    """On the CPU, jagged SDPA runs the math path on nested tensors: the counts are over
    each sequence's own L_i x L_i scores, not a padded max length."""
    h, d, lengths = 2, 4, [3, 5]
    q, k, v = (torch.randn(8, h, d, requires_grad=True) for _ in range(3))
    prof = ls.profile(JaggedAttention(), args=(q, k, v), backward=True)
    scores = h * sum(n * n for n in lengths)  # per head L_i * L_i: 2 * (9 + 25) = 68
    tokens = sum(lengths)  # 8
    # Q K^T and P V: d MACs per score entry each: 68 * 4 = 272 twice
    assert prof.root.metrics["macs"] == 2 * scores * d == 544
    assert (
        prof.root.metrics["flops"]
        == (
            2 * 544  # the two matmuls
            + 2 * tokens * h * d  # q and k each scaled by sqrt(1/sqrt(d)): 128
            + 5 * scores  # softmax: 340
            + 3 * 2  # each of q, k, v's lengths: offsets[1:] - offsets[:-1] (2 subtractions)
        )
        == 1562
    )
    # backward: dQ, dK from dS (2 matmuls) and dP, dV from dO (2 matmuls): P was saved
    assert prof.root.metrics["backward_macs"] == 4 * scores * d == 1088
    assert (
        prof.root.metrics["backward_flops"]
        == (
            2 * 1088
            + 4 * scores  # softmax backward: 272
            + 2 * tokens * h * d  # the gradients of the two scalings: 128
        )
        == 2576
    )
    assert prof.unsupported_ops == {}
