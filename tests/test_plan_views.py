"""The text of a plan and of a sweep (``planning.view``): exact pieces with their arithmetic,
every width, the 80-column golden file of one small fixed plan, and a real plan of
tiny_gpt rendered from its own numbers.

``LAYERSCOPE_UPDATE_GOLDEN=1 pytest tests/test_plan_views.py`` rewrites the golden file.
"""

from __future__ import annotations

import copy
import io
import json
import os
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import torch

import layerscope as ls
from layerscope.errors import InvalidInputError
from layerscope.examples.gpt import tiny_gpt
from layerscope.planning.view import render_plan, render_sweep, show_plan, show_sweep
from layerscope.render import units

GOLDEN = Path(__file__).parent / "golden"
MiB, GiB = 2**20, 2**30

#: One GPU of 4 H100s, FSDP2, two checkpointed layers: round numbers, so every figure
#: below is easy to check by hand. The parts add up to the peak: 1 + 2 + 1 + 2 + 3 + 1
#: = 10 MiB; the time parts to the step: 6 + 2 + 1 + 1 = 10 ms.
SMALL: dict[str, Any] = {
    "options": {
        "target": "h100", "world_size": 4, "sharding": "fsdp", "precision": "bf16-mixed",
        "optimizer": "adamw", "grad_accum": 2, "rank": 0, "reshard_after_forward": True,
        "checkpoint": "blocks", "units": None, "fsdp_units": ["", "layers.0", "layers.1"],
        "inter_node_bandwidth": 50e9, "bucket_cap_mb": 25.0,
    },
    "device": {
        "name": "h100", "label": "NVIDIA H100 SXM5 80GB", "memory_bytes": 80_000_000_000,
        "interconnect": 450e9, "interconnect_kind": "nvlink", "node_size": 8,
    },
    "states": {"param_bytes": 1 * MiB, "grad_bytes": 1 * MiB,
               "optimizer_state_bytes": 2 * MiB, "master_weight_bytes": 0},
    "peak_bytes": 10 * MiB,
    "memory": {
        "param_bytes": 1 * MiB, "unsharded_param_bytes": 2 * MiB, "grad_bytes": 1 * MiB,
        "optimizer_state_bytes": 2 * MiB, "master_weight_bytes": 0,
        "activation_bytes": 3 * MiB, "recompute_bytes": 0, "comm_buffer_bytes": 1 * MiB,
        "other_bytes": 0,
    },
    "peak_phase": {"phase": "backward", "event": "gather", "path": "layers.1"},
    "budget": 16 * GiB,
    "reserve_bytes": 2 * GiB,
    "checkpoint": ["layers.0", "layers.1"],
    "kept_activation_bytes": 512 * 1024,
    "recompute_flops": 3_000_000_000,
    "timeline": {"phase": [], "event": [], "path": [], "total": []},
    "time": {"compute": 0.006, "recompute": 0.002, "exposed_comm": 0.001, "optimizer": 0.001,
             "comm": 0.004},
    "step_time": 0.010,
    "model_flops": 12_000_000_000,
    "mfu": 0.42,
    "tokens": 4096,
    "tokens_per_s": 409_600.0,
    "modules": [
        {"path": "", "type": "Net", "params": 3_000_000, "unit": True, "checkpointed": False,
         "activation_bytes": 3 * MiB, "kept_activation_bytes": 3 * MiB, "recompute_bytes": 0,
         "recompute_flops": 0, "shard_elements": 1000, "unsharded_bytes": 8000,
         "gather_bytes": 4000, "reduce_bytes": 16000},
        {"path": "layers.0", "type": "Layer", "params": 1_000_000, "unit": True,
         "checkpointed": True, "activation_bytes": 1 * MiB, "kept_activation_bytes": 256 * 1024,
         "recompute_bytes": 1 * MiB, "recompute_flops": 1_500_000_000,
         "shard_elements": 250_000, "unsharded_bytes": 2 * MiB, "gather_bytes": 1 * MiB,
         "reduce_bytes": 4 * MiB},
        {"path": "layers.1", "type": "Layer", "params": 1_000_000, "unit": True,
         "checkpointed": True, "activation_bytes": 1 * MiB, "kept_activation_bytes": 256 * 1024,
         "recompute_bytes": 1 * MiB, "recompute_flops": 1_500_000_000,
         "shard_elements": 250_000, "unsharded_bytes": 2 * MiB, "gather_bytes": 1 * MiB,
         "reduce_bytes": 4 * MiB},
    ],
    "comm": {},
    "notes": ["step_time is a lower bound: MFU is an upper bound"],
    "fits": True,
    "headroom_bytes": 16 * GiB - 2 * GiB - 10 * MiB,
}  # fmt: skip

SWEEP: dict[str, Any] = {
    "axes": ["world_size", "checkpoint"],
    "rows": [
        {"micro_batch": 2, "world_size": ws, "sharding": "fsdp", "checkpoint": ck,
         "precision": "bf16-mixed", "optimizer": "adamw", "grad_accum": 1,
         "fits": fits, "peak_bytes": peak, "headroom_bytes": 8 * GiB - peak,
         "step_time": step, "tokens_per_s": 4096 / step, "mfu": mfu,
         "checkpointed": 2 if ck else 0}
        for ws, ck, fits, peak, step, mfu in (
            (8, None, False, 9 * GiB, 0.010, 0.40),
            (8, "blocks", True, 6 * GiB, 0.012, 0.33),
            (16, None, True, 7 * GiB, 0.011, 0.36),
            (16, "blocks", True, 5 * GiB, 0.013, 0.30),
        )
    ],
}  # fmt: skip


def line_with(text: str, label: str) -> str:
    """The one table line of ``text`` whose first cell is ``label``, its runs of blanks
    made one."""
    found = [line for line in text.splitlines() if re.split(r"\s{2,}", line)[0] == label]
    assert len(found) == 1, (label, found)
    return " ".join(found[0].split())


def check_widths(text: str, width: int) -> None:
    """No line past the width, nothing shortened with an ellipsis."""
    assert max(len(line) for line in text.splitlines()) <= width
    assert "…" not in text


@pytest.fixture(autouse=True)
def _shipped_config(default_display_config: None) -> None:
    """The views as shipped, whatever the environment configures."""


# ---- the small fixed plan ------------------------------------------------------------
def test_small_plan_at_80_columns_is_the_golden_file() -> None:
    text = render_plan(SMALL, width=80)
    path = GOLDEN / "plan.small.80.txt"
    if os.environ.get("LAYERSCOPE_UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")
    check_widths(text, 80)


def test_memory_parts_show_bytes_and_their_share_of_the_peak() -> None:
    text = render_plan(SMALL, width=80).split("Step time", 1)[0]
    peak = SMALL["peak_bytes"]
    assert line_with(text, "Params") == "Params 1.00 MiB 10.0%"  # 1 MiB / 10 MiB
    assert line_with(text, "Unsharded params") == "Unsharded params 2.00 MiB 20.0%"  # 2 / 10
    assert line_with(text, "Activations") == "Activations 3.00 MiB 30.0%"  # 3 / 10
    assert line_with(text, "Master weights") == "Master weights 0 B 0%"
    assert line_with(text, "Peak") == "Peak 10.00 MiB 100%"
    for key, value in SMALL["memory"].items():  # the same rule for every part
        assert f"{units.nbytes(value)} " in text and units.pct(100 * value / peak) in text, key
    assert sum(SMALL["memory"].values()) == peak


def test_peak_budget_and_headroom() -> None:
    text = " ".join(render_plan(SMALL, width=200).split())
    assert "The peak is in the backward phase, at the gather event of layers.1." in text
    # 16 GiB - 2 GiB - 10 MiB = 14,326 MiB = 13.99 GiB
    assert "Budget 16.00 GiB, reserve 2.00 GiB: fits, headroom 13.99 GiB." in text
    over = copy.deepcopy(SMALL)
    over.update(budget=8 * MiB, reserve_bytes=1 * MiB, fits=False, headroom_bytes=-3 * MiB)
    text = " ".join(render_plan(over, width=200).split())
    assert "Budget 8.00 MiB, reserve 1.00 MiB: does not fit, 3.00 MiB over." in text  # 10-(8-1)
    unknown = copy.deepcopy(SMALL)
    unknown.update(budget=None, fits=None, headroom_bytes=None)
    assert "No budget" in render_plan(unknown, width=80)


def test_step_time_by_part_and_throughput() -> None:
    text = render_plan(SMALL, width=80).split("Step time", 1)[1]  # below the memory table
    assert line_with(text, "Compute") == "Compute 6 ms 60.0%"  # 6 ms / 10 ms
    assert line_with(text, "Recompute") == "Recompute 2 ms 20.0%"
    assert line_with(text, "Exposed comm") == "Exposed comm 1 ms 10.0%"
    assert line_with(text, "Optimizer") == "Optimizer 1 ms 10.0%"
    assert line_with(text, "Step") == "Step 10 ms 100%"  # 6 + 2 + 1 + 1
    flat = " ".join(text.split())
    assert "Collectives: 4 ms per step, 1 ms of it exposed" in flat
    # 4,096 tokens / 10 ms = 409,600 tokens/s; MFU 0.42 written as the views write a %
    assert "Throughput: 410 K tokens/s per GPU; MFU 42.0% (an upper bound)" in flat
    assert "12 G model FLOPs per step" in flat
    assert "Activations kept for the backward: 512.00 KiB; recompute 3 G FLOPs per step" in flat


def test_heading_names_the_run() -> None:
    flat = " ".join(render_plan(SMALL, width=80).split())
    assert flat.startswith("Plan for one GPU of 4: NVIDIA H100 SXM5 80GB (h100) ")
    assert (
        "Sharding fsdp (3 units), precision bf16-mixed, optimizer adamw; micro-batch 4,096 "
        "tokens, grad_accum 2; checkpointing blocks: 2 modules; rank 0." in flat
    )
    assert "Note: step_time is a lower bound: MFU is an upper bound" in flat


def test_module_table_and_max_rows() -> None:
    check_widths(render_plan(SMALL, width=120), 120)
    text = render_plan(SMALL, width=160, fold=False)
    header = "Module Type Params Unit Ckpt Kept Recomputed Recompute FLOPs Unsharded Gather Reduce"
    assert line_with(text, "Module") == header
    assert line_with(text, "<root>") == "<root> Net 3,000,000 yes - 3.00 MiB 0 B 0 7.81 KiB " + (
        "3.91 KiB 15.62 KiB"  # 8,000 / 1,024 = 7.81; 4,000 / 1,024 = 3.91; 16,000 / 1,024
    )
    assert line_with(text, "layers.0") == (
        "layers.0 Layer 1,000,000 yes yes 256.00 KiB 1.00 MiB 1.5 G 2.00 MiB 1.00 MiB 4.00 MiB"
    )
    short = render_plan(SMALL, width=160, max_rows=1, fold=False)
    assert not any(line.startswith("layers.") for line in short.splitlines())
    assert "Showing 1 of 3 rows (max_rows 1)." in short


def test_repeated_blocks_fold_into_one_row_of_their_sum() -> None:
    text = render_plan(SMALL, width=160)
    # layers.0 and layers.1 are equal rows: one row of their sums, 2 x each value
    assert line_with(text, "layers.0–1 ×2") == (
        "layers.0–1 ×2 Layer 2,000,000 yes yes 512.00 KiB 2.00 MiB 3 G 4.00 MiB 2.00 MiB 8.00 MiB"
    )
    assert "A row ×N is N repeated blocks with equal rows: their sum." in text
    assert "Showing 1 of 2 rows (max_rows 1)." in render_plan(SMALL, width=160, max_rows=1)
    with pytest.raises(ls.InvalidInputError, match="fold"):
        render_plan(SMALL, fold="yes")  # type: ignore[arg-type]


def test_narrow_widths_drop_columns_and_say_so() -> None:
    text = render_plan(SMALL, width=80)
    assert "Hidden to fit 80 columns: Type, Unit" in text
    assert "(widen with --width / width=)." in " ".join(text.split())
    for width in (20, 30, 40, 50, 60, 70, 80, 100, 120, 160):
        out = render_plan(SMALL, width=width)
        assert max(len(line) for line in out.splitlines()) <= width, width
    assert render_plan(SMALL, width=19).strip().startswith("(19 columns is too narrow")


def test_without_modules_or_units() -> None:
    ddp = copy.deepcopy(SMALL)
    ddp["options"].update(sharding="ddp", checkpoint=None, fsdp_units=[])
    ddp.update(modules=[], checkpoint=[])
    text = render_plan(ddp, width=80)
    assert "Sharding ddp, " in text and "no checkpointing" in text
    assert "No module rows: no FSDP units and no checkpointed modules." in text


def test_bad_options_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="width must be an int >= 1, got 0"):
        render_plan(SMALL, width=0)
    with pytest.raises(InvalidInputError, match="max_rows must be an int >= 1, got -1"):
        render_plan(SMALL, max_rows=-1)
    with pytest.raises(InvalidInputError, match="section must be a plan's section"):
        render_plan({"peak_bytes": 1})


def test_show_prints_at_the_terminal_width(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    show_plan(SMALL)
    assert capsys.readouterr().out == render_plan(SMALL, width=100)
    buf = io.StringIO()
    show_plan(SMALL, file=buf, width=80)
    assert buf.getvalue() == render_plan(SMALL, width=80)
    show_sweep(SWEEP)
    assert capsys.readouterr().out == render_sweep(SWEEP, width=100)


# ---- the sweep -----------------------------------------------------------------------
def test_sweep_table() -> None:
    text = render_sweep(SWEEP, width=120)
    check_widths(text, 120)
    flat = " ".join(text.split())
    assert flat.startswith("Plan sweep: 4 plans over world_size × checkpoint ")
    assert "The same in every plan: micro_batch 2, sharding fsdp, precision bf16-mixed" in flat
    assert line_with(text, "GPUs") == "GPUs Checkpoint Fits Peak Headroom Step Tokens/s MFU"
    rows = [" ".join(line.split()) for line in text.splitlines() if re.match(r" +(8|16) ", line)]
    assert rows == [
        # 8 GiB - 9 GiB = -1 GiB; 4,096 / 10 ms = 410 K tokens/s
        "8 none no 9.00 GiB -1.00 GiB 10 ms 410 K 40.0%",
        "8 blocks (2) yes 6.00 GiB 2.00 GiB 12 ms 341 K 33.0%",  # 4,096 / 12 ms = 341 K
        "16 none yes 7.00 GiB 1.00 GiB 11 ms 372 K 36.0%",
        "16 blocks (2) yes 5.00 GiB 3.00 GiB 13 ms 315 K 30.0%",
    ]


def test_sweep_at_80_columns_and_narrower() -> None:
    for width in (30, 50, 80):
        text = render_sweep(SWEEP, width=width)
        check_widths(text, width)
    text = render_sweep(SWEEP, width=50)
    assert "Hidden to fit 50 columns:" in text
    assert line_with(text, "GPUs").startswith("GPUs Checkpoint Fits")


# ---- a real plan ---------------------------------------------------------------------
@cache
def real_plan() -> ls.Plan:
    return ls.plan(
        tiny_gpt(), input_shape=(2, 16), input_dtype=torch.long, world_size=8,
        sharding="fsdp", checkpoint="blocks",
    )  # fmt: skip


@pytest.mark.parametrize("width", [80, 120])
def test_a_real_plan_renders_its_own_numbers(width: int) -> None:
    plan = real_plan()
    text = plan.render(width=width, fold=False)
    assert (
        text
        == render_plan(plan.section(), width=width, fold=False)
        == render_plan(json.loads(json.dumps(plan.section())), width=width, fold=False)
    )  # fresh or read back from JSON, the same text
    check_widths(text, width)
    peak = plan.peak_bytes
    act = plan.memory["activation_bytes"]
    expected = f"Activations {units.nbytes(act)} {units.pct(100 * act / peak)}"
    assert line_with(text, "Activations") == expected
    assert line_with(text, "Peak") == f"Peak {units.nbytes(peak)} 100%"
    bound = units.seconds(plan.step_time_bound or 0.0)
    assert line_with(text, "Step") == f"Step {units.seconds(plan.step_time)} 100% {bound}"
    flat = " ".join(text.split())
    assert f"the roofline lower bound is {bound} per step" in flat
    assert f"{units.pct(100 * (plan.mfu_counted or 0))} of the analysis's FLOPs" in flat
    for row in plan.modules:
        assert (row["path"] or "<root>") in text


def test_str_and_show_of_a_plan(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    plan = real_plan()
    assert str(plan) == plan.render(width=80)
    plan.show()
    assert capsys.readouterr().out == plan.render(width=80)
