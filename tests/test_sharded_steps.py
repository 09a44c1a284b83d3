"""Sharded and replicated training steps on 2 and 4 ranks (gloo, CPU): one spawn per world
size, every strategy inside it, the third step profiled on every rank.

The model: ``Sequential(Linear(64, 7), Linear(7, 3))``, 479 parameters (448 + 7 + 21 +
3), batch 4, AdamW. Strategies: DDP in float32 and under bf16 autocast; FSDP2 with each
Linear a unit and the Sequential the root, ``reshard_after_forward`` True and False, and
``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``; and FSDP2 with the root
its one unit.

FSDP2 splits every tensor along dim 0 with ``torch.chunk`` and pads each rank's shard to
the first chunk's size. On 2 ranks: weight 0 (7 rows) 4 + 3 rows, padded 4 x 64; bias 0
4 + 3, padded 4; weight 1 (3 rows) 2 + 1, padded 2 x 7; bias 1 2 + 1, padded 2: an
all-gather input of 260 elements for unit 0 and 16 for unit 1. On 4 ranks: 7 rows chunk
2, 2, 2, 1 (padded 2 x 64 + 2 = 130 elements), 3 rows chunk 1, 1, 1 and nothing for
rank 3 (padded 1 x 7 + 1 = 8 elements).

Frozen (``FROZEN``): the first weight (7 x 64, 448 elements) with ``requires_grad=False``,
the other 31 elements trainable, under FSDP2 (each Linear a unit, float32) and DDP.
FSDP2 shards the frozen weight like the others and gathers it, but gives it no
gradient, no optimizer state and no reduce-scatter; DDP holds it whole. And under FSDP2
the whole first Linear frozen (``fsdp_frozen_unit``): unit 0 has nothing to
reduce-scatter, yet is gathered again in the backward (unit 1's backward prefetch) though
no gradient reaches it.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

import layerscope as ls
from helpers.distributed import rank_output, spawn_world
from helpers.records import StorageTracker
from layerscope.metrics.fsdpunits import fsdp_param_groups
from layerscope.planning.comm import ddp_collectives, fsdp_collectives
from layerscope.planning.strategies import model_states

TIME_LIMIT_S = 120.0
STRATEGIES = ("ddp", "ddp_bf16", "fsdp_reshard", "fsdp_keep", "fsdp_bf16", "fsdp_root")
#: the runs with the first weight frozen (module docstring)
FROZEN = ("fsdp_frozen", "ddp_frozen", "fsdp_frozen_unit")


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def _build(strategy: str) -> tuple[nn.Module, nn.Module]:
    """(the module to call, the module to profile)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 7), nn.Linear(7, 3))
    if "_frozen" in strategy:
        model[0].weight.requires_grad_(False)
    if strategy == "fsdp_frozen_unit":
        model[0].bias.requires_grad_(False)
    if strategy.startswith("ddp"):
        ddp = DistributedDataParallel(model)
        return ddp, ddp
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    options: dict[str, Any] = {"reshard_after_forward": strategy != "fsdp_keep"}
    if strategy == "fsdp_bf16":
        options["mp_policy"] = policy
    if strategy == "fsdp_root":
        fully_shard(model)  # FSDP2's default: the root is not resharded after forward
        return model, model
    if strategy == "hsdp":  # 2 replicas of 2-way shards (4 ranks)
        from torch.distributed.device_mesh import init_device_mesh

        options["mesh"] = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    for unit in (model[0], model[1], model):
        fully_shard(unit, **options)
    return model, model


def _worker(rank: int, store: str, out: str, world: int) -> None:
    facts: dict[str, Any] = {}
    with rank_output(rank, out, facts):
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
        x = torch.randn(4, 64)
        for strategy in STRATEGIES + FROZEN + (("hsdp",) if world == 4 else ()):
            call, profiled = _build(strategy)
            params = list(call.parameters())
            opt = torch.optim.AdamW(params, lr=0.01)
            autocast = (
                torch.autocast("cpu", dtype=torch.bfloat16)
                if strategy == "ddp_bf16"
                else contextlib.nullcontext()
            )
            # steps 2 to 4 are profiled and tracked; the step kept is the one whose tracker
            # saw the lowest peak. On a loaded machine gloo's thread now and then frees a
            # collective's buffer after the caller allocates the next one (a whole unit's
            # gathered parameters once, 1,924 B on 2 ranks): a late free can only raise a
            # peak, so the least of three steps is the program's own.
            kept: tuple[int, ls.Profile, int] | None = None
            for step in range(5):
                if step >= 2:
                    held = [_local(p) for p in params]
                    held += [_local(t) for s in opt.state.values() for t in s.values()]
                    with (
                        StorageTracker(held) as tracker,
                        ls.Profiler(profiled, memory=True, optimizer=opt) as p,
                    ):
                        with autocast:
                            y = call(x)
                        y.float().sum().backward()
                    grads = sum(_local(q.grad).nbytes for q in params if q.grad is not None)
                    if kept is None or tracker.peak < kept[0]:
                        kept = (tracker.peak, p.profile, grads)
                else:
                    with autocast:
                        y = call(x)
                    y.float().sum().backward()
                opt.step()
                opt.zero_grad()
            assert kept is not None
            peak, prof, grads = kept
            path = os.path.join(out, f"{strategy}{rank}.json")
            prof.save(path)
            loaded = ls.load(path)
            facts[strategy] = {
                "memory": {k: v for k, v in loaded.memory.items() if k != "timeline"},
                "comm": loaded.comm,
                "root": dict(loaded.root.metrics),
                "unsupported": prof.unsupported_ops,
                "outside_comm": [k for k in prof.outside if "comm" in k],
                "wrapped_left": [
                    k
                    for m in call.modules()
                    for g in fsdp_param_groups(m)
                    for k in vars(g)
                    if k in ("post_backward", "unshard")
                ],
                "partial": prof.partial_metrics,
                "tracker_peak": peak,
                "local_params": sum(_local(q).nbytes for q in params),
                "local_grads": grads,
                "states": sum(_local(t).nbytes for s in opt.state.values() for t in s.values()),
            }
        dist.barrier()


def _spawn(world: int, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return spawn_world(_worker, world, tmp_path_factory, "sharded", TIME_LIMIT_S)


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return _spawn(2, tmp_path_factory)


@pytest.fixture(scope="module")
def four(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return _spawn(4, tmp_path_factory)


def _row(payload: int, wire: int) -> dict[str, int]:
    return {"calls": 1, "bytes": payload, "wire_bytes": wire}


#: elements of each rank's padded shard of unit 0 and unit 1 (module docstring)
SHARD = {2: (260, 16), 4: (130, 8)}
#: elements each rank holds, unpadded: world -> per rank
LOCAL = {2: (276, 203), 4: (138, 138, 138, 65)}
PARAMS = 479 * 4  # 1,916 B
STEP = 4 * 4  # AdamW's step: a float32 scalar per parameter


@pytest.mark.slow
def test_local_bytes_are_the_shards(two: list[dict[str, Any]], four: list[dict[str, Any]]) -> None:
    """Parameters, gradients and AdamW states each rank holds: the test's own sums of
    ``to_local().nbytes``, and by hand (2 ranks: 260 + 16 and 195 + 8 elements)."""
    for world, ranks in ((2, two), (4, four)):
        for rank, facts in enumerate(ranks):
            for strategy in STRATEGIES:
                f = facts[strategy]
                held = PARAMS if strategy.startswith("ddp") else 4 * LOCAL[world][rank]
                assert f["local_params"] == f["local_grads"] == held, (world, rank, strategy)
                states = f["memory"]["baseline"]["optimizer_states"]
                assert states == f["states"] == 2 * held + STEP  # exp_avg, exp_avg_sq, step
                if strategy.startswith("ddp"):
                    assert f["root"]["param_bytes"] == f["memory"]["baseline"]["parameters"]
                    continue
                assert f["root"]["local_param_bytes"] == f["local_params"]
                assert f["root"]["local_grad_bytes"] == f["local_grads"]
                assert f["root"]["grad_bytes"] == PARAMS  # the global figure beside it
                # at rest a rank holds its padded shards: every rank the same
                assert f["memory"]["baseline"]["parameters"] == 4 * sum(SHARD[world])


def test_absolute_peak_matches_a_tracker(
    two: list[dict[str, Any]], four: list[dict[str, Any]]
) -> None:
    """Held at start plus the session's peak against the test's tracker of every storage
    (and resize), plus, under DDP, the reducer's gradient bucket, which no tracker of
    Python-visible storages sees: one bucket of the 1,916 B of gradients."""
    for world, ranks in ((2, two), (4, four)):
        for rank, facts in enumerate(ranks):
            for strategy in STRATEGIES:
                mem = facts[strategy]["memory"]
                ours = mem["baseline_bytes"] + mem["session_peak_bytes"]
                buckets = PARAMS if strategy.startswith("ddp") else 0
                assert mem["baseline"]["other"] == buckets
                theirs = facts[strategy]["tracker_peak"] + buckets
                # 1 %, or 128 B for these 8-KB peaks: on a loaded machine the order in
                # which gloo's thread and the caller drop small tensors varies (112 B
                # apart once, the root-only unit on 2 ranks; equal when not loaded)
                slack = max(0.01 * theirs, 128)
                assert abs(ours - theirs) <= slack, (world, rank, strategy, ours, theirs)


def test_collectives_by_kind_and_unit(
    two: list[dict[str, Any]], four: list[dict[str, Any]]
) -> None:
    """Payloads and ring wire bytes per rank: an all-gather sends its shard to n - 1
    ranks; a reduce-scatter's input is n shards, (n - 1) / n of it crosses the wire; an
    all-reduce moves 2 (n - 1) / n of its buffer. DDP all-reduces one bucket of the 1,916
    B of float32 gradients, in the backward of the module whose gradient came last
    (``0``)."""
    for world, ranks in ((2, two), (4, four)):
        n = world
        for facts in ranks:
            for strategy in STRATEGIES:
                f = facts[strategy]
                assert f["unsupported"] == {} and f["partial"] == [], strategy
                assert f["outside_comm"] == [], strategy  # every collective on a module
                assert f["wrapped_left"] == []  # FSDP's methods are their class's again
            for strategy in ("ddp", "ddp_bf16"):
                wire = 2 * (n - 1) * PARAMS // n  # 1,916 or 2,874
                assert facts[strategy]["comm"] == {
                    "0": {"backward": {"all_reduce": _row(PARAMS, wire)}}
                }
            for strategy, size in (("fsdp_reshard", 4), ("fsdp_keep", 4), ("fsdp_bf16", 2)):
                comm = {}
                for unit, shard in zip(("0", "1"), SHARD[world], strict=True):
                    gather = _row(size * shard, (n - 1) * size * shard)
                    scatter = _row(n * 4 * shard, (n - 1) * 4 * shard)  # reduced in fp32
                    backward = {"reduce_scatter": scatter}
                    if strategy != "fsdp_keep":  # gathered again for the backward
                        backward = {"all_gather": gather, **backward}
                    comm[unit] = {"forward": {"all_gather": gather}, "backward": backward}
                assert facts[strategy]["comm"] == comm, (world, strategy)
            # one unit, the root: every tensor gathered at once; the root is not
            # resharded after the forward, so nothing is gathered in the backward, and
            # its reduce-scatter is the root's backward, not outside
            both = 4 * sum(SHARD[world])  # 1,104 B on 2 ranks, 552 on 4
            assert facts["fsdp_root"]["comm"] == {
                "": {
                    "forward": {"all_gather": _row(both, (n - 1) * both)},
                    "backward": {"reduce_scatter": _row(n * both, (n - 1) * both)},
                }
            }
            root = facts["fsdp_reshard"]["root"]
            assert root["comm_bytes"] == 4 * sum(SHARD[world])
            assert root["backward_comm_wire_bytes"] == 2 * (n - 1) * 4 * sum(SHARD[world])


#: the strategies as the planning arithmetic names them (sharding, precision)
PLANNED = {
    "ddp": ("ddp", "fp32"),
    "ddp_bf16": ("ddp", "bf16-mixed"),
    "fsdp_reshard": ("fsdp", "fp32"),
    "fsdp_keep": ("fsdp", "fp32"),
    "fsdp_bf16": ("fsdp", "bf16-mixed"),
    "fsdp_root": ("fsdp", "fp32"),
}


def test_planned_model_states_equal_the_runs(
    two: list[dict[str, Any]], four: list[dict[str, Any]]
) -> None:
    """``planning.strategies.model_states`` from the parameters' shapes alone gives every
    rank's parameter (at rest), gradient and optimizer-state bytes as measured."""
    shapes = [(7, 64), (7,), (3, 7), (3,)]
    for world, ranks in ((2, two), (4, four)):
        for rank, facts in enumerate(ranks):
            for strategy, (sharding, precision) in PLANNED.items():
                planned = model_states(
                    shapes, world_size=world, sharding=sharding, precision=precision, rank=rank
                )
                f, where = facts[strategy], (world, rank, strategy)
                assert planned.param_bytes == f["memory"]["baseline"]["parameters"], where
                assert planned.grad_bytes == f["local_grads"], where
                assert planned.optimizer_state_bytes == f["states"], where
                assert planned.master_weight_bytes == 0


def test_planned_collectives_equal_the_runs(
    two: list[dict[str, Any]], four: list[dict[str, Any]]
) -> None:
    """``planning.comm`` from the parameters' shapes gives the measured collectives: per
    FSDP2 unit and phase, and DDP's all-reduce (one bucket of 1,916 B: under 1 MiB)."""
    w0, w1 = [(7, 64), (7,)], [(3, 7), (3,)]
    for world, ranks in ((2, two), (4, four)):
        for facts in ranks:
            for strategy, size in (("fsdp_reshard", 4), ("fsdp_keep", 4), ("fsdp_bf16", 2)):
                planned = fsdp_collectives(
                    {"0": w0, "1": w1, "": []}, world_size=world, param_bytes=size,
                    reshard_after_forward=strategy != "fsdp_keep",
                )  # fmt: skip
                assert planned == facts[strategy]["comm"], (world, strategy)
            root = fsdp_collectives({"": w0 + w1}, world_size=world)
            assert root == facts["fsdp_root"]["comm"]
            for strategy in ("ddp", "ddp_bf16"):
                measured = facts[strategy]["comm"]["0"]["backward"]
                assert ddp_collectives([(s, 4) for s in w0 + w1], world_size=world) == measured


#: how each strategy is planned: (sharding, precision, FSDP2 units, reshard_after_forward);
#: "hsdp" (4 ranks only) is FSDP2 on a (replicate 2, shard 2) mesh
PLANS: dict[str, tuple[str, str, list[str], bool]] = {
    "ddp": ("ddp", "fp32", [], True),
    "ddp_bf16": ("ddp", "bf16-mixed", [], True),
    "fsdp_reshard": ("fsdp", "fp32", ["0", "1"], True),
    "fsdp_keep": ("fsdp", "fp32", ["0", "1"], False),
    "fsdp_bf16": ("fsdp", "bf16-mixed", ["0", "1"], True),
    "fsdp_root": ("fsdp", "fp32", [], True),
    "hsdp": ("fsdp", "fp32", ["0", "1"], True),
}


def _by_kind(comm: dict[str, Any]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for phases in comm.values():
        for kinds in phases.values():
            for kind, row in kinds.items():
                mine = out.setdefault(kind, {"calls": 0, "bytes": 0, "wire_bytes": 0})
                for key in mine:
                    mine[key] += row[key]
    return out


def test_plans_equal_the_runs(two: list[dict[str, Any]], four: list[dict[str, Any]]) -> None:
    """``ls.plan`` from one analysis of the unsharded model on meta: every rank's model
    states exactly, its collectives by kind exactly, and its peak of the forward and
    backward within 2 % of the measured absolute peak. The measured peak is the tracker's
    plus what no tracker of Python storages sees: DDP's bucket (1,916 B) and the input
    the test made before the step (4 x 64 float32 = 1,024 B), which the plan counts in
    ``other_bytes``. The optimizer step is planned too but not measured here. HSDP (4
    ranks): each gradient shard is all-reduced over the 2 replicas, in place."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 7), nn.Linear(7, 3))
    x = torch.randn(4, 64)
    for world, ranks in ((2, two), (4, four)):
        for rank, facts in enumerate(ranks):
            for strategy, (sharding, precision, units, reshard) in PLANS.items():
                if strategy not in facts:
                    continue  # hsdp on 2 ranks
                hsdp = (2, 2) if strategy == "hsdp" else None  # rank % 2: its shard
                plan = ls.plan(
                    model, x, world_size=world, rank=rank % 2 if hsdp else rank,
                    sharding=sharding, precision=precision, units=units,
                    reshard_after_forward=reshard, reserve_bytes=0, hsdp=hsdp,
                )  # fmt: skip
                f, where = facts[strategy], (world, rank, strategy)
                assert plan.states["param_bytes"] == f["memory"]["baseline"]["parameters"]
                assert plan.states["grad_bytes"] == f["local_grads"], where
                assert plan.states["optimizer_state_bytes"] == f["states"], where
                assert _by_kind(plan.comm) == _by_kind(f["comm"]), where
                timeline = plan.timeline
                planned = max(
                    total
                    for total, phase in zip(timeline["total"], timeline["phase"], strict=True)
                    if phase != "optimizer"
                )
                measured = f["tracker_peak"] + (PARAMS if sharding == "ddp" else 0) + x.nbytes
                # unloaded, every strategy is within 0.7 % (most exact); on a loaded
                # machine gloo's thread drops a small buffer late now and then (204 B
                # once, the root-only unit on 4 ranks): 256 B of slack for that
                slack = max(0.02 * measured, 256)
                assert abs(planned - measured) <= slack, (where, planned, measured)


#: trainable elements each rank holds, by run (``FROZEN``). The first weight frozen: 2
#: ranks: bias 0 (4 + 3 rows), weight 1 (2 + 1 rows of 7), bias 1 (2 + 1): 4 + 14 + 2 = 20
#: and 3 + 7 + 1 = 11; 4 ranks: bias 0 chunks 2, 2, 2, 1, weight 1 and bias 1 one row each
#: on ranks 0 to 2: 2 + 7 + 1 = 10, rank 3 1. The first Linear frozen: those less bias
#: 0's. DDP: all 31 on every rank.
FROZEN_LOCAL = {
    "fsdp_frozen": {2: (20, 11), 4: (10, 10, 10, 1)},
    "fsdp_frozen_unit": {2: (16, 8), 4: (8, 8, 8, 0)},
    "ddp_frozen": {2: (31, 31), 4: (31,) * 4},
}
#: the trainable parameters' padded shards of units 0 and 1 (elements): bias 0's 7 rows
#: chunk 4 (2 ranks) or 2 (4 ranks); unit 1's as ``SHARD``; none in a frozen unit 0
FROZEN_GRAD_SHARD = {
    "fsdp_frozen": {2: (4, 16), 4: (2, 8)},
    "fsdp_frozen_unit": {2: (0, 16), 4: (0, 8)},
}
#: trainable tensors (AdamW's 4-B step each)
FROZEN_TENSORS = {"fsdp_frozen": 3, "fsdp_frozen_unit": 2, "ddp_frozen": 3}


def test_frozen_parameters_plan_as_they_run(
    two: list[dict[str, Any]], four: list[dict[str, Any]]
) -> None:
    """Frozen parameters: ``ls.plan`` gives every rank's parameters at rest, its
    gradients, AdamW's states and its collectives by kind exactly as measured, and the
    peak of the forward and backward as ``test_plans_equal_the_runs`` bounds it. By hand:
    FSDP2 holds the padded shards of all 479 elements (``SHARD``), gradients of its
    trainable elements only (``FROZEN_LOCAL``), AdamW two states of those and a step per
    trainable tensor; unit 0 gathers 260 elements (2 ranks), in the forward and again in
    the backward, but reduce-scatters only its trainable ones' padded shard (bias 0: 4
    elements, 2 x 4 x 4 = 32 B on 2 ranks; none when the whole Linear is frozen). DDP
    holds all 1,916 B, gradients of the 31 trainable elements (124 B) in one bucket."""
    for world, ranks in ((2, two), (4, four)):
        n = world
        for rank, facts in enumerate(ranks):
            for strategy in FROZEN:
                torch.manual_seed(0)
                model = nn.Sequential(nn.Linear(64, 7), nn.Linear(7, 3))
                model[0].weight.requires_grad_(False)
                model[0].bias.requires_grad_(strategy != "fsdp_frozen_unit")
                x = torch.randn(4, 64)
                f, where = facts[strategy], (world, rank, strategy)
                fsdp = strategy.startswith("fsdp")
                plan = ls.plan(
                    model, x, world_size=world, rank=rank, sharding="fsdp" if fsdp else "ddp",
                    precision="fp32", units=["0", "1"] if fsdp else [], reserve_bytes=0,
                )  # fmt: skip
                held = 4 * sum(SHARD[world]) if fsdp else PARAMS
                trained = 4 * FROZEN_LOCAL[strategy][world][rank]
                states = 2 * trained + 4 * FROZEN_TENSORS[strategy]
                assert plan.states["param_bytes"] == f["memory"]["baseline"]["parameters"]
                assert plan.states["param_bytes"] == held, where
                assert plan.states["grad_bytes"] == f["local_grads"] == trained, where
                assert plan.states["optimizer_state_bytes"] == f["states"] == states, where
                assert _by_kind(plan.comm) == _by_kind(f["comm"]), where
                if fsdp:
                    grads = FROZEN_GRAD_SHARD[strategy][world]
                    scatter = 4 * n * sum(grads)
                    assert _by_kind(f["comm"])["reduce_scatter"]["bytes"] == scatter, where
                    gathered = 4 * 2 * sum(SHARD[world])  # every unit, forward and backward
                    assert _by_kind(f["comm"])["all_gather"]["bytes"] == gathered, where
                planned = max(
                    t
                    for t, phase in zip(plan.timeline["total"], plan.timeline["phase"], strict=True)
                    if phase != "optimizer"
                )
                measured = f["tracker_peak"] + (0 if fsdp else 4 * 31) + x.nbytes
                slack = max(0.02 * measured, 256)
                assert abs(planned - measured) <= slack, (where, planned, measured)
