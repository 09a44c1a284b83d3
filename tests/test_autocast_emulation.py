"""CUDA autocast's rules on any device (``layerscope.collect.autocast``): the policy table
against the installed torch's own registrations, the dtypes each policy gives, and an
analysis on ``meta`` under the rules against a model that makes autocast's casts itself."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import layerscope as ls
from layerscope.collect.autocast import (
    FLOAT32,
    FLOAT32_DTYPE,
    LOWER_PRECISION,
    PROMOTE,
    CudaAutocast,
    emulate_cuda_autocast,
)

BF16 = torch.bfloat16


def _registered() -> set[str]:
    """The ops (without overload) that this torch registers a CUDA autocast kernel for."""
    names = set()
    for schema in torch._C._jit_get_all_schemas():
        full = schema.name + (f".{schema.overload_name}" if schema.overload_name else "")
        try:
            if torch._C._dispatch_has_kernel_for_dispatch_key(full, "AutocastCUDA"):
                names.add(schema.name.removeprefix("aten::"))
        except RuntimeError:  # an operator of the schema list that is not registered
            continue
    return names


def test_the_table_is_torchs() -> None:
    """Every op with a CUDA autocast kernel is in one policy, and every policy's op has
    one, but three: autocast refuses binary_cross_entropy (an error, not a cast), and the
    cuDNN convolutions are reached through ``convolution`` (already cast)."""
    ours = LOWER_PRECISION | FLOAT32 | FLOAT32_DTYPE | PROMOTE
    assert len(ours) == len(LOWER_PRECISION) + len(FLOAT32) + len(FLOAT32_DTYPE) + len(PROMOTE)
    extra = {"binary_cross_entropy", "cudnn_convolution", "cudnn_convolution_transpose"}
    assert _registered() == ours | extra


def test_each_policy_gives_its_dtypes() -> None:
    w = nn.Parameter(torch.randn(8, 16))
    x = torch.randn(4, 16)
    half = torch.randn(4, 8, dtype=BF16)
    with CudaAutocast(BF16) as mode:
        assert F.linear(x, w).dtype == BF16  # lower precision
        assert (x @ w.t()).dtype == BF16  # Tensor.__matmul__ is matmul
        assert F.layer_norm(half, (8,)).dtype == torch.float32  # float32
        assert half.exp().dtype == torch.float32
        assert (half**2).dtype == torch.float32  # __pow__ is pow
        assert half.softmax(-1).dtype == torch.float32  # float32 through dtype=
        assert half.sum().dtype == torch.float32
        assert half.sum(dtype=BF16).dtype == BF16  # a dtype given is kept
        assert torch.arange(4).sum().dtype == torch.int64  # integers are not eligible
        assert torch.addcmul(half, half, x[:, :8]).dtype == torch.float32  # promote
        assert torch.addcmul(half, half, half).dtype == BF16
        assert F.gelu(half).dtype == BF16  # not listed: as given
        loss = F.cross_entropy(half, torch.tensor([0, 1, 2, 3]))
        assert loss.dtype == torch.float32
        # the weight cache: one 16-bit copy of a float32 leaf that needs a gradient
        assert len(mode.cache) == 1
        F.linear(x, w)
        assert len(mode.cache) == 1
        assert mode.cache[id(w)][1].dtype == BF16
        mode.clear()
        assert mode.cache == {}


class Block(nn.Module):
    def __init__(self, a: nn.Module, n: nn.Module, b: nn.Module) -> None:
        super().__init__()
        self.a, self.n, self.b = a, n, b

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h: torch.Tensor = self.a(x)
        out: torch.Tensor = self.b(self.n(h) + h)
        return out.softmax(-1)


#: the copies autocast keeps for its region (its weight cache), for the hand-cast model
CACHE: dict[int, torch.Tensor] = {}


def cached(t: torch.Tensor) -> torch.Tensor:
    if id(t) not in CACHE:
        CACHE[id(t)] = t.to(BF16)
    return CACHE[id(t)]


class CastLinear(nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x.to(BF16), cached(self.weight), cached(self.bias))


class FloatNorm(nn.LayerNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x.float(), self.normalized_shape, self.weight, self.bias, self.eps)


class CastBlock(Block):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h: torch.Tensor = self.a(x)
        out: torch.Tensor = self.b(self.n(h) + h)
        return out.softmax(-1, dtype=torch.float32)


def test_meta_analysis_equals_the_casts_made_by_hand() -> None:
    """A Linear, a LayerNorm and a Linear on a residual, analysed on meta under the
    rules, against the same model that makes autocast's casts itself, run on the CPU:
    every module's saved bytes and peak, and the whole step, equal. Saved by hand
    (batch 4, float32 input of 64): ``a`` its input's bf16 copy, 4 x 64 x 2 = 512 B (its
    weight's copy is not saved: the input needs no gradient); ``n`` its input in float32,
    4 x 32 x 4 = 512 B, and mean and rstd, 2 x 4 x 4 = 32 B; ``b`` its float32 input
    (LayerNorm's float32 output plus the bf16 ``h``) as a bf16 copy, 4 x 32 x 2 = 256 B,
    and its weight's copy, 32 x 8 x 2 = 512 B; the softmax its float32 output,
    4 x 8 x 4 = 128 B: 1,952 B in all."""
    torch.manual_seed(0)
    plain = Block(nn.Linear(64, 32), nn.LayerNorm(32), nn.Linear(32, 8))
    by_hand = CastBlock(CastLinear(64, 32), FloatNorm(32), CastLinear(32, 8))
    by_hand.load_state_dict(plain.state_dict())
    x = torch.randn(4, 64)

    def loss(out: torch.Tensor) -> torch.Tensor:
        return out.pow(2).sum()

    def hand_loss(out: torch.Tensor) -> torch.Tensor:
        try:
            return loss(out)
        finally:
            CACHE.clear()  # the region ends after the loss

    real = ls.profile(by_hand, x, backward=True, memory=True, loss_fn=hand_loss)
    meta = ls.to_meta(plain)
    with emulate_cuda_autocast(meta, BF16, loss) as emulated_loss:
        emulated = ls.profile(
            meta, x.to("meta"), backward=True, memory=True, loss_fn=emulated_loss, target="cpu"
        )
    saved = {"": 1952, "a": 512, "n": 544, "b": 768}
    for node in real.nodes():
        other = emulated.node(node.path).metrics
        assert node.metrics["activation_bytes"] == other["activation_bytes"] == saved[node.path]
        for key in ("peak_bytes", "output_bytes", "flops", "backward_flops"):
            assert node.metrics[key] == other[key], (node.path, key)
    assert real.memory["session_peak_bytes"] == emulated.memory["session_peak_bytes"]
    assert not meta._forward_hooks and not meta._forward_pre_hooks  # the hooks are gone


def test_plan_under_autocast_follows_the_rules() -> None:
    """DDP in bf16-mixed analyses the float32 model under autocast's rules: the analysis
    says so, its activations are the block's 1,952 B above (not the 16-bit analysis's),
    and a profile that ran every op in bfloat16 still plans, as before."""
    torch.manual_seed(0)
    model = Block(nn.Linear(64, 32), nn.LayerNorm(32), nn.Linear(32, 8))
    x = torch.randn(4, 64)

    def loss(out: torch.Tensor) -> torch.Tensor:
        return out.pow(2).sum()

    plan = ls.plan(
        model, x, target="h100", world_size=2, sharding="ddp", precision="bf16-mixed",
        reserve_bytes=0, loss_fn=loss,
    )  # fmt: skip
    assert plan.analysis is not None
    assert plan.analysis.model["autocast"] == "bfloat16"
    assert plan.analysis.model["dtype"] == "float32"
    assert plan.analysis.root.metrics["activation_bytes"] == 1952
    again = ls.plan(plan.analysis, world_size=2, sharding="ddp", precision="bf16-mixed",
                    reserve_bytes=0)  # fmt: skip
    assert again.peak_bytes == plan.peak_bytes
    with pytest.raises(ls.InvalidInputError, match="computes in float32"):
        ls.plan(plan.analysis, world_size=2, sharding="ddp", precision="fp32")


@pytest.mark.cuda
def test_plan_under_autocast_equals_a_gpu_step() -> None:
    """GPT-2 (4 layers of width 256, batch 4 x 128) trained with AdamW under bf16
    autocast on this GPU: the plan's peak (DDP on one GPU, less DDP's bucket, which a
    run without DDP lacks) against the third step's peak allocated bytes less what the
    GPU holds beyond the weights, the AdamW states and the input (the cuBLAS workspaces
    the plan's reserve stands for): 108,019,000 against 108,023,808 B on an H100. Within
    2 %: the caching allocator rounds and splits blocks."""
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        n_layer=4, n_embd=256, n_head=4, vocab_size=1000, n_positions=256
    )  # fmt: skip
    config._attn_implementation = "sdpa"

    def loss(out: Any) -> torch.Tensor:
        result: torch.Tensor = out.logits.float().pow(2).mean()
        return result

    torch.manual_seed(0)
    ids = torch.randint(0, 1000, (4, 128))
    target = "h200" if "H200" in torch.cuda.get_device_name() else "h100"
    plan = ls.plan(
        transformers.GPT2LMHeadModel(config), ids, target=target, world_size=1,
        sharding="ddp", precision="bf16-mixed", reserve_bytes=0, loss_fn=loss,
    )  # fmt: skip
    planned = plan.peak_bytes - plan.memory["comm_buffer_bytes"]
    model = transformers.GPT2LMHeadModel(config).cuda().train()
    opt = torch.optim.AdamW(model.parameters())
    x = ids.cuda()

    def step() -> None:
        with torch.autocast("cuda", torch.bfloat16):
            out = model(x)
        loss(out).backward()  # type: ignore[no-untyped-call]
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    step()
    torch.cuda.synchronize()
    states = [t for s in opt.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    held = sum(t.nbytes for t in [*model.parameters(), *states, x] if t.is_cuda)
    extra = torch.cuda.memory_allocated() - held
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    measured = torch.cuda.max_memory_allocated() - extra
    assert abs(planned - measured) <= 0.02 * measured, (planned, measured)
