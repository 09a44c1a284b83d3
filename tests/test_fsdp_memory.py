"""FSDP2's memory in the simulated allocator: unsharded parameters, buffers of collectives.

One 2-rank gloo run (CPU) of a 3-block MLP, ``Sequential(Linear(64, 256), ReLU(),
Linear(256, 64))`` per block, batch 8, fp32: each block a ``fully_shard`` unit and the
model the root, with ``reshard_after_forward`` True and False, the same model unsharded
(``plain``), and sharded with bf16 parameters and float32 reduction (``mp``). Step 3 of
each is profiled (forward and backward; SGD with momentum, so its states exist), a
tracker written here watching the same step.

Numbers by hand. A block has 64·256 + 256 + 256·64 + 64 = 33,088 parameters; every dim 0
(256, 64) splits evenly on 2 ranks, so nothing is padded: FSDP2's flat all-gather buffer
of a block, its unsharded parameters and its reduce-scatter input are each
33,088 · 4 = 132,352 B (``B``). Per block the forward saves its input (8·64·4 = 2,048)
and the ReLU's output (8·256·4 = 8,192): 3 · 10,240 = 30,720 B of activations, of which
the session allocates 8,192 + 2,048 (the block's output) per block.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

import layerscope as ls
from helpers.distributed import rank_output, spawn_ranks
from helpers.records import StorageTracker
from layerscope.metrics.fsdpunits import fsdp_param_groups
from layerscope.metrics.memory.fsdp import _METHODS

WORLD = 2
TIME_LIMIT_S = 90.0
B = 33_088 * 4  # 132,352: one block's parameters, unsharded, fp32
ACTIVATIONS = 3 * (8 * 64 * 4 + 8 * 256 * 4)  # 30,720


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def _worker(rank: int, store: str, out: str) -> None:
    facts: dict[str, Any] = {}
    with rank_output(rank, out, facts):
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        x = torch.randn(8, 64)
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for mode in ("plain", "reshard", "keep", "mp"):
            torch.manual_seed(0)
            model = nn.Sequential(
                *(
                    nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64))
                    for _ in range(3)
                )
            )
            if mode != "plain":
                options: dict[str, Any] = {"reshard_after_forward": mode != "keep"}
                if mode == "mp":
                    options["mp_policy"] = mp
                for block in model:
                    fully_shard(block, **options)
                fully_shard(model, **options)
            opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            for step in range(3):
                if step == 2:
                    held = [_local(p) for p in model.parameters()]
                    held += [_local(t) for s in opt.state.values() for t in s.values()]
                    with (
                        StorageTracker(held) as tracker,
                        ls.Profiler(model, memory=True, optimizer=opt) as p,
                    ):
                        model(x).sum().backward()
                else:
                    model(x).sum().backward()
                opt.step()
                opt.zero_grad()
            mem = p.profile.memory
            path = os.path.join(out, f"{mode}{rank}.json")
            p.profile.save(path)
            facts[mode] = {
                "memory": mem,
                "loaded": ls.load(path).memory.get("by_kind"),
                "text": ls.load(path).render(view="table", width=80, columns=["peak_bytes"]),
                "tracker_peak": tracker.peak,
                "wrapped_left": [
                    name
                    for m in model.modules()
                    for group in fsdp_param_groups(m)
                    for f in group.fsdp_params
                    for name in vars(f)
                    if name in dict(_METHODS)
                ],
            }
        dist.barrier()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("fsdpmem")
    return spawn_ranks(_worker, WORLD, out, TIME_LIMIT_S)


@pytest.mark.slow
def test_activations_exclude_views_of_unsharded_parameters(ranks: list[dict[str, Any]]) -> None:
    # the W.t() addmm saves is a view of the unsharded weight: as unsharded, no activation
    for facts in ranks:
        for mode in ("plain", "reshard", "keep"):
            assert facts[mode]["memory"]["activation_bytes"] == ACTIVATIONS


def test_mixed_precision_activations_are_bf16(ranks: list[dict[str, Any]]) -> None:
    # bf16 parameters (fp32 reduce): the same tensors saved as in fp32, of 2 bytes each:
    # 30,720 / 2; the views of the bf16 unsharded weights are again not activations
    for facts in ranks:
        assert facts["mp"]["memory"]["activation_bytes"] == ACTIVATIONS // 2  # 15,360


def test_forward_peak_holds_the_unsharded_parameters(ranks: list[dict[str, Any]]) -> None:
    # At block 2's all-gather copy-out: blocks 0 and 1's activations (2 · 10,240), block
    # 1's flat all-gather buffer (freed at the next all-gather's copy-in), block 2's,
    # and the unsharded parameters: block 2's when resharded after the forward, all
    # three blocks' when kept.
    reshard = 2 * 10_240 + 2 * B + B  # 417,536
    keep = 2 * 10_240 + 2 * B + 3 * B  # 682,240
    for facts in ranks:
        assert facts["reshard"]["memory"]["forward_peak_bytes"] == reshard
        assert facts["keep"]["memory"]["forward_peak_bytes"] == keep
        assert keep - reshard == 2 * B
        # unprofiled by kind, at that peak
        timeline = facts["keep"]["memory"]["timeline"]
        i = timeline["bytes"].index(keep)
        assert timeline["by_kind"]["comm_buffer"][i] == 2 * B
        assert timeline["by_kind"]["unsharded_params"][i] == 3 * B
        assert "by_kind" not in facts["plain"]["memory"]
        assert "by_kind" not in facts["plain"]["memory"]["timeline"]


def test_comm_buffers_and_units(ranks: list[dict[str, Any]]) -> None:
    for facts in ranks:
        for mode, unshards in (("reshard", 2), ("keep", 1)):
            by_kind = facts[mode]["memory"]["by_kind"]
            assert facts[mode]["loaded"] == by_kind  # a JSON round trip keeps it
            # each unshard all-gathers into a flat buffer of B, each unit's backward
            # reduce-scatters from one of B: resharded, 3 · (2 + 1); kept, 3 · (1 + 1)
            assert by_kind["comm_buffer_bytes"] == 3 * (unshards + 1) * B
            assert by_kind["comm_buffer_peak_bytes"] == 2 * B
            assert by_kind["unsharded_params_peak_bytes"] == (B if mode == "reshard" else 3 * B)
            assert by_kind["fsdp_units"] == {
                str(i): {"unshards": unshards, "unsharded_param_bytes": B} for i in range(3)
            }
            assert facts[mode]["wrapped_left"] == []


def test_absolute_peak_matches_a_tracker(ranks: list[dict[str, Any]]) -> None:
    for facts in ranks:
        for mode in ("plain", "reshard", "keep", "mp"):
            mem = facts[mode]["memory"]
            ours = mem["baseline_bytes"] + mem["session_peak_bytes"]
            theirs = facts[mode]["tracker_peak"]
            assert abs(ours - theirs) <= 0.01 * theirs, (mode, ours, theirs)


def test_summary_says_what_the_session_held(ranks: list[dict[str, Any]]) -> None:
    # 132,352 B = 129.25 KiB; 2 · B = 258.50 KiB; 9 · B = 1,191,168 B = 1.14 MiB;
    # 3 · B = 387.75 KiB; 6 · B = 794,112 B = 775.50 KiB
    text = " ".join(ranks[0]["reshard"]["text"].split())
    assert (
        "In the session: unsharded params up to 129.25 KiB at once (3 FSDP units), buffers"
        " of collectives up to 258.50 KiB at once (1.14 MiB in all)"
    ) in text
    text = " ".join(ranks[0]["keep"]["text"].split())
    assert "unsharded params up to 387.75 KiB at once (3 FSDP units)" in text
    assert "(775.50 KiB in all)" in text
    assert "In the session:" not in ranks[0]["plain"]["text"]
