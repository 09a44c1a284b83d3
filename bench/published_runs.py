"""Published, measured training runs against their plans: predicted and bound tokens/s
per GPU beside the measured ones, and whether the plan fits runs that ran.

    python bench/published_runs.py [--only NAME] [--loss fused] [--json OUT.json]

The runs are MosaicML's MPT throughput benchmarks (llm-foundry,
``scripts/train/benchmarking/README.md``, tables "H100 80GB BF16 (Large Scale, >= 128
GPUs)", "H100 80GB BF16", "A100 80GB with 1600 Gbps node-node interconnect (RoCE)" and
"A100 40GB with 1600 Gbps ..."): each row gives the model, sequence length, GPUs, micro-
batch, gradient accumulation, precision, FSDP sharding strategy, activation
checkpointing, the parameter count and the measured throughput per GPU (T/s/GPU).

The models (llm-foundry ``scripts/train/yamls/pretrain/mpt-*.yaml``: d_model, n_heads,
n_layers, vocab 50,368, expansion ratio 4) as these benchmarks ran them are GPT-2's
architecture: learned position embeddings of ``max_seq_len``, LayerNorm and Linear
biases, a GELU MLP of 4 x d_model (torch's exact GELU, ``nn.GELU()``), no dropout
(MPT's ``attn_pdrop``, ``resid_pdrop`` and ``emb_pdrop`` default to 0), tied embeddings.
So each is built as transformers' ``GPT2LMHeadModel`` on ``meta``, and its parameter
count must equal the table's ``NumParams`` (checked for every row: 12 d^2 + 13 d per
layer, (vocab + seq) d, 2 d).

Approximations, stated: Composer's FSDP ``FULL_SHARD`` is planned as FSDP2 (every block
a unit), ``SHARD_GRAD_OP`` as FSDP2 with ``reshard_after_forward=False``; precision
``amp_bf16`` (mixed precision ``DEFAULT``) and ``bf16`` (``PURE``) both as
``bf16-mixed`` (16-bit parameters: the LayerNorms run in 16 bits, as the runs'
``low_precision_layernorm`` does, which ``submit_benchmarks.py`` sets); attention as
torch's flash backend, FlashAttention-2 (the runs set llm-foundry's ``attn_impl`` to
``flash``, flash-attn 2, or ``triton``, flash-attn's Triton kernel:
``scripts/train/benchmarking/sweep.py`` and ``submit_benchmarks.py``, whose default is
``triton``; no published rate of the Triton kernel was found, so it is priced as
FlashAttention-2), not the target's default SDPA choice (cuDNN on the H100, which the
runs did not use); activation checkpointing as every block checkpointed; the optimizer
AdamW (decoupled AdamW in the runs). The A100 runs' cluster is the default A100 node (8
x 200 Gb/s = the tables' 1600 Gbps); the H100 runs' the default H100 node.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import layerscope as ls

SOURCE = (
    "mosaicml/llm-foundry scripts/train/benchmarking/README.md (MPT training benchmarks), "
    "models from scripts/train/yamls/pretrain/mpt-*.yaml"
)
#: d_model, n_heads, n_layers (llm-foundry's mpt-*.yaml)
SHAPES: dict[str, tuple[int, int, int]] = {
    "125m": (768, 12, 12), "350m": (1024, 16, 24), "760m": (1536, 12, 24),
    "1b": (2048, 16, 24), "3b": (2560, 20, 32), "7b": (4096, 32, 32),
    "13b": (5120, 40, 40), "30b": (7168, 56, 48), "70b": (8192, 64, 80),
}  # fmt: skip
VOCAB = 50368
TARGETS = {"h100_80gb": "h100", "a100_80gb": "a100-80gb", "a100_40gb": "a100-40gb"}


@dataclass(frozen=True)
class Run:
    """One row of the tables, as printed there."""

    model: str
    seq: int
    gpus: int
    gpu: str
    micro_batch: int
    grad_accum: int
    precision: str
    sharding: str  # FULL_SHARD or SHARD_GRAD_OP
    checkpointing: bool
    params: int
    tokens_per_s_per_gpu: int
    table: str

    @property
    def name(self) -> str:
        return f"mpt-{self.model} {self.seq} x{self.gpus} {self.gpu}"


def _rows(table: str, text: str) -> list[Run]:
    """Rows ``model seq gpus gpu mb ga precision sharding ckpt params tok/s/gpu``."""
    out = []
    for line in text.strip().splitlines():
        m, s, n, g, mb, ga, prec, shard, ckpt, params, tps = line.split()
        out.append(Run(m, int(s), int(n), g, int(mb), int(ga), prec, shard, ckpt == "True",
                       int(params), int(tps), table))  # fmt: skip
    return out


RUNS = [
    *_rows(
        "H100 80GB BF16 (Large Scale, >= 128 GPUs)",
        """
70b 2048 512 h100_80gb 8 1 amp_bf16 FULL_SHARD True 64862437376 1007
70b 2048 128 h100_80gb 8 1 amp_bf16 FULL_SHARD True 64862437376 1058
30b 2048 512 h100_80gb 8 1 amp_bf16 FULL_SHARD True 29975214080 2115
13b 2048 128 h100_80gb 16 1 amp_bf16 FULL_SHARD True 12853954560 5080
7b 2048 512 h100_80gb 6 1 amp_bf16 FULL_SHARD False 6658859008 9670
7b 2048 128 h100_80gb 6 1 amp_bf16 FULL_SHARD False 6658859008 10475
3b 2048 128 h100_80gb 8 1 amp_bf16 SHARD_GRAD_OP False 2651837440 23422
1b 2048 128 h100_80gb 12 1 amp_bf16 SHARD_GRAD_OP False 1315950592 44123
""",
    ),
    *_rows(
        "H100 80GB BF16",
        """
70b 2048 64 h100_80gb 8 4 amp_bf16 FULL_SHARD True 64862437376 1039
30b 2048 8 h100_80gb 3 21 amp_bf16 FULL_SHARD True 29975214080 2002
30b 8192 8 h100_80gb 1 21 amp_bf16 FULL_SHARD True 30019254272 1384
13b 2048 8 h100_80gb 2 1 amp_bf16 FULL_SHARD False 12853954560 4792
13b 4096 8 h100_80gb 10 3 amp_bf16 FULL_SHARD True 12864440320 4717
7b 2048 8 h100_80gb 6 1 amp_bf16 FULL_SHARD False 6658859008 10643
7b 8192 8 h100_80gb 8 2 amp_bf16 FULL_SHARD True 6684024832 6935
7b 32768 8 h100_80gb 2 2 amp_bf16 FULL_SHARD True 6784688128 3318
3b 2048 16 h100_80gb 10 3 amp_bf16 FULL_SHARD False 2651837440 24142
3b 8192 8 h100_80gb 3 6 amp_bf16 FULL_SHARD False 2667566080 16578
1b 2048 8 h100_80gb 14 1 amp_bf16 FULL_SHARD False 1315950592 45455
1b 8192 8 h100_80gb 3 4 amp_bf16 FULL_SHARD False 1328533504 29157
760m 2048 8 h100_80gb 24 2 amp_bf16 FULL_SHARD False 760470528 63147
""",
    ),
    *_rows(
        "A100 80GB with 1600 Gbps node-node interconnect (RoCE)",
        """
70b 2048 64 a100_80gb 8 4 bf16 FULL_SHARD True 64862437376 410
30b 2048 8 a100_80gb 3 21 amp_bf16 FULL_SHARD True 29975214080 916
13b 2048 8 a100_80gb 2 3 amp_bf16 FULL_SHARD False 12853954560 2262
7b 2048 8 a100_80gb 6 2 amp_bf16 FULL_SHARD False 6658859008 4641
7b 8192 8 a100_80gb 8 2 amp_bf16 FULL_SHARD True 6684024832 3206
3b 2048 8 a100_80gb 10 2 amp_bf16 FULL_SHARD False 2651837440 10811
1b 2048 8 a100_80gb 14 4 amp_bf16 FULL_SHARD False 1315950592 20513
350m 2048 8 a100_80gb 32 2 amp_bf16 FULL_SHARD False 355985408 58782
125m 2048 8 a100_80gb 32 2 amp_bf16 FULL_SHARD False 125311488 141737
""",
    ),
    *_rows(
        "A100 40GB with 1600 Gbps node-node interconnect (RoCE)",
        """
13b 2048 64 a100_40gb 16 1 bf16 FULL_SHARD True 12853954560 1976
7b 2048 128 a100_40gb 18 1 bf16 FULL_SHARD True 6658859008 3623
""",
    ),
]


def build(run: Run) -> torch.nn.Module:
    """The run's model on ``meta``: GPT-2's architecture at the MPT shape (module doc)."""
    import transformers

    d, heads, layers = SHAPES[run.model]
    config = transformers.GPT2Config(
        n_embd=d, n_head=heads, n_layer=layers, vocab_size=VOCAB, n_positions=run.seq,
        activation_function="gelu", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        use_cache=False,
    )  # fmt: skip
    with torch.device("meta"):
        model: torch.nn.Module = transformers.GPT2LMHeadModel(config)
    params = sum(p.numel() for p in model.parameters())
    by_hand = layers * (12 * d * d + 13 * d) + (VOCAB + run.seq) * d + 2 * d
    if not params == by_hand == run.params:
        raise AssertionError(f"{run.name}: {params:,} parameters, the table says {run.params:,}")
    return model.train()


def plan_run(run: Run, loss: str = "plain") -> dict[str, Any]:
    model = build(run)
    ids = torch.zeros(run.micro_batch, run.seq, dtype=torch.long, device="meta")
    start = time.perf_counter()
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):  # the runs' kernel (module doc)
        plan = ls.plan(
        model, kwargs={"input_ids": ids, "labels": ids}, target=TARGETS[run.gpu],
            world_size=run.gpus, sharding="fsdp", precision="bf16-mixed", optimizer="adamw",
            grad_accum=run.grad_accum, checkpoint="blocks" if run.checkpointing else None,
            reshard_after_forward=run.sharding == "FULL_SHARD", progress=False, loss=loss,
        )  # fmt: skip
    predicted = plan.tokens_per_s
    bound = getattr(plan, "tokens_per_s_bound", None) or predicted
    return {
        **asdict(run), "name": run.name, "seconds_to_plan": time.perf_counter() - start,
        "predicted": predicted, "bound": bound, "fits": plan.fits,
        "peak_bytes": plan.peak_bytes, "budget": plan.budget, "time": plan.time,
        "time_bound": plan.time_bound, "step_time": plan.step_time, "kernels": plan.kernels,
        "ratio": run.tokens_per_s_per_gpu / predicted if predicted else None,
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="runs whose name contains this")
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument(
        "--loss", default="plain", choices=["plain", "fused"],
        help="ls.plan's loss= (llm-foundry's runs use a fused cross-entropy)",
    )  # fmt: skip
    args = parser.parse_args()
    runs = [r for r in RUNS if not args.only or args.only in r.name]
    rows = []
    print(f"{'run':<30} {'measured':>9} {'predicted':>9} {'bound':>9} {'meas/pred':>9} "
          f"{'meas/bound':>10} {'fits':>5}")  # fmt: skip
    for run in runs:
        row = plan_run(run, args.loss)
        rows.append(row)
        ratio = row["ratio"]
        print(f"{run.name:<30} {run.tokens_per_s_per_gpu:>9,} {row['predicted']:>9,.0f} "
              f"{row['bound']:>9,.0f} {ratio:>9.2f} "
              f"{run.tokens_per_s_per_gpu / row['bound']:>10.2f} {row['fits']!s:>5}",
              flush=True)  # fmt: skip
    errors = [abs(r["ratio"] - 1) for r in rows if r["ratio"]]
    above = [r["name"] for r in rows if r["tokens_per_s_per_gpu"] > r["bound"]]
    unfit = [r["name"] for r in rows if r["fits"] is False]
    print(
        f"\n{len(rows)} runs; median |measured / predicted - 1| = "
        f"{100 * statistics.median(errors):.1f} %; median measured / predicted = "
        f"{statistics.median(r['ratio'] for r in rows):.2f}; measured / bound median "
        f"{statistics.median(r['tokens_per_s_per_gpu'] / r['bound'] for r in rows):.2f}"
    )
    print(f"faster than the bound: {above or 'none'}; ran but predicted not to fit: "
          f"{unfit or 'none'}")  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"source": SOURCE, "torch": torch.__version__, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
