"""``checkpoint="op"``: torchtitan's per-op selective checkpointing of every repeated
block (``planning.oppolicy``): every other matmul's output and every attention output
kept, the rest recomputed; from the analysis's op records
(``memory["storages"]["ops"]``). ``checkpoint=policy``: a policy function's."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import layerscope as ls
from layerscope.cli.plan_cmd import parse_checkpoint
from layerscope.errors import InvalidInputError

N, H = 32, 64  # tokens, width


class Block(nn.Module):
    """``n`` bias-free Linears with a ReLU between each: ``n`` ``aten.mm`` calls."""

    def __init__(self, n: int = 4) -> None:
        super().__init__()
        self.mm = nn.ModuleList(nn.Linear(H, H, bias=False) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.mm):
            x = layer(x) if i == 0 else layer(torch.relu(x))
        return x


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(Block(), Block())


X = torch.randn(N, H)


def _storages(plan: ls.Plan) -> dict[str, Any]:
    assert plan.analysis is not None
    table: dict[str, Any] = plan.analysis.memory["storages"]
    return table


def _plan(checkpoint: str | None) -> ls.Plan:
    return ls.plan(
        _model(), X, world_size=1, sharding="none", precision="fp32", optimizer="sgd",
        reserve_bytes=0, checkpoint=checkpoint,
    )  # fmt: skip


def test_the_analysis_records_the_policys_ops() -> None:
    """Only a plan with ``checkpoint="op"`` records them: 8 matmuls, each N x H float32
    out (8,192 B) and 2 N H H FLOPs (262,144)."""
    op = _storages(_plan("op"))
    paths = op["paths"]
    assert [(paths[i], o, b, f) for i, o, b, f in op["ops"]] == [
        (f"{k}.mm.{j}", "aten.mm.default", N * H * 4, 2 * N * H * H)
        for k in range(2)
        for j in range(4)
    ]
    assert "ops" not in _storages(_plan("blocks"))


def test_every_other_matmul_is_kept() -> None:
    """Per block the policy keeps the 1st and 3rd matmul's outputs (2 x 8,192 B) beside
    what ``"blocks"`` keeps, and recomputes its forward less those two matmuls' FLOPs
    (2 x 262,144)."""
    blocks, op = _plan("blocks"), _plan("op")
    assert op.checkpoint == blocks.checkpoint == ["0", "1"]
    assert op.kept_activation_bytes - blocks.kept_activation_bytes == 2 * 2 * N * H * 4
    assert blocks.recompute_flops - op.recompute_flops == 2 * 2 * 2 * N * H * H
    rows = {r["path"]: r for r in op.modules}
    block_rows = {r["path"]: r for r in blocks.modules}
    for path in ("0", "1"):
        kept = rows[path]["kept_activation_bytes"] - block_rows[path]["kept_activation_bytes"]
        assert kept == 2 * N * H * 4
        assert rows[path]["recompute_flops"] == block_rows[path]["recompute_flops"] - 2 * (
            2 * N * H * H
        )
    # the kept outputs are held from each block's exit to its backward: at the model's
    # exit 2 x 2 x 8,192 B more than under "blocks"
    end = {}
    for name, p in (("blocks", blocks), ("op", op)):
        t = p.timeline
        at = next(k for k, (e, q) in enumerate(zip(t["event"], t["path"], strict=True))
                  if e == "exit" and q == "")  # fmt: skip
        end[name] = t["total"][at]
    assert end["op"] - end["blocks"] == 2 * 2 * N * H * 4
    assert 0 < op.time["recompute"] < blocks.time["recompute"]


def test_llama_blocks_keep_q_v_attention_gate_and_down() -> None:
    """A Llama block's matmuls run q, k, v, o, gate, up, down: the policy keeps q, v,
    gate and down (the odd ones) and the attention kernel's outputs."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "bench"))
    from documents import llama  # the documents' 2-layer Llama: width 64, 2 KV heads

    ids = torch.randint(0, 128, (2, 64), generator=torch.Generator().manual_seed(0))
    blocks, op = (
        ls.plan(llama().train(), ids, world_size=1, sharding="none", checkpoint=c)
        for c in ("blocks", "op")
    )
    ops = _storages(op)["ops"]
    names = [o[1].split(".")[1] for o in ops if o[0] != ops[-1][0]]  # less lm_head
    assert names == ["mm", "mm", "mm", "_scaled_dot_product_cudnn_attention", *["mm"] * 4] * 2
    # 2 x 64 tokens in bf16: q 64 wide, v 32 (2 KV heads of 16), gate 128, down 64
    attention = ops[3][2]  # its output (bf16), log-sum-exp (float32) and 16 B more
    assert attention == 2 * 4 * 64 * 16 * 2 + 2 * 4 * 64 * 4 + 16
    # its FLOPs causal, as the module's: 2 rows x 4 heads x 64 x 65 / 2 entries x (2 x
    # (16 + 16) for QK^T and PV + 6 for the scale and softmax); torch's counter, which
    # the records used, gave the full square, 2,293,760, taken off the recompute
    assert ops[3][3] == 2 * 4 * (64 * 65 // 2) * (2 * (16 + 16) + 6) == 1_164_800
    per_block = 2 * 64 * 2 * (64 + 32 + 128 + 64) + attention
    assert op.kept_activation_bytes - blocks.kept_activation_bytes == 2 * per_block


def test_refusals_and_the_flag() -> None:
    prof = _plan("blocks").analysis  # no op records
    assert prof is not None
    with pytest.raises(InvalidInputError, match="checkpoint='op' needs the analysis's op"):
        ls.plan(prof, world_size=1, sharding="none", precision="fp32", checkpoint="op")
    with pytest.raises(InvalidInputError, match="checkpoint='op': this model has no repeated"):
        ls.plan(nn.Linear(4, 4), torch.randn(2, 4), checkpoint="op", world_size=1,
                sharding="none")  # fmt: skip
    assert parse_checkpoint("op") == "op"


def _torchtitan_policy(meta: dict[str, int]) -> Any:
    """torchtitan's ``_custom_policy`` (torchtitan/distributed/activation_checkpoint.py)
    over the ops its save list has that this model runs."""
    from torch.utils.checkpoint import CheckpointPolicy

    mm = torch.ops.aten.mm.default

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        mode = "recompute" if ctx.is_recompute else "forward"
        key = f"{mode}_mm_count"
        if func == mm:
            meta[key] = meta.get(key, 0) + 1
        save = func in (mm, torch.ops.aten.max.default) and not (func == mm and meta[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


X_RUN = torch.randn(1024, H)  # 1,024 tokens: the activations set the peak


def _loss(o: torch.Tensor) -> torch.Tensor:
    return o.float().pow(2).mean()


def _measured_peak(policy: Callable[[], Any]) -> int:
    """Each block of ``_model()`` under torch's selective checkpointing with a fresh
    ``policy()`` a call (as a ``context_fn`` makes its contexts), run on the CPU on
    ``X_RUN`` and profiled: its parameters, its measured session peak and the input
    (plain SGD keeps no states)."""
    import functools

    from torch.utils.checkpoint import (
        checkpoint,
        create_selective_checkpoint_contexts,
        set_checkpoint_early_stop,
    )

    real = _model()
    for block in real.children():
        forward = block.forward

        def run(*args: Any, _forward: Any = forward) -> Any:
            contexts = functools.partial(create_selective_checkpoint_contexts, policy())
            return checkpoint(_forward, *args, use_reentrant=False, context_fn=contexts)

        block.forward = run
    torch.manual_seed(1)
    with set_checkpoint_early_stop(False):
        mem = ls.profile(real.train(), X_RUN, backward=True, memory=True, loss_fn=_loss).memory
    return int(mem["baseline_bytes"] + mem["session_peak_bytes"] + X_RUN.nbytes)


def _planned(checkpoint: Any) -> ls.Plan:
    return ls.plan(
        _model(), X_RUN, world_size=1, sharding="none", precision="fp32", optimizer="sgd",
        reserve_bytes=0, checkpoint=checkpoint, loss_fn=_loss,
    )  # fmt: skip


def test_the_peak_equals_a_real_selective_checkpoint_run() -> None:
    """torchtitan's policy: the plan's peak is the run's (``_measured_peak``), and below
    the plan without checkpointing."""
    op = _planned("op")
    assert op.peak_bytes == _measured_peak(lambda: _torchtitan_policy({}))
    assert op.peak_bytes < _planned(None).peak_bytes


def _relus(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
    """A policy that saves the ReLUs' outputs (3 a block: before the 2nd, 3rd and 4th
    matmul) and recomputes the rest, matmuls included."""
    from torch.utils.checkpoint import CheckpointPolicy

    save = func == torch.ops.aten.relu.default
    return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE


def test_a_policy_function_in_every_block() -> None:
    """``checkpoint=policy`` (as create_selective_checkpoint_contexts takes): the analysis
    records the calls the policy saves, 3 ReLUs a block, each N x H float32 (8,192 B;
    N x H = 2,048 FLOPs, one an element, as the modules' FLOPs count them). Each block
    keeps 3 x 8,192 B beside what "blocks" keeps and recomputes its forward less those
    3 x 2,048 FLOPs; the document names the policy; a given profile is refused."""
    blocks, mine = _plan("blocks"), ls.plan(
        _model(), X, world_size=1, sharding="none", precision="fp32", optimizer="sgd",
        reserve_bytes=0, checkpoint=_relus,
    )  # fmt: skip
    table = _storages(mine)
    paths = table["paths"]
    assert table["policy"] == "_relus"
    assert [(paths[i], o, b, f) for i, o, b, f in table["ops"]] == [
        (str(k), "aten.relu.default", N * H * 4, N * H) for k in range(2) for _ in range(3)
    ]
    assert mine.checkpoint == ["0", "1"]
    assert mine.kept_activation_bytes - blocks.kept_activation_bytes == 2 * 3 * N * H * 4
    assert blocks.recompute_flops - mine.recompute_flops == 2 * 3 * N * H
    assert mine.options["checkpoint"] == "policy _relus"
    assert any(n.startswith("checkpoint=_relus: the policy in every block") for n in mine.notes)
    assert "checkpointing policy _relus: 2 modules" in mine.render(width=100)
    assert mine.analysis is not None
    with pytest.raises(InvalidInputError, match="a checkpoint policy is called on each op"):
        ls.plan(mine.analysis, world_size=1, sharding="none", precision="fp32",
                checkpoint=_relus)  # fmt: skip
    with pytest.raises(InvalidInputError, match="or a policy function"):
        ls.plan(_model(), X, checkpoint=5)  # type: ignore[arg-type]


def test_a_policy_function_equals_a_real_selective_checkpoint_run() -> None:
    """``_relus`` in every block: the plan's peak is the run's, as for torchtitan's."""
    assert _planned(_relus).peak_bytes == _measured_peak(lambda: _relus)


def _odd_model() -> nn.Module:
    """Three blocks of three Linears: the policy keeps the 1st and the 3rd matmul's
    outputs, and the 3rd's is the block's output."""
    torch.manual_seed(0)
    return nn.Sequential(Block(3), Block(3), Block(3))


def _tracked_peak(
    model: nn.Module,
    x: torch.Tensor,
    blocks: nn.Module,
    loss: Callable[[Any], torch.Tensor] = _loss,
) -> int:
    """The peak of a training step (plain SGD, early stop off) of ``model`` with each of
    ``blocks``' children under torch's selective checkpointing with torchtitan's policy
    (a fresh one a call), as torch's ``MemTracker`` measures it on the CPU (the second
    step: SGD keeps no state)."""
    import functools

    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.utils.checkpoint import (
        checkpoint,
        create_selective_checkpoint_contexts,
        set_checkpoint_early_stop,
    )

    for block in blocks.children():
        forward = block.forward

        def run(*args: Any, _forward: Any = forward, **kwargs: Any) -> Any:
            policy = _torchtitan_policy({})
            contexts = functools.partial(create_selective_checkpoint_contexts, policy)
            return checkpoint(_forward, *args, use_reentrant=False, context_fn=contexts, **kwargs)

        block.forward = run
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step() -> None:
        with set_checkpoint_early_stop(False):
            made = loss(model(x))  # the output dropped once the loss is made
            made.backward()  # type: ignore[no-untyped-call]
        opt.step()
        opt.zero_grad()

    step()
    tracker = MemTracker()
    tracker.track_external(model, opt, x)
    with tracker:
        step()
    snap: dict[Any, dict[Any, int]] = tracker.get_tracker_snapshot("peak")
    return next(v for k, v in snap.items() if str(k) == "cpu")["Total"]


def test_a_kept_block_output_is_not_kept_twice() -> None:
    """The 3rd matmul's output is each block's output, which the next block (or the
    loss) holds anyway: the table ties that call to its storage's row (``op_rows``), so
    the policy adds only the 1st matmul's output, 1,024 x 64 x 4 = 262,144 B a block,
    beside what "blocks" keeps. The peak is a real step's to the byte (it was 3 x
    262,144 B over: each block's output counted twice)."""
    a = X_RUN.nbytes  # 1,024 x 64 x 4 = 262,144
    common: dict[str, Any] = dict(
        world_size=1, sharding="none", precision="fp32", optimizer="sgd", reserve_bytes=0,
        loss_fn=_loss,
    )  # fmt: skip
    blocks, op = (ls.plan(_odd_model(), X_RUN, checkpoint=c, **common) for c in ("blocks", "op"))
    table = _storages(op)
    ops, rows, paths = table["ops"], table["rows"], table["paths"]
    assert len(table["op_rows"]) == len(ops) == 9
    for k in range(3):  # the 3rd call of each block: its output's row, an output of it
        (row,) = table["op_rows"][3 * k + 2]
        assert rows[row][0] == a and paths.index(str(k)) in rows[row][3]
    assert op.kept_activation_bytes - blocks.kept_activation_bytes == 3 * a
    real = _odd_model()
    assert op.peak_bytes == _tracked_peak(real, X_RUN, real)


def _logits_loss(out: Any) -> torch.Tensor:
    loss: torch.Tensor = out.logits.float().pow(2).mean()
    return loss


def test_llama_blocks_peak_equals_a_real_selective_checkpoint_step() -> None:
    """A 3-layer transformers Llama (eager attention, float32, 2 x 64 tokens) under
    torchtitan's policy: q, v, gate and down kept (the down projection's output, which
    the analysis freed at the residual add, too); the plan's peak is the step's."""
    import transformers

    def llama() -> nn.Module:
        torch.manual_seed(0)
        shape: dict[str, Any] = dict(
            vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, attn_implementation="eager",
            use_cache=False,
        )  # fmt: skip
        config = transformers.LlamaConfig(**shape)
        model: nn.Module = transformers.LlamaForCausalLM(config)
        return model

    ids = torch.randint(0, 256, (2, 64), generator=torch.Generator().manual_seed(0))
    plan = ls.plan(
        llama(), ids, target="h100", world_size=1, sharding="none", precision="fp32",
        optimizer="sgd", reserve_bytes=0, checkpoint="op", loss_fn=_logits_loss,
    )  # fmt: skip
    real = llama()
    assert plan.peak_bytes == _tracked_peak(
        real, ids, real.get_submodule("model.layers"), _logits_loss
    )
