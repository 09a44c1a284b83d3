"""torchtitan's published Llama 2 / Llama 3 FSDP2 runs on 64 A100 80GB against their
plans: predicted and bound tokens/s per GPU beside the measured, and fits.

    python bench/published_runs_torchtitan.py [--only NAME] [--json OUT.json]

Source: https://github.com/pytorch/torchtitan/blob/main/docs/performance.md, tables
"Llama 3 performance numbers" and "Llama 2 performance numbers" (WPS = tokens/s per GPU,
MFU; 64 A100 80GB, FSDP2, local batch as given) and footnote 1 (Llama 2 70B at local
batch 2 with selective op checkpointing ran out of memory); the file's first version
(commit 395a52627) also lists Llama 2 70B at local batch 2 with selective layer
checkpointing as out of memory. The shapes are Meta's
published configs (Llama 3 8B/70B: 8,192 tokens, vocab 128,256, 8 KV heads; Llama 2
13B/70B: 4,096 tokens, vocab 32,000), built as transformers' ``LlamaForCausalLM`` on
``meta``.

The norms are the ones torchtitan's configs of those runs set (``train_configs/*.toml``
at the commit that published both tables, 1ea476e9f, 2024-04-24: ``norm_type``):
``fused_rmsnorm`` for Llama 2 13B and Llama 3 8B, torchtitan's Triton RMSNorm, which
saves its input, weight and per-row rstd for the backward (``torchtitan/models/norms.py``,
``TritonFusedRMSNorm``: ``ctx.save_for_backward(x, weight, rstd)``), built here as
``F.rms_norm`` (whose CUDA kernel, ``_fused_rms_norm``, saves the same); ``rmsnorm``
for the 70B models, torchtitan's eager RMSNorm (``x.float()``, ``pow``, ``mean``,
``rsqrt``, ``type_as``, ``* weight``: the ops of transformers' ``LlamaRMSNorm``, kept).

Approximations, stated: 8 GPUs per node (the default A100 node); torchtitan's default
mixed precision (bf16 parameters, fp32 reduce) as ``bf16-mixed``; AdamW; no
``torch.compile``; the loss as transformers computes it from ``labels``; "full" AC as
every block checkpointed; "selective layer" AC (``ac_freq`` 2) as every second block
(``model.layers.1``, ``.3``, ...); "selective op" AC (torchtitan's per-op policy) as
``checkpoint="op"`` (every block under that policy: ``layerscope/planning/oppolicy.py``).
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F

import layerscope as ls
import published

SOURCE = "https://github.com/pytorch/torchtitan/blob/main/docs/performance.md"
SHAPES: dict[str, dict[str, Any]] = {
    "llama3-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, vocab_size=128256),
    "llama3-70b": dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                       num_attention_heads=64, num_key_value_heads=8, vocab_size=128256),
    "llama2-13b": dict(hidden_size=5120, intermediate_size=13824, num_hidden_layers=40,
                       num_attention_heads=40, num_key_value_heads=40, vocab_size=32000),
    "llama2-70b": dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                       num_attention_heads=64, num_key_value_heads=8, vocab_size=32000),
}  # fmt: skip
SEQ = {"llama3": 8192, "llama2": 4096}
#: checkpointing a plan cannot express (none since ``checkpoint="op"``)
NOT_EXPRESSIBLE: dict[str, str] = {}


@dataclass(frozen=True)
class Run:
    """One row of torchtitan's tables, as printed there (tokens/s 0: it did not run)."""

    model: str
    batch: int
    checkpointing: str  # no, full, selective layer, selective op
    tokens_per_s_per_gpu: int
    mfu: float
    table: str
    ran: bool = True

    @property
    def name(self) -> str:
        return f"{self.model} b{self.batch} ac={self.checkpointing.replace(' ', '-')}"


_L3, _L2 = "Llama 3 performance numbers", "Llama 2 performance numbers"
#: the file's first version (commit 395a52627, 2024-04-18), whose one table also listed
#: 70B at local batch 2 with selective layer checkpointing as OOM
_FIRST = "docs/performance.md at 395a52627, the 13B/70B table (OOM)"
RUNS = [
    Run("llama3-8b", 1, "selective layer", 2904, 56.8, _L3),
    Run("llama3-8b", 1, "selective op", 2973, 58.2, _L3),
    Run("llama3-70b", 1, "full", 331, 51.7, _L3),
    Run("llama2-13b", 2, "no", 2162, 61.1, _L2),
    Run("llama2-13b", 2, "selective layer", 1914, 54.1, _L2),
    Run("llama2-13b", 2, "selective op", 1904, 53.8, _L2),
    Run("llama2-70b", 1, "selective op", 355, 50.8, _L2),
    Run("llama2-70b", 2, "full", 353, 50.5, _L2),
    Run("llama2-70b", 2, "selective op", 0, 0.0, _L2 + ", footnote 1 (OOM)", ran=False),
    Run("llama2-70b", 2, "selective layer", 0, 0.0, _FIRST, ran=False),
]


#: the models whose torchtitan config set ``norm_type = "fused_rmsnorm"`` (module doc)
FUSED_NORM = frozenset({"llama2-13b", "llama3-8b"})


class FusedRMSNorm(torch.nn.Module):
    """torchtitan's ``fused_rmsnorm`` as ``F.rms_norm``: one kernel each way, saving the
    input, the weight and the rstd (module doc)."""

    def __init__(self, weight: torch.nn.Parameter, eps: float) -> None:
        super().__init__()
        self.weight, self.eps = weight, eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def build(run: Run) -> torch.nn.Module:
    """The run's model on ``meta``, without a KV cache, with its config's norm."""
    import transformers

    config = transformers.LlamaConfig(
        max_position_embeddings=SEQ[run.model.split("-")[0]], use_cache=False,
        **SHAPES[run.model],
    )  # fmt: skip
    with torch.device("meta"):
        model: torch.nn.Module = transformers.LlamaForCausalLM(config)
    if run.model in FUSED_NORM:
        for parent in list(model.modules()):
            for name, child in list(parent.named_children()):
                if type(child).__name__ == "LlamaRMSNorm":
                    weight = cast(torch.nn.Parameter, child.weight)
                    norm = FusedRMSNorm(weight, cast(float, child.variance_epsilon))
                    setattr(parent, name, norm)
    return model.train()


def checkpoint(run: Run) -> str | tuple[str, ...] | None:
    layers = int(SHAPES[run.model]["num_hidden_layers"])
    if run.checkpointing == "selective layer":
        return tuple(f"model.layers.{i}" for i in range(1, layers, 2))
    return {"no": None, "full": "blocks", "selective op": "op"}[run.checkpointing]


def plan_run(run: Run) -> dict[str, Any]:
    row: dict[str, Any] = {**asdict(run), "name": run.name}
    if run.checkpointing in NOT_EXPRESSIBLE:
        return row | {"expressible": False, "why": NOT_EXPRESSIBLE[run.checkpointing]}
    model = build(run)
    seq = SEQ[run.model.split("-")[0]]
    ids = torch.zeros(run.batch, seq, dtype=torch.long, device="meta")
    start = time.perf_counter()
    plan = ls.plan(
        model, kwargs={"input_ids": ids, "labels": ids}, target="a100-80gb",
        world_size=64, sharding="fsdp", precision="bf16-mixed", optimizer="adamw",
        checkpoint=checkpoint(run), progress=False,
    )  # fmt: skip
    predicted = plan.tokens_per_s
    bound = getattr(plan, "tokens_per_s_bound", None) or predicted
    return row | {
        "expressible": True, "seconds_to_plan": time.perf_counter() - start,
        "predicted": predicted, "bound": bound, "fits": plan.fits,
        "peak_bytes": plan.peak_bytes, "budget": plan.budget, "time": plan.time,
        "time_bound": plan.time_bound, "step_time": plan.step_time, "kernels": plan.kernels,
        "ratio": run.tokens_per_s_per_gpu / predicted if predicted and run.ran else None,
    }  # fmt: skip


def _line(row: dict[str, Any]) -> str:
    if not row["expressible"]:
        return f"{row['name']:<34} not expressible: {row['why']}"
    ratio = "" if row["ratio"] is None else f"{row['ratio']:.2f}"
    bound = "" if not row["ran"] else f"{row['tokens_per_s_per_gpu'] / row['bound']:.2f}"
    return (
        f"{row['name']:<34} {row['tokens_per_s_per_gpu']:>9,} {row['predicted']:>9,.0f} "
        f"{row['bound']:>9,.0f} {ratio:>9} {bound:>10} {row['fits']!s:>5} "
        f"{row['peak_bytes'] / 2**30:>8.1f}"
    )


def main() -> int:
    args = published.arguments(__doc__)
    header = (
        f"{'run':<34} {'measured':>9} {'predicted':>9} {'bound':>9} {'meas/pred':>9} "
        f"{'meas/bound':>10} {'fits':>5} {'peak GiB':>8}"
    )
    rows = published.table(RUNS, args.only, plan_run, _line, header)
    ratios = [r["ratio"] for r in rows if r.get("ratio")]
    if ratios:
        print("\n" + published.medians(ratios))
    wrong = [r["name"] for r in rows if r.get("fits") is not None and r["fits"] != r["ran"]]
    above = [r["name"] for r in rows if r.get("ratio") and r["tokens_per_s_per_gpu"] > r["bound"]]
    print(f"faster than the bound: {above or 'none'}; fit predicted wrongly: {wrong or 'none'}")
    published.save(args.json, SOURCE, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
