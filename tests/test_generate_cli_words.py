"""``layerscope generate`` and ``layerscope serve`` refuse in the flags' words: the
server's lengths, ``--group-size`` without ``--weights int4``, generate's ``--input-shape``
in its documented form (BATCH,PROMPT), a base model on a real device named with its class
that has a head, a prompt beyond the model's positions; and ``serve --help`` says what
each ``--weights`` scheme is."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
from pathlib import Path

import pytest

from layerscope.cli import main
from layerscope.cli.serve_cmd import add_arguments, check_flags

pytest.importorskip("transformers")

LLAMA = json.dumps(
    {"num_hidden_layers": 1, "hidden_size": 32, "intermediate_size": 64,
     "num_attention_heads": 2, "vocab_size": 64}
)  # fmt: skip
GPT2 = json.dumps({"n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 64, "n_positions": 128})


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--max-context", "0"], "--max-context must be an int >= 2, got 0"),
        (["--new-tokens", "0"], "--new-tokens must be an int >= 1, got 0"),
        (["--prompt", "0"], "--prompt must be an int >= 1, got 0"),
        (["--tp", "0"], "--tp must be an int >= 1, got 0"),
        (["--block-size", "0"], "--block-size must be an int >= 1, got 0"),
        (["--memory-utilization", "0"], "--memory-utilization must be a positive number, got 0.0"),
        (
            ["--group-size", "64"],
            "--group-size 64 is int4's scale group: give --weights int4 with it (--weights "
            "is not given)",
        ),
        (
            ["--group-size", "64", "--weights", "fp8"],
            "--group-size 64 is int4's scale group: give --weights int4 with it (--weights is fp8)",
        ),
    ],
)
def test_serve_names_its_flags(flags: list[str], words: str) -> None:
    # was "max_context must be an int >= 2, got 0", "group_size (64) ... needs
    # weights='int4', got weights=None": the Python names
    assert run(["serve", "transformers:llama", *flags]) == (2, "", f"layerscope: error: {words}\n")


def test_serve_group_size_with_int4_is_accepted_by_the_flags() -> None:
    args = ["transformers:llama", "--group-size", "64", "--weights", "int4"]
    check_flags(_serve_parser().parse_args(args))


@pytest.mark.parametrize(
    ("shape", "allowed"),
    [
        ("0,16", "BATCH,PROMPT (positive integers, e.g. 1,2048)"),
        ("1,x", "BATCH,PROMPT (positive integers, e.g. 1,2048)"),
        ("1,2,3", "BATCH,PROMPT (two positive integers, e.g. 1,2048)"),
    ],
)
def test_generate_input_shape_is_batch_and_prompt(shape: str, allowed: str) -> None:
    # was "--input-shape must be a shape such as 2,3,32,32": an image's
    assert run(["generate", "transformers:llama", "--input-shape", shape]) == (
        2,
        "",
        f"layerscope: error: --input-shape must be {allowed}, got '{shape}'\n",
    )


def test_a_base_model_on_a_real_device_points_to_its_head() -> None:
    argv = ["generate", "transformers:llama", "--model-args", LLAMA, "--device", "cpu",
            "--input-shape", "1,8", "--max-new-tokens", "2"]  # fmt: skip
    assert run(argv) == (
        2,
        "",
        "layerscope: error: profile_generate needs a model with generate() (transformers): "
        "LlamaModel (transformers:llama) has none (a base model has no head to generate "
        "with); give transformers:LlamaForCausalLM, the same model with its "
        "language-modelling head\n",
    )


def test_beyond_the_positions_on_a_real_device_names_the_flags() -> None:
    argv = ["generate", "transformers:GPT2LMHeadModel", "--model-args", GPT2, "--device",
            "cpu", "--input-shape", "2,16", "--max-new-tokens", "200"]  # fmt: skip
    assert run(argv) == (
        2,
        "",
        "layerscope: error: prompt + new_tokens = 216 is beyond GPT2LMHeadModel's 128 "
        "positions (config.max_position_embeddings): give prompt + new_tokens <= 128 "
        "(--input-shape's PROMPT and --max-new-tokens)\n",
    )


def test_serve_help_says_fp8_is_w8a8() -> None:
    """fp8 is priced as W8A8 at the FP8 peak (docs/generate.md), not weight-only."""
    helps = {a.dest: a.help for a in _serve_parser()._actions}
    assert helps["weights"] == (
        "the linears' weights as deployed: bf16, fp16, fp8, int8, int4 (default: as "
        "built); int8 and int4 weight-only (matmuls at the compute dtype), fp8 W8A8 "
        "(matmuls at the target's FP8 peak where it has one)"
    )
    assert helps["group_size"] == "with --weights int4, its scale group (default 128)"


def _serve_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p


def test_a_spec_whose_token_ids_are_not_batch_by_prompt(tmp_path: Path) -> None:
    # was "--input-shape must be BATCH,PROMPT ..., got None": a flag not given
    (tmp_path / "ids.py").write_text(
        "import torch\nfrom torch import nn\n\n\n"
        "def build():\n    return nn.Embedding(8, 4), (torch.zeros(5, dtype=torch.long),)\n"
    )
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = run(["generate", "ids.py:build"])
    finally:
        os.chdir(here)
    assert result == (
        2,
        "",
        "layerscope: error: generate needs the prompt's shape: the spec's token ids are of "
        "shape (5,), not (batch, prompt); give --input-shape BATCH,PROMPT (e.g. 1,2048)\n",
    )
