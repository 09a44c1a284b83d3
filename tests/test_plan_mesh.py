"""``ls.plan(mesh=...)``: a device mesh as torchtitan states it, its placement on the
cluster's nodes, the data-parallel options it stands for, and the axes refused until
they are modelled."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import layerscope as ls
from layerscope.cli import main
from layerscope.errors import InvalidInputError
from layerscope.planning.mesh import Mesh, check_mesh, parse_mesh


def test_the_ranks_are_laid_out_tp_innermost() -> None:
    """torchtitan's order, pp, dp_replicate, dp_shard, cp, tp: strides are the products
    of the axes inside."""
    mesh = Mesh(dp_replicate=2, dp_shard=16, cp=2, tp=8, pp=4)
    assert mesh.world_size == 4 * 2 * 16 * 2 * 8 == 2048
    assert [mesh.stride(a) for a in ("tp", "cp", "dp_shard", "dp_replicate", "pp")] == [
        1, 8, 16, 256, 512,
    ]  # fmt: skip


def test_each_axis_placed_on_the_nodes() -> None:
    """8 GPUs a node: tp 8 at stride 1 fills a node; dp_shard 32 at stride 8 puts one
    rank a node over 32 nodes. tp 2 × cp 2 × dp_shard 8: tp and cp inside a node (stride
    1 and 2), dp_shard at stride 4 has 2 ranks a node over 4 nodes."""
    assert Mesh(dp_shard=32, tp=8).placement(8) == {"dp_shard": (1, 32), "tp": (8, 1)}
    assert Mesh(dp_shard=8, cp=2, tp=2).placement(8) == {
        "dp_shard": (2, 4), "cp": (2, 1), "tp": (2, 1),
    }  # fmt: skip
    assert Mesh(dp_shard=32, tp=8).placement_words(8) == (
        "dp_shard 32 across 32 nodes, 1 per node; tp 8 inside a node"
    )


def test_a_data_parallel_mesh_is_planned_as_its_strategy() -> None:
    model, x = nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 16)), torch.randn(4, 16)
    for sizes, (world, sharding, hsdp) in (
        ({"dp_shard": 4}, (4, "fsdp", None)),
        ({"dp_replicate": 4}, (4, "ddp", None)),
        ({"dp_replicate": 2, "dp_shard": 4}, (8, "fsdp", [2, 4])),
        ({"dp_shard": 1}, (1, "none", None)),
    ):
        plan = ls.plan(model, x, mesh=sizes)
        o = plan.options
        assert (o["world_size"], o["sharding"], o["hsdp"]) == (world, sharding, hsdp)
        assert o["mesh"] == check_mesh(sizes).to_dict()
    # the same plan as the options it stands for
    direct = ls.plan(model, x, world_size=8, hsdp=(2, 4))
    meshed = ls.plan(model, x, mesh={"dp_replicate": 2, "dp_shard": 4})
    assert (meshed.peak_bytes, meshed.step_time) == (direct.peak_bytes, direct.step_time)


def test_refusals() -> None:
    model, x = nn.Linear(16, 16), torch.randn(4, 16)
    with pytest.raises(InvalidInputError, match="must split into 4 equal chunks"):
        ls.plan(model, torch.randn(4, 6), mesh={"dp_shard": 4, "cp": 2})
    with pytest.raises(InvalidInputError, match="tp=8: the model has no tensor-parallel plan"):
        ls.plan(model, x, mesh={"dp_shard": 4, "tp": 8})
    with pytest.raises(InvalidInputError, match="unknown axis 'dp'"):
        ls.plan(model, x, mesh={"dp": 4})
    said = r"means world_size=4 \(--world-size 4\), but world_size=8"
    with pytest.raises(InvalidInputError, match=said):
        ls.plan(model, x, mesh={"dp_shard": 4}, world_size=8)
    with pytest.raises(InvalidInputError, match="--mesh must be AXIS=N pairs"):
        parse_mesh("dp_shard:4")
    assert parse_mesh("dp_shard=32, tp=8") == Mesh(dp_shard=32, tp=8)


def test_the_cli_takes_a_mesh(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", "examples:tiny_gpt", "--mesh", "dp_replicate=2,dp_shard=2", "--width", "100"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "hsdp" in out.lower() or "2 x 2" in out
    assert main(["plan", "examples:tiny_gpt", "--mesh", "dp_shard=3,ep=2"]) == 2
    assert "ep must divide dp_shard" in capsys.readouterr().err
