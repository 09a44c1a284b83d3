"""Published, measured serving runs against ``ls.plan_serving``: predicted and bound
output tokens/s beside the measured, and whether the bound holds.

    python bench/published_serving.py [--json OUT.json]

Every row's throughput is its batch's output tokens over the whole generation, prefill
included (as every source times it): predicted ``batch * new / (ttft + (new - 1) * tpot)``
and bound the same with ``tpot_bound`` (``ttft`` is already the prefill's roofline).

**gpt-fast** (https://github.com/pytorch-labs/gpt-fast, README.md at commit 0f925b5,
"Benchmarks"): batch 1, a 5-token prompt, ``torch.compile`` (CUDA graphs through
``mode="reduce-overhead"``), one A100-80GB power-limited to 330 W; tokens/s per user.
Llama-2-7B base 104.9, 8-bit 155.58, 4-bit (G=32) 196.80; Llama-2-70B 8-bit 19.13,
4-bit (G=32) 25.25. Its ``generate`` times the prefill and ``max_new_tokens - 1`` steps.
Approximations: the A100 SXM4 80GB spec (the runs were power-limited, and the README
says the bandwidth it reached was about 1,700 GB/s of the datasheet's 2,039);
``mode="graphs"``; 200 new tokens (gpt-fast's default ``max_new_tokens``); its int8 has
a bfloat16 scale per output channel (our ``int8``'s float16 one has the same width); its
int4 stores a bfloat16 scale and zero per group of 32 (4 bytes a group) where our
``int4`` charges a float16 scale and a 4-bit zero (2.5 bytes); it also quantizes the
output projection, which ours keeps at bfloat16 (about 2 % of Llama-2-7B's bytes). Its
"Tensor Parallelism" table (the same 8xA100-80GB node, "hybrid cube mesh" NVLink; bfloat16
Llama-2-7B on 2, 4, 8 GPUs 168.84, 254.02, 328.43; Llama-2-70B 21.32, 38.01, 62.50) and
"Tensor Parallelism + Quantization" (Llama-2-70B on 8 GPUs: 8-bit 80.44, 4-bit (G=32)
90.77): ``tp`` GPUs, the model split by its transformers tensor-parallel plan, each call's
collectives on the A100's NVLink.

**TensorRT-LLM v0.6.1** (https://github.com/NVIDIA/TensorRT-LLM, docs/source/performance.md
at commit 138f96d45f90b9667426f7c47297d8c06bafac73, "Peak Throughput": the tables "H100
GPUs (FP8)", "L40S GPUs (FP8)" (its v0.5 data) and "A100 GPUs (FP16)") and **v0.9.0**
(the same file as released with v0.9.0, its tables "All data was generated using version
0.9.0": "H200 GPUs (FP8)", "H100 GPUs (FP8)", "L40S GPUs (FP8)", "A100 GPUs (FP16)"; its
H100/H200 Mistral rows are quoted in NVIDIA/TensorRT-LLM issue #1570). Static batches of
the stated size, input and output lengths, run by ``gptSessionBenchmark`` (the whole
batch's output tokens over the generation, context phase included), float16 engines with
a contiguous (not paged) KV cache per sequence; "LLaMA 7B" and "LLaMA 70B" are Llama 2
(the files' build configs: 32 layers, 4096 wide, 11008 MLP; 80 layers, 8192 wide, 28672
MLP, 8 KV heads; 32000 vocabulary). The tensor-parallel rows (LLaMA 70B at TP 2 to 8,
v0.6.1's A100 GPT-J and LLaMA 7B at TP 2) are planned with ``tp`` (the L40S's collectives
on PCIe, the others' on NVLink). The figures are output tokens/s *per GPU*: every v0.9.0
table says so, and at 138f96d the H100 one (its L40S and A100 tables say "out tok/s"; the
same tables at commit 77d24b5fa178f11ed7fafdd9833b7245e075f721 say "out tok/s/GPU"): a
row's batch makes TP times its figure. Not expressed: Falcon 180B (transformers'
``FalconConfig`` has no tensor-parallel plan) and Mixtral 8x7B (FP8 engines, and
``weights=`` narrows ``nn.Linear`` layers, not transformers' packed expert parameters).

A tensor-parallel row's plan is one GPU's share of the model (``plan_serving(tp=)``), its
collectives on the node's link; its throughput the GPUs together.

Approximations, stated: the H100, H200 and L40S engines are FP8 (``--enable_fp8
--fp8_kv_cache``; v0.9.0's ``quant_algo`` and ``kv_cache_quant_algo`` "FP8"): FP8 weights
*and* FP8 matmuls (W8A8) with an FP8 KV cache: ``weights="fp8"`` (W8A8, the matmuls at
the target's FP8 peak; the activations' casts not charged) and ``kv_dtype="fp8"`` (the
cache held and read at one byte). The rows' cache is ``plan_serving``'s paged one, read at each
sequence's current length (rounded up to 16-token blocks) as TensorRT-LLM's attention
plugin reads its contiguous per-sequence cache. The A100 rows are float16 with a float16
cache. TensorRT's C++ runtime
enqueues an engine's fused kernels without Python: ``mode="graphs"`` (one launch per
step). GPT-J 6B's config (v0.9.0's): 28 layers, 4096 wide, 16 heads, rotary dimension
64, 50400 vocabulary, its 2048 positions raised to 4096 for the 2048 + 2048 rows (rotary:
no learned positions). Mistral 7B (v0.1, its Hugging Face config.json: 32 layers, 4096
wide, 14336 MLP, 32 heads, 8 KV heads, 32000 vocabulary) as a Llama of that shape: its
4096-token sliding window is no shorter than any context here.

**LMDeploy v0.2.0** (https://github.com/InternLM/lmdeploy, docs/en/benchmark/a100_fp16.md
at commit f44ba31cece50e28208c337238d9f903a4f66751, "Static Inference Benchmark", "FP16
llama2-7b"): TurboMind on one A100-80G, ``batch`` requests run concurrently, each
generating ``output_tokens`` after ``prompt_tokens``; ``benchmark/profile_generation.py``
divides every generated token by the elapsed time (prefill included). Approximations: the
A100 SXM4 80GB spec; float16 with a float16 cache; TurboMind is a C++ engine launching
fused kernels asynchronously: ``mode="graphs"``; its paged cache is read at each
sequence's length where the rows' static cache is read whole. The batch-64 rows with
2,048-token prompts hold more cache than fits beside the weights (the table's mean first
token latency, 6.6 s and 39 s, suggests requests queued): likely fewer than 64 ran at
once.

Not expressed: vLLM and TGI publish their serving benchmarks as figures or
dashboards with no table of batch, lengths and tokens/s found; MLPerf Inference's
Llama-2-70B results are whole multi-GPU systems on a dataset of varying lengths, their
per-GPU batch not published; TensorRT-LLM's later tables (v0.10 on) measure in-flight
batching under maximum load without stating the batch a step runs.

First-token latency: v0.9.0's "Low Latency" tables (batch 1, 128 and 2048 input tokens,
``gptSessionBenchmark`` with one output token; the TP 1 rows and LLaMA 70B's at TP 4 and 8)
against ``ttft``, a roofline lower bound: the measured should not be below it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch
import transformers

import layerscope as ls

GPT_FAST = "https://github.com/pytorch-labs/gpt-fast/blob/0f925b5/README.md"
TRT_LLM = (
    "https://github.com/NVIDIA/TensorRT-LLM/blob/138f96d45f90b9667426f7c47297d8c06bafac73"
    "/docs/source/performance.md"
)
TRT_LLM_090 = "https://github.com/NVIDIA/TensorRT-LLM/blob/v0.9.0/docs/source/performance.md"
LMDEPLOY_020 = (
    "https://github.com/InternLM/lmdeploy/blob/f44ba31cece50e28208c337238d9f903a4f66751"
    "/docs/en/benchmark/a100_fp16.md"
)
SOURCES = {
    "gpt-fast": GPT_FAST,
    "trt-llm-0.6.1": TRT_LLM,
    "trt-llm-0.9.0": TRT_LLM_090,
    "lmdeploy-0.2.0": LMDEPLOY_020,
}
SHAPES: dict[str, tuple[type, dict[str, Any]]] = {
    "llama2-7b": (transformers.LlamaConfig, dict(
        hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=32, vocab_size=32000,
        max_position_embeddings=4096)),
    "llama2-70b": (transformers.LlamaConfig, dict(
        hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
        num_attention_heads=64, num_key_value_heads=8, vocab_size=32000,
        max_position_embeddings=4096)),
    "mistral-7b": (transformers.LlamaConfig, dict(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, vocab_size=32000,
        max_position_embeddings=32768)),
    "gpt-j-6b": (transformers.GPTJConfig, dict(
        n_embd=4096, n_layer=28, n_head=16, rotary_dim=64, vocab_size=50400,
        n_positions=4096)),
}  # fmt: skip
SHORT = {"float16": "fp16", "bfloat16": "bf16"}
MODELS = {
    transformers.LlamaConfig: transformers.LlamaForCausalLM,
    transformers.GPTJConfig: transformers.GPTJForCausalLM,
}


@dataclass(frozen=True)
class Run:
    """One published row: the setting as expressed here and the measured output tokens/s
    of the whole batch."""

    source: str
    model: str
    target: str
    weights: str | None
    batch: int
    prompt: int
    new_tokens: int
    measured: float
    group_size: int = 128
    kv_dtype: str | None = None
    dtype: str = "bfloat16"
    tp: int = 1


def _gpt_fast(model: str, weights: str | None, group: int, measured: float, tp: int = 1) -> Run:
    return Run("gpt-fast", model, "a100", weights, 1, 5, 200, measured, group, tp=tp)


def _trt(
    source: str,
    model: str,
    gpu: str,
    batch: int,
    prompt: int,
    new: int,
    per_gpu: float,
    tp: int = 1,
) -> Run:
    """A TensorRT-LLM row; its tables state output tokens/s per GPU: the batch's are
    ``tp`` times that (module doc)."""
    fp8 = gpu != "a100"  # the H100, H200 and L40S engines are FP8 (module doc)
    return Run(
        source, model, gpu, "fp8" if fp8 else None, batch, prompt, new, per_gpu * tp,
        kv_dtype="fp8" if fp8 else None, dtype="float16", tp=tp,
    )  # fmt: skip


# TensorRT-LLM's tables, the TP 1 rows: (model, GPU, batch, input, output, tokens/s)
TRT_061 = (
    # "H100 GPUs (FP8)"
    ("gpt-j-6b", "h100", 1024, 128, 128, 26_150),
    ("gpt-j-6b", "h100", 120, 128, 2048, 8_011),
    ("gpt-j-6b", "h100", 64, 2048, 128, 2_551),
    ("gpt-j-6b", "h100", 64, 2048, 2048, 3_327),
    ("llama2-7b", "h100", 768, 128, 128, 19_694),
    ("llama2-7b", "h100", 112, 128, 2048, 6_818),
    ("llama2-7b", "h100", 80, 2048, 128, 2_244),
    ("llama2-7b", "h100", 48, 2048, 2048, 2_740),
    # "L40S GPUs (FP8)" (v0.5 data)
    ("gpt-j-6b", "l40s", 64, 128, 128, 3_630),
    ("gpt-j-6b", "l40s", 64, 128, 2048, 1_859),
    ("gpt-j-6b", "l40s", 32, 2048, 128, 616),
    ("gpt-j-6b", "l40s", 32, 2048, 2048, 757),
    ("llama2-7b", "l40s", 64, 128, 128, 3_240),
    ("llama2-7b", "l40s", 64, 128, 2048, 1_622),
    ("llama2-7b", "l40s", 32, 2048, 128, 581),
    ("llama2-7b", "l40s", 16, 2048, 2048, 531),
    # "A100 GPUs (FP16)"
    ("gpt-j-6b", "a100", 512, 128, 128, 6_374),
    ("gpt-j-6b", "a100", 60, 2048, 128, 670),
    ("llama2-7b", "a100", 384, 128, 128, 5_586),
    ("llama2-7b", "a100", 60, 128, 2048, 1_928),
    ("llama2-7b", "a100", 52, 2048, 128, 591),
)
TRT_090 = (
    # "H200 GPUs (FP8)"
    ("gpt-j-6b", "h200", 1024, 128, 128, 27_304),
    ("gpt-j-6b", "h200", 120, 128, 2048, 8_530),
    ("gpt-j-6b", "h200", 64, 2048, 128, 2_785),
    ("gpt-j-6b", "h200", 64, 2048, 2048, 3_753),
    ("mistral-7b", "h200", 896, 128, 128, 20_460),
    ("mistral-7b", "h200", 120, 128, 2048, 8_950),
    ("mistral-7b", "h200", 64, 2048, 128, 2_423),
    ("mistral-7b", "h200", 56, 2048, 2048, 3_867),
    ("llama2-7b", "h200", 896, 128, 128, 20_618),
    ("llama2-7b", "h200", 120, 128, 2048, 8_348),
    ("llama2-7b", "h200", 64, 2048, 128, 2_391),
    ("llama2-7b", "h200", 56, 2048, 2048, 3_522),
    ("llama2-70b", "h200", 1024, 128, 128, 3_989),
    ("llama2-70b", "h200", 64, 2048, 128, 418),
    ("llama2-70b", "h200", 64, 2048, 2048, 1_458),
    # "H100 GPUs (FP8)"
    ("gpt-j-6b", "h100", 1024, 128, 128, 25_860),
    ("gpt-j-6b", "h100", 120, 128, 2048, 7_350),
    ("gpt-j-6b", "h100", 64, 2048, 128, 2_570),
    ("gpt-j-6b", "h100", 64, 2048, 2048, 3_212),
    ("mistral-7b", "h100", 896, 128, 128, 20_404),
    ("mistral-7b", "h100", 120, 128, 2048, 8_623),
    ("mistral-7b", "h100", 84, 2048, 128, 2_405),
    ("mistral-7b", "h100", 56, 2048, 2048, 3_731),
    ("llama2-7b", "h100", 896, 128, 128, 19_854),
    ("llama2-7b", "h100", 120, 128, 2048, 6_944),
    ("llama2-7b", "h100", 84, 2048, 128, 2_163),
    ("llama2-7b", "h100", 56, 2048, 2048, 2_826),
    # "L40S GPUs (FP8)"
    ("gpt-j-6b", "l40s", 512, 128, 128, 7_859),
    ("gpt-j-6b", "l40s", 64, 128, 2048, 1_904),
    ("gpt-j-6b", "l40s", 32, 2048, 128, 684),
    ("gpt-j-6b", "l40s", 32, 2048, 2048, 768),
    ("mistral-7b", "l40s", 896, 128, 128, 9_562),
    ("mistral-7b", "l40s", 120, 128, 2048, 4_387),
    ("mistral-7b", "l40s", 84, 2048, 128, 971),
    ("mistral-7b", "l40s", 56, 2048, 2048, 1_721),
    ("llama2-7b", "l40s", 256, 128, 128, 5_885),
    ("llama2-7b", "l40s", 64, 128, 2048, 1_654),
    ("llama2-7b", "l40s", 32, 2048, 128, 574),
    ("llama2-7b", "l40s", 16, 2048, 2048, 537),
    # "A100 GPUs (FP16)"
    ("gpt-j-6b", "a100", 512, 128, 128, 5_876),
    ("gpt-j-6b", "a100", 32, 128, 2048, 1_549),
    ("gpt-j-6b", "a100", 32, 2048, 128, 545),
    ("gpt-j-6b", "a100", 32, 2048, 2048, 815),
    ("mistral-7b", "a100", 896, 128, 128, 6_251),
    ("mistral-7b", "a100", 120, 128, 2048, 3_776),
    ("mistral-7b", "a100", 64, 2048, 128, 698),
    ("mistral-7b", "a100", 56, 2048, 2048, 1_576),
    ("llama2-7b", "a100", 256, 128, 128, 5_390),
    ("llama2-7b", "a100", 32, 128, 2048, 1_484),
    ("llama2-7b", "a100", 32, 2048, 128, 533),
    ("llama2-7b", "a100", 16, 2048, 2048, 603),
)
# Their tensor-parallel rows: (model, GPU, TP, batch, input, output, tokens/s per GPU)
TRT_061_TP = (
    # "H100 GPUs (FP8)"
    ("llama2-70b", "h100", 2, 1024, 128, 128, 2_657),
    ("llama2-70b", "h100", 4, 480, 128, 2048, 1_486),
    ("llama2-70b", "h100", 2, 96, 2048, 128, 306),
    ("llama2-70b", "h100", 2, 64, 2048, 2048, 547),
    # "A100 GPUs (FP16)"
    ("gpt-j-6b", "a100", 2, 120, 128, 2048, 2_192),
    ("gpt-j-6b", "a100", 2, 64, 2048, 2048, 903),
    ("llama2-7b", "a100", 2, 64, 2048, 2048, 782),
    ("llama2-70b", "a100", 4, 1280, 128, 128, 670),
    ("llama2-70b", "a100", 4, 240, 128, 2048, 525),
    ("llama2-70b", "a100", 4, 120, 2048, 128, 79),
)
TRT_090_TP = (
    # "H200 GPUs (FP8)", "H100 GPUs (FP8)", "L40S GPUs (FP8)", "A100 GPUs (FP16)"
    ("llama2-70b", "h200", 2, 512, 128, 2048, 3_963),
    ("llama2-70b", "h100", 2, 1024, 128, 128, 3_214),
    ("llama2-70b", "h100", 4, 512, 128, 2048, 2_725),
    ("llama2-70b", "h100", 2, 96, 2048, 128, 346),
    ("llama2-70b", "h100", 2, 64, 2048, 2048, 1_011),
    ("llama2-70b", "l40s", 2, 256, 128, 128, 562),
    ("llama2-70b", "l40s", 4, 256, 128, 2048, 478),
    ("llama2-70b", "l40s", 2, 16, 2048, 128, 49),
    ("llama2-70b", "l40s", 4, 64, 2048, 2048, 185),
    ("llama2-70b", "a100", 4, 1024, 128, 128, 686),
    ("llama2-70b", "a100", 8, 512, 128, 2048, 684),
    ("llama2-70b", "a100", 4, 96, 2048, 128, 80),
    ("llama2-70b", "a100", 4, 64, 2048, 2048, 289),
)
# LMDeploy's "FP16 llama2-7b" static inference table: (batch, input, output, tokens/s)
LMDEPLOY = (
    (1, 1, 128, 100.02), (1, 128, 128, 102.21), (1, 128, 2048, 98.92),
    (1, 2048, 128, 86.1), (1, 2048, 2048, 93.78),
    (16, 1, 128, 1504.72), (16, 128, 128, 1272.47), (16, 128, 2048, 1010.62),
    (16, 2048, 128, 348.87), (16, 2048, 2048, 601.63),
    (32, 1, 128, 2136.73), (32, 128, 128, 2125.47), (32, 128, 2048, 1462.12),
    (32, 2048, 128, 450.43), (32, 2048, 2048, 733.34),
    (64, 1, 128, 4154.81), (64, 128, 128, 3024.07), (64, 128, 2048, 1852.06),
    (64, 2048, 128, 493.46), (64, 2048, 2048, 755.65),
)  # fmt: skip
# TensorRT-LLM v0.9.0's "Low Latency" tables, batch 1: (model, GPU, input, ms), TP 1
TRT_090_TTFT = (
    ("gpt-j-6b", "h200", 128, 5.0), ("gpt-j-6b", "h200", 2048, 23.5),
    ("mistral-7b", "h200", 128, 5.9), ("mistral-7b", "h200", 2048, 31.7),
    ("llama2-7b", "h200", 128, 5.7), ("llama2-7b", "h200", 2048, 30.2),
    ("gpt-j-6b", "h100", 128, 5.5), ("gpt-j-6b", "h100", 2048, 23.8),
    ("mistral-7b", "h100", 128, 6.5), ("mistral-7b", "h100", 2048, 32.4),
    ("llama2-7b", "h100", 128, 6.3), ("llama2-7b", "h100", 2048, 30.8),
    ("gpt-j-6b", "l40s", 128, 12.4), ("gpt-j-6b", "l40s", 2048, 61.7),
    ("mistral-7b", "l40s", 128, 15.4), ("mistral-7b", "l40s", 2048, 87.3),
    ("llama2-7b", "l40s", 128, 14.1), ("llama2-7b", "l40s", 2048, 80.1),
    ("gpt-j-6b", "a100", 128, 14.8), ("gpt-j-6b", "a100", 2048, 136.4),
    ("mistral-7b", "a100", 128, 16.3), ("mistral-7b", "a100", 2048, 139.6),
    ("llama2-7b", "a100", 128, 16.2), ("llama2-7b", "a100", 2048, 132.4),
)  # fmt: skip
# and LLaMA 70B's tensor-parallel rows: (model, GPU, input, ms, TP)
TRT_090_TTFT_TP = (
    ("llama2-70b", "h200", 128, 17.8, 4), ("llama2-70b", "h200", 2048, 103.0, 4),
    ("llama2-70b", "h100", 128, 19.6, 4), ("llama2-70b", "h100", 2048, 85.1, 8),
    ("llama2-70b", "l40s", 128, 70.4, 8), ("llama2-70b", "l40s", 2048, 673.3, 4),
    ("llama2-70b", "a100", 128, 45.6, 4), ("llama2-70b", "a100", 2048, 249.2, 8),
)  # fmt: skip
RUNS = (
    _gpt_fast("llama2-7b", None, 128, 104.9),
    _gpt_fast("llama2-7b", "int8", 128, 155.58),
    _gpt_fast("llama2-7b", "int4", 32, 196.80),
    _gpt_fast("llama2-70b", "int8", 128, 19.13),
    _gpt_fast("llama2-70b", "int4", 32, 25.25),
    # "Tensor Parallelism" and "Tensor Parallelism + Quantization"
    _gpt_fast("llama2-7b", None, 128, 168.84, tp=2),
    _gpt_fast("llama2-7b", None, 128, 254.02, tp=4),
    _gpt_fast("llama2-7b", None, 128, 328.43, tp=8),
    _gpt_fast("llama2-70b", None, 128, 21.32, tp=2),
    _gpt_fast("llama2-70b", None, 128, 38.01, tp=4),
    _gpt_fast("llama2-70b", None, 128, 62.50, tp=8),
    _gpt_fast("llama2-70b", "int8", 128, 80.44, tp=8),
    _gpt_fast("llama2-70b", "int4", 32, 90.77, tp=8),
    *(_trt("trt-llm-0.6.1", *row) for row in TRT_061),
    *(_trt("trt-llm-0.9.0", *row) for row in TRT_090),
    *(_trt("trt-llm-0.6.1", m, g, b, i, o, t, tp) for m, g, tp, b, i, o, t in TRT_061_TP),
    *(_trt("trt-llm-0.9.0", m, g, b, i, o, t, tp) for m, g, tp, b, i, o, t in TRT_090_TP),
    *(
        Run("lmdeploy-0.2.0", "llama2-7b", "a100", None, b, i, o, m, dtype="float16")
        for b, i, o, m in LMDEPLOY
    ),
)


def meta_model(name: str, dtype: str) -> Any:
    """The named shape as a transformers model on meta, at ``dtype``."""
    config_class, shape = SHAPES[name]
    with torch.device("meta"):
        model: Any = MODELS[config_class](config_class(**shape))
    return model.to(getattr(torch, dtype))


def plan_run(run: Run) -> dict[str, Any]:
    """The run planned as published; throughputs over prefill and decode (module doc)."""
    start = time.perf_counter()
    plan = ls.plan_serving(
        meta_model(run.model, run.dtype), target=run.target, max_context=4096,
        prompt=run.prompt, new_tokens=run.new_tokens, batch=run.batch, weights=run.weights,
        group_size=run.group_size, kv_dtype=run.kv_dtype, mode="graphs", tp=run.tp,
    )  # fmt: skip
    row = plan.rows[0]
    steps = run.new_tokens - 1
    tokens = run.batch * run.new_tokens
    predicted = tokens / (row.ttft + steps * row.tpot)
    bound = tokens / (row.ttft + steps * row.tpot_bound)
    return {
        **asdict(run),
        "predicted": predicted,
        "bound": bound,
        "ratio": run.measured / predicted,
        "bound_holds": run.measured <= bound,
        "prefill_share": row.ttft / (row.ttft + steps * row.tpot),
        "fits": row.fits,
        "max_concurrency": plan.max_concurrency,
        "weight_bytes": plan.weight_bytes,
        "seconds": time.perf_counter() - start,
    }


def ttft_rows() -> list[dict[str, Any]]:
    """TensorRT-LLM v0.9.0's first-token latencies against ``plan_serving``'s ``ttft``,
    the prefill's roofline bound (as the throughput rows: FP8 engines as W8A8)."""
    rows = []
    for model, gpu, prompt, ms, tp in (*((*t, 1) for t in TRT_090_TTFT), *TRT_090_TTFT_TP):
        fp8 = gpu != "a100"
        plan = ls.plan_serving(
            meta_model(model, "float16"), target=gpu, max_context=4096, prompt=prompt,
            new_tokens=1, batch=1, weights="fp8" if fp8 else None, mode="graphs", tp=tp,
        )  # fmt: skip
        bound = plan.rows[0].ttft * 1e3
        rows.append(dict(model=model, target=gpu, prompt=prompt, tp=tp, measured_ms=ms,
                         bound_ms=bound, ratio=ms / bound, bound_holds=ms >= bound))  # fmt: skip
    return rows


def summary(rows: list[dict[str, Any]], label: str) -> str:
    """The median, spread and bound count of ``rows``' measured/predicted."""
    ratios = [r["ratio"] for r in rows]
    held = sum(r["bound_holds"] for r in rows)
    return (
        f"{label}: median measured/predicted {statistics.median(ratios):.2f} "
        f"(min {min(ratios):.2f}, max {max(ratios):.2f}) over {len(rows)} rows; "
        f"bound held on {held} of {len(rows)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the rows as JSON")
    args = parser.parse_args()
    rows = []
    print(f"{'source':14s} {'model':10s} {'gpu':4s} {'tp':>2s} {'weights':7s} {'batch':>5s} "
          f"{'in/out':>9s} {'measured':>9s} {'predicted':>9s} {'bound':>9s} "
          f"{'meas/pred':>9s} {'prefill':>7s}  bound holds")  # fmt: skip
    for run in RUNS:
        r = plan_run(run)
        rows.append(r)
        print(f"{r['source']:14s} {r['model']:10s} {r['target']:4s} {r['tp']:2d} "
              f"{r['weights'] or SHORT[r['dtype']]:7s} {r['batch']:5d} "
              f"{r['prompt']:>4d}/{r['new_tokens']:<4d} {r['measured']:9.1f} "
              f"{r['predicted']:9.1f} {r['bound']:9.1f} {r['ratio']:9.2f} "
              f"{r['prefill_share']:7.0%}  {'yes' if r['bound_holds'] else 'NO'}"
              f"{'' if r['fits'] else ' (cache beyond the plan budget)'}")  # fmt: skip
    print(summary(rows, "all"))
    for source, url in SOURCES.items():
        print(summary([r for r in rows if r["source"] == source], source) + f"; {url}")
    fp8 = [r for r in rows if r["kv_dtype"] == "fp8"]
    print(summary(fp8, "FP8 engines (W8A8, FP8 cache)"))
    print(summary([r for r in rows if r not in fp8], "16-bit and weight-only"))
    print(summary([r for r in rows if r["tp"] == 1], "one GPU"))
    print(summary([r for r in rows if r["tp"] > 1], "tensor-parallel"))
    print(f'\nfirst-token latency, batch 1 ({TRT_LLM_090}, "Low Latency")')
    print(f"{'model':10s} {'gpu':4s} {'tp':>2s} {'input':>5s} {'measured ms':>11s} "
          f"{'bound ms':>8s} {'meas/bound':>10s}  bound holds")  # fmt: skip
    ttft = ttft_rows()
    for t in ttft:
        print(f"{t['model']:10s} {t['target']:4s} {t['tp']:2d} {t['prompt']:5d} "
              f"{t['measured_ms']:11.1f} {t['bound_ms']:8.1f} {t['ratio']:10.2f}  "
              f"{'yes' if t['bound_holds'] else 'NO'}")  # fmt: skip
    ratios = [t["ratio"] for t in ttft]
    print(f"first-token latency: measured/bound median {statistics.median(ratios):.2f} "
          f"(min {min(ratios):.2f}, max {max(ratios):.2f}); bound held on "
          f"{sum(t['bound_holds'] for t in ttft)} of {len(ttft)}")  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"throughput": rows, "ttft": ttft}, f, indent=1)


if __name__ == "__main__":
    main()
