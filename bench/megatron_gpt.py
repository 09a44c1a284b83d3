"""A Megatron-style GPT at tensor parallel 8 x pipeline parallel 8, planned: GPT-3 175B's
shapes (96 layers, hidden 12,288, 96 heads, sequence 2,048, Megatron's padded vocabulary
of 51,200), learned positions, pre-norm blocks with GELU MLPs of 4 x hidden, biases, an
untied output projection; Megatron's tensor-parallel layout (q, k, v and the first MLP
linear column-wise, the attention's and the MLP's output row-wise); FSDP2 over 16
(1,024 GPUs), 1F1B over 64 microbatches of one sequence; bf16 mixed precision, AdamW,
every block checkpointed.

    python bench/megatron_gpt.py

Prints the plan's per-GPU states beside the same figures by hand, its peak, step time,
tokens/s and MFU, and how long planning took. The model is built here as an
``nn.Sequential`` (pipeline stages are cut from its children) with separate q, k, v
projections: the same shapes and FLOPs as Megatron's fused one.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import layerscope as ls

LAYERS, HIDDEN, HEADS, SEQ, VOCAB = 96, 12288, 96, 2048, 51200
TP, PP, DP, MICROBATCHES = 8, 8, 16, 64


class Embeddings(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tokens, self.positions = nn.Embedding(VOCAB, HIDDEN), nn.Embedding(SEQ, HIDDEN)

    def forward(self, ids: Tensor) -> Tensor:
        where = torch.arange(ids.shape[1], device=ids.device)
        out: Tensor = self.tokens(ids) + self.positions(where)
        return out


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(HIDDEN, HIDDEN) for _ in range(3))
        self.proj = nn.Linear(HIDDEN, HIDDEN)

    def forward(self, x: Tensor) -> Tensor:
        n, t, _ = x.shape
        d = HIDDEN // HEADS  # this rank's heads: as many as its share of q's outputs

        def heads(z: Tensor) -> Tensor:
            return z.view(n, t, -1, d).transpose(1, 2)

        y = F.scaled_dot_product_attention(heads(self.q(x)), heads(self.k(x)),
                                           heads(self.v(x)), is_causal=True)  # fmt: skip
        out: Tensor = self.proj(y.transpose(1, 2).reshape(n, t, -1))
        return out


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(HIDDEN), Attention()
        self.ln2 = nn.LayerNorm(HIDDEN)
        self.fc, self.proj = nn.Linear(HIDDEN, 4 * HIDDEN), nn.Linear(4 * HIDDEN, HIDDEN)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln1(x))
        out: Tensor = x + self.proj(F.gelu(self.fc(self.ln2(x))))
        return out


def model() -> nn.Sequential:
    with torch.device("meta"):
        blocks = [Block() for _ in range(LAYERS)]
        head = nn.Linear(HIDDEN, VOCAB, bias=False)
        return nn.Sequential(Embeddings(), *blocks, nn.LayerNorm(HIDDEN), head)


#: Megatron's layout over the Sequential's children (``*``: one path segment)
TP_PLAN = {
    "*.attn.q": "colwise", "*.attn.k": "colwise", "*.attn.v": "colwise",
    "*.attn.proj": "rowwise", "*.fc": "colwise", "*.proj": "rowwise",
}  # fmt: skip


def by_hand(pieces: list[int]) -> int:
    """Elements per GPU of a stage running ``pieces`` (the Sequential's children): per
    block 12 h^2 weights split by TP 8, the column-wise biases (q, k, v: 3 h; fc: 4 h)
    split, the row-wise ones (2 h) and the two norms (4 h) whole; the embeddings (vocabulary
    and positions) and the output projection whole, the final norm 2 h; then FSDP2 chunks
    every tensor's rows by 16, evenly."""
    h = HIDDEN
    per_block = 12 * h * h // TP + 7 * h // TP + 2 * h + 4 * h
    blocks = sum(1 for p in pieces if 1 <= p <= LAYERS)
    ends = (VOCAB + SEQ) * h * (0 in pieces) + (2 * h + h * VOCAB) * (LAYERS + 2 in pieces)
    return (blocks * per_block + ends) // DP


def main() -> None:
    start = time.perf_counter()
    plan = ls.plan(
        model(), input_shape=(1, SEQ), target="h100",
        mesh={"dp_shard": DP, "tp": TP, "pp": PP}, tp_plan=TP_PLAN,
        microbatches=MICROBATCHES, checkpoint="blocks", return_outputs=False, progress=False,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    assert plan.pipeline is not None
    row = plan.pipeline["rows"][plan.pipeline["stage"]]
    pieces = list(range(int(row["first"]), int(row["last"]) + 1))
    print(f"planned in {seconds:.1f} s; stage {row['stage']} ({row['modules']})")
    print(f"parameter elements per GPU: plan {plan.states['param_bytes'] // 4:,}, "
          f"by hand {by_hand(pieces):,}")  # fmt: skip
    print(f"peak {plan.peak_bytes / 2**30:.1f} GiB, step {plan.step_time:.2f} s, "
          f"{plan.tokens_per_s:.0f} tokens/s per GPU, MFU {plan.mfu:.1%}")  # fmt: skip
    for r in plan.pipeline["rows"]:
        print(f"  stage {r['stage']}: {r['modules']}, peak {r['peak_bytes'] / 2**30:.1f} GiB, "
              f"{r['time'] * 1e3:.0f} ms a microbatch")  # fmt: skip


if __name__ == "__main__":
    main()
