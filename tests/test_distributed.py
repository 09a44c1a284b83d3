"""torch.distributed: per-rank profiles gathered on one rank, the cross-rank view, DDP,
DTensor sizes, collectives (zero FLOPs, their bytes in ``comm_bytes``), the ``ranks`` key
of the JSON.

The multi-process tests share one run of 2 spawned processes (gloo on CPU, a file store:
no ports), started once per module with a time limit; each rank writes what it saw to
files and the tests check them here. Rank r runs batch r + 1, so the ranks differ:
Linear(8, 4) does batch * 8 * 4 MACs.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

import layerscope as ls
from helpers.distributed import rank_output, spawn_ranks
from layerscope.analysis.ranks import RankSummary, rank_summary
from layerscope.export.json import SCHEMA_PATH
from layerscope.metrics.comm import comm_observers, payload_bytes
from layerscope.metrics.flops import is_zero_cost
from layerscope.render.ranks import rank_table

WORLD = 2
#: Wall-clock limit of the 2-process run (it takes about 6 s on 2 cores: each process
#: imports torch and torch._dynamo).
TIME_LIMIT_S = 60.0


# ---- what each spawned rank runs ----------------------------------------------------
def _observers() -> list[Any]:
    """A CommObserver unless the session adds one itself (when a process group is up)."""
    return comm_observers(ls.Profiler(nn.Linear(1, 1)).observers)


def _worker(rank: int, store: str, out: str) -> None:
    """One rank: profile, gather to rank 0, save; DDP; DTensor; failures. Writes
    ``rank{r}.json`` (facts) or ``rank{r}.error`` (a traceback)."""
    facts: dict[str, Any] = {}
    with rank_output(rank, out, facts):
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
        torch.manual_seed(0)  # the same weights on every rank
        model = nn.Sequential(nn.Linear(8, 4), nn.ReLU())
        prof = ls.profile(model, torch.randn(rank + 1, 8), observers=_observers())
        facts["dist"] = prof.dist

        start = time.perf_counter()
        got = prof.gather(dst=0)
        facts["gather_s"] = time.perf_counter() - start
        facts["got_none"] = got is None
        if got is not None:
            got.save(os.path.join(out, "gathered.json"))
            facts["ranks_are_profiles"] = all(isinstance(p, ls.Profile) for p in got.ranks)
            facts["top_is_rank0"] = got.root is prof.root and got.ranks[0].root is prof.root
            facts["loads_equal"] = ls.load(os.path.join(out, "gathered.json")) == got

        # A backend without gather: all_gather_object instead, the same result.
        real = dist.gather_object

        def no_gather(*args: Any, **kwargs: Any) -> None:
            raise RuntimeError("gather is not supported by this backend")

        dist.gather_object = no_gather
        try:
            again = prof.gather(dst=1)
        finally:
            dist.gather_object = real
        facts["fallback_none"] = again is None
        if again is not None:
            again.save(os.path.join(out, "fallback.json"))

        # A rank whose profile cannot be sent: both ranks raise, none hangs.
        broken = ls.profile(model, torch.randn(1, 8))
        if rank == 1:
            broken.model["x"] = object()
        try:
            broken.gather(dst=0)
        except ls.LayerscopeError as e:
            facts["broken"] = str(e)

        # DDP: profiled through .module; the bucket all-reduce in backward.
        torch.manual_seed(0)
        ddp = nn.parallel.DistributedDataParallel(nn.Linear(8, 4))
        with ls.Profiler(ddp, observers=_observers()) as p:
            ddp(torch.randn(rank + 1, 8)).sum().backward()
        gathered = p.profile.gather(dst=0)
        if gathered is not None:
            gathered.save(os.path.join(out, "ddp.json"))
        plain = ls.profile(ddp, torch.randn(rank + 1, 8), backward=True, observers=_observers())
        facts["ddp_profile"] = {
            "paths": [n.path for n in plain.nodes()],
            "notices": plain.notices,
            "backward_comm_bytes": plain.root.metrics.get("backward_comm_bytes"),
        }

        # DTensor: the weight sharded by rows over the 2 ranks, counted logically and
        # locally (structure only: no forward mixes it with plain tensors).
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Shard, distribute_tensor

        mesh = init_device_mesh("cpu", (WORLD,))
        lin = nn.Linear(8, 4)
        lin.weight = nn.Parameter(distribute_tensor(lin.weight.detach(), mesh, [Shard(0)]))
        facts["dtensor"] = dict(ls.profile(lin).root.metrics)
        # gradients: the weight's a DTensor like it (this rank's 2 rows), the bias's plain
        lin.weight.grad = distribute_tensor(torch.ones(4, 8), mesh, [Shard(0)])
        lin.bias.grad = torch.ones(4)
        with ls.Profiler(lin, memory=True) as held:
            pass
        facts["dtensor_grads"] = {
            "metrics": dict(held.profile.root.metrics),
            "grads": held.profile.memory["grads"],
            "baseline": held.profile.memory["baseline"],
        }

        dist.barrier()


#: The gather timeout of the runs where a rank does not arrive, in seconds.
SHORT_TIMEOUT_S = 2


def _absent_worker(rank: int, store: str, out: str) -> None:
    """One of 2 ranks gathering where a rank does not arrive: rank 1 runs other code
    while rank 0 gathers, then it exits and rank 0 gathers again. Writes
    ``rank{r}.json`` (the errors rank 0 got) or ``rank{r}.error``."""
    facts: dict[str, Any] = {}
    try:
        torch.set_num_threads(1)
        limit = timedelta(seconds=TIME_LIMIT_S)  # gloo's own: the test's limit, not 30 min
        dist.init_process_group(
            "gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD, timeout=limit
        )
        prof = ls.profile(nn.Linear(2, 2))  # the structure: no run, quick to start
        if rank == 1:  # other code until rank 0 has given up, then gone
            while not Path(out, "gave_up").exists():
                time.sleep(0.05)
            Path(out, "rank1.json").write_text("{}", encoding="utf-8")
            os._exit(0)
        for case in ("skipped", "exited"):
            start = time.perf_counter()
            try:
                prof.gather(dst=0, timeout=SHORT_TIMEOUT_S)
            except ls.LayerscopeError as e:
                facts[case] = str(e)
            facts[f"{case}_s"] = time.perf_counter() - start
            Path(out, "gave_up").touch()
    except BaseException:
        Path(out, f"rank{rank}.error").write_text(traceback.format_exc(), encoding="utf-8")
        raise
    Path(out, f"rank{rank}.json").write_text(json.dumps(facts), encoding="utf-8")
    os._exit(0)  # no destroy_process_group: rank 1 is gone


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[dict[str, Any]]]]:
    """Start the 2 ranks, wait at most TIME_LIMIT_S, and hand over their output."""
    out = tmp_path_factory.mktemp("dist")
    yield out, spawn_ranks(_worker, WORLD, out, TIME_LIMIT_S)


# ---- 2 processes: gather ----------------------------------------------------------------
@pytest.mark.slow
def test_gather_collects_every_rank_in_order(run: tuple[Path, list[dict[str, Any]]]) -> None:
    out, facts = run
    assert [f["got_none"] for f in facts] == [False, True]  # only dst gets a profile
    assert facts[0]["ranks_are_profiles"] and facts[0]["top_is_rank0"]
    assert facts[0]["loads_equal"]
    for r in range(WORLD):
        assert facts[r]["dist"] == {"rank": r, "world_size": 2, "backend": "gloo"}
    prof = ls.load(out / "gathered.json")
    assert [p.dist["rank"] for p in prof.ranks] == [0, 1]
    assert prof.dist == prof.ranks[0].dist
    for r, p in enumerate(prof.ranks):
        batch = r + 1
        assert p.node("0").metrics["macs"] == batch * 8 * 4
        assert p.node("0").metrics["flops"] == 2 * batch * 8 * 4 + batch * 4  # + bias adds
        assert p.node("1").metrics["flops"] == batch * 4  # ReLU: one per element
        assert p.root.metrics["params"] == 8 * 4 + 4
        assert p.root.metrics["comm_bytes"] == 0  # nothing sent inside the model
        assert p.unsupported_ops == {}
    assert prof.root.metrics == prof.ranks[0].root.metrics  # the top level is rank 0's
    data = json.loads((out / "gathered.json").read_text())
    assert [set(e) >= {"schema", "root", "dist"} for e in data["ranks"]] == [True, True]
    assert not any("ranks" in e for e in data["ranks"])


def test_gather_falls_back_to_all_gather(run: tuple[Path, list[dict[str, Any]]]) -> None:
    out, facts = run
    assert [f["fallback_none"] for f in facts] == [True, False]  # dst=1 this time
    fallback, gathered = ls.load(out / "fallback.json"), ls.load(out / "gathered.json")
    assert fallback.dist["rank"] == 1
    assert [p.to_dict() for p in fallback.ranks] == [p.to_dict() for p in gathered.ranks]


def test_a_rank_that_cannot_send_fails_on_both(run: tuple[Path, list[dict[str, Any]]]) -> None:
    _, facts = run
    assert facts[0]["broken"].startswith("cannot gather the profiles: rank 1: cannot serialise")
    assert "$.model.x is not JSON data" in facts[0]["broken"]
    assert facts[1]["broken"].startswith("rank 1: cannot send its profile: cannot serialise")


def test_gather_of_two_small_profiles_is_fast(run: tuple[Path, list[dict[str, Any]]]) -> None:
    _, facts = run
    assert max(f["gather_s"] for f in facts) < 2.0


def test_rank_table_of_the_gathered_profile(run: tuple[Path, list[dict[str, Any]]]) -> None:
    out, _ = run
    prof = ls.load(out / "gathered.json")
    summary = prof.rank_summary()
    assert summary.metrics == ("flops", "params")  # not timed: FLOPs, then parameters
    s = summary.row("0").stats["flops"]
    low, high = 2 * 1 * 32 + 4, 2 * 2 * 32 + 8  # batch 1 and 2: 68 and 136 FLOPs
    assert s.values == (low, high)
    assert (s.min, s.median, s.max, s.argmax) == (low, (low + high) / 2, high, 1)
    assert s.imbalance == pytest.approx(high / ((low + high) / 2))  # 136 / 102 = 1.33
    p = summary.row("").stats["params"]
    assert (p.min, p.median, p.max, p.argmax, p.imbalance) == (36, 36, 36, 0, 1.0)
    text = rank_table(prof, width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "FLOPs over 2 ranks" in text and "Params over 2 ranks" in text
    row = next(line for line in text.splitlines() if line.startswith("0 "))
    assert row.split() == ["0", "68", "136", "68", "102", "136", "rank", "1", "1.33"]


# ---- 2 processes: a rank that does not arrive ----------------------------------------------
@pytest.mark.slow
def test_a_rank_that_does_not_call_gather_is_named(tmp_path: Path) -> None:
    """Rank 1 runs other code, then exits: rank 0 gives up after the 2 s timeout each
    time (not gloo's 30 minutes, nor a raw gloo error) and names it."""
    facts = spawn_ranks(_absent_worker, WORLD, tmp_path, TIME_LIMIT_S)
    for case in ("skipped", "exited"):
        assert facts[0][case] == (
            "rank 0: rank 1 did not call Profile.gather within 2 s: every rank of the "
            "group must call it at the same point (a rank that exited, failed or runs "
            "other code never arrives)"
        )
        # 2 s, and the file store's polling (up to 1 s more)
        assert SHORT_TIMEOUT_S <= facts[0][f"{case}_s"] < SHORT_TIMEOUT_S + 5


def test_gather_timeout_and_a_broken_transfer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One rank: ``timeout`` is checked, the rank meets itself at every gather, and a
    transfer that breaks (a rank exited in it) is a LayerscopeError, not gloo's own."""
    prof = ls.profile(nn.Linear(2, 2))
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        with pytest.raises(ls.InvalidInputError) as info:
            prof.gather(timeout=0)
        assert str(info.value) == "timeout must be a number from 0.001 to 1e+09, got 0"
        for _ in range(3):  # a new meeting each time
            assert prof.gather(timeout=1) is not None

        def closed(*args: Any, **kwargs: Any) -> None:
            raise RuntimeError("Connection closed by peer [127.0.0.1]:29500")

        monkeypatch.setattr(dist, "gather_object", closed)
        with pytest.raises(ls.LayerscopeError) as broken:
            prof.gather(timeout=1)
        assert str(broken.value) == (
            "rank 0: the profiles' transfer failed after every rank had called "
            "Profile.gather (a rank may have exited during it): Connection closed by peer "
            "[127.0.0.1]:29500"
        )
    finally:
        dist.destroy_process_group()


# ---- 2 processes: DDP, DTensor --------------------------------------------------------
def test_ddp_is_profiled_through_its_module(run: tuple[Path, list[dict[str, Any]]]) -> None:
    out, facts = run
    prof = ls.load(out / "ddp.json")
    for r, p in enumerate(prof.ranks):
        assert [n.path for n in p.nodes()] == [""]  # Linear, no "module." prefix
        assert p.root.type == "Linear"
        assert p.unsupported_ops == {}  # the all-reduce is no unsupported op
        assert p.partial_metrics == []
        # gloo all-reduces one bucket: weight 8*4 + bias 4 = 36 float32 = 144 bytes
        assert p.root.metrics["backward_comm_bytes"] == 36 * 4
        assert p.root.metrics["comm_bytes"] == 0
        assert p.root.metrics["macs"] == (r + 1) * 8 * 4
        assert any("DistributedDataParallel" in n for n in p.notices)
    ddp = facts[0]["ddp_profile"]  # ls.profile(ddp): the module runs without DDP's sync
    assert ddp["paths"] == [""]
    assert ddp["backward_comm_bytes"] == 0
    assert "without the 'module.' prefix" in ddp["notices"][0]


def test_dtensor_parameters_count_logical_and_local(
    run: tuple[Path, list[dict[str, Any]]],
) -> None:
    _, facts = run
    for f in facts:
        m = f["dtensor"]
        assert m["params"] == 8 * 4 + 4  # the logical weight and the bias
        assert m["param_bytes"] == (8 * 4 + 4) * 4
        assert m["local_params"] == 2 * 8 + 4  # this rank's 2 rows of 4, the bias whole
        assert m["local_param_bytes"] == (2 * 8 + 4) * 4
        assert m["local_buffer_bytes"] == 0
        g = f["dtensor_grads"]
        assert g["grads"]["weight"] == {
            "shape": [4, 8],  # logical
            "dtype": "float32",
            "bytes": 4 * 8 * 4,
            "module": "",
            "local_shape": [2, 8],  # this rank's rows
            "local_bytes": 2 * 8 * 4,
        }
        assert g["grads"]["bias"] == {"shape": [4], "dtype": "float32", "bytes": 16, "module": ""}
        assert g["metrics"]["grad_bytes"] == 4 * 8 * 4 + 4 * 4
        assert g["metrics"]["local_grad_bytes"] == 2 * 8 * 4 + 4 * 4  # the bias whole
        # per rank, local: 2 weight rows + the bias, and their gradients
        assert g["baseline"]["parameters"] == (2 * 8 + 4) * 4
        assert g["baseline"]["gradients"] == (2 * 8 + 4) * 4


# ---- one process ------------------------------------------------------------------------
def _rank_profile(rank: int, **metrics: float) -> ls.Profile:
    prof = ls.profile(nn.Sequential(nn.Linear(8, 4)), torch.randn(rank + 1, 8))
    prof.dist = {"rank": rank, "world_size": 3, "backend": "gloo"}
    for key, value in metrics.items():
        prof.root.metrics[key] = value
        prof.node("0").metrics[key] = value
    return prof


def _gathered(**per_rank: list[float]) -> ls.Profile:
    count = len(next(iter(per_rank.values())))
    ranks = [_rank_profile(r, **{k: v[r] for k, v in per_rank.items()}) for r in range(count)]
    top = ls.Profile.from_dict(ranks[0].to_dict())
    top.ranks = ranks
    return top


def test_gather_needs_a_process_group() -> None:
    prof = ls.profile(nn.Linear(2, 2), torch.randn(1, 2))
    assert not dist.is_initialized()
    with pytest.raises(ls.InvalidInputError, match="needs an initialised process group"):
        prof.gather()


def test_ranks_round_trip_through_json(tmp_path: Path) -> None:
    prof = _gathered(forward_time=[1e-3, 3e-3, float("nan")])
    assert "ranks" not in prof.ranks[0].to_dict()
    prof.save(tmp_path / "p.json")
    back = ls.load(tmp_path / "p.json")
    assert back == prof
    assert [p.dist["rank"] for p in back.ranks] == [0, 1, 2]
    assert [p.root.metrics["macs"] for p in back.ranks] == [32, 64, 96]
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text()))
    data = json.loads((tmp_path / "p.json").read_text())
    assert list(validator.iter_errors(data)) == []
    data["ranks"][1]["ranks"] = []
    assert [e.json_path for e in validator.iter_errors(data)] == ["$.ranks[1]"]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(ranks={}), "$.ranks: expected an array of per-rank profiles"),
        (lambda d: d["ranks"].append(3), "$.ranks[3]: a rank's profile must be a JSON object"),
        (lambda d: d["ranks"][1].pop("schema"), "$.ranks[1]: missing key 'schema'"),
        (lambda d: d["ranks"][2].pop("root"), "$.ranks[2]: missing key 'root'"),
        (
            lambda d: d["ranks"][1]["root"]["metrics"].update(macs="many"),
            "$.ranks[1].root.metrics.macs: expected a finite number",
        ),
        (
            lambda d: d["ranks"][0].update(ranks=[]),
            "$.ranks[0].ranks: a rank's profile cannot hold ranks of its own",
        ),
        (lambda d: d["ranks"][2]["dist"].update(rank=-1), "$.ranks[2].dist.rank:"),
        (
            lambda d: d["ranks"][0]["root"]["metrics"].update(comm_bytes="NaN"),
            "$.ranks[0].root.metrics.comm_bytes: expected a finite number",
        ),
    ],
)
def test_reader_checks_each_rank_like_the_top_level(edit: Any, message: str) -> None:
    data = json.loads(_gathered(flops=[1, 2, 3]).to_json(indent=None))
    edit(data)
    with pytest.raises(ls.SchemaError) as info:
        ls.Profile.from_dict(data)
    assert str(info.value).startswith(message)


def test_rank_summary_statistics() -> None:
    prof = _gathered(forward_time=[2.0, 1.0, 6.0], comm_bytes=[0, 0, 0])
    summary = rank_summary(prof)
    assert isinstance(summary, RankSummary) and summary.ranks == (0, 1, 2)
    assert summary.metrics == ("forward_time", "params")  # timed: time first
    t = summary.row("").stats["forward_time"]
    assert (t.min, t.median, t.max, t.argmax, t.imbalance) == (1.0, 2.0, 6.0, 2, 3.0)
    zero = rank_summary(prof, "comm_bytes").row("").stats["comm_bytes"]
    assert (zero.max, zero.imbalance) == (0, 1.0)  # all 0: balanced
    prof.ranks[1].root.metrics["comm_bytes"] = 8
    assert rank_summary(prof, ["comm_bytes"]).row("").stats["comm_bytes"].imbalance == float(
        "inf"
    )  # median 0, max 8
    del prof.ranks[2].node("0").metrics["forward_time"]  # a rank that lacks a value
    partial = rank_summary(prof).row("0").stats["forward_time"]
    assert partial.values == (2.0, 1.0, None) and partial.median == 1.5


def test_rank_summary_errors() -> None:
    with pytest.raises(ls.InvalidInputError, match="no per-rank profiles"):
        rank_summary(ls.profile(nn.Linear(2, 2), torch.randn(1, 2)))
    with pytest.raises(ls.InvalidInputError, match="no rank has the metric 'nope'"):
        rank_summary(_gathered(flops=[1, 2, 3]), ["nope"])


def test_rank_table_fits_80_columns() -> None:
    prof = _gathered(forward_time=[2e-3, 1e-3, 6e-3])
    wide = prof.rank_summary().render(width=100).splitlines()
    assert max(len(line) for line in wide) <= 100
    assert wide[0] == "Fwd time over 3 ranks"
    assert wide[1].split() == [
        *("Module", "Rank", "0", "Rank", "1", "Rank", "2"),
        *("Min", "Median", "Max", "Max", "on", "Max/med"),
    ]
    assert wide[3].split() == [
        *("Sequential", "(root)", "2", "ms", "1", "ms", "6", "ms", "1", "ms"),
        *("2", "ms", "6", "ms", "rank", "2", "3.00"),
    ]
    lines = prof.rank_summary().render(width=80).splitlines()
    assert max(len(line) for line in lines) <= 80
    # the per-rank columns do not fit: all of them go, never some
    assert lines[1].split() == ["Module", "Min", "Median", "Max", "Max", "on", "Max/med"]
    narrow = prof.rank_summary().render(width=50)  # then the min
    assert max(len(line) for line in narrow.splitlines()) <= 50
    assert narrow.splitlines()[1].split() == ["Module", "Median", "Max", "Max", "on", "Max/med"]


# ---- collectives without a process group ------------------------------------------------
def test_collectives_are_zero_cost_and_their_bytes_counted() -> None:
    t = torch.empty(36, device="meta")
    ops = torch.ops
    for op in (
        ops.c10d.allreduce_.default,
        ops.c10d.broadcast_.default,
        ops.c10d.allgather_.default,
        ops.c10d.reduce_scatter_.default,
        ops._c10d_functional.all_reduce.default,
        ops._c10d_functional.wait_tensor.default,
    ):
        assert is_zero_cost(op)
    assert payload_bytes(ops.c10d.allreduce_.default, ([t], None, None, None), {}) == 144
    # all-gather: this rank's input, not the gathered output
    gather_args = ([[t, t]], [t[:9]], None)
    assert payload_bytes(ops.c10d.allgather_.default, gather_args, {}) == 36
    assert payload_bytes(ops._c10d_functional.all_reduce.default, (t, "sum", "0"), {}) == 144
    assert payload_bytes(ops._c10d_functional.wait_tensor.default, (t,), {}) == 0
    assert payload_bytes(ops.c10d.barrier.default, (t, None, []), {}) == 0
    assert payload_bytes(ops.aten.mm.default, (t, t), {}) is None
    assert comm_observers() == []  # no process group: nothing to observe
