"""torchtitan's published runs with tensor parallelism against their plans: predicted and
bound tokens/s per GPU beside the measured, the peak beside the measured memory.

    python bench/published_runs_parallel.py [--only NAME] [--json OUT.json]

Sources (pytorch/torchtitan):

- ``docs/performance.md`` at 3faaa1a0d (2024-08-23), "Llama 3.1 performance numbers":
  Llama 3.1 405B on 128 H100 (94 GB), FSDP2 x tensor parallel 8 (16 x 8), local batch 2,
  full activation checkpointing, 109 tokens/s per GPU without Float8, 177 with it; the
  config of those runs, ``train_configs/llama3_405b.toml`` there: sequence 8,192,
  ``norm_type = "rmsnorm"``;
- ``benchmarks/llama3_h100_202412_torchtitan.md``, Table 4: Llama 3.1 70B on 256 H100
  (96 GB HBM2e, 500 W), FSDP 32 x TP 8, local batch 16, full activation checkpointing,
  torch.compile and Float8: 829 tokens/s per GPU, 71.9 GiB of memory;
- the same file, Table 5: Llama 3.1 405B on 512 H100, FSDP 8 x TP 8 x PP 8, local batch
  32 (torchtitan's microbatch size 1: 32 microbatches a step), full activation
  checkpointing, torch.compile, Float8 and asynchronous TP, schedule 1F1B: 100 tokens/s
  per GPU, 82.5 GiB (the most of any rank); interleaved 1F1B (torchtitan: two stages a
  rank for its looped schedules): 128 tokens/s, 72.7 GiB; torchtitan's trainer calls the
  schedule's ``step`` with ``return_outputs=False``.

Built as transformers' ``LlamaForCausalLM`` on ``meta`` (Meta's published shapes) with
its own tensor-parallel plan and sequence parallelism, as torchtitan's ``apply_tp``
shards them. Approximations, stated: torchtitan's loss parallelism (the loss on the
vocabulary-sharded logits) as the output projection column-wise without gathering its
output and a float32 cross-entropy on this rank's shard of the logits; the 405B rows'
optimizations ("None": no Float8, no asynchronous tensor parallelism, taken as not
compiled); the target the H100 SXM's datasheet (the runs'
H100s ran at a 500 W limit, and torchtitan says their peak is between the SXM's and
the NVL's); the budgets, 94 and 96 GB, at the H100 80GB's usable share (``h100``'s
85,029,158,912 B per 80 GB: the same 79.2 of 80 GiB); bf16 mixed precision with float32 reduction,
AdamW; full checkpointing as every block checkpointed.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import torch

import layerscope as ls
import published

SOURCE = "https://github.com/pytorch/torchtitan (docs/performance.md, benchmarks/)"
SHAPES: dict[str, dict[str, Any]] = {
    "llama3.1-405b": dict(hidden_size=16384, intermediate_size=53248, num_hidden_layers=126,
                          num_attention_heads=128, num_key_value_heads=8, vocab_size=128256),
    "llama3.1-70b": dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                         num_attention_heads=64, num_key_value_heads=8, vocab_size=128256),
}  # fmt: skip
SEQ = 8192
#: the H100 80GB's usable bytes per GB of its size (``ls.device_spec("h100")``)
USABLE = 85_029_158_912 / 80


@dataclass(frozen=True)
class Run:
    """One published row (memory 0: not reported)."""

    model: str
    batch: int
    dp_shard: int
    tp: int
    compile: bool
    float8: bool
    tokens_per_s_per_gpu: int
    memory_gib: float
    budget_gb: float
    source: str
    #: pipeline stages and schedule (1: none); a pipeline's ``batch`` is its microbatches
    #: of one sequence each
    pp: int = 1
    schedule: str = "1f1b"

    @property
    def name(self) -> str:
        extra = "+compile" * self.compile + "+float8" * self.float8
        short = {"interleaved_1f1b": "interleaved"}.get(self.schedule, self.schedule)
        pp = f"xpp{self.pp}-{short}" if self.pp > 1 else ""
        return f"{self.model} b{self.batch} fsdp{self.dp_shard}xtp{self.tp}{pp}{extra}"


_405 = "docs/performance.md at 3faaa1a0d, Llama 3.1 performance numbers"
_70 = "benchmarks/llama3_h100_202412_torchtitan.md, Table 4"
_405_PP = "benchmarks/llama3_h100_202412_torchtitan.md, Table 5"
RUNS = [
    Run("llama3.1-405b", 2, 16, 8, False, False, 109, 0.0, 94.0, _405),
    Run("llama3.1-405b", 2, 16, 8, False, True, 177, 0.0, 94.0, _405),
    Run("llama3.1-70b", 16, 32, 8, True, True, 829, 71.9, 96.0, _70),
    Run("llama3.1-405b", 32, 8, 8, True, True, 100, 82.5, 96.0, _405_PP, pp=8),
    Run(
        "llama3.1-405b",
        32,
        8,
        8,
        True,
        True,
        128,
        72.7,
        96.0,
        _405_PP,
        pp=8,
        schedule="interleaved_1f1b",
    ),
]


def plan_run(run: Run) -> dict[str, Any]:
    import transformers

    config = transformers.LlamaConfig(max_position_embeddings=SEQ, use_cache=False,
                                      **SHAPES[run.model])  # fmt: skip
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    tp_plan = dict(model._tp_plan) | {"lm_head": "colwise"}  # loss parallelism
    rows = 1 if run.pp > 1 else run.batch  # a pipeline's input is one microbatch
    ids = torch.zeros(rows, SEQ, dtype=torch.long, device="meta")
    pipeline: dict[str, Any] = (
        {"microbatches": run.batch, "schedule": run.schedule, "return_outputs": False}
        if run.pp > 1 else {}
    )  # fmt: skip
    if run.schedule == "interleaved_1f1b":
        pipeline["virtual_stages"] = 2
    start = time.perf_counter()

    def loss(out: Any) -> torch.Tensor:  # on this rank's vocabulary shard
        logits = out.logits.float()
        target = torch.zeros(logits.shape[:-1], dtype=torch.long, device=logits.device)
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten())

    plan = ls.plan(
        model, kwargs={"input_ids": ids}, loss_fn=loss, target="h100",
        mesh={"dp_shard": run.dp_shard, "tp": run.tp, "pp": run.pp}, tp_plan=tp_plan,
        sequence_parallel=True, checkpoint="blocks", compile=run.compile,
        float8=run.float8, budget=int(run.budget_gb * USABLE), progress=False, **pipeline,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    predicted = plan.tokens_per_s or 0.0
    return asdict(run) | {
        "name": run.name, "seconds_to_plan": seconds, "predicted": predicted,
        "bound": plan.tokens_per_s_bound, "fits": plan.fits, "peak_bytes": plan.peak_bytes,
        "states": plan.states, "time": plan.time, "step_time": plan.step_time,
        "ratio": run.tokens_per_s_per_gpu / predicted if predicted else None,
    }  # fmt: skip


def _line(row: dict[str, Any]) -> str:
    memory = f"{row['memory_gib']:.1f}" if row["memory_gib"] else "-"
    return (
        f"{row['name']:<50} {row['tokens_per_s_per_gpu']:>8,} {row['predicted']:>9,.0f} "
        f"{row['bound']:>8,.0f} {row['ratio']:>9.2f} {row['fits']!s:>5} "
        f"{row['peak_bytes'] / 2**30:>8.1f} {memory:>8} {row['seconds_to_plan']:>6.1f}"
    )


def main() -> int:
    args = published.arguments(__doc__)
    header = (
        f"{'run':<50} {'measured':>8} {'predicted':>9} {'bound':>8} {'meas/pred':>9} "
        f"{'fits':>5} {'peak GiB':>8} {'run GiB':>8} {'plan s':>6}"
    )
    rows = published.table(RUNS, args.only, plan_run, _line, header)
    ratios = [r["ratio"] for r in rows if r["ratio"]]
    if ratios:
        print("\n" + published.medians(ratios))
    published.save(args.json, SOURCE, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
