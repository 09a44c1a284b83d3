"""FSDP2's float8 all-gather (``float8_all_gather``, torchao's
``enable_fsdp_float8_all_gather``): the float8 linears' weights are cast on each rank's
shard, gathered and held unsharded at 1 byte an element.

The model: a 2-layer Llama, hidden 64, MLP 128, 4 heads of 16 (2 KV heads), vocab 256,
over 4 GPUs (FSDP2, bf16 mixed precision). A layer's parameters, and each one's padded
shard over 4 (dim 0 split, rounded up): q 64 x 64 (16 x 64 = 1,024), k and v 32 x 64
(8 x 64 = 512 each), o 64 x 64 (1,024), gate and up 128 x 64 (32 x 64 = 2,048 each),
down 64 x 128 (16 x 128 = 2,048), two norms of 64 (16 each): 9,248 elements, of them
9,216 the linears' weights and 32 the norms'."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import layerscope as ls
from layerscope.errors import InvalidInputError
from layerscope.planning.kernels import Kernels, float8

transformers = pytest.importorskip("transformers")

LINEARS, NORMS = 1_024 + 512 + 512 + 1_024 + 3 * 2_048, 2 * 16  # 9,216 and 32 a shard


@pytest.fixture(scope="module")
def plans() -> tuple[Any, Any]:
    """(float8, float8 gathered in float8)."""
    config = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=256, use_cache=False,
    )  # fmt: skip
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    ids = torch.zeros(2, 32, dtype=torch.long, device="meta")
    common: dict[str, Any] = dict(kwargs={"input_ids": ids, "labels": ids}, target="h100",
                                  world_size=4, float8=True)  # fmt: skip
    return ls.plan(model, **common), ls.plan(model, **common, float8_all_gather=True)


def test_the_weights_are_gathered_and_held_in_float8(plans: tuple[Any, Any]) -> None:
    """A layer's unsharded parameters: 4 shards of 9,216 float8 and 32 bf16 elements,
    4 x (9,216 + 64) = 37,120 B, against 4 x 9,248 x 2 = 73,984 B in bf16; gathered
    forward and again for the backward: 2 x 9,280 B."""
    plain, eight = plans
    for layer in (0, 1):
        was = {r["path"]: r for r in plain.modules}[f"model.layers.{layer}"]
        row = {r["path"]: r for r in eight.modules}[f"model.layers.{layer}"]
        assert was["unsharded_bytes"] == 4 * (LINEARS + NORMS) * 2 == 73_984
        assert row["unsharded_bytes"] == 4 * (LINEARS * 1 + NORMS * 2) == 37_120
        assert was["gather_bytes"] == 2 * (LINEARS + NORMS) * 2
        assert row["gather_bytes"] == 2 * (LINEARS + NORMS * 2) == 18_560
        # the reduce-scatter is the gradients', in float32 either way
        assert row["reduce_bytes"] == was["reduce_bytes"]
    assert eight.peak_bytes < plain.peak_bytes
    assert eight.states == plain.states  # the shards at rest are the float32 masters
    assert "float8_all_gather (torchao's enable_fsdp_float8_all_gather)" in " ".join(eight.notes)
    assert "float8 linears\n  gathered in float8;" in eight.render(width=80)
    assert eight.options["float8_all_gather"] is True
    assert "float8_all_gather" not in plain.options


def test_the_forward_casts_a_shard_of_the_weight() -> None:
    """Gathered in float8 over 4, the forward's weight cast moves a quarter of the
    weight's bytes: a 64 -> 32 linear over 8 rows, input 512 and weight 2,048 elements,
    5 B an element cast: 5 x 512 + 5 x 2,048 / 4."""
    k = Kernels({("fc", "forward", "matmul", (1, 8, 32)): [1, 32768, 5632, 0]})
    rows = float8(k, frozenset({"fc"}), 2.0, shard=4).rows
    assert rows[("fc", "forward", "memory", ("float8_cast",))] == [4, 0, 5 * 512 + 5 * 512, 0]


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"float8_all_gather": True}, "it needs float8=True"),
        ({"float8": True, "float8_all_gather": True, "sharding": "ddp"},
         "needs sharding='fsdp' over 2 or more GPUs, got sharding='ddp' over 4"),
        ({"float8": True, "float8_all_gather": True, "world_size": 1},
         "got sharding='fsdp' over 1"),
        ({"float8": True, "float8_all_gather": "yes"}, "float8_all_gather"),
    ],
)  # fmt: skip
def test_refused_without_float8_or_fsdp(options: dict[str, Any], says: str) -> None:
    with pytest.raises(InvalidInputError, match=says):
        ls.plan(torch.nn.Linear(64, 64), torch.randn(8, 64), **{"world_size": 4, **options})


def test_saved_and_loaded_and_on_the_command_line(
    plans: tuple[Any, Any], tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from layerscope.cli import main

    eight = plans[1]
    eight.save(tmp_path / "p.json")
    loaded = ls.load_plan(tmp_path / "p.json")
    assert loaded.options["float8_all_gather"] is True
    assert loaded.render(width=80) == eight.render(width=80)
    model = tmp_path / "net.py"
    model.write_text("import torch\nmodel = torch.nn.Sequential(torch.nn.Linear(64, 64))\n")
    args = ["plan", f"{model}:model", "--input-shape", "8,64", "--world-size", "4",
            "--float8", "--float8-all-gather", "--width", "80"]  # fmt: skip
    assert main(args) == 0
    assert "float8 linears gathered in float8" in capsys.readouterr().out.replace("\n  ", " ")


def test_a_sweep_gathers_in_float8_where_fsdp2_shards() -> None:
    """Asked for a sweep, the float8 all-gather applies to the rows FSDP2 shards over 2
    or more GPUs; the others run without it (a 64 x 64 linear: its weight's 4,096
    elements, 1,024 a rank over 4, sent as 1,024 B instead of 2,048)."""
    sweep = ls.plan_sweep(
        torch.nn.Sequential(torch.nn.Linear(64, 64)), torch.randn(8, 64), world_size=[1, 4],
        sharding=["fsdp", "ddp"], float8=True, float8_all_gather=True,
    )  # fmt: skip
    assert "float8 gathered in float8 under FSDP2." in sweep.render(width=200)
    assert len(sweep.rows) == 4
    model = torch.nn.Sequential(torch.nn.Linear(64, 64))
    one = ls.plan(model, torch.randn(8, 64), world_size=4, float8=True, float8_all_gather=True)
    # the root unit's own gather, forward only (the root is not resharded), this rank's
    # payload: its weight shard at 1 byte, its bias shard (64 elements, 16 a rank) at 2
    assert one.modules[0]["gather_bytes"] == 1_024 + 16 * 2


def test_linears_whose_features_are_not_multiples_of_16_stay_in_high_precision() -> None:
    """``torch._scaled_mm`` needs both features to be multiples of 16: a 64 -> 8 and an
    8 -> 64 linear (a rank-8 adapter's) are not converted, a 64 -> 64 one is."""
    from layerscope.planning.kernels import float8_linears

    model = torch.nn.Sequential(
        torch.nn.Linear(64, 8), torch.nn.Linear(8, 64), torch.nn.Linear(64, 64)
    )
    assert float8_linears(ls.profile(model, torch.randn(4, 64))) == frozenset({"2"})
