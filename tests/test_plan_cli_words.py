"""``layerscope plan``'s refusals as a CLI user reads them (flags, not Python), and
``ls.plan``'s as a Python user does: ZeRO-3 and HSDP by name, a mesh, --checkpoint's
words, the targets (a device profile's path too; the CPU refused alike)."""

from __future__ import annotations

import contextlib
import io

import pytest
import torch
from torch import nn

import layerscope as ls
from layerscope import hardware
from layerscope.cli import main
from layerscope.errors import InvalidInputError

SHARDINGS = "--sharding must be one of 'none', 'ddp', 'fsdp', 'zero1', 'zero2', got "
#: the built-in GPUs' names, aliases too (hardware.GPUS: no file but the table lists them)
GPUS = (
    f"a GPU ({', '.join(hardware.GPUS)}) or a device profile's path (*.json, layerscope "
    "calibrate's)"
)


def error(*argv: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["plan", "examples:tiny_gpt", *argv])
    assert code == 2 and out.getvalue() == ""
    return err.getvalue().removeprefix("layerscope: error: ").removesuffix("\n")


def python_error(**options: object) -> str:
    with pytest.raises(InvalidInputError) as info:
        ls.plan(nn.Linear(4, 4), torch.randn(2, 4), **options)  # type: ignore[arg-type]
    return str(info.value)


def test_zero3_is_fsdp() -> None:
    why = "(ZeRO-3 is 'fsdp': FSDP2 shards parameters, gradients and optimizer states; "
    assert error("--sharding", "zero3") == f"{SHARDINGS}'zero3' {why}did you mean 'fsdp'?)"
    assert python_error(sharding="zero3") == (
        f"{SHARDINGS.removeprefix('--')}'zero3' {why}did you mean 'fsdp'?)"
    )


def test_hsdp_points_to_its_flags_or_its_options() -> None:
    assert error("--sharding", "hsdp") == (
        f"{SHARDINGS}'hsdp' (HSDP is 'fsdp' on a 2-D mesh: give --sharding fsdp --hsdp R,S, "
        "or --mesh dp_replicate=R,dp_shard=S; did you mean 'fsdp'?)"
    )
    assert python_error(sharding="hsdp") == (
        f"{SHARDINGS.removeprefix('--')}'hsdp' (HSDP is 'fsdp' on a 2-D mesh: give "
        "sharding='fsdp' with hsdp=(R, S), or mesh={'dp_replicate': R, 'dp_shard': S}; "
        "did you mean 'fsdp'?)"
    )


def test_mesh_refusals_spell_the_mesh_as_both_write_it() -> None:
    said = (
        "mesh dp_shard=2,tp=4 means world_size=8 (--world-size 8), but world_size=16 was "
        "given: give the mesh alone"
    )
    assert error("--world-size", "16", "--mesh", "dp_shard=2,tp=4") == said
    assert python_error(world_size=16, mesh={"dp_shard": 2, "tp": 4}) == said
    assert error("--sharding", "ddp", "--mesh", "dp_shard=8") == (
        "mesh dp_shard=8 means sharding='fsdp' (--sharding fsdp), but sharding='ddp' was "
        "given: give the mesh alone"
    )
    assert error("--microbatches", "4") == (
        "microbatches is pipeline parallelism's: give a mesh with pp above 1, e.g. "
        "mesh={'dp_shard': 8, 'pp': 4} (--mesh dp_shard=8,pp=4)"
    )


def test_checkpoint_words_are_listed_and_suggested() -> None:
    assert error("--checkpoint", "Blocks") == (
        "--checkpoint must be none, blocks, op, auto or module paths (a,b), got 'Blocks' "
        "(did you mean 'blocks'?)"
    )
    assert error("--checkpoint", "blok") == (
        "--checkpoint must be none, blocks, op, auto or a module path of the model, got "
        "'blok' (did you mean 'blocks', 'blocks.1' or 'blocks.0'?)"
    )


def test_targets_name_the_gpus_and_profile_paths_and_refuse_the_cpu_alike() -> None:
    assert error("--target", "h1000") == (
        f"--target must be {GPUS}, got 'h1000' (did you mean 'h100', 'h200' or 'a100'?)"
    )
    cpu = f"must be {GPUS}, got 'cpu' (a plan prices a GPU's training step)"
    assert error("--target", "cpu") == f"--target {cpu}"
    assert python_error(target="cpu") == f"target {cpu}"
    assert python_error(target="cpux") == f"target must be {GPUS}, got 'cpux'"
