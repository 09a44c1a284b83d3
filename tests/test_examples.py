"""The built-in examples: registry, determinism, and exact parameter counts.

Every expected count is derived by hand beside the assertion, then checked against
layerscope's profile and against the count of unique tensors torch reports.
"""

from __future__ import annotations

import random

import pytest
import torch
from torch import nn

import layerscope as ls
from helpers.records import tensor_shape
from layerscope import examples
from layerscope.examples import EXAMPLES, Example

# ---- hand-derived counts --------------------------------------------------------------

# tiny_resnet -------------------------------------------------------------------------
STEM_CONV = 3 * 16 * 3 * 3  # = 432, conv 3->16 3x3, no bias
BN16 = 2 * 16  # = 32, BatchNorm2d(16) weight + bias
BN32 = 2 * 32  # = 64
BLOCK_16_16 = 16 * 16 * 9 + BN16 + 16 * 16 * 9 + BN16  # = 2304 + 32 + 2304 + 32 = 4672
DOWNSAMPLE = 16 * 32 * 1 * 1 + BN32  # = 512 + 64 = 576, 1x1 conv 16->32 + BN
BLOCK_16_32 = 16 * 32 * 9 + BN32 + 32 * 32 * 9 + BN32 + DOWNSAMPLE  # = 4608+64+9216+64+576 = 14528
BLOCK_32_32 = 32 * 32 * 9 + BN32 + 32 * 32 * 9 + BN32  # = 9216+64+9216+64 = 18560
FC = 32 * 10 + 10  # = 330
RESNET_PARAMS = STEM_CONV + BN16 + 2 * BLOCK_16_16 + BLOCK_16_32 + BLOCK_32_32 + FC
assert RESNET_PARAMS == 432 + 32 + 9344 + 14528 + 18560 + 330 == 43226
# BatchNorm buffers: running_mean + running_var (C each) + num_batches_tracked (1).
# 16-channel BNs: stem bn1, layer1.{0,1}.{bn1,bn2} = 5; 32-channel: layer2.0.{bn1,bn2,
# downsample.1}, layer2.1.{bn1,bn2} = 5.
RESNET_BUFFERS = 5 * (16 + 16 + 1) + 5 * (32 + 32 + 1)  # = 165 + 325 = 490
assert RESNET_BUFFERS == 490

# tiny_gpt (vocab 64, context 16, d_model 32, 2 heads, 2 blocks) -------------------------
TOK_EMB = 64 * 32  # = 2048, shared with lm_head.weight
POS_EMB = 16 * 32  # = 512
LN = 2 * 32  # = 64, weight + bias
QKV = 32 * 96 + 96  # = 3168, Linear(32, 3*32)
ATTN_PROJ = 32 * 32 + 32  # = 1056
MLP_FC = 32 * 128 + 128  # = 4224, Linear(32, 4*32)
MLP_PROJ = 128 * 32 + 32  # = 4128
GPT_BLOCK = LN + QKV + ATTN_PROJ + LN + MLP_FC + MLP_PROJ  # = 12704
GPT_PARAMS = TOK_EMB + POS_EMB + 2 * GPT_BLOCK + LN  # lm_head adds nothing: tied, no bias
assert GPT_PARAMS == 2048 + 512 + 25408 + 64 == 28032
GPT_DOUBLE_COUNTED = GPT_PARAMS + TOK_EMB  # = 30080, what a naive counter reports

# lstm_tagger (vocab 50, embed 16, hidden 16, bidirectional, 5 tags) -------------------
EMBED = 50 * 16  # = 800
# per direction: weight_ih (4H x E) + weight_hh (4H x H) + bias_ih (4H) + bias_hh (4H)
LSTM_DIRECTION = 4 * 16 * 16 + 4 * 16 * 16 + 4 * 16 + 4 * 16  # = 1024+1024+64+64 = 2176
TAG_HEAD = (2 * 16) * 5 + 5  # = 165, Linear(2H, 5)
LSTM_PARAMS = EMBED + 2 * LSTM_DIRECTION + TAG_HEAD
assert LSTM_PARAMS == 800 + 4352 + 165 == 5317

# shared_mlp (8 -> 16 -> 16 -> 4) ------------------------------------------------------
ROOT_W = 8 * 16  # = 128, nn.Parameter on the root
SHARED_BLOCK = 16 * 16 + 16  # = 272, Linear(16, 16), counted once though called twice
HEAD = 16 * 4 + 4  # = 68
SHARED_PARAMS = ROOT_W + SHARED_BLOCK + HEAD
assert SHARED_PARAMS == 468

EXPECTED_PARAMS = {
    "tiny_resnet": RESNET_PARAMS,
    "tiny_gpt": GPT_PARAMS,
    "lstm_tagger": LSTM_PARAMS,
    "shared_mlp": SHARED_PARAMS,
}
EXPECTED_BUFFERS = {"tiny_resnet": RESNET_BUFFERS, "tiny_gpt": 0, "lstm_tagger": 0, "shared_mlp": 0}
EXPECTED_OUTPUT = {
    "tiny_resnet": (2, 10),
    "tiny_gpt": (2, 16, 64),
    "lstm_tagger": (2, 12, 5),
    "shared_mlp": (2, 4),
}

NAMES = sorted(EXAMPLES)


def unique_numel(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # parameters() deduplicates


# ---- registry ---------------------------------------------------------------------------


def test_registry_has_the_four_examples() -> None:
    assert set(EXAMPLES) == {"tiny_resnet", "tiny_gpt", "lstm_tagger", "shared_mlp"}
    for name, ex in EXAMPLES.items():
        assert isinstance(ex, Example)
        assert ex.name == name
        assert ex.description
        assert examples.get(name) is ex
    assert examples.names() == list(EXAMPLES)


def test_get_unknown_name_lists_known_ones() -> None:
    with pytest.raises(ls.InvalidInputError) as info:
        examples.get("resnet50")
    msg = str(info.value)
    assert "'resnet50'" in msg
    for name in EXAMPLES:
        assert name in msg


def test_example_is_frozen() -> None:
    ex = examples.get("tiny_resnet")
    with pytest.raises(AttributeError):
        ex.name = "other"  # type: ignore[misc]


@pytest.mark.parametrize("name", NAMES)
def test_build_is_deterministic_and_fresh(name: str) -> None:
    ex = examples.get(name)
    a, b = ex.build(), ex.build()
    assert a is not b
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for key in sa:
        assert torch.equal(sa[key], sb[key]), key
    assert not any(pa is pb for pa, pb in zip(a.parameters(), b.parameters(), strict=True))


@pytest.mark.parametrize("name", NAMES)
def test_building_and_inputs_leave_global_rng_alone(name: str) -> None:
    torch.manual_seed(123)
    random.seed(7)
    cpu, py = torch.get_rng_state(), random.getstate()
    ex = examples.get(name)
    ex.build()
    ex.example_input()
    ex.example_input(batch=3)
    assert torch.equal(torch.get_rng_state(), cpu)
    assert random.getstate() == py


@pytest.mark.parametrize("name", NAMES)
def test_example_input(name: str) -> None:
    ex = examples.get(name)
    x = ex.example_input()
    assert tuple(x.shape) == ex.input_shape
    assert torch.equal(x, ex.example_input())
    x5 = ex.example_input(batch=5)
    assert tuple(x5.shape) == (5, *ex.input_shape[1:])
    if ex.vocab_size is not None:
        assert x.dtype == torch.long
        assert int(x.min()) >= 0 and int(x.max()) < ex.vocab_size
    else:
        assert x.dtype == torch.float32
    with pytest.raises(ls.InvalidInputError):
        ex.example_input(batch=0)


@pytest.mark.parametrize("name", NAMES)
def test_forward_output_shape(name: str) -> None:
    ex = examples.get(name)
    with torch.no_grad():
        out = ex.build().eval()(ex.example_input())
    assert tuple(out.shape) == EXPECTED_OUTPUT[name]
    assert torch.isfinite(out).all()


# ---- parameter counts -------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_total_params_match_hand_count(name: str) -> None:
    ex = examples.get(name)
    model = ex.build()
    prof = ls.profile(model, ex.example_input())
    expected = EXPECTED_PARAMS[name]
    assert prof.root.metrics["params"] == expected
    assert unique_numel(model) == expected
    # Everything is trainable on a fresh model.
    assert prof.root.metrics["trainable_params"] == expected
    assert prof.root.metrics["buffers"] == EXPECTED_BUFFERS[name]
    # float32 everywhere: 4 bytes per element.
    assert prof.root.metrics["param_bytes"] == 4 * expected
    prof.self_check()


@pytest.mark.parametrize("name", NAMES)
def test_counts_without_running_equal_counts_after_running(name: str) -> None:
    ex = examples.get(name)
    model = ex.build()
    static = ls.profile(model)
    ran = ls.profile(model, ex.example_input())
    for key in ("params", "trainable_params", "buffers", "param_bytes", "buffer_bytes"):
        assert static.root.metrics[key] == ran.root.metrics[key], key


def test_tiny_resnet_per_node_counts() -> None:
    ex = examples.get("tiny_resnet")
    prof = ls.profile(ex.build(), ex.example_input())
    assert prof.node("conv1").metrics["params"] == STEM_CONV  # 432
    assert prof.node("bn1").metrics["params"] == BN16  # 32
    assert prof.node("bn1").metrics["buffers"] == 16 + 16 + 1  # 33
    assert prof.node("layer1").metrics["params"] == 2 * BLOCK_16_16  # 9344
    assert prof.node("layer1.0").metrics["params"] == BLOCK_16_16  # 4672
    assert prof.node("layer2.0").metrics["params"] == BLOCK_16_32  # 14528
    assert prof.node("layer2.0.downsample").metrics["params"] == DOWNSAMPLE  # 576
    assert prof.node("layer2.0.downsample.0").metrics["params"] == 512
    assert prof.node("layer2.0.downsample.1").metrics["buffers"] == 32 + 32 + 1  # 65
    assert prof.node("layer2.1").metrics["params"] == BLOCK_32_32  # 18560
    assert prof.node("fc").metrics["params"] == FC  # 330
    assert prof.node("avgpool").metrics["params"] == 0
    # Nothing is held directly by the root or the containers.
    assert prof.root.self_metrics["params"] == 0
    assert prof.node("layer2").self_metrics["params"] == 0
    # num_batches_tracked is int64 (8 bytes), running stats float32 (4 bytes).
    bn_buffer_bytes = 5 * (4 * 32 + 8) + 5 * (4 * 64 + 8)  # = 680 + 1320 = 2000
    assert prof.root.metrics["buffer_bytes"] == bn_buffer_bytes
    assert prof.root.by_dtype["int64"]["buffers"] == 10  # one counter per BN
    assert prof.root.by_dtype["float32"]["buffers"] == RESNET_BUFFERS - 10  # 480


def test_tiny_resnet_shapes() -> None:
    ex = examples.get("tiny_resnet")
    prof = ls.profile(ex.build(), ex.example_input())
    assert tensor_shape(prof.node("fc").outputs[0][0]) == (2, 10)
    assert tensor_shape(prof.node("conv1").inputs[0][0]) == (2, 3, 32, 32)
    assert tensor_shape(prof.node("layer1").outputs[0][0]) == (2, 16, 32, 32)
    assert tensor_shape(prof.node("layer2").outputs[0][0]) == (2, 32, 16, 16)  # stride 2
    assert tensor_shape(prof.node("layer2.0.downsample").outputs[0][0]) == (2, 32, 16, 16)
    assert tensor_shape(prof.node("avgpool").outputs[0][0]) == (2, 32, 1, 1)
    assert tensor_shape(prof.node("flatten").outputs[0][0]) == (2, 32)
    # Every module runs exactly once (``relu`` instances are reused inside a module).
    assert prof.node("layer1.0").calls == 1
    assert prof.node("layer1.0.relu").calls == 2
    assert prof.node("relu").calls == 1


def test_tiny_resnet_trainable_after_freezing_the_stem() -> None:
    model = examples.tiny_resnet()
    for p in (*model.conv1.parameters(), *model.bn1.parameters()):
        p.requires_grad_(False)
    prof = ls.profile(model, examples.get("tiny_resnet").example_input())
    assert prof.root.metrics["params"] == RESNET_PARAMS
    assert prof.root.metrics["trainable_params"] == RESNET_PARAMS - STEM_CONV - BN16  # 42762
    assert prof.node("conv1").metrics["trainable_params"] == 0
    assert prof.node("layer1").metrics["trainable_params"] == 2 * BLOCK_16_16
    # Profiling did not unfreeze anything.
    assert not model.conv1.weight.requires_grad


def test_tiny_gpt_tied_weight_counted_once_at_root() -> None:
    ex = examples.get("tiny_gpt")
    model = ex.build()
    assert isinstance(model, examples.TinyGPT)
    assert model.lm_head.weight is model.tok_emb.weight
    prof = ls.profile(model, ex.example_input())
    total = prof.root.metrics["params"]
    assert total == unique_numel(model) == GPT_PARAMS  # 28032
    naive = sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False))
    assert naive == GPT_DOUBLE_COUNTED == 30080  # the tied 64*32 = 2048 twice
    assert total != naive
    # The tied tensor counts at the lowest common ancestor of its holders: the root.
    assert prof.root.self_metrics["params"] == TOK_EMB  # 2048, nothing else on the root
    assert prof.node("tok_emb").metrics["params"] == 0
    assert prof.node("lm_head").metrics["params"] == 0
    assert prof.node("pos_emb").metrics["params"] == POS_EMB  # 512
    assert prof.node("blocks").metrics["params"] == 2 * GPT_BLOCK  # 25408
    assert prof.node("blocks.0.attn.qkv").metrics["params"] == QKV  # 3168
    assert prof.node("blocks.1.mlp").metrics["params"] == MLP_FC + MLP_PROJ  # 8352
    assert prof.node("ln_f").metrics["params"] == LN
    assert any(s.startswith("tok_emb.weight") for s in prof.node("tok_emb").shared)
    assert any(s.startswith("lm_head.weight") for s in prof.node("lm_head").shared)
    assert prof.node("pos_emb").shared == []
    # by_dtype agrees with the metric.
    assert prof.root.by_dtype["float32"]["params"] == GPT_PARAMS
    prof.self_check()


def test_tiny_gpt_trainable_after_freezing_tied_weight() -> None:
    model = examples.tiny_gpt()
    model.tok_emb.weight.requires_grad_(False)  # freezes lm_head.weight too: same tensor
    prof = ls.profile(model, examples.get("tiny_gpt").example_input())
    assert prof.root.metrics["trainable_params"] == GPT_PARAMS - TOK_EMB  # 25984
    assert prof.root.metrics["params"] == GPT_PARAMS


def test_tiny_gpt_shapes() -> None:
    ex = examples.get("tiny_gpt")
    prof = ls.profile(ex.build(), ex.example_input())
    assert tensor_shape(prof.node("tok_emb").outputs[0][0]) == (2, 16, 32)
    assert tensor_shape(prof.node("pos_emb").outputs[0][0]) == (16, 32)
    assert tensor_shape(prof.node("blocks.0.attn.qkv").outputs[0][0]) == (2, 16, 96)
    assert tensor_shape(prof.node("lm_head").outputs[0][0]) == (2, 16, 64)
    assert prof.node("blocks.1").calls == 1
    # The ModuleList is iterated, never called.
    assert prof.node("blocks").calls == 0


def test_lstm_tagger_counts_and_shapes() -> None:
    ex = examples.get("lstm_tagger")
    model = ex.build()
    prof = ls.profile(model, ex.example_input())
    assert prof.node("embed").metrics["params"] == EMBED  # 800
    assert prof.node("lstm").metrics["params"] == 2 * LSTM_DIRECTION  # 4352
    assert prof.node("head").metrics["params"] == TAG_HEAD  # 165
    lstm_out = prof.node("lstm").outputs[0]
    assert [s.shape for s in lstm_out if isinstance(s, ls.TensorSpec)] == [
        (2, 12, 32),  # output: (N, T, 2H)
        (2, 2, 16),  # h_n: (directions * layers, N, H)
        (2, 2, 16),  # c_n
    ]
    assert tensor_shape(prof.node("head").outputs[0][0]) == (2, 12, 5)


def test_lstm_tagger_trainable_after_freezing_embedding() -> None:
    model = examples.lstm_tagger()
    model.embed.weight.requires_grad_(False)
    prof = ls.profile(model, examples.get("lstm_tagger").example_input())
    assert prof.root.metrics["trainable_params"] == LSTM_PARAMS - EMBED  # 4517


def test_shared_mlp_block_called_twice() -> None:
    ex = examples.get("shared_mlp")
    model = ex.build()
    prof = ls.profile(model, ex.example_input())
    assert prof.node("block").calls == 2
    assert prof.node("block.0").calls == 2
    assert prof.node("head").calls == 1
    assert prof.root.calls == 1
    assert prof.node("block").metrics["params"] == SHARED_BLOCK  # 272, once
    assert prof.root.self_metrics["params"] == ROOT_W  # 128, the root's own parameter
    assert prof.root.metrics["params"] == SHARED_PARAMS  # 468
    # Both calls had the same input shape, so one signature is kept.
    assert [tensor_shape(sig[0]) for sig in prof.node("block").inputs] == [(2, 16)]
    assert tensor_shape(prof.node("head").outputs[0][0]) == (2, 4)


def test_shared_mlp_trainable_after_freezing_root_parameter() -> None:
    model = examples.shared_mlp()
    model.w.requires_grad_(False)
    prof = ls.profile(model, examples.get("shared_mlp").example_input())
    assert prof.root.metrics["trainable_params"] == SHARED_PARAMS - ROOT_W  # 340
    assert prof.root.self_metrics["trainable_params"] == 0


def test_one_module_under_several_paths_of_one_parent_takes_them_in_turn() -> None:
    """``Sequential(lin, relu, lin)`` calls the linear as "0" then as "2"; a loop over
    ``ModuleList([block] * 4)`` (the ModuleList itself never called) calls the block as
    layers.0, .1, .2, .3: each path one call of 2 x 8 x 8 = 128 MACs (before, every call
    fell on the first path and the others showed as never run)."""
    lin = nn.Linear(4, 4)
    prof = ls.profile(nn.Sequential(lin, nn.ReLU(), lin), torch.randn(2, 4), backward=True)
    assert [prof.node(p).calls for p in ("0", "1", "2")] == [1, 1, 1]
    assert prof.node("0").metrics["macs"] == prof.node("2").metrics["macs"] == 2 * 4 * 4

    block = nn.Sequential(nn.Linear(8, 8), nn.GELU())

    class Looped(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList([block] * 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.layers:
                x = layer(x)
            return x

    prof = ls.profile(Looped(), torch.randn(2, 8))
    for i in range(4):
        assert prof.node(f"layers.{i}").calls == 1
        assert prof.node(f"layers.{i}.0").metrics["macs"] == 2 * 8 * 8
