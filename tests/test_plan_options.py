"""``planning.Options``: every option of ``ls.plan`` in one typed object, so a sweep and
``max_micro_batch`` plan with exactly the options of the plan they start from."""

from __future__ import annotations

import re
from dataclasses import fields
from typing import Any

import pytest
import torch
from torch import nn

import layerscope as ls
from layerscope.errors import InvalidInputError
from layerscope.hardware import SPECS
from layerscope.planning import Options
from layerscope.planning.options import DEFAULTS, NAMES, RESERVE_BYTES, check_options

#: one GPU's micro-batch: (batch, 32 tokens, 64 features)
SHAPE = (32, 64)
#: a GPU of 2,000,000 bytes (to plan the tiny model against a tiny memory)
TINY = {"name": "tiny", "bandwidth": 1e12, "peak_flops": {"bfloat16": 1e14, "float32": 1e13},
        "memory_bytes": 2_000_000, "interconnect": 1e11}  # fmt: skip
#: the options all cases share: no reserve, a budget the defaults fit at a few sequences
BASE: dict[str, Any] = {"reserve_bytes": 0, "budget": 1_500_000}
#: each block's first Linear split by columns, its last by rows (``_model``)
TP_PLAN = {"*.0": "colwise", "*.2": "rowwise"}
#: for each option of ``Options``, a value other than the default (with what it needs)
CASES: dict[str, dict[str, Any]] = {
    "target": {"target": TINY, "budget": None},
    "world_size": {"world_size": 2},
    "sharding": {"sharding": "ddp", "budget": 3_000_000},  # replicated: more memory
    "precision": {"precision": "fp32"},
    "optimizer": {"optimizer": "sgd"},
    "grad_accum": {"grad_accum": 4},
    "budget": {"budget": 2_500_000},
    "reserve_bytes": {"reserve_bytes": 400_000},
    "rank": {"world_size": 6, "rank": 5},  # uneven shards: rank 5 holds the smallest
    "reshard_after_forward": {"reshard_after_forward": False},
    "units": {"units": ["0", "1.0"]},
    "inter_node_bandwidth": {"world_size": 16, "inter_node_bandwidth": 1e9},
    "bucket_cap_mb": {"sharding": "ddp", "budget": 3_000_000, "bucket_cap_mb": 0.01},
    "hsdp": {"hsdp": (2, 4)},
    "checkpoint": {"checkpoint": "blocks"},
    "cluster": {"world_size": 16, "cluster": {"gpus_per_node": 4, "nics_per_node": 1}},
    "reduce_dtype": {"reduce_dtype": "bf16"},
    "compile": {"compile": True},
    "float8": {"float8": True},
    "float8_all_gather": {"float8": True, "float8_all_gather": True},
    "loss": {"loss": "fused"},
    "mesh": {"mesh": {"dp_replicate": 2, "dp_shard": 4}},
    "tp_plan": {"mesh": {"dp_shard": 4, "tp": 2}, "tp_plan": TP_PLAN},
    "sequence_parallel": {
        "mesh": {"dp_shard": 4, "tp": 2},
        "tp_plan": TP_PLAN,
        "sequence_parallel": True,
    },
    "microbatches": {"mesh": {"dp_shard": 4, "pp": 2}, "microbatches": 4},
    "schedule": {"mesh": {"dp_shard": 4, "pp": 2}, "schedule": "gpipe"},
    "pp_split": {"mesh": {"dp_shard": 4, "pp": 2}, "pp_split": ["1"]},
    "stage": {"mesh": {"dp_shard": 4, "pp": 2}, "stage": 1},
    "return_outputs": {"mesh": {"dp_shard": 4, "pp": 2}, "return_outputs": False},
    # the model's 3 blocks make no 2 x 2 stages: interleaved with one stage a rank
    "virtual_stages": {
        "mesh": {"dp_shard": 4, "pp": 2},
        "schedule": "interleaved_1f1b",
        "virtual_stages": 1,
    },
}
LIMIT = 16


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        *(nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64)) for _ in range(3))
    )


MODEL = _model()


def _plan(batch: int, options: dict[str, Any]) -> ls.Plan:
    return ls.plan(MODEL, input_shape=(batch, *SHAPE), **options)


def test_every_option_has_a_case_and_a_default() -> None:
    assert set(CASES) == set(NAMES) == set(DEFAULTS) == {f.name for f in fields(Options)}
    for name, case in CASES.items():
        assert case[name] != DEFAULTS[name]


@pytest.mark.parametrize("name", list(CASES))
def test_max_micro_batch_fits_with_every_option(name: str) -> None:
    """The answer's plan, made with the same options, fits; one more sequence does not
    (unless the answer is the limit)."""
    options = {**BASE, **CASES[name]}
    best = _plan(1, options).max_micro_batch(limit=LIMIT)
    assert 0 <= best <= LIMIT
    if best:
        assert _plan(best, options).fits
    if best < LIMIT:
        assert _plan(best + 1, options).fits is False


@pytest.mark.parametrize("name", list(CASES))
def test_sweep_rows_are_the_plans_with_every_option(name: str) -> None:
    """Each row of a sweep over two micro-batches, with the option given, is
    ``ls.plan`` with that row's options."""
    options = {**BASE, **CASES[name]}
    sweep = ls.plan_sweep(MODEL, input_shape=(1, *SHAPE), micro_batch=[1, 3], **options)
    assert [r.micro_batch for r in sweep.rows] == [1, 3]
    for row in sweep.rows:
        alone = _plan(row.micro_batch, options)
        assert (row.peak_bytes, row.headroom_bytes, row.fits) == (
            alone.peak_bytes, alone.headroom_bytes, alone.fits
        )  # fmt: skip
        assert (row.step_time, row.tokens_per_s, row.mfu) == (
            alone.step_time, alone.tokens_per_s, alone.mfu
        )  # fmt: skip
        assert row.checkpointed == len(alone.checkpoint)


def test_the_hsdp_answer_plans_hsdp() -> None:
    """HSDP (2 x 4) shards over 4 GPUs, not 8: its largest fitting batch is smaller than
    FSDP2's over all 8, and ``max_micro_batch`` plans HSDP at every size it tries."""
    options = {**BASE, **CASES["hsdp"]}
    hsdp = _plan(1, options).max_micro_batch(limit=LIMIT)
    fsdp = _plan(1, BASE).max_micro_batch(limit=LIMIT)
    assert hsdp < fsdp
    assert _plan(hsdp, options).fits and not _plan(hsdp + 1, options).fits


@pytest.mark.parametrize("name", list(CASES))
def test_options_round_trip(name: str) -> None:
    opts = check_options({**BASE, **CASES[name]})
    assert Options.from_dict(opts.to_dict()) == opts
    assert check_options(opts.to_dict()) == opts


def test_to_dict_is_every_option_in_plan_form() -> None:
    opts = check_options({"units": ("0",), "hsdp": [2, 4], "checkpoint": ("1",)})
    assert opts.to_dict() == {
        "target": "h100", "world_size": 8, "sharding": "fsdp", "precision": "bf16-mixed",
        "optimizer": "adamw", "grad_accum": 1, "budget": 85_029_158_912,
        "reserve_bytes": RESERVE_BYTES, "rank": 0, "reshard_after_forward": True,
        "units": ["0"], "inter_node_bandwidth": None, "bucket_cap_mb": 25,
        "hsdp": [2, 4], "checkpoint": ["1"], "cluster": None, "reduce_dtype": None,
        "compile": False, "float8": False, "float8_all_gather": False, "loss": "plain",
        "mesh": None, "tp_plan": None,
        "sequence_parallel": False, "microbatches": None, "schedule": "1f1b",
        "pp_split": None, "stage": None, "return_outputs": True, "virtual_stages": None,
    }  # fmt: skip
    custom = check_options({"target": TINY})
    assert custom.to_dict()["target"]["memory_bytes"] == 2_000_000
    assert custom.budget == 2_000_000  # the target's memory
    assert custom.replace(world_size=4).world_size == 4
    with pytest.raises(InvalidInputError, match=r"unknown option 'micro_batch' for ls\.plan"):
        check_options({"micro_batch": 2})
    with pytest.raises(InvalidInputError, match="hsdp is FSDP2 on a 2-D mesh"):
        check_options({"hsdp": (2, 4)}).replace(sharding="ddp")


def test_the_document_section_is_the_options() -> None:
    """``Plan.options`` (the JSON document's) is ``Options.section``: every option but
    the budget and reserve (the plan's own fields), with the FSDP2 units used."""
    plan = _plan(1, {**BASE, **CASES["hsdp"], "units": ["0"]})
    opts = check_options({**BASE, **CASES["hsdp"], "units": ["0"]})
    assert plan.options == opts.section(["", "0"])
    assert list(plan.options) == [
        "target", "world_size", "sharding", "precision", "optimizer", "grad_accum", "rank",
        "reshard_after_forward", "checkpoint", "units", "fsdp_units", "inter_node_bandwidth",
        "bucket_cap_mb", "hsdp", "cluster",
    ]  # fmt: skip
    assert (plan.budget, plan.reserve_bytes) == (opts.budget, opts.reserve_bytes)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"units": 5}, "units must be a list of module paths, got 5"),
        ({"units": "0"}, "units must be a list of module paths, got '0'"),
        (
            {"checkpoint": 5},
            'checkpoint must be "blocks", "op", "auto", a list of module paths or a policy '
            "function",
        ),
        (
            {"checkpoint": [5]},
            'checkpoint must be "blocks", "op", "auto", a list of module paths or a policy '
            "function",
        ),
    ],
)
def test_shapeless_options_are_refused(options: dict[str, Any], words: str) -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    with pytest.raises(InvalidInputError, match=re.escape(words)):
        ls.plan(model, torch.randn(2, 4), sharding="fsdp", world_size=2, precision="fp32",
                **options)  # fmt: skip


@pytest.mark.parametrize("batch", [-1, 0, "2", 10**30])
def test_a_sweeps_micro_batches_are_checked_first(batch: Any) -> None:
    model = nn.Sequential(nn.Linear(4, 4))
    with pytest.raises(InvalidInputError, match="micro_batch must be an int from 1 to 1000000000"):
        ls.plan_sweep(model, torch.randn(2, 4), precision="fp32", micro_batch=[1, batch])


def test_a_lazy_module_is_refused_by_name_and_left_lazy() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.LazyLinear(3))
    words = "module '1' (LazyLinear) has lazy parameters that no input has shaped yet"
    with pytest.raises(InvalidInputError, match=re.escape(words)):
        ls.plan(model, torch.randn(2, 4), precision="fp32")
    assert isinstance(model[1], nn.LazyLinear) and model[1].has_uninitialized_params()


def test_reduce_dtype_halves_the_reduce_scatter_not_the_gradients() -> None:
    """Two Linear(8, 8) units on 2 GPUs, bf16-mixed: each rank's padded shard is 4 rows of
    8 and 4 biases, 36 elements; the reduce-scatter takes 2 x 36 elements, 288 B in
    float32 (FSDP2's default reduce dtype under mixed precision), 144 B in bfloat16. The
    sharded gradients stay float32: 2 x 36 x 4 = 288 B for the two units either way."""
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))
    x = torch.randn(2, 8)
    plans = {d: ls.plan(model, x, world_size=2, reduce_dtype=d) for d in (None, "bf16")}
    for dtype, payload in ((None, 288), ("bf16", 144)):
        assert plans[dtype].comm["0"]["backward"]["reduce_scatter"]["bytes"] == payload
        assert plans[dtype].states["grad_bytes"] == 288
    assert plans["bf16"].options["reduce_dtype"] == "bf16"
    assert "reduce_dtype" not in plans[None].options  # the default: documents as before
    with pytest.raises(InvalidInputError, match="reduce_dtype is FSDP2's"):
        ls.plan(model, torch.randn(2, 8), world_size=2, sharding="ddp", reduce_dtype="bf16")
    with pytest.raises(InvalidInputError, match="reduce_dtype must be one of 'fp32', 'bf16'"):
        ls.plan(model, torch.randn(2, 8), world_size=2, reduce_dtype="int8")


def test_the_default_budget_is_what_the_device_lets_a_process_use() -> None:
    """An H100's plan budgets the 85,029,158,912 B torch.cuda.mem_get_info() reports
    (79.19 GiB), not the datasheet's 80e9 (74.51 GiB), and says so; a budget given, or a
    custom spec without a usable figure, is used as it is."""
    model = nn.Sequential(nn.Linear(8, 8))
    plan = ls.plan(model, torch.randn(2, 8), world_size=1, sharding="none", precision="fp32")
    assert plan.budget == SPECS["h100"].usable_memory_bytes == 85_029_158_912
    assert plan.device["usable_memory_bytes"] == 85_029_158_912
    assert plan.device["memory_bytes"] == 80 * 10**9
    assert plan.headroom_bytes == 85_029_158_912 - plan.reserve_bytes - plan.peak_bytes
    assert any("85,029,158,912 B a process can use" in n for n in plan.notes)
    given = ls.plan(model, torch.randn(2, 8), world_size=1, sharding="none",
                    precision="fp32", budget=10**9)  # fmt: skip
    assert given.budget == 10**9 and not any("a process can use" in n for n in given.notes)
    assert check_options({"target": TINY}).budget == 2_000_000  # its memory_bytes
    with pytest.raises(InvalidInputError, match="usable_memory_bytes must be at most"):
        ls.device_spec({**TINY, "usable_memory_bytes": 3_000_000})
    # a usable figure without the datasheet's: budgeted, the note without the datasheet
    # figure (its format of None raised a TypeError)
    usable = {k: v for k, v in TINY.items() if k != "memory_bytes"}
    usable["usable_memory_bytes"] = 1_500_000
    alone = ls.plan(model, torch.randn(2, 8), target=usable, world_size=1, sharding="none",
                    precision="fp32", reserve_bytes=0)  # fmt: skip
    assert alone.budget == 1_500_000
    assert "budget: the 1,500,000 B a process can use on the tiny (the total " in alone.notes[-1]


def test_sweep_rows_over_shardings_and_precisions_are_the_plans() -> None:
    """DDP's bf16-mixed analyses the float32 model under autocast, FSDP2's and ZeRO's the
    model in bfloat16, plain bf16 too: the rows share an analysis only where the plans
    would, so each row, in either order, is ``ls.plan`` with its options."""
    options = {**BASE, "budget": 6_000_000, "world_size": 4}
    for shardings in (["ddp", "fsdp", "zero2"], ["fsdp", "ddp"]):
        sweep = ls.plan_sweep(MODEL, input_shape=(2, *SHAPE), sharding=shardings,
                              precision=["bf16", "bf16-mixed"], **options)  # fmt: skip
        assert len(sweep.rows) == 2 * len(shardings)
        for row in sweep.rows:
            alone = _plan(2, {**options, "sharding": row.sharding, "precision": row.precision})
            assert (row.peak_bytes, row.step_time) == (alone.peak_bytes, alone.step_time)


@pytest.mark.parametrize(
    ("given", "shape"),
    [
        ({"args": (torch.zeros(0, 8),)}, [0, 8]),
        ({"args": (torch.zeros(2, 0),)}, [2, 0]),
        ({"input_shape": (0, 8)}, [0, 8]),
    ],
)
def test_an_empty_micro_batch_is_refused(given: dict[str, Any], shape: list[int]) -> None:
    """No sample, or no token: refused before the analysis (it was the model's error,
    raised where it first reshaped the empty batch)."""
    model = nn.Sequential(nn.Linear(8, 8))
    with pytest.raises(InvalidInputError, match=re.escape(f"an input of shape {shape} has no")):
        ls.plan(model, *given.get("args", ()), input_shape=given.get("input_shape"))


def test_a_transformers_base_model_is_noted() -> None:
    """``LlamaModel`` (``transformers:llama``) has no output head: the plan says so and
    names the class with one; ``LlamaForCausalLM``'s plan has no such note."""
    import transformers

    shape: dict[str, Any] = dict(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2,
    )  # fmt: skip
    config = transformers.LlamaConfig(**shape)
    common: dict[str, Any] = dict(input_shape=(2, 16), world_size=1, sharding="none")
    base = ls.plan(transformers.LlamaModel(config), **common)
    assert base.notes[-1] == (
        "LlamaModel is a transformers base model, without an output head: the plan holds no "
        "logits; plan the model with its head (transformers:LlamaForCausalLM) for a language "
        "model's training step"
    )
    headed = ls.plan(transformers.LlamaForCausalLM(config), **common)
    assert not any("base model" in n for n in headed.notes)
