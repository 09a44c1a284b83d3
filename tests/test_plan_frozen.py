"""Plans of a partly frozen model (a LoRA-style base with ``requires_grad=False`` and a
small trainable adapter): the analysis records the frozen parameters
(``memory["frozen"]``), and each strategy holds them as it runs them: FSDP2 shards them,
one GPU, DDP and ZeRO hold them whole; none has a gradient or optimizer state."""

from __future__ import annotations

import torch
from torch import nn

import layerscope as ls


class Adapted(nn.Module):
    """A frozen 256 x 256 base (no bias) plus a trainable rank-8 adapter."""

    def __init__(self) -> None:
        super().__init__()
        self.base = nn.Linear(256, 256, bias=False).requires_grad_(False)
        self.down = nn.Linear(256, 8, bias=False)
        self.up = nn.Linear(8, 256, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.base(x) + self.up(self.down(x))
        return out


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(Adapted(), Adapted())


X = torch.randn(8, 256)
#: per block: 65,536 frozen elements, 2 x 2,048 trainable (8 rows and 256 rows: every
#: tensor splits evenly over 8 GPUs, no FSDP2 padding)
FROZEN, TRAINED = 2 * 65_536, 2 * 2 * 2_048


def test_the_analysis_records_frozen_parameters() -> None:
    prof = ls.profile(_model(), X, backward=True, memory=True)
    frozen = prof.memory["frozen"]
    assert list(frozen) == ["0.base.weight", "1.base.weight"]
    assert frozen["0.base.weight"] == {
        "shape": [256, 256], "dtype": "float32", "bytes": 4 * 65_536, "module": "0.base",
    }  # fmt: skip
    assert "frozen" not in ls.profile(nn.Linear(3, 2), torch.randn(1, 3), memory=True).memory


def test_each_strategy_holds_frozen_parameters_as_it_runs_them() -> None:
    """Parameters at rest by hand (8 GPUs unless one): FSDP2 in float32 under mixed
    precision, (131,072 + 8,192) / 8 x 4 B; one GPU in bf16 with float32 master weights
    of the trainable only; DDP (autocast) float32 whole; ZeRO-2 bf16 whole, its
    partitions the trainable 8,192 / 8 = 1,024 elements."""
    model = _model()
    both = FROZEN + TRAINED
    cases = {
        ("fsdp", 8): (4 * both // 8, 4 * TRAINED // 8),
        ("none", 1): (2 * both, 2 * TRAINED),
        ("ddp", 8): (4 * both, 4 * TRAINED),
        ("zero2", 8): (2 * both, 2 * TRAINED // 8),
    }
    for (sharding, world), (params, grads) in cases.items():
        plan = ls.plan(model, X, world_size=world, sharding=sharding, precision="bf16-mixed")
        assert plan.states["param_bytes"] == params, sharding
        assert plan.states["grad_bytes"] == grads, sharding
        # AdamW: two float32 states of the trainable elements each GPU keeps, 4 B steps
        kept = TRAINED // 8 if sharding in ("fsdp", "zero2") else TRAINED
        assert plan.states["optimizer_state_bytes"] == 8 * kept + 4 * 4, sharding
        assert plan.timeline["param_bytes"][0] == params  # at rest, in the replay
        frozen_held = params - (4 if sharding in ("fsdp", "ddp") else 2) * (
            TRAINED // 8 if sharding == "fsdp" else TRAINED
        )
        note = f"{FROZEN:,} frozen parameter elements (requires_grad=False): {frozen_held:,} B"
        assert any(n.startswith(note) for n in plan.notes), (sharding, plan.notes)


def test_fsdp_reduces_only_the_trainable_shard() -> None:
    """Each block a unit, sharded over 2 GPUs: gathered whole (in bf16, (65,536 + 4,096)
    / 2 x 2 B = 69,632 B), reduce-scattered over the trainable elements only (2 shards of
    2,048 x 4 B in float32 = 16,384 B), each shard of those (8,192 B) then all-reduced
    over HSDP's 2 replicas."""
    plan = ls.plan(
        _model(), X, world_size=4, hsdp=(2, 2), sharding="fsdp", precision="bf16-mixed",
        units=["0", "1"],
    )  # fmt: skip
    for unit in ("0", "1"):
        backward = plan.comm[unit]["backward"]
        assert plan.comm[unit]["forward"]["all_gather"]["bytes"] == 69_632
        assert backward["all_gather"]["bytes"] == 69_632
        assert backward["reduce_scatter"]["bytes"] == 16_384
        assert backward["all_reduce"]["bytes"] == 8_192


def test_a_profile_without_frozen_records_plans_as_before() -> None:
    """A profile made before frozen parameters were recorded: their analysed bytes,
    replicated, as plans counted them then."""
    prof = ls.profile(_model().to(torch.bfloat16), X.to(torch.bfloat16), backward=True,
                      memory=True)  # fmt: skip
    del prof.memory["frozen"]
    plan = ls.plan(prof, world_size=8, sharding="fsdp", precision="bf16-mixed")
    assert plan.states["param_bytes"] == 4 * TRAINED // 8
    assert plan.timeline["param_bytes"][0] == 4 * TRAINED // 8 + 2 * FROZEN
    assert "frozen parameters are counted replicated, in the analysed dtype" in plan.notes


def test_mfu_counts_a_frozen_parameter_four_flops_a_token() -> None:
    """6 N per token for a trained parameter (forward, input gradient, weight gradient),
    4 for a frozen one (no weight gradient)."""
    torch.manual_seed(0)
    frozen = nn.Linear(32, 32).requires_grad_(False)
    model = nn.Sequential(nn.Embedding(100, 32), frozen, nn.Linear(32, 100))
    ids = torch.randint(0, 100, (2, 16))
    plan = ls.plan(model, ids, world_size=1, sharding="none")
    # trained: the embedding 100 x 32 and the head 32 x 100 + 100; frozen: 32 x 32 + 32;
    # 2 x 16 = 32 tokens, no attention
    trained, kept = 3_200 + 3_200 + 100, 1_024 + 32
    assert plan.mfu_flops == (6 * trained + 4 * kept) * 32
