"""The planning arithmetic of model states per GPU (``layerscope.planning.states``), by
hand. The runs that check it are in ``test_sharded_steps.py``."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import layerscope as ls
from layerscope.errors import InvalidInputError
from layerscope.planning.footprint import OptimizerName
from layerscope.planning.states import ModelStates, fsdp_shard
from layerscope.planning.strategies import model_states


@pytest.mark.parametrize(
    ("shape", "world", "rank", "expected"),
    [
        ((7, 64), 2, 0, (4 * 64, 4 * 64)),  # chunks of 4 and 3 rows, padded to 4
        ((7, 64), 2, 1, (3 * 64, 4 * 64)),
        ((7, 64), 4, 3, (1 * 64, 2 * 64)),  # 2, 2, 2, 1
        ((3, 7), 4, 3, (0, 7)),  # 3 chunks of 1 row: rank 3 holds none, padded to 1 row
        ((), 4, 0, (1, 1)),  # a 0-dim tensor is one row
        ((), 4, 1, (0, 1)),
        ((8,), 8, 7, (1, 1)),
    ],
)
def test_fsdp_shard(
    shape: tuple[int, ...], world: int, rank: int, expected: tuple[int, int]
) -> None:
    assert fsdp_shard(shape, world, rank) == expected


SHAPES = [(1000, 100), (1000,)]  # 101,000 elements, two tensors


def test_one_gpu_and_ddp() -> None:
    # fp32 AdamW: 4 B weights, 4 B gradients, 8 B states per element, 4 B step per tensor
    fp32 = model_states(SHAPES, world_size=1, sharding="none", precision="fp32")
    assert fp32 == ModelStates(404_000, 404_000, 808_000 + 8, 0)
    # mixed on one GPU: 2 + 2 + 8 (fp32 states) + 4 (master) = 16 B per element
    mixed = model_states(SHAPES, world_size=1, sharding="none", precision="bf16-mixed")
    assert mixed == ModelStates(202_000, 202_000, 808_000 + 8, 404_000)
    assert mixed.total == 16 * 101_000 + 8
    # pure bf16: the states are bf16 too; momentum SGD one state, plain SGD none
    bf16 = model_states(SHAPES, world_size=1, sharding="none", precision="bf16", optimizer="sgd")
    assert bf16 == ModelStates(202_000, 202_000, 0, 0)
    sgd = model_states(
        SHAPES, world_size=1, sharding="none", precision="bf16", optimizer="sgd_momentum"
    )
    assert sgd.optimizer_state_bytes == 202_000
    # DDP replicates; its mixed precision is autocast, all float32
    ddp = model_states(SHAPES, world_size=8, sharding="ddp", precision="bf16-mixed")
    assert ddp == fp32


def test_fsdp() -> None:
    # 1000 rows on 8 GPUs: 125 each, no padding; the bias 125 each
    fsdp = model_states(SHAPES, world_size=8, sharding="fsdp", precision="bf16-mixed", rank=7)
    local = 125 * 100 + 125
    assert fsdp == ModelStates(4 * local, 4 * local, 8 * local + 8, 0)
    # 1000 rows on 3 GPUs: 334, 334, 332 rows; every shard padded to 334
    last = model_states(SHAPES, world_size=3, sharding="fsdp", precision="fp32", rank=2)
    assert last.param_bytes == 4 * (334 * 100 + 334)
    assert last.grad_bytes == 4 * (332 * 100 + 332)


def test_zero() -> None:
    # ZeRO-1: weights and gradients replicated (bf16), the fp32 master and its states
    # split: ceil(101,000 / 8) = 12,625 elements each
    z1 = model_states(SHAPES, world_size=8, sharding="zero1", precision="bf16-mixed")
    assert z1 == ModelStates(202_000, 202_000, 8 * 12_625 + 8, 4 * 12_625)
    # ZeRO-2: gradients split too
    z2 = model_states(SHAPES, world_size=8, sharding="zero2", precision="bf16-mixed")
    assert z2.grad_bytes == 2 * 12_625
    # fp32: no master copy
    z2 = model_states(SHAPES, world_size=8, sharding="zero2", precision="fp32")
    assert z2 == ModelStates(404_000, 4 * 12_625, 8 * 12_625 + 8, 0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"world_size": 0}, "world_size must be a positive int"),
        ({"world_size": 2, "rank": 2}, r"rank must be in \[0, 2\)"),
        ({"sharding": "tp"}, "unknown sharding 'tp'; known: none, ddp, fsdp, zero1, zero2"),
        ({"precision": "fp8"}, "unknown precision 'fp8'"),
        ({"optimizer": "lion"}, "unknown optimizer 'lion'"),
        ({"sharding": "none", "world_size": 2}, "sharding='none' is one GPU"),
    ],
)
def test_bad_input(kwargs: dict[str, object], message: str) -> None:
    given: dict[str, object] = {
        "world_size": 4, "sharding": "fsdp", "precision": "fp32", **kwargs
    }  # fmt: skip
    with pytest.raises(InvalidInputError, match=message):
        model_states(SHAPES, **given)  # type: ignore[arg-type]


def test_llama_3_8b_on_8_and_64_gpus() -> None:
    """Llama-3-8B built from its config on meta (nothing allocated): 8,030,261,248
    parameters in 291 tensors, every dim 0 (128,256, 4,096, 1,024, 14,336) divisible by 8
    and by 64, so FSDP2 pads nothing. bf16-mixed AdamW: 4 + 4 + 8 bytes per local
    parameter, plus 4 B of ``step`` per tensor."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=128_256, hidden_size=4_096, intermediate_size=14_336,
        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
        tie_word_embeddings=False,
    )  # fmt: skip
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    shapes = [tuple(p.shape) for p in model.parameters()]
    assert (len(shapes), sum(p.numel() for p in model.parameters())) == (291, 8_030_261_248)
    for world in (8, 64):
        local = 8_030_261_248 // world  # 1,003,782,656 on 8 GPUs, 125,472,832 on 64
        states = model_states(shapes, world_size=world, sharding="fsdp", precision="bf16-mixed")
        assert states == ModelStates(4 * local, 4 * local, 8 * local + 4 * 291, 0)
    assert states.total == 2_007_566_476  # on 64 GPUs: 16 B x 125,472,832 + 1,164


def test_ddp_buckets_as_ddp_assigns_them() -> None:
    """Reverse order, the first bucket closed at 1 MiB, the others at 25 MiB, a tensor
    past the cap alone: 3 MiB, 2 MiB and 1 KiB float32 tensors in model order."""
    from layerscope.planning.comm import ddp_buckets, ddp_collectives

    mib = 1024 * 1024
    params = [((3 * mib // 4,), 4), ((2 * mib // 4,), 4), ((256,), 4)]
    # reversed: 1 KiB + 2 MiB closes the first bucket (>= 1 MiB); 3 MiB alone is left
    assert ddp_buckets(params) == [1024 + 2 * mib, 3 * mib]
    assert ddp_buckets(params, bucket_cap_mb=1) == [1024 + 2 * mib, 3 * mib]
    # bf16 and float32 gradients never share a bucket
    assert ddp_buckets([((10,), 2), ((10,), 4)]) == [40, 20]
    row = ddp_collectives(params, world_size=4)["all_reduce"]
    assert row == {"calls": 2, "bytes": 5 * mib + 1024, "wire_bytes": (5 * mib + 1024) * 3 // 2}


@pytest.mark.parametrize("optimizer", ["adamw", "adam", "sgd", "sgd_momentum"])
def test_training_footprint_is_the_plans_arithmetic(optimizer: OptimizerName) -> None:
    """One device, float32: Linear(16, 32) and Linear(32, 8) hold 16 x 32 + 32 + 32 x 8
    + 8 = 808 parameters in 4 tensors. Gradients 808 x 4 = 3,232 B; states: Adam/AdamW 2
    x 3,232 + 4 tensors x 4 B of ``step`` = 6,480 B, momentum SGD 3,232 B, SGD 0; the same
    figures as ``ls.plan``'s for one GPU (``planning.states.optimizer_state_bytes``)."""
    model = nn.Sequential(nn.Linear(16, 32), nn.Linear(32, 8))
    x = torch.randn(2, 16)
    prof = ls.profile(model, x, memory=True)
    foot = ls.training_footprint(prof, optimizer)
    plan = ls.plan(model, x, world_size=1, sharding="none", precision="fp32",
                   optimizer=optimizer)  # fmt: skip
    states = {"adamw": 6_480, "adam": 6_480, "sgd": 0, "sgd_momentum": 3_232}[optimizer]
    assert foot["grad_bytes"] == plan.states["grad_bytes"] == 3_232
    assert foot["optimizer_state_bytes"] == plan.states["optimizer_state_bytes"] == states
    # bf16 weights with a float32 master copy: float32 states, as FSDP2's mixed precision
    # keeps them on one GPU (2 x 808 x 4 + 16 = 6,480 B for Adam)
    half = ls.profile(nn.Sequential(nn.Linear(16, 32), nn.Linear(32, 8)).to(torch.bfloat16),
                      x.to(torch.bfloat16), memory=True)  # fmt: skip
    mixed = ls.training_footprint(half, optimizer, master_weights=True)
    fsdp = ls.plan(model, x, world_size=1, sharding="fsdp", precision="bf16-mixed",
                   optimizer=optimizer)  # fmt: skip
    assert mixed["optimizer_state_bytes"] == fsdp.states["optimizer_state_bytes"] == states
    assert mixed["master_weight_bytes"] == 808 * 4


FROZEN = [(3000, 100)]  # 300,000 frozen elements (a LoRA-style base), one tensor


def test_frozen_parameters() -> None:
    """Frozen parameters (``requires_grad=False``): weights only, no gradient, no
    optimizer state. FSDP2 shards them (padded like the others); one GPU, DDP and ZeRO
    hold them whole in the weights' dtype (DeepSpeed partitions trainable parameters
    only)."""

    def states(sharding: str, precision: str, world: int = 8, rank: int = 0) -> ModelStates:
        return model_states(
            SHAPES, world_size=world, sharding=sharding, precision=precision, rank=rank,
            frozen=FROZEN,
        )  # fmt: skip

    # one GPU, mixed: 2 B per frozen element beside the trainable 2 + 2 + 8 + 4 B
    assert states("none", "bf16-mixed", 1) == ModelStates(
        2 * (101_000 + 300_000), 202_000, 808_000 + 8, 404_000
    )
    # DDP under autocast: float32 weights, 4 B per frozen element
    assert states("ddp", "bf16-mixed") == ModelStates(4 * 401_000, 404_000, 808_000 + 8, 0)
    # FSDP2 on 8: 3000 rows, 375 each: 37,500 frozen elements per GPU, float32 at rest
    # under mixed precision, beside the trainable 125 x 100 + 125
    local = 125 * 100 + 125
    assert states("fsdp", "bf16-mixed") == ModelStates(
        4 * (local + 37_500), 4 * local, 8 * local + 8, 0
    )
    # on 7: 3000 rows chunk 429 (428 on the last), every shard padded to 429 rows; the
    # trainable 1000 rows chunk 143 (142 on the last), bias alike
    last = states("fsdp", "fp32", 7, 6)
    assert last.param_bytes == 4 * (429 * 100 + 143 * 100 + 143)
    assert last.grad_bytes == 4 * (142 * 100 + 142)
    # ZeRO-1/2: frozen weights whole (bf16); the partitions cover the trainable only
    z1 = states("zero1", "bf16-mixed")
    assert z1 == ModelStates(2 * 401_000, 202_000, 8 * 12_625 + 8, 4 * 12_625)
    assert states("zero2", "bf16-mixed").grad_bytes == 2 * 12_625
    # without frozen parameters, as before
    assert model_states(SHAPES, world_size=8, sharding="fsdp", precision="fp32", frozen=[]) == (
        model_states(SHAPES, world_size=8, sharding="fsdp", precision="fp32")
    )


@pytest.mark.parametrize(
    ("sharding", "precision", "moved"),
    [
        # 520 trainable elements (64 x 8 + 8); AdamW states 2 x 520 x 4 + 2 steps x 4 B
        # = 4,168. fp32 on one GPU: params 2,080 and states read and written, the 2,080 B
        # of gradients read: 2 x (2,080 + 4,168) + 2,080
        ("none", "fp32", 2 * (2_080 + 4_168) + 2_080),
        # bf16-mixed: bf16 params 1,040, float32 masters 2,080, bf16 gradients 1,040
        ("none", "bf16-mixed", 2 * (1_040 + 4_168 + 2_080) + 1_040),
        # ZeRO-2 over 4: a quarter of each (states 2 x 130 x 4 + 8 = 1,048), the
        # replicated params' partition 2,080 / 4, the gradient partition 520
        ("zero2", "fp32", 2 * (520 + 1_048) + 520),
    ],
)
def test_the_optimizer_step_moves_what_it_updates(
    sharding: str, precision: str, moved: int
) -> None:
    """A frozen 64 x 64 layer (LoRA's base weights) under a trained 64 -> 8 one: the
    step reads and writes the trainable parameters (under ZeRO this rank's partition),
    their states and masters, and reads their gradients; the frozen ones not at all.
    Priced at the h100's stated 0.9 of 3.35 TB/s."""
    model = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 8))
    model[0].requires_grad_(False)
    world = 1 if sharding == "none" else 4
    plan = ls.plan(model, torch.randn(4, 64), target="h100", world_size=world,
                   sharding=sharding, precision=precision)  # fmt: skip
    assert plan.time["optimizer"] == pytest.approx(moved / (0.9 * 3.35e12))
