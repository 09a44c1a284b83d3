"""``loss=``: ``"plain"`` plans the analysis's logits and loss; ``"fused"`` a chunked
fused linear cross-entropy (Liger's) that never holds the full-vocabulary logits
(``planning.loss``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import layerscope as ls
from layerscope.errors import InvalidInputError
from layerscope.planning import Options
from layerscope.planning.loss import chunk_tokens

V, H, T = 1024, 16, 64  # vocabulary, width, tokens (one sequence)


class TinyLM(nn.Module):
    """A frozen embedding, a mixing Linear and an output projection, and the
    cross-entropy of the logits against the input ids, in the model's forward."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, H).requires_grad_(False)
        self.mix = nn.Linear(H, H)
        self.head = nn.Linear(H, V, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        logits = self.head(self.mix(self.emb(ids)))
        return F.cross_entropy(logits.view(-1, V), ids.view(-1))


IDS = torch.randint(0, V, (1, T), generator=torch.Generator().manual_seed(0))


def _plan(loss: str) -> ls.Plan:
    torch.manual_seed(0)
    return ls.plan(
        TinyLM(), IDS, world_size=1, sharding="none", precision="fp32", optimizer="sgd",
        reserve_bytes=0, loss=loss,
    )  # fmt: skip


def test_liger_chunk_size() -> None:
    # Liger's own example (fused_linear_cross_entropy.py): BT = 4096 x 4, V = 32000,
    # H = 4096: ceil(V / H) = 8, 16,384 / 8 = 2,048 tokens a chunk
    assert chunk_tokens(4096 * 4, 4096, 32000) == 2048
    # ours: ceil(1,024 / 16) = 64, ceil(64 / 64) = 1 token a chunk; never above BT
    assert chunk_tokens(T, H, V) == 1
    assert chunk_tokens(3, 4096, 32000) == 1 and chunk_tokens(100, 4096, 4096) == 100
    # next power of 2: 1,000 tokens, ceil(V / H) = 3: ceil(1,000 / 3) = 334 -> 512
    assert chunk_tokens(1000, 100, 300) == 512


def test_the_peaks_differ_by_the_logits_held() -> None:
    """Both peaks by hand, above what both hold at the projection's entry (the
    embedding's and the mixer's outputs, the weights, the ids).

    Plain: ``F.cross_entropy`` is ``log_softmax`` then ``nll_loss``; its backward holds
    at once the saved ``log_softmax`` output, ``nll_loss``'s gradient and
    ``log_softmax``'s (each 64 x 1,024 float32 = 262,144 B), beside ``nll_loss``'s total
    weight and the loss's gradient (2 x 4 B): 786,440 B. The scalar the model returned
    is dropped once the loss is made from it, as a training loop drops the output.

    Fused: at the loss, the input's gradient (64 x 16 x 4 = 4,096 B), the weight's
    (1,024 x 16 x 4 = 65,536 B), one chunk of logits (1 token: 1,024 x 4 = 4,096 B) and
    a float32 loss per token (256 B): 73,984 B, more than the step holds anywhere else
    (the embedding is frozen: the gradients at the end are the mixer's and the
    projection's, 66,624 B)."""
    plain, fused = _plan("plain"), _plan("fused")
    logits = T * V * 4
    assert plain.peak_bytes - fused.peak_bytes == (3 * logits + 8) - (
        T * H * 4 + V * H * 4 + 1 * V * 4 + 4 * T
    )
    assert fused.peak_phase == {"phase": "forward", "event": "loss", "path": "head"}
    assert plain.peak_phase["phase"] == "backward"
    # the same step time: the same matmuls, and no change to the analysis
    assert fused.step_time == plain.step_time and fused.time == plain.time
    note = next(n for n in fused.notes if n.startswith("loss='fused'"))
    assert "64 tokens in chunks of 1, 4,096 B of logits at a time instead of 262,144" in note
    # kept for the backward. Plain: the mixer's input (64 x 16 x 4 = 4,096 B), the head's
    # input (4,096), log_softmax's output (262,144), the ids and the total weight
    # nll_loss saves (64 x 8 = 512, and 4). Fused: the mixer's input and, in place of
    # the rest, the input's gradient made in the forward (4,096)
    assert plain.kept_activation_bytes == 4_096 + 4_096 + 262_144 + 512 + 4 == 270_852
    assert fused.kept_activation_bytes == 4_096 + 4_096
    assert not any(n.startswith("loss=") for n in plain.notes)


def test_the_option_in_documents_views_and_html(tmp_path: Path) -> None:
    plain, fused = _plan("plain"), _plan("fused")
    assert fused.options["loss"] == "fused"
    assert "loss" not in plain.options  # the default: documents as before
    assert "optimizer sgd, loss fused; micro-batch" in fused.render(width=100)
    assert "loss" not in plain.render(width=100).split("\n", 3)[1]
    path = tmp_path / "plan.json"
    fused.save(path)
    loaded = ls.load_plan(path)
    assert loaded.options["loss"] == "fused" and loaded.peak_bytes == fused.peak_bytes
    assert json.loads(path.read_text())["plan"]["options"]["loss"] == "fused"
    fused.to_html(tmp_path / "plan.html")
    page = (tmp_path / "plan.html").read_text()
    assert '["loss","fused"]' in page  # the settings table
    assert "fused loss at head" in page  # the peak and the timeline
    opts = Options.from_dict({"loss": "fused"})
    assert opts.loss == "fused" and Options.from_dict(opts.to_dict()) == opts
    with pytest.raises(InvalidInputError, match="loss"):
        Options.from_dict({"loss": "chunked"})


def test_fused_composes_with_fsdp_and_mixed_precision() -> None:
    """Under FSDP2 and bf16 the fused loss's figures are in the projection's dtypes:
    its input and logits bf16, its gradient of the (gathered, bf16) weight too."""
    torch.manual_seed(0)
    model = TinyLM()
    plans = {
        loss: ls.plan(model, IDS, world_size=2, precision="bf16-mixed", loss=loss, units=[])
        for loss in ("plain", "fused")
    }
    fused = plans["fused"]
    at = fused.timeline["event"].index("loss")
    before = at - 1  # the projection's entry
    grown = fused.timeline["activation_bytes"][at] - fused.timeline["activation_bytes"][before]
    assert grown == T * H * 2 + V * H * 2 + 1 * V * 2 + 4 * T
    assert fused.peak_bytes < plans["plain"].peak_bytes


def test_a_model_without_a_projection_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="no module with matmuls"):
        ls.plan(nn.Sequential(nn.LayerNorm(4)), torch.randn(2, 4), loss="fused",
                world_size=1, sharding="none")  # fmt: skip


class _BaseModel(nn.Module):
    """A body without a head: its last matmul module (``mix``) is followed by a norm
    with weights, so its output is hidden states, not logits."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, H)
        self.mix = nn.Linear(H, H)
        self.norm = nn.LayerNorm(H)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.norm(self.mix(self.emb(ids)))
        return out


def test_a_model_whose_last_matmul_does_not_make_logits_is_refused() -> None:
    with pytest.raises(InvalidInputError, match=r"'mix', is followed by 'norm'.*LlamaModel"):
        ls.plan(_BaseModel(), IDS, loss="fused", world_size=1, sharding="none")


def test_a_sweep_says_its_loss() -> None:
    torch.manual_seed(0)
    sweep = ls.plan_sweep(
        TinyLM(), IDS, sharding="none", precision="fp32", world_size=1, micro_batch=[1, 2],
        loss="fused",
    )  # fmt: skip
    assert sweep.setting["loss"] == "fused"
    # the rows' micro-batch, not the input given, is the input's first dimension
    said = sweep.render(width=100).replace("\n  ", " ")
    assert "input (micro_batch, 64) int64 per GPU; loss fused." in said
    torch.manual_seed(0)
    alone = ls.plan(TinyLM(), IDS, sharding="none", precision="fp32", world_size=1,
                    loss="fused")  # fmt: skip
    assert sweep.rows[0].peak_bytes == alone.peak_bytes
    plain = ls.plan_sweep(TinyLM(), IDS, sharding="none", precision="fp32", world_size=1,
                          micro_batch=[1, 2])  # fmt: skip
    assert "loss" not in plain.setting and "loss" not in plain.render(width=100)


class _FusedLinearCrossEntropy(torch.autograd.Function):
    """Liger's fused linear cross-entropy as far as memory goes, in plain torch: chunks
    of ``chunk_tokens`` tokens, each chunk's logits turned into their gradient in place,
    the input's and the weight's gradients made in the forward, a float32 loss per
    token."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, target: torch.Tensor) -> Any:
        tokens = x.shape[0]
        chunk = chunk_tokens(tokens, x.shape[1], w.shape[0])
        grad_x, grad_w = torch.zeros_like(x), torch.zeros_like(w)
        losses = torch.zeros(tokens, dtype=torch.float32)
        for start in range(0, tokens, chunk):
            end = min(tokens, start + chunk)
            logits = x[start:end] @ w.t()
            lse = torch.logsumexp(logits, -1)
            losses[start:end] = lse - logits.gather(1, target[start:end, None]).squeeze(1)
            logits.sub_(lse[:, None]).exp_()
            logits[torch.arange(end - start), target[start:end]] -= 1
            logits.div_(tokens)
            grad_x[start:end] = logits @ w
            grad_w.addmm_(logits.t(), x[start:end])
            del logits, lse
        ctx.save_for_backward(grad_x, grad_w)
        return losses.sum() / tokens

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        grad_x, grad_w = ctx.saved_tensors
        return grad_x, grad_w, None


class _FusedTinyLM(TinyLM):
    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.mix(self.emb(ids)).view(-1, H)
        fused = _FusedLinearCrossEntropy.apply
        out: torch.Tensor = fused(h, self.head.weight, ids.view(-1))  # type: ignore[no-untyped-call]
        return out


def test_the_fused_peak_is_a_real_fused_runs() -> None:
    """The tiny LM run for real on the CPU with that fused loss in place of its head and
    cross-entropy, and profiled: its peak (parameters, measured session peak, input) is
    the fused plan's of the plain model, but for the chunk's own small tensors (its
    log-sum-exp, the target's logit, the row index: a few bytes per token of its 1-token
    chunk), which the rule leaves out."""
    torch.manual_seed(0)
    fused = _FusedTinyLM()
    torch.manual_seed(1)
    mem = ls.profile(fused.train(), IDS, backward=True, memory=True).memory
    real = mem["baseline_bytes"] + mem["session_peak_bytes"] + IDS.nbytes
    planned = _plan("fused").peak_bytes
    assert 0 <= real - planned <= 128, (real, planned)
