"""Collectives by kind: the wire-bytes formulas, the kinds of the ops, FSDP2's copy ops
priced (no FLOPs, their bytes) and ``Profile.comm`` in JSON. Real DDP and FSDP2 steps on
2 and 4 ranks, whose collectives land on their units with sizes derived by hand, are in
``test_sharded_steps.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import layerscope as ls
from layerscope.metrics.bytes import _PLANS, _Plan, op_bytes
from layerscope.metrics.commkinds import comm_calls, op_kind, wire_bytes
from layerscope.metrics.flops.registry import is_zero_cost


# ---- the formulas ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kind", "payload", "world", "expected"),
    [
        ("all_reduce", 1000, 4, 1500),  # 2 (4 - 1) / 4 x 1000
        ("all_reduce", 1000, 3, 4000 / 3),  # 2 x 2 / 3 x 1000: not a whole number
        ("all_gather", 1040, 2, 1040),  # (2 - 1) x this rank's 1040
        ("all_gather", 100, 4, 300),  # (n - 1) / n of the gathered 4 x 100
        ("reduce_scatter", 2080, 2, 1040),  # (2 - 1) / 2 of the whole input
        ("reduce_scatter", 400, 4, 300),
        ("all_to_all", 400, 4, 300),
        ("broadcast", 512, 8, 512),
        ("reduce", 512, 8, 512),
        ("send", 12, 1, 12),
        ("recv", 12, 4, 12),
        ("all_reduce", 1000, 1, 0),  # one rank: nothing crosses the wire
        ("broadcast", 512, 1, 0),
    ],
)
def test_wire_bytes_of_a_ring(kind: str, payload: int, world: int, expected: float) -> None:
    got = wire_bytes(kind, payload, world)
    assert got == pytest.approx(expected, rel=1e-15)
    assert type(got) is (int if float(expected).is_integer() else float)


def test_wire_bytes_of_gather_and_scatter_depend_on_the_root() -> None:
    assert wire_bytes("gather", 100, 4, root=True) == 300  # receives 3 other chunks
    assert wire_bytes("gather", 100, 4) == 100  # sends its own
    assert wire_bytes("scatter", 400, 4, root=True) == 300  # sends all but its own chunk
    assert wire_bytes("scatter", 0, 4, received=100) == 100  # receives its chunk
    with pytest.raises(ValueError, match="unknown kind of collective 'gossip'"):
        wire_bytes("gossip", 1, 2)


def test_kinds_of_the_ops() -> None:
    ops = torch.ops
    assert op_kind(ops.c10d.allreduce_.default) == "all_reduce"
    assert op_kind(ops.c10d._allgather_base_.default) == "all_gather"
    assert op_kind(ops.c10d._reduce_scatter_base_.default) == "reduce_scatter"
    assert op_kind(ops._c10d_functional.all_gather_into_tensor.default) == "all_gather"
    assert op_kind(ops._c10d_functional.reduce_scatter_tensor.default) == "reduce_scatter"
    assert op_kind(ops._c10d_functional.all_to_all_single.default) == "all_to_all"
    assert op_kind(ops.c10d.alltoall_base_.default) == "all_to_all"
    assert op_kind(ops.c10d.broadcast_.default) == "broadcast"
    assert op_kind(ops.c10d.send.default) == "send"
    assert op_kind(ops.c10d.recv_.default) == "recv"


def test_functional_ops_take_the_group_size_from_their_arguments() -> None:
    t = torch.empty(9, device="meta")  # 36 bytes
    gather = torch.ops._c10d_functional.all_gather_into_tensor.default
    (call,) = comm_calls(gather, (t, 4, "no-such-group"), {}, 36)
    assert (call.kind, call.payload, call.wire) == ("all_gather", 36, 108)  # 3 x 36
    scatter = torch.ops._c10d_functional.reduce_scatter_tensor.default
    (call,) = comm_calls(scatter, (t, "sum", 3, "no-such-group"), {}, 36)
    assert (call.kind, call.wire) == ("reduce_scatter", 24)  # 2 / 3 x 36


def test_collective_namespaces_cost_no_flops_also_when_defined_later() -> None:
    """DTensor's tensor parallelism calls ``_c10d_functional::_wrap_tensor_autograd``,
    which torch.distributed defines when its functional collectives are imported (after
    layerscope's own import may have listed the namespace's ops): it is zero-cost by its
    namespace, not reported as an op without a FLOP formula."""
    import torch.distributed._functional_collectives  # defines the op

    assert is_zero_cost(torch.ops._c10d_functional._wrap_tensor_autograd.default)
    assert not is_zero_cost(torch.ops.aten.mm.default)


# ---- FSDP2's own ops -------------------------------------------------------------------
def _fsdp_ops() -> Any:
    # importing it defines the fsdp ops
    import torch.distributed.fsdp._fully_shard._fsdp_collectives

    return torch.ops.fsdp


def test_fsdp_ops_cost_no_flops_and_move_their_copies() -> None:
    fsdp = _fsdp_ops()
    for op in (
        fsdp.all_gather_copy_in.default,
        fsdp.split_with_sizes_copy.default,
        fsdp.chunk_cat.default,
        fsdp.copy_.default,
    ):
        assert is_zero_cost(op)

    def moved(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> int:
        plan = _PLANS.get(id(op)) or _Plan(op)
        read, written = op_bytes(plan, args, kwargs, out)
        return read + written

    # rank 1 of 2 copies its flattened shards (4 x 64 and 4 float32) into its half of a
    # 520-element buffer: reads 260 x 4 = 1,040 B, writes the same 1,040 B, not the
    # whole buffer
    shards = [torch.randn(256), torch.randn(4)]
    buffer = torch.empty(520)
    copy_in = fsdp.all_gather_copy_in.default
    args = (shards, buffer, [256, 4], 260, 1)
    out = copy_in(*args)
    assert moved(copy_in, args, {}, out) == 1040 + 1040
    assert torch.equal(out[0][:256], shards[0])
    assert torch.equal(buffer[260:516], shards[0])

    # the copy out: reads the gathered 2 x 260 float32 (2,080 B), writes the two
    # unsharded tensors, 8 x 64 and 8 (the padded rows included): 2,080 B
    split = fsdp.split_with_sizes_copy.default
    outs = [torch.empty(2, 256), torch.empty(2, 4)]
    args2 = (out[1].view(2, -1), [256, 4])
    split(*args2, dim=1, out=outs)
    assert moved(split, args2, {"dim": 1, "out": outs}, None) == 2080 + 2080

    # the reduce-scatter input: 7 x 64 and 7 gradients (1,820 B) into the padded
    # 2 x 260 float32 buffer (2,080 B)
    cat = fsdp.chunk_cat.default
    grads = [torch.randn(7, 64), torch.randn(7)]
    rs_in = torch.empty(2, 260)
    cat(grads, 0, 2, out=rs_in)
    assert moved(cat, (grads, 0, 2), {"out": rs_in}, None) == 1820 + 2080


# ---- Profile.comm in JSON --------------------------------------------------------------
def test_comm_table_round_trips_through_json(tmp_path: Path) -> None:
    prof = ls.profile(nn.Linear(2, 2), torch.randn(1, 2))
    prof.comm = {
        "0": {"backward": {"reduce_scatter": {"calls": 1, "bytes": 2080, "wire_bytes": 1040}}},
        "<outside>": {"forward": {"all_reduce": {"calls": 2, "bytes": 8, "wire_bytes": 4.5}}},
    }
    prof.save(tmp_path / "p.json")
    loaded = ls.load(tmp_path / "p.json")
    assert loaded.comm == prof.comm
    data = json.loads((tmp_path / "p.json").read_text())
    data["comm"]["0"]["backward"]["reduce_scatter"]["calls"] = -1
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(
        ls.SchemaError,
        match=r"\$\.comm\[\"0\"\]\.backward\.reduce_scatter\.calls: expected an integer >= 0",
    ):
        ls.load(tmp_path / "bad.json")
    assert "comm" not in ls.profile(nn.Linear(2, 2)).to_dict()  # absent when none


# ---- a 2-rank FSDP2 step -----------------------------------------------------------------
def test_a_loop_cycle_sums_its_steps_comm() -> None:
    from layerscope.analysis.merge import merge_profiles

    steps = [ls.profile(nn.Linear(2, 2), torch.randn(1, 2)) for _ in range(2)]
    steps[0].comm = {"": {"backward": {"all_reduce": {"calls": 1, "bytes": 24, "wire_bytes": 24}}}}
    steps[1].comm = {
        "": {
            "backward": {"all_reduce": {"calls": 2, "bytes": 48, "wire_bytes": 48}},
            "forward": {"broadcast": {"calls": 1, "bytes": 8, "wire_bytes": 8}},
        }
    }
    merged = merge_profiles(steps)
    assert merged.comm == {
        "": {
            "backward": {"all_reduce": {"calls": 3, "bytes": 72, "wire_bytes": 72}},  # 1+2, 24+48
            "forward": {"broadcast": {"calls": 1, "bytes": 8, "wire_bytes": 8}},
        }
    }
