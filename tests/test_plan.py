"""``ls.plan``: the memory timeline replayed by hand, the time model's arithmetic, the
options refused, the JSON round trip, sweeps and the largest micro-batch. Real runs
check the plan in ``test_sharded_steps.py`` (sharding) and ``test_plan_checkpointing.py``
(checkpointing)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import layerscope as ls
from layerscope.errors import InvalidInputError, SchemaError
from layerscope.hardware import SPECS
from layerscope.planning.cluster import Cluster
from layerscope.planning.collectives import consecutive
from layerscope.planning.strategies.autocast import AutocastEvents
from layerscope.planning.strategies.fsdp import FSDPEvents, Unit, UnitWork, fsdp_exposed
from layerscope.planning.strategies.replicated import ddp_exposed
from layerscope.planning.timeline import Setup, replay
from layerscope.planning.timemodel import link_time

#: an analysed timeline of Sequential(Linear, Linear) (the shape of a real one): enter
#: and exit of each module, then the backward of each with its peak, then the end
TIMELINE: dict[str, list[Any]] = {
    "event": ["enter", "enter", "exit", "enter", "exit", "exit", "backward", "peak",
              "backward", "peak", "end"],
    "path": ["", "0", "0", "1", "1", "", "1", "1", "0", "0", ""],
    "bytes": [0, 0, 100, 100, 140, 140, 140, 240, 200, 1200, 1040],
}  # fmt: skip
#: gradients of each module's own parameters, as analysed (they appear in its backward)
GRADS = {"0": 1000, "1": 40}


def test_fsdp_replay_by_hand() -> None:
    """Two FSDP2 units on 2 GPUs, 4-byte parameters: unit 0 has a padded shard of 260
    elements (all-gather output and unsharded parameters 2 x 260 x 4 = 2,080 B), unit 1
    of 16 (128 B); 1,000 B at rest. Each point's total, derived event by event."""
    units = [Unit("", 0), Unit("0", 260), Unit("1", 16)]
    setup = Setup(
        {"param_bytes": 1000}, grads=dict(GRADS), final_grads=(260 + 16) * 4,
        events=[FSDPEvents(2, units)],
    )  # fmt: skip
    points = replay(setup, TIMELINE)
    got = [(p.phase, p.event, p.path, p.total) for p in points]
    rest = 1000
    assert got == [
        ("forward", "enter", "", rest),  # the root has no parameters of its own
        ("forward", "gather", "0", rest + 2080 + 2080),  # output + unsharded
        ("forward", "enter", "0", rest + 4160),
        ("forward", "exit", "0", rest + 4160 + 100),
        # unit 1 gathered while unit 0's output waits for its all-gather to be done;
        # unit 0 resharded after its forward
        ("forward", "gather", "1", rest + 2080 + 128 + 128 + 100),
        ("forward", "enter", "1", rest + 128 + 128 + 100),
        ("forward", "exit", "1", rest + 256 + 140),
        ("forward", "exit", "", rest + 128 + 140),  # unit 1 resharded; its output freed after
        # backward of unit 1: gathered (output freed at once), unit 0 prefetched
        ("backward", "gather", "1", rest + 128 + 128 + 140),
        ("backward", "prefetch", "0", rest + 128 + 2080 + 140),
        ("backward", "backward", "1", rest + 128 + 2080 + 140),
        ("backward", "peak", "1", rest + 128 + 2080 + 240),  # 40 B of gradients in it
        # when the backward reaches module 0 (200 B analysed, 40 of them unit 1's
        # gradients): unit 1's post-backward: resharded, a reduce-scatter input of
        # 2 x 16 x 4 = 128 B, then its gradients freed for its 64 B shard
        ("backward", "reduce_scatter", "1", rest + 2080 + 128 + 200),
        ("backward", "reduce_scatter", "1", rest + 2080 + 128 + 160 + 64),
        # unit 0 unsharded from the prefetched output, both alive for a moment: the
        # backward's peak
        ("backward", "gather", "0", rest + 2080 + 2080 + 128 + 64 + 160),
        ("backward", "backward", "0", rest + 2080 + 128 + 64 + 160),
        ("backward", "peak", "0", rest + 2080 + 128 + 64 + 160 + 1000),
        # at the end (1,040 B analysed: all gradients): unit 0 resharded, unit 1's
        # reduce-scatter input freed, unit 0's of 2 x 260 x 4 allocated; its 1,000 B of
        # gradients freed for a 1,040 B shard
        ("backward", "reduce_scatter", "0", rest + 2080 + 64 + 1000),
        ("backward", "reduce_scatter", "0", rest + 2080 + 64 + 1040),
        ("backward", "end", "", rest + 64 + 1040),
        ("optimizer", "step", "", rest + 1104),
    ]
    peak = max(points, key=lambda p: p.total)
    assert (peak.event, peak.path, peak.total) == ("gather", "0", rest + 4512)
    assert sum(peak.parts.values()) == peak.total


def test_ddp_autocast_replay_by_hand() -> None:
    """DDP under autocast, analysed in bf16: float32 gradients (twice the analysed), a
    bucket at rest, and while a module's backward ends its 16-bit gradient beside the
    float32 one; weight copies made in the forward, the ones not saved dropped at its end."""
    autocast = AutocastEvents(
        grad_scale=2.0, weight_copies={"0": 1000, "1": 40}, saved_copies={"1": 40},
        cast_grads={"0": 1000, "1": 40},
    )  # fmt: skip
    setup = Setup(
        {"param_bytes": 2080, "comm_buffer_bytes": 2080},
        grads=dict(GRADS),
        final_grads=2080,
        events=[autocast],
    )
    points = replay(setup, TIMELINE)
    rest = 4160
    totals = {(p.event, p.path): p.total for p in points}
    assert totals[("exit", "0")] == rest + 100 + 1000  # the copy of module 0's weight
    assert totals[("exit", "1")] == rest + 140 + 1040
    assert totals[("exit", "")] == rest + 140 + 40  # autocast is done: only saved copies
    # module 1's backward: analysed 240 of which 40 are its gradients, now 80 B
    assert totals[("peak", "1")] == rest + 200 + 40 + 80
    # module 0's peak: 1,200 analysed with 1,040 of gradients; copies all gone
    assert totals[("peak", "0")] == rest + 160 + 2080
    cast = [p.total for p in points if p.event == "grad_cast"]
    assert cast == [rest + 200 - 40 + 80 + 40, rest + 1040 - 1040 + 2080 + 1000]


#: 4 GPUs per node at 100 B/s, NICs at 100 B/s per GPU, no latency, line rates reached:
#: every collective is its ring's wire bytes over 100 B/s
PLAIN = Cluster(4, 100.0, "pcie", 4, 100.0, 1.0, 1.0, 0.0, 0.0, 0.0)


def test_time_model_arithmetic() -> None:
    """Ring times and overlap by hand, 4 GPUs at 100 B/s (``PLAIN``: the tree's
    all-reduce, 2 b / (0.92 x 100), is dearer than the ring's)."""
    four = consecutive(PLAIN, 4)
    assert link_time("all_gather", 400, four) == 3 * 400 / 100  # (n-1) shards sent
    assert link_time("reduce_scatter", 1600, four) == 1600 * 3 / 4 / 100
    assert link_time("all_reduce", 800, four) == 2 * 3 / 4 * 800 / 100
    assert link_time("all_reduce", 800, consecutive(PLAIN, 1)) == 0.0
    units = [
        UnitWork("", 1.0, 2.0, 100, 400, False),  # gather 3 s, scatter 3 s
        UnitWork("a", 5.0, 1.0, 200, 800, True),  # gather 6 s, scatter 6 s
    ]
    total, exposed = fsdp_exposed(units, four)
    assert total == 3 + 6 + 6 + 3 + 6  # a is gathered twice
    # forward: root's 3 s exposed, a's 6 s under root's 1 s: 5 exposed; backward in
    # reverse: a first, gathered again (6 s exposed), its compute (1 s) hides nothing of
    # the root's gather (the root is not resharded); the root's 2 s hide 2 of a's 6 s
    # reduce-scatter; the last reduce-scatter (root, 3 s) is exposed
    assert exposed == 3 + 5 + 6 + 0 + (6 - 2) + 3
    assert ddp_exposed([400, 400], four, backward=10.0) == (12.0, 6.0)
    assert ddp_exposed([400, 400], four, backward=3.0) == (12.0, 9.0)


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))


def test_step_time_and_mfu_follow_from_the_parts() -> None:
    x = torch.randn(8, 64)
    plan = ls.plan(_mlp(), x, world_size=8, sharding="ddp", precision="bf16-mixed")
    parts = ("compute", "recompute", "exposed_comm", "optimizer")
    assert plan.step_time == pytest.approx(sum(plan.time[k] for k in parts))
    assert plan.time["exposed_comm"] <= plan.time["comm"]
    root = plan.analysis.root.metrics  # type: ignore[union-attr]
    assert plan.model_flops == root["flops"] + root["backward_flops"]
    assert plan.mfu_counted == pytest.approx(plan.model_flops / (plan.step_time * 989.4e12))
    # a float input: no tokens, so neither throughput nor the per-token convention's MFU
    assert plan.tokens is None and plan.tokens_per_s is None and plan.mfu is None
    bound = plan.time_bound or {}
    assert plan.step_time_bound == pytest.approx(sum(bound[k] for k in parts))
    assert (plan.step_time_bound or 0.0) <= plan.step_time
    # one small bucket (float32 gradients): NCCL's tree with its LL128 protocol is the
    # cheapest, latency-bound: 14 us base, a chain of 8 within the node both ways (1.25
    # us a step), 2 b at 0.92 x 7/9 of NVLink's 0.824 x 450 GB/s
    b = (64 * 256 + 256 + 256 * 64 + 64) * 4
    assert plan.comm[""]["backward"]["all_reduce"]["bytes"] == b
    nvlink = 0.824 * 450e9
    near = 14e-6 + 2 * 7 * 1.25e-6 + 2 * b / (0.92 * 7 / 9 * nvlink)
    assert plan.time["comm"] == pytest.approx(near)
    # 16 GPUs on 2 nodes: one hop between the nodes each way (8.5 us), 0.92 x 120/128
    far = ls.plan(_mlp(), x, world_size=16, sharding="ddp", precision="bf16-mixed")
    across = 14e-6 + 2 * (7 * 1.25e-6 + 1 * 8.5e-6) + 2 * b / (0.92 * 120 / 128 * nvlink)
    assert far.time["comm"] == pytest.approx(across)
    assert SPECS["h100"].interconnect == 450e9 and SPECS["h100"].node_size == 8


def test_memory_parts_add_up_and_budget() -> None:
    x = torch.randn(8, 64)
    plan = ls.plan(_mlp(), x, world_size=2, sharding="fsdp", budget=10**6, reserve_bytes=1000)
    assert sum(plan.memory.values()) == plan.peak_bytes
    assert plan.headroom_bytes == 10**6 - 1000 - plan.peak_bytes and plan.fits
    for k, total in enumerate(plan.timeline["total"]):
        assert total == sum(plan.timeline[p][k] for p in plan.memory)
    tight = ls.plan(_mlp(), x, world_size=2, sharding="fsdp", budget=plan.peak_bytes)
    assert tight.fits is False  # the default reserve of 2 GiB does not fit 1 MB


def test_refusals() -> None:
    model, x = _mlp(), torch.randn(8, 64)
    with pytest.raises(InvalidInputError, match="sharding must be"):
        ls.plan(model, x, sharding="tp")
    with pytest.raises(InvalidInputError, match="world_size must be 1"):
        ls.plan(model, x, sharding="none", world_size=8)
    with pytest.raises(InvalidInputError, match="unknown option 'micro_batch'"):
        ls.plan(model, x, micro_batch=2)
    # FSDP2's own options are refused under another strategy rather than ignored
    with pytest.raises(InvalidInputError, match=r"units \(--units\) is FSDP2's.*'ddp'"):
        ls.plan(model, x, sharding="ddp", units=["0"])
    with pytest.raises(InvalidInputError, match=r"reshard_after_forward .* got 'zero2'"):
        ls.plan(model, x, sharding="zero2", reshard_after_forward=False)
    with pytest.raises(InvalidInputError, match=r"replicate x shard = 8, but world_size is 16"):
        ls.plan(model, x, world_size=16, hsdp=(2, 4))
    with pytest.raises(InvalidInputError, match="hsdp is FSDP2 on a 2-D mesh"):
        ls.plan(model, x, sharding="ddp", hsdp=(2, 4))
    with pytest.raises(InvalidInputError, match="units: no module '0x' in the model"):
        ls.plan(model, x, units=["0x"])
    with pytest.raises(InvalidInputError, match="target must be a GPU"):
        ls.plan(model, x, target={"name": "box", "kind": "cpu", "bandwidth": 1e9,
                                   "peak_flops": {"float32": 1e12}})  # fmt: skip
    prof = ls.profile(model, x)
    with pytest.raises(InvalidInputError, match="backward=True, memory=True"):
        ls.plan(prof)
    prof = ls.profile(model, x, backward=True, memory=True)  # float32
    with pytest.raises(InvalidInputError, match="computes in bfloat16"):
        ls.plan(prof, precision="bf16-mixed")
    assert ls.plan(prof, precision="fp32").analysis is prof  # reused as it is
    with pytest.raises(InvalidInputError, match="needs the plan made from a model"):
        ls.plan(prof, precision="fp32").max_micro_batch()


def test_json_round_trip(tmp_path: Path) -> None:
    plan = ls.plan(_mlp(), torch.randn(8, 64), world_size=4, checkpoint=["0"])
    plan.save(tmp_path / "plan.json")
    loaded = ls.load_plan(tmp_path / "plan.json")
    assert loaded.section() == json.loads(json.dumps(plan.section()))
    assert loaded.render(width=100) == plan.render(width=100)
    assert ls.load(tmp_path / "plan.json").root.type == "Sequential"  # the analysis
    data = json.loads((tmp_path / "plan.json").read_text())
    # the load lets each parsed module go once read; from_dict leaves the caller's data be
    assert ls.Plan.from_dict(data).analysis.to_dict() == loaded.analysis.to_dict()  # type: ignore[union-attr]
    assert data == json.loads((tmp_path / "plan.json").read_text())
    data["plan"]["timeline"]["total"] = "many"
    with pytest.raises(SchemaError, match=r"\$\.plan\.timeline\.total"):
        ls.Plan.from_dict(data)
    del data["plan"]
    with pytest.raises(SchemaError, match="no 'plan' section"):
        ls.Plan.from_dict(data)


def test_sweep_rows_are_the_plans() -> None:
    """Two micro-batches (two analyses) times two world sizes: each row equals the plan
    made alone."""
    model = _mlp()
    sweep = ls.plan_sweep(model, input_shape=(4, 64), micro_batch=[4, 8], world_size=[2, 4])
    assert sweep.axes == ["micro_batch", "world_size"]
    assert [(r["micro_batch"], r["world_size"]) for r in sweep.rows] == [
        (4, 2), (4, 4), (8, 2), (8, 4)
    ]  # fmt: skip
    for row in sweep.rows:
        alone = ls.plan(model, input_shape=(row["micro_batch"], 64), world_size=row["world_size"])
        assert row["peak_bytes"] == alone.peak_bytes
        assert row["step_time"] == pytest.approx(alone.step_time)


def test_max_micro_batch_is_the_edge_of_fitting() -> None:
    """The largest batch whose plan fits; one more does not."""
    model = _mlp()
    budget = ls.plan(model, input_shape=(24, 64), world_size=2, reserve_bytes=0).peak_bytes
    plan = ls.plan(model, input_shape=(4, 64), world_size=2, reserve_bytes=0, budget=budget)
    best = plan.max_micro_batch(limit=64)
    assert best >= 24

    def fits(b: int) -> bool:
        return bool(ls.plan(model, input_shape=(b, 64), world_size=2, reserve_bytes=0,
                            budget=budget).fits)  # fmt: skip

    assert fits(best) and not fits(best + 1)


def test_transformers_trains_on_meta() -> None:
    """GPT-2 in training mode without a cache or mask: transformers asks whether the
    position ids pack several sequences by reading a value, which meta cannot give; an
    analysis answers "no" for meta position ids and puts the helper back."""
    transformers = pytest.importorskip("transformers")
    masking = pytest.importorskip("transformers.masking_utils")
    before = masking.find_packed_sequence_indices
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16, use_cache=False
    )
    model = transformers.GPT2Model(config).train()
    ids = torch.randint(0, 64, (2, 8))
    plan = ls.plan(model, ids, world_size=2, checkpoint="blocks", precision="fp32",
                   loss_fn=lambda o: o[0].sum())  # fmt: skip
    assert plan.analysis is not None and plan.analysis.model["device"] == "meta"
    assert plan.checkpoint == ["h.0", "h.1"] and plan.tokens == 2 * 8
    assert masking.find_packed_sequence_indices is before
    # the same for any analysis on meta, not only a plan's
    prof = ls.profile(ls.to_meta(model).train(), ids.to("meta"), backward=True,
                      loss_fn=lambda o: o[0].sum())  # fmt: skip
    assert prof.root.metrics["backward_flops"] > prof.root.metrics["flops"] > 0
    assert masking.find_packed_sequence_indices is before
    positions = torch.arange(8).unsqueeze(0)
    assert masking.find_packed_sequence_indices(positions) is None  # the real one, unpacked


def test_a_loaded_analysis_plans_the_same(tmp_path: Path) -> None:
    """The plan reads only what a saved profile keeps (gradient shapes, storage records,
    the memory timeline), so the analysis written to JSON and read back plans alike."""
    model, x = _mlp(), torch.randn(8, 64).bfloat16()
    prof = ls.profile(ls.to_meta(model).bfloat16(), x.to("meta"), backward=True, memory=True,
                      target="h100")  # fmt: skip
    prof.save(tmp_path / "a.json")
    fresh = ls.plan(prof, world_size=4, hsdp=(2, 2), checkpoint=["0"])
    loaded = ls.plan(ls.load(tmp_path / "a.json"), world_size=4, hsdp=(2, 2), checkpoint=["0"])
    assert loaded.section() == fresh.section()
    # 2 replicas of 2-way shards: each unit's gradient shard all-reduced over 2 GPUs
    assert fresh.comm[""]["backward"]["all_reduce"]["bytes"] == fresh.states["grad_bytes"]


def test_a_custom_gpu_brings_its_interconnect() -> None:
    """A spec from a mapping: its interconnect (bytes/s per direction) and node size set
    the collectives' link (PCIe's: 0.75 of it reached, NCCL's PCIe latencies); past the
    node, the inter-node bandwidth given (per GPU, 0.96 of it reached)."""
    spec = {"name": "box", "bandwidth": 1e12, "peak_flops": {"bfloat16": 1e14},
            "memory_bytes": 10**10, "interconnect": 1e11, "node_size": 4}  # fmt: skip
    assert ls.DeviceSpec.from_mapping(spec).interconnect == 1e11
    x = torch.randn(8, 64)
    near = ls.plan(_mlp(), x, target=spec, world_size=4, sharding="ddp")
    far = ls.plan(_mlp(), x, target=spec, world_size=8, sharding="ddp", inter_node_bandwidth=1e10)
    b = near.comm[""]["backward"]["all_reduce"]["bytes"]  # float32 gradients, 1 bucket
    assert b == (64 * 256 + 256 + 256 * 64 + 64) * 4
    intra, nics = 0.75 * 1e11, 4 * 1e10 * 0.96
    # 4 GPUs, one node: NCCL's tree (a chain of 4: 2 x 3 steps of 4.0 us over PCIe, 8.4
    # us base; 2 b at 0.92 of the link) beats the ring (2 x 3 steps of 5.7 us; 2 x 3/4 b)
    tree = 8.4e-6 + 2 * 3 * 4.0e-6 + 2 * b / (0.92 * intra)
    ring = 8.4e-6 + 2 * 3 * 5.7e-6 + 2 * 3 / 4 * b / intra
    assert tree < ring
    assert near.time["comm"] == pytest.approx(tree)
    # 8 GPUs on 2 nodes: the ring (12 steps within a node, 2 between at 14 us; 2 x 7/8 b
    # at the smaller of the link and the node's NICs) against the tree (a chain of 4 and
    # one hop between nodes, both ways; on 2 nodes at the node's link, as NCCL's tuner)
    ring = 8.4e-6 + 12 * 5.7e-6 + 2 * 14e-6 + 2 * 7 / 8 * b / min(intra, nics)
    tree = 8.4e-6 + 2 * (3 * 4.0e-6 + 1 * 14e-6) + 2 * b / (0.92 * intra)
    assert far.time["comm"] == pytest.approx(min(ring, tree)) == pytest.approx(tree)
    with pytest.raises(InvalidInputError, match="node_size must be a positive int"):
        ls.DeviceSpec.from_mapping({**spec, "node_size": 0})
