"""``compile=True``'s memory: what AOTAutograd's partitioner saves for the backward
(``metrics.memory.remat``'s min-cut over the op graph ``metrics.memory.opgraph``
records), checked by hand and against torch's own partitioner, and the plan that drops
the rest at each block's exit."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import layerscope as ls
from layerscope.metrics.memory.opgraph import record_graph
from layerscope.metrics.memory.remat import OpCall, compiled_saves, min_cut


class Block(nn.Module):
    """An RMSNorm (no eps module: its ops inline) and a gated MLP, residual: a Llama
    block without attention."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(8))
        self.gate = nn.Linear(8, 16, bias=False)
        self.up = nn.Linear(8, 16, bias=False)
        self.down = nn.Linear(16, 8, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
        out: torch.Tensor = x + self.down(nn.functional.silu(self.gate(y)) * self.up(y))
        return out


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(Block(), Block())


X = torch.randn(2, 4, 8)  # (2, 4, 8) float32: 256 B; the MLP's (2, 4, 16): 512 B


def _loss(out: torch.Tensor) -> torch.Tensor:
    return out.sum()


# ---- the min-cut -------------------------------------------------------------------
def test_the_cut_saves_the_cheapest_set_the_backward_can_be_made_from() -> None:
    """p (a matmul's output, 100 B) -> q (pointwise, 10 B) -> r, s (pointwise, 40 B
    each, both read by the backward). Saving r and s costs 2 x 40 x 2 (nothing in the
    forward reads them: a fused kernel would not write them), saving p 100 x 1.1 ** 3
    (three ops from the backward), saving q 2 x 10 x 1.1 ** 2 = 24: q is saved."""
    ops = [
        OpCall((), (0,), False),  # p = mm(...)
        OpCall((0,), (1,), True),  # q = relu(p)
        OpCall((1,), (2,), True),  # r = exp(q)
        OpCall((1,), (3,), True),  # s = sin(q)
    ]
    assert compiled_saves([100, 10, 40, 40], ops, saved={2, 3}) == {1}
    # r and s both 4 B: saving them (2 x 4 x 1.1 x 2 = 17) beats q
    assert compiled_saves([100, 10, 4, 4], ops, saved={2, 3}) == {2, 3}


def test_a_reduction_and_what_cannot_be_recomputed_are_kept() -> None:
    """p (an input, 1,000 B) -> x = relu(p) (64 B) -> m = mean(x) (8 B: under a quarter
    of x, so never recomputed) -> r = rsqrt(m) (8 B); y = exp(x) (64 B); the backward
    reads r and y. Weights: x 2 x int(64 x 1.1 ** 2) = 154 (two ops from the backward,
    read only by recomputable ops), y 2 x int(64 x 1.1) = 140, r 2 x int(8 x 1.1) = 16,
    m 2 x int(8 x 1.1 ** 2) = 18. Without the reduction's ban x alone (154) would do;
    with it x needs m or r beside it (170), so y and r (156) are saved. A node a matmul
    made that the backward reads is kept whatever it costs, and a free one (a
    parameter) is taken at no cost."""
    ops = [
        OpCall((0,), (1,), True),  # x = relu(p)
        OpCall((1,), (2,), True),  # m = mean(x)
        OpCall((2,), (3,), True),  # r = rsqrt(m)
        OpCall((1,), (4,), True),  # y = exp(x)
    ]
    assert compiled_saves([1000, 64, 8, 8, 64], ops, saved={3, 4}) == {3, 4}
    ops = [OpCall((0, 1), (2,), False)]  # h = mm(x, W)
    assert compiled_saves([64, 4, 256], ops, saved={0, 1, 2}, free={1}) == {0, 1, 2}
    assert min_cut([5, 1], [(0, 1)], fixed={0}, needed={1}) == {1}
    assert min_cut([1, 5], [(0, 1)], fixed={0}, needed={1}) == {0}


def test_a_reader_past_a_matmul_is_not_recomputed() -> None:
    """x = relu(p) is read by exp (then a matmul) and, after that matmul, by an add: the
    add uses x far from its first use, so it is not recomputed (torch's
    ``ban_recompute_used_far_apart``). Read by the add before the matmul, it may be."""
    from layerscope.metrics.memory.remat import _index, _used_far_apart

    def far_apart(ops: list[OpCall]) -> set[int]:
        return _used_far_apart(ops, *_index(ops))

    relu, exp = OpCall((0,), (1,), True), OpCall((1,), (2,), True)
    mm, add = OpCall((2, 3), (4,), False), OpCall((1, 4), (5,), True)
    assert far_apart([relu, exp, mm, add]) == {3}
    early = OpCall((1, 0), (5,), True)  # x + p, before the matmul
    assert far_apart([relu, exp, early, mm]) == set()


# ---- against torch's partitioner -----------------------------------------------------
def _graph_saved(model: nn.Module) -> tuple[int, int, dict[str, Any]]:
    with record_graph():
        prof = ls.profile(model, X, memory=True, backward=True, loss_fn=_loss)
    table = prof.memory["storages"]
    eager = sum(r[0] for r in table["rows"] if r[1] and not r[4])
    return eager, sum(b for _, b in table["compiled"]), table


def _partitioned_saved(model: nn.Module) -> int:
    """What the backward of ``torch.compile(model)`` holds (AOTAutograd's min-cut
    partitioner, with torch's decompositions, no code generation), parameters aside."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "bench"))
    from compile_saved import compiled_saved

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    torch._dynamo.reset()
    try:
        return compiled_saved(model, X, params, backend="aot_eager_decomp_partition")
    finally:
        torch._dynamo.reset()


def test_the_rule_saves_what_torchs_partitioner_saves() -> None:
    """Eager, block 0 (its input needs no gradient: the norm's ops save nothing until the
    weight's multiply): the normalised x (256), the norm's output (256), gate, silu(gate),
    up, their product (512 each) = 2,560; block 1 also its input and rsqrt's output
    (256 + 32): 2,848; 5,408 in all. Compiled, per block: the input (256), the mean
    (32: a reduction, kept), the norm's output, the three MLP matmuls' inputs and outputs
    but silu's (256 + 3 x 512): 2,080; 4,160 in all, what torch's partitioner saves."""
    eager, compiled, table = _graph_saved(_model())
    assert eager == 2560 + 2848 == 5408
    assert compiled == 2 * (256 + 32 + 256 + 3 * 512) == 4160
    assert _partitioned_saved(_model()) == 4160
    paths = table["paths"]
    by_block = [sum(b for i, b in table["compiled"] if paths[i].startswith(k)) for k in "01"]
    assert by_block == [2080, 2080]


def test_under_autocast_a_tensor_cast_twice_is_saved_once() -> None:
    """bfloat16 autocast on the CPU: gate and up each cast the norm's output (128 B in
    bfloat16), and the three weights are cast (256 B each). Eager saves, block 0: the
    normalised x (256), both casts (2 x 128), the weight casts (3 x 256), gate, silu,
    up, their product (4 x 256 in bfloat16) = 2,304; block 1 also its float32 input and
    rsqrt's output (256 + 32): 2,592; 4,896. The joint graph's common subexpression
    elimination makes the two casts one, and the partitioner saves, block 0: x (256),
    the mean (32), one cast (128), the weight casts (768), gate, up and their product
    (768) = 1,952; block 1 the same but down's bfloat16 output (128) for its input (its
    residual add is made again from it): 1,824; 3,776, as torch's partitioner does."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        eager, compiled, _ = _graph_saved(_model())
        assert eager == 2304 + 2592 == 4896
        assert compiled == 1952 + 1824 == 3776
        assert _partitioned_saved(_model()) == 3776


# ---- the plan --------------------------------------------------------------------------
COMMON: dict[str, Any] = {"target": "h100", "world_size": 1, "sharding": "none",
                          "precision": "fp32", "loss_fn": _loss}  # fmt: skip


def test_a_compiled_plan_drops_what_the_partitioner_recomputes(tmp_path: Path) -> None:
    """Eager keeps 5,408 B for the backward, compiled 4,160: block 0 drops 2,560 - 2,080
    = 480 B at its exit, block 1 2,848 - 2,080 = 768; both come back before their
    backward. The forward's last moment holds 1,248 B less, and the note says how much
    is saved. The analysis's "compiled" records survive a save and a load."""
    eager = ls.plan(_model(), X, **COMMON)
    compiled = ls.plan(_model(), X, **COMMON, compile=True)
    assert eager.kept_activation_bytes - compiled.kept_activation_bytes == 1248
    assert compiled.kept_activation_bytes == 4160

    def at(plan: ls.Plan, event: str, path: str) -> int:
        t = plan.timeline
        rows = zip(t["phase"], t["event"], t["path"], t["activation_bytes"], strict=True)
        return int([b for ph, e, p, b in rows if ph == "forward" and (e, p) == (event, path)][-1])

    assert at(eager, "exit", "0") - at(compiled, "exit", "0") == 0  # before its drop
    assert at(eager, "enter", "1") - at(compiled, "enter", "1") == 480
    assert at(eager, "exit", "") - at(compiled, "exit", "") == 480 + 768
    assert compiled.peak_bytes <= eager.peak_bytes
    note = next(n for n in compiled.notes if n.startswith("compiled memory"))
    assert "in 2 repeated blocks, 4,160 B saved for the backward where eager saves 5,408 B" in note
    assert compiled.analysis is not None
    compiled.save(tmp_path / "plan.json")
    loaded = ls.load_plan(tmp_path / "plan.json")
    assert loaded.analysis is not None and loaded.kept_activation_bytes == 4160
    records = loaded.analysis.memory["storages"]["compiled"]
    assert records == compiled.analysis.memory["storages"]["compiled"]
    assert sum(nbytes for _, nbytes in records) == 4160


def test_the_module_rows_keep_the_compiled_bytes() -> None:
    """FSDP2 on 2 GPUs (each block a unit): each block's row keeps the 2,080 B the
    partitioner saves there (eager: 2,560 and 2,848, its Saved), the root's 4,160."""
    options = {**COMMON, "sharding": "fsdp", "world_size": 2}
    rows = {r["path"]: r for r in ls.plan(_model(), X, compile=True, **options).modules}
    assert [rows[p]["activation_bytes"] for p in ("0", "1")] == [2560, 2848]
    assert [rows[p]["kept_activation_bytes"] for p in ("", "0", "1")] == [4160, 2080, 2080]


def test_a_model_without_repeated_blocks_is_one_unit() -> None:
    """One block as the whole model (nothing repeats): the root drops 2,560 - 2,080 =
    480 B at its exit."""
    torch.manual_seed(0)
    eager = ls.plan(Block(), X, **COMMON)
    torch.manual_seed(0)
    compiled = ls.plan(Block(), X, **COMMON, compile=True)
    assert eager.kept_activation_bytes - compiled.kept_activation_bytes == 480
    assert any("in the model, 2,080 B saved for the backward where eager saves 2,560 B" in n
               for n in compiled.notes)  # fmt: skip


def test_a_compiled_plan_from_a_profile_without_its_graph_says_memory_is_eagers() -> None:
    """An analysis made for an eager plan has no op graph: compiled, its memory stays
    eager's, and the note says why."""
    eager = ls.plan(_model(), X, **COMMON)
    assert eager.analysis is not None
    again = ls.plan(eager.analysis, compile=True, target="h100", world_size=1,
                    sharding="none", precision="fp32")  # fmt: skip
    assert again.kept_activation_bytes == eager.kept_activation_bytes
    assert any("memory as in eager (the profile has no op graph" in n for n in again.notes)


@pytest.mark.parametrize("checkpoint", ["blocks", ["0"]])
def test_checkpointed_blocks_keep_their_checkpoint_drop(checkpoint: Any) -> None:
    """A checkpointed block keeps only its input: compile changes nothing there, and a
    block left eager still drops what the partitioner recomputes (block 1: 768 B)."""
    eager = ls.plan(_model(), X, **COMMON, checkpoint=checkpoint)
    compiled = ls.plan(_model(), X, **COMMON, checkpoint=checkpoint, compile=True)
    less = 0 if checkpoint == "blocks" else 768
    assert eager.kept_activation_bytes - compiled.kept_activation_bytes == less
    if checkpoint == "blocks":
        assert any("compiled memory: as in eager (every repeated block is checkpointed"
                   in n for n in compiled.notes)  # fmt: skip


def test_a_compiled_sweep_says_so_and_its_rows_are_the_plans(tmp_path: Path) -> None:
    """A sweep with compile=True: its setting and header say so, a saved sweep loads
    with it, and each row's peak is the compiled plan's."""
    sweep = ls.plan_sweep(_model(), X, micro_batch=[1, 2], compile=True, **COMMON)
    assert sweep.setting["compile"] is True and "float8" not in sweep.setting
    assert "per GPU; compiled." in sweep.render(width=100).replace("\n  ", " ")
    sweep.save(tmp_path / "s.json")
    assert ls.load_sweep(tmp_path / "s.json").setting == sweep.setting
    alone = ls.plan(_model(), X, compile=True, **COMMON)
    eager = ls.plan(_model(), X, **COMMON)
    row = next(r for r in sweep.rows if r.micro_batch == 2)  # X's batch of 2
    assert row.peak_bytes == alone.peak_bytes <= eager.peak_bytes


def test_auto_checkpointing_of_a_compiled_plan_targets_its_own_bytes() -> None:
    """Six blocks on 16 x 32 tokens, a budget 1 B under the compiled plan's need without
    checkpointing: compiled, one block checkpointed fits (the greedy's first, block 1:
    block 0's input needs no gradient, so it saves less); eager holds more and needs
    two. Each block's recompute is its forward, 512 tokens: 3 matmuls of 2 x 512 x 8 x 16
    = 393,216 FLOPs; elementwise, pow (4,096), mean (4,096 + 512), the eps add and rsqrt
    (512 each), two multiplies (4,096 each), silu and the gate product (8,192 each), the
    residual add (4,096): 46,592; 439,808 in all."""
    torch.manual_seed(0)
    model = nn.Sequential(*(Block() for _ in range(6)))
    x = torch.randn(16, 32, 8)
    alone = ls.plan(model, x, compile=True, **COMMON)
    budget = alone.peak_bytes + alone.reserve_bytes - 1
    eager = ls.plan(model, x, checkpoint="auto", budget=budget, **COMMON)
    compiled = ls.plan(model, x, checkpoint="auto", budget=budget, compile=True, **COMMON)
    assert (eager.fits, compiled.fits) == (True, True)
    assert (eager.checkpoint, compiled.checkpoint) == (["1", "2"], ["1"])
    assert (eager.recompute_flops, compiled.recompute_flops) == (2 * 439_808, 439_808)


def test_a_compiled_row_pointing_past_the_paths_is_refused() -> None:
    """The JSON check holds the "compiled" rows' module indices to ``paths``, as the
    rows'."""
    from layerscope.errors import SchemaError

    plan = ls.plan(_model(), X, compile=True, **COMMON)
    data = plan.to_dict()
    paths = data["memory"]["storages"]["paths"]
    data["memory"]["storages"]["compiled"][0][0] = len(paths)
    with pytest.raises(SchemaError, match=r"compiled\[0\]\[0\].*an index into 'paths'"):
        ls.Plan.from_dict(data)
