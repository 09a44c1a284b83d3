"""User mistakes at the boundary are refused up front, one line naming the option (in
the CLI, the flag: never Python's spelling of it).

Each case was an exit 1 ("internal error"), a raw ``TypeError``/``AttributeError``, or
was accepted and gave a wrong answer. In Python the refusal is an ``InvalidInputError``
(a failing user formula a ``FlopFormulaError``, one of them); in the CLI it is exit 2 and
one line on stderr naming the flag.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import layerscope as ls
from layerscope.cli import main
from layerscope.errors import FlopFormulaError, InvalidInputError
from layerscope.metrics.flops import Cost

CLI_DIR = Path(__file__).resolve().parent / "data" / "cli"
#: What a whole-number option says it takes.
WHOLE = "a whole number >= {} (an int, or a float such as 8e9)"
#: What a shape too big for torch is refused with.
TOO_BIG = "must be a shape whose tensor torch can size (at most 2**63 - 1 bytes), got"


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 4), nn.ReLU())


def _inputs(batch: int) -> tuple[torch.Tensor]:
    return (torch.randn(batch, 8),)


def _huge_cost(*args: Any, out: Any, **kwargs: Any) -> Cost:
    return Cost(10**400, 10**400)


def _profile(**options: Any) -> ls.Profile:
    return ls.profile(_mlp(), torch.randn(2, 8), **options)


#: (case, what raises, the exact message).
PYTHON_CASES: list[tuple[str, Callable[[], Any], str]] = [
    (
        "register_flop_formula with a string",
        lambda: ls.register_flop_formula("aten::mm"),  # type: ignore[arg-type]
        "register_flop_formula: 'aten::mm' is a string, not an op; pass the op itself: "
        "torch.ops.aten.mm (all its overloads) or one overload, such as "
        "torch.ops.aten.mm.default",
    ),
    (
        "register_flop_formula with a formula that is no callable",
        lambda: ls.register_flop_formula(torch.ops.aten.mm)(5),  # type: ignore[arg-type]
        "the formula must be a callable formula(*args, out=..., **kwargs) -> Cost, got 5",
    ),
    (
        "show to a file that is no stream",
        lambda: _profile().show(file=5),  # type: ignore[arg-type]
        "file must be a text stream, such as sys.stdout or open(path, 'w'), got 5",
    ),
    (
        "training_footprint of None",
        lambda: ls.training_footprint(None),  # type: ignore[arg-type]
        "profile must be a Profile (ls.profile(model, x, memory=True)), got None",
    ),
    (
        "training_footprint with negative activations",
        lambda: ls.training_footprint(_profile(memory=True), activation_bytes=-1),
        f"activation_bytes must be {WHOLE.format(0)}, got -1",
    ),
    (
        "training_footprint with master_weights a string",
        lambda: ls.training_footprint(_profile(memory=True), master_weights="yes"),  # type: ignore[arg-type]
        "master_weights must be True or False, got 'yes'",
    ),
    (
        "to_meta of None",
        lambda: ls.to_meta(None),  # type: ignore[arg-type]
        "model must be an nn.Module, got None",
    ),
    *[
        (
            f"max_batch_size with budget {budget!r}",
            lambda budget=budget: ls.max_batch_size(_mlp(), _inputs, budget),
            f"budget_bytes must be {WHOLE.format(1)}, got {budget!r}",
        )
        for budget in (math.nan, math.inf, "1e9", True, 1.5)
    ],
    (
        "max_batch_size with make_input no callable",
        lambda: ls.max_batch_size(_mlp(), 5, 10**9),  # type: ignore[arg-type]
        "make_input must be a callable(batch) -> the model's inputs, got 5",
    ),
    (
        "input_shape past what torch can size",
        lambda: ls.profile(_mlp(), input_shape=(2**62, 8)),
        # 2**62 * 8 = 2**65 = 36893488147419103232 float32 elements
        f"input_shape {TOO_BIG} (4611686018427387904, 8) (36893488147419103232 elements "
        "of 4 bytes)",
    ),
    (
        "estimate with tensor_cores a string",
        lambda: ls.estimate(_profile(), "h100", tensor_cores="x"),  # type: ignore[arg-type]
        "tensor_cores must be True or False, got 'x'",
    ),
    (
        "a user formula returning 10**400",
        lambda: _profile(flop_formulas={torch.ops.aten.addmm: _huge_cost}),
        # the value shown is cut to 80 characters: "Cost(macs=" (10), "1" and 66 zeros, "..."
        "the FLOP formula _huge_cost for aten.addmm.default returned Cost(macs=1"
        + "0" * 66
        + "... (Cost); a formula must return a Cost with non-negative int macs and flops "
        "of at most 2**63 - 1",
    ),
]


@pytest.mark.parametrize(
    ("case", "call", "message"), PYTHON_CASES, ids=[c[0] for c in PYTHON_CASES]
)
def test_python_mistake_is_refused_naming_the_option(
    case: str, call: Callable[[], Any], message: str
) -> None:
    with pytest.raises(InvalidInputError) as info:
        call()
    assert str(info.value) == message
    if "formula returning" in case:
        assert isinstance(info.value, FlopFormulaError)


def test_max_batch_size_refuses_its_options_before_the_model_runs() -> None:
    calls: list[int] = []

    def make_input(batch: int) -> tuple[torch.Tensor]:
        calls.append(batch)
        return _inputs(batch)

    for options, message in (
        ({"budget_bytes": 0.5}, f"budget_bytes must be {WHOLE.format(1)}, got 0.5"),
        (
            {"budget_bytes": 10**6, "optimizer": "lion"},
            "optimizer must be one of 'sgd', 'sgd_momentum', 'adam', 'adamw' or None, got 'lion'",
        ),
        (
            {"budget_bytes": 10**6, "batch_sizes": (1, 4, 2)},
            "batch_sizes must be three increasing positive ints, such as (1, 2, 4), got (1, 4, 2)",
        ),
        (
            {"budget_bytes": 10**6, "batch_sizes": (0, 2, 4)},
            "batch_sizes[0] must be an int >= 1, got 0",
        ),
    ):
        with pytest.raises(InvalidInputError) as info:
            ls.max_batch_size(_mlp(), make_input, **options)
        assert str(info.value) == message
    assert calls == []


def test_a_whole_float_budget_is_a_byte_count() -> None:
    # Linear(8, 4): (8*4 + 4) * 4 B = 144 B of parameters; with AdamW 144 B of gradients
    # and 2 * 144 + 2 tensors * 4 B = 296 B of state: 584 B fixed before activations.
    res = ls.max_batch_size(_mlp(), _inputs, 8e3)
    assert res["budget_bytes"] == 8000 and type(res["budget_bytes"]) is int
    assert res["fixed_bytes"] == 584


DEEP = '{"x": ' + "[" * 60_000 + "]" * 60_000 + "}"

#: (case, the arguments after `layerscope profile models.py:build`, the exact stderr line).
CLI_CASES: list[tuple[str, list[str], str]] = [
    (
        "a shape past what torch can size",
        ["--input-shape", "99999999999,99999999999"],
        # 99999999999**2 = 9999999999800000000001 float32 elements
        f"--input-shape {TOO_BIG} (99999999999, 99999999999) (9999999999800000000001 "
        "elements of 4 bytes)",
    ),
    (
        "a dimension past int64",
        ["--input-shape", "1180591620717411303424,4"],
        # 2**70 * 4 = 4722366482869645213696 elements
        f"--input-shape {TOO_BIG} (1180591620717411303424, 4) (4722366482869645213696 "
        "elements of 4 bytes)",
    ),
    (
        "a keyword tensor past what torch can size",
        ["--input-shape", "2,4", "--kwargs", '{"s": {"shape": [99999999999, 99999999999]}}'],
        f"--kwargs 's' {TOO_BIG} (99999999999, 99999999999) (9999999999800000000001 "
        "elements of 4 bytes)",
    ),
    (
        "--kwargs nested 60,000 deep",
        ["--input-shape", "2,4", "--kwargs", DEEP],
        # the value is cut to 80 characters: the quote, '{"x": ' and 70 brackets, "..."
        """--kwargs must be a JSON object such as '{"n_layer": 2}', got '{"x": """
        + "[" * 70
        + "... (nested too deeply to read)",
    ),
    (
        "a seed past what torch takes",
        ["--input-shape", "2,4", "--seed", str(2**70)],
        "--seed must be an int from -9223372036854775808 to 18446744073709551615, "
        "got 1180591620717411303424",
    ),
    (
        "the roofline view with no device",
        ["--input-shape", "2,4", "--format", "roofline"],
        # was: "device='h100' ... target='h100'", Python's spelling
        "--format roofline needs a device for its roof: --spec h100 (or cpu, a100, l4, "
        "...), a profile analysed with --device meta --target h100, or a run on a GPU "
        "with a built-in spec",
    ),
    (
        "a kernel target for a model on the CPU",
        ["--input-shape", "2,4", "--target", "h100"],
        # was: "target='h100' ... (move the model to meta with ls.to_meta, ...)"
        "--target h100 makes a meta analysis follow that device's kernels; the model is "
        "on cpu, which runs cpu kernels (add --device meta, or leave --target out)",
    ),
    (
        "an unknown kernel target",
        ["--device", "meta", "--target", "h100x"],
        "--target must be one of 'cpu', 'cuda', 'h100', 'h100-pcie', 'h200', 'a100-40gb', "
        "'a100-80gb', 'l4', 'l40s', 'rtx4090', 'h100-sxm', 'h100-sxm5', 'a100', '4090', "
        "'rtx-4090', got 'h100x' (did you mean 'h100', 'h100-sxm' or 'h100-sxm5'?)",
    ),
    (
        "an unknown device spec",
        ["--spec", "h100x"],
        "--spec must be one of 'h100', 'h100-pcie', 'h200', 'a100-40gb', 'a100-80gb', "
        "'l4', 'l40s', 'rtx4090', 'h100-sxm', 'h100-sxm5', 'a100', '4090', 'rtx-4090', "
        "'cpu', got 'h100x' (did you mean 'h100', 'h100-sxm' or 'h100-sxm5'?)",
    ),
    (
        "an integer --dtype",
        ["--input-shape", "2,4", "--dtype", "int64"],
        "--dtype must be a floating-point or complex dtype such as float32, float16, "
        "bfloat16, got 'int64'",
    ),
]


@pytest.mark.parametrize(("case", "argv", "line"), CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_cli_mistake_is_exit_2_and_one_line(case: str, argv: list[str], line: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(CLI_DIR)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["profile", "models.py:build", *argv])
    finally:
        os.chdir(cwd)
    assert (code, err.getvalue(), out.getvalue()) == (2, f"layerscope: error: {line}\n", "")
