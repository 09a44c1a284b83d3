"""Parameter counting: exact counts, self vs inclusive, dtypes, sharing, frozen params."""

from __future__ import annotations

import torch
from torch import nn

import layerscope as ls
from helpers.snapshots import ModelSnapshot


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, kernel_size=3, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(8 * 6 * 6, 10))
        self.scale = nn.Parameter(torch.ones(10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.bn(self.conv(x))) * self.scale
        return out


def test_exact_counts_self_and_inclusive() -> None:
    model, x = Net(), torch.randn(2, 3, 8, 8)
    snap = ModelSnapshot.take(model)
    prof = ls.profile(model, x)
    snap.assert_unchanged(model)
    conv = 8 * 3 * 3 * 3  # out * in * kh * kw = 216, no bias
    bn = 8 + 8  # weight + bias
    bn_buffers = 8 + 8 + 1  # running_mean + running_var + num_batches_tracked
    fc = 8 * 6 * 6 * 10 + 10  # 2880 + 10 = 2890
    scale = 10
    assert prof.node("conv").metrics["params"] == conv == 216
    assert prof.node("bn").metrics["params"] == bn
    assert prof.node("bn").metrics["buffers"] == bn_buffers == 17
    assert prof.node("head").metrics["params"] == fc == 2890
    assert prof.node("head").self_metrics["params"] == 0
    assert prof.node("head.1").self_metrics["params"] == fc
    assert prof.root.self_metrics["params"] == scale
    assert prof.root.metrics["params"] == conv + bn + fc + scale == 3132
    # bytes: float32 params 4 bytes each; buffers 16 float32 + 1 int64 (8 bytes)
    assert prof.root.metrics["param_bytes"] == 3132 * 4
    assert prof.root.metrics["buffer_bytes"] == 16 * 4 + 8
    assert prof.root.by_dtype == {
        "float32": {"params": 3132, "param_bytes": 12528, "buffers": 16, "buffer_bytes": 64},
        "int64": {"params": 0, "param_bytes": 0, "buffers": 1, "buffer_bytes": 8},
    }
    prof.self_check()


def test_trainable_and_frozen() -> None:
    model = Net()
    model.conv.weight.requires_grad_(False)
    model.head[1].bias.requires_grad_(False)
    prof = ls.profile(model)
    assert model.conv.weight.requires_grad is False  # left as found
    assert prof.root.metrics["params"] == 3132
    assert prof.root.metrics["trainable_params"] == 3132 - 216 - 10  # conv weight, fc bias


def test_mixed_dtypes() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    model[1].to(torch.float16)
    prof = ls.profile(model)
    assert prof.root.by_dtype["float32"]["params"] == 4 * 4 + 4  # 20
    assert prof.root.by_dtype["float16"]["params"] == 4 * 2 + 2  # 10
    assert prof.root.metrics["param_bytes"] == 20 * 4 + 10 * 2  # 100


class Tied(nn.Module):
    """GPT-2 style: the LM head's weight is the embedding's weight."""

    def __init__(self, vocab: int = 50, dim: int = 8) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.body = nn.Linear(dim, dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.emb.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.lm_head(self.body(self.emb(ids)))
        return out


def test_tied_weights_counted_once_at_common_ancestor() -> None:
    model = Tied()
    prof = ls.profile(model, torch.randint(0, 50, (2, 5)))
    unique = 50 * 8 + (8 * 8 + 8)  # 400 + 72 = 472
    assert prof.root.metrics["params"] == unique == sum(p.numel() for p in model.parameters())
    double = sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False))
    assert double == unique + 400  # what a naive counter reports
    assert prof.root.self_metrics["params"] == 400  # the tied weight, at the root
    assert prof.node("emb").metrics["params"] == 0
    assert prof.node("lm_head").metrics["params"] == 0
    assert prof.node("emb").shared == ["emb.weight (counted at <root>)"]
    assert prof.node("lm_head").shared == ["lm_head.weight (counted at <root>)"]
    prof.self_check()


class SharedBlock(nn.Module):
    """One module instance registered under two paths and called twice."""

    def __init__(self) -> None:
        super().__init__()
        block = nn.Linear(6, 6)
        self.enc = nn.Sequential(block, nn.ReLU())
        self.dec = nn.Sequential(block, nn.Tanh())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.dec(self.enc(x))
        return out


def test_module_registered_twice() -> None:
    model = SharedBlock()
    prof = ls.profile(model, torch.randn(3, 6))
    assert prof.root.metrics["params"] == 6 * 6 + 6  # 42, once
    assert prof.root.self_metrics["params"] == 42  # LCA of enc.0 and dec.0 is the root
    # Each path gets the call made through it: the parent on the stack picks the path.
    assert prof.node("enc.0").calls == 1
    assert prof.node("dec.0").calls == 1
    assert [n.path for n in prof.nodes()] == ["", "enc", "enc.0", "enc.1", "dec", "dec.0", "dec.1"]
    prof.self_check()


def test_meta_model_counts_without_memory() -> None:
    with torch.device("meta"):
        model = nn.Sequential(*[nn.Linear(4096, 4096) for _ in range(8)])
    prof = ls.profile(model, input_shape=(2, 4096))
    assert prof.root.metrics["params"] == 8 * (4096 * 4096 + 4096)  # 134,250,496
    assert prof.node("7").outputs[0][0] == ls.TensorSpec("", (2, 4096), "float32", "meta")


def test_lazy_module_notice() -> None:
    model = nn.Sequential(nn.LazyLinear(3))
    prof = ls.profile(model)
    assert prof.root.metrics["params"] == 0
    assert any("lazy" in n for n in prof.notices)
