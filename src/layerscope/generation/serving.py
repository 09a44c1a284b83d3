"""``ls.plan_serving``: how many sequences a model serves on one GPU, at what latency and
throughput, the question a server answers at start-up (``docs/generate.md``).

Memory, as vLLM sizes its cache (``gpu_memory_utilization``):

- the **budget**: the target's usable memory (``DeviceSpec.usable_memory_bytes``, what
  ``torch.cuda.mem_get_info`` reports on an idle GPU) times ``memory_utilization``;
- less the **weights** as stored (``generation.weights``: quantized linears at their
  width, scales included), the **activation workspace** (the peak of one prefill chunk of
  ``prefill_chunk`` tokens, analysed on meta with no cache held beside it) and a stated
  **reserve** (the CUDA context, cuBLAS workspaces and the allocator's slack);
- what is left holds the **KV cache**. Its bytes per token come from a cache the model
  itself filled on meta to ``max_context`` tokens (each layer's keys and values, a
  sliding-window layer capped at its window), at ``kv_dtype``'s width when given, every
  layer's tokens rounded up to whole blocks of ``block_size`` (a paged cache allocates
  blocks, not tokens, for a window too: ``cachekinds.paged_tokens``, the estimate's
  paged cache's rule).

``max_concurrency`` is the number of sequences of ``max_context`` tokens that fit;
``max_context(batch)`` the longest context ``batch`` sequences can each hold. Latency and
throughput per batch size come from ``ls.estimate_generate`` at the same options: time to
the first token is the prefill of ``batch`` prompts at once (a roofline lower bound).
Time per output token is predicted: one decode step at the mean cache length is analysed
again with its kernels recorded (``planning.kernels``) and priced at the target's
achievable rates (``analysis.rates``); the host launches them one by one (``mode="eager"``:
each kernel costs the rates' launch time, and the GPU waits when launching is slower than
running, so the step takes the larger of the two) or replays them as one CUDA graph
(``mode="graphs"``: one launch per step). The roofline bound stays beside it
(``tpot_bound``).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import layerscope.metricspec as ms
from layerscope.analysis.roofline import roof_of
from layerscope.collect.hfmeta import meta_values
from layerscope.errors import InvalidInputError
from layerscope.generation.cache import cache_facts
from layerscope.generation.cachekinds import BLOCK_SIZE, KV_WIDTHS, windows
from layerscope.generation.estimate import (
    Driver,
    Options,
    _eval_mode,
    _floating_dtype,
    check_options,
    estimated,
    meta_model,
    split,
)
from layerscope.generation.estimate_notes import column_notes, memory_note
from layerscope.generation.estimate_result import SweepRow
from layerscope.generation.modelcheck import check_generative, positions
from layerscope.generation.moe import experts_kernel
from layerscope.generation.predicted import MODES, Step
from layerscope.generation.serving_result import KVLayer, ServingPlan, ServingRow
from layerscope.generation.weights import (
    check_scheme,
    stored_bytes,
)
from layerscope.hardware import GPUS
from layerscope.session.run import profile
from layerscope.validate import check_choice, check_int, is_bool, refuse

#: Bytes kept free below the budget: the CUDA context, cuBLAS/cuDNN workspaces and the
#: caching allocator's slack. A stated default, not measured (the plan's reserve, too).
RESERVE_BYTES = 2 * 1024**3
#: The largest prefill chunk the server runs at once (its activation workspace), when
#: ``prefill_chunk`` is not given: layerscope's stated default, at most ``max_context``.
PREFILL_CHUNK = 2048


@dataclass(frozen=True)
class ServingOptions:
    target: str
    max_context: int
    prompt: int
    new_tokens: int
    batches: tuple[int, ...] | None
    kv_dtype: str | None
    block_size: int
    utilization: float
    prefill_chunk: int
    reserve: int
    mode: str
    tp: int


def _options(model: nn.Module, **o: Any) -> ServingOptions:
    limit = positions(model)
    if o["max_context"] is None and limit is None:
        refuse("max_context", None, "the longest context to serve (the model states none)")
    given = o["max_context"] if o["max_context"] is not None else limit and limit[0]
    most = check_int("max_context", given, 2)
    if limit is not None and most > limit[0]:
        raise InvalidInputError(
            f"max_context (--max-context) {most:,} is beyond {type(model).__name__}'s "
            f"{limit[0]:,} positions (config.{limit[1]}): give max_context <= {limit[0]:,}"
        )
    check_generative(model, most)
    new = check_int("new_tokens", o["new_tokens"], 1)
    if new >= most:
        raise InvalidInputError(
            f"new_tokens (--new-tokens, 256 unless given) {new:,} leaves no room for a prompt "
            f"in max_context (--max-context) {most:,}: give new_tokens below {most:,}"
        )
    prompt = check_int(
        "prompt", o["prompt"] if o["prompt"] is not None else min(2048, most - new), 1
    )
    if prompt + new > most:
        raise InvalidInputError(
            f"prompt (--prompt) {prompt:,} + new_tokens (--new-tokens) {new:,} is over "
            f"max_context (--max-context) {most:,}: give a prompt of at most {most - new:,}"
        )
    batches = o["batch"]
    if isinstance(batches, int) and not isinstance(batches, bool):
        batches = (batches,)
    if batches is not None:
        if not isinstance(batches, Sequence) or isinstance(batches, str) or not batches:
            refuse("batch", batches, "a batch size, a list of them, or None (chosen)")
        batches = tuple(sorted({check_int(f"batch[{i}]", b, 1) for i, b in enumerate(batches)}))
    kv = o["kv_dtype"]
    if kv is not None:
        kv = check_choice("kv_dtype", kv, list(KV_WIDTHS))
    chunk = o["prefill_chunk"] if o["prefill_chunk"] is not None else min(PREFILL_CHUNK, most)
    return ServingOptions(
        target=check_choice("target", o["target"], list(GPUS)),
        max_context=most,
        prompt=prompt,
        new_tokens=new,
        batches=batches,
        kv_dtype=kv,
        block_size=check_int("block_size", o["block_size"], 1),
        utilization=_utilization(o["utilization"]),
        prefill_chunk=check_int("prefill_chunk", chunk, 1, most),
        reserve=check_int("reserve_bytes", o["reserve"], 0),
        mode=check_choice("mode", o["mode"], list(MODES)),
        tp=check_int("tp", o["tp"], 1),
    )


def _utilization(value: object) -> float:
    """``memory_utilization``: a share of the usable memory above 0 and at most 1, as vLLM
    takes ``gpu_memory_utilization`` (0 leaves the server no memory at all)."""
    share = float(value) if isinstance(value, numbers.Real) and not is_bool(value) else math.nan
    if not 0 < share <= 1:  # NaN too
        refuse(
            "memory_utilization (--memory-utilization)", value,
            "a share of the usable memory above 0 and at most 1 (vLLM's "
            "gpu_memory_utilization; 0.9 unless given)",
        )  # fmt: skip
    return share


def kv_layers(driver: Driver, length: int) -> list[KVLayer]:
    """Each layer's KV bytes per token (at the options' ``kv_dtype``: ``Driver.kv_ratio``)
    and the most tokens it holds (None: every token), read from a cache the model filled
    to ``length`` tokens of one sequence on meta. A sliding-window layer holds its window:
    a step's token and the ``window - 1`` before it (transformers' dynamic layer keeps
    those ``window - 1`` between steps; a server's block holds the step's token too:
    ``cachekinds.paged_tokens``)."""
    cache = driver.fill(1, length)
    facts = cache_facts(cache)
    layers = []
    for size, tokens, window in zip(
        facts.self_bytes, facts.self_tokens, windows(cache), strict=True
    ):
        if not tokens:
            continue
        per_token = size / tokens * driver.kv_ratio
        cap = window if window is not None else tokens
        layers.append(KVLayer(per_token, cap if cap < length else None))
    if not layers:
        raise InvalidInputError(
            f"{type(driver.model).__name__} filled no KV cache layer that layerscope can "
            f"read ({'; '.join(facts.notices) or 'an empty cache'}): nothing to size"
        )
    return layers


def workspace(driver: Driver, tokens: int) -> int:
    """The peak bytes a prefill chunk of ``tokens`` tokens allocates, analysed on meta
    with ``memory=True`` and no cache: its keys and values go to the paged pool the KV
    budget holds (vLLM profiles its activations so, before it allocates that pool)."""
    if "use_cache" in driver.call:
        kwargs = {**driver.call, "use_cache": False}
    else:  # a model that always writes a cache: the chunk's keys and values counted too
        kwargs = {**driver.call, driver.cache_name: driver.new_cache()}
    model = driver.model
    with torch.no_grad(), meta_values(), _eval_mode(model), experts_kernel(model, driver.routing):
        prof = profile(
            driver.model, driver.ids(1, tokens), kwargs=kwargs, target=driver.opts.target,
            mode="eval", record_shapes=False, count_flops=False, count_bytes=False,
            memory=True, dtensor=driver.dtensor,
        )  # fmt: skip
    return int(prof.root.metrics.get(ms.PEAK_BYTES) or 0)


def _row(r: SweepRow, prefill: Step, step: Step, plan: ServingPlan, length: int) -> ServingRow:
    """A batch's row: the predicted prefill and decode step beside the estimate's bounds,
    the KV cache at the last token against the plan's budget."""
    # the bounds of the calls as run: a fused kernel does not move what it fuses away
    ttft_bound = max(r.prefill_time - prefill.fused_off, 0.0)
    tpot_bound = max(r.decode_time_per_token - step.fused_off, 0.0)
    tpot = max(step.time, tpot_bound)  # never below the bound
    kv = r.batch * plan.kv_bytes(length)
    return ServingRow(
        batch=r.batch,
        ttft=max(prefill.time, ttft_bound),
        ttft_bound=ttft_bound,
        tpot=tpot,
        tpot_bound=tpot_bound,
        launch_time=step.launch,
        kernels=step.kernels,
        tokens_per_s=r.batch / tpot,
        tokens_per_s_per_seq=1 / tpot,
        bound="launches" if step.launch > step.run else r.bound,
        kv_bytes=kv,
        fits=kv <= plan.kv_budget,
    )


def _batches(concurrency: int) -> tuple[int, ...]:
    """The batches shown when none are given: 1, 8, 32, 128, 256 that fit, and the most
    that fit at ``max_context``."""
    chosen = [b for b in (1, 8, 32, 128, 256) if b <= concurrency]
    if concurrency >= 1 and concurrency not in chosen:
        chosen.append(concurrency)
    return tuple(chosen) or (1,)


def plan_serving(
    model: nn.Module,
    *,
    target: str = "h100",
    max_context: int | None = None,
    prompt: int | None = None,
    new_tokens: int = 256,
    batch: int | Sequence[int] | None = None,
    weights: str | None = None,
    group_size: int = 128,
    kv_dtype: str | None = None,
    block_size: int = BLOCK_SIZE,
    memory_utilization: float = 0.9,
    prefill_chunk: int | None = None,
    reserve_bytes: int = RESERVE_BYTES,
    mode: str = "eager",
    dtype: torch.dtype | str | None = None,
    tp: int = 1,
) -> ServingPlan:
    """How many sequences ``model`` serves on ``target``, and at what latency and
    throughput per batch size (module doc, ``docs/generate.md``).

    ``max_context``: the longest sequence (prompt and output) to serve (default: the
    model's positions); ``prompt``/``new_tokens``: the request the latency rows are for;
    ``batch``: batch sizes for those rows (default: 1, 8, 32, 128, 256 that fit and the
    most that fit); ``weights``/``group_size``: the linears as deployed
    (``generation.weights``); ``kv_dtype``: the KV cache's width ("fp8", "int8", "bf16",
    "fp16", "fp32"; default the model's); ``block_size``: a paged cache's block in
    tokens; ``memory_utilization``: the share of usable memory the server may take
    (above 0, at most 1); ``prefill_chunk``: the largest prefill run at once;
    ``reserve_bytes``: kept free;
    ``mode``: "eager" (a launch per kernel) or "graphs" (CUDA graphs: one per step);
    ``dtype``: the compute dtype (default the model's); ``tp``: GPUs of one node the
    model is split over by its own tensor-parallel plan (every figure one GPU's:
    ``estimate_generate``'s ``tp``). The model is never changed."""
    if not isinstance(model, nn.Module):
        refuse("model", model, "an nn.Module (a transformers decoder)")
    so = _options(
        model, target=target, max_context=max_context, prompt=prompt, new_tokens=new_tokens,
        batch=batch, kv_dtype=kv_dtype, block_size=block_size,
        utilization=memory_utilization, prefill_chunk=prefill_chunk, reserve=reserve_bytes,
        mode=mode, tp=tp,
    )  # fmt: skip
    scheme = check_scheme(weights, group_size)
    # a dynamic cache for the fills: it holds what the model stores, no preallocation
    eo = check_options(
        so.target, so.prompt, so.new_tokens, 1, "dynamic", dtype, None, kv_dtype=so.kv_dtype,
        tp=so.tp,
    )  # fmt: skip
    meta, not_run = meta_model(model, eo.dtype, copy=so.tp > 1)
    run_dtype = str(_floating_dtype(meta)).removeprefix("torch.")
    with split(meta, so.tp):
        plan = _sized(so, eo, meta, scheme, run_dtype, type(model).__name__)
    if not plan.usable_bytes:
        raise InvalidInputError(f"{so.target} states no memory: nothing to size")
    batches = so.batches or _batches(plan.max_concurrency)
    # the rows: the estimate on a paged cache with the weights and the KV cache as
    # deployed, its calls predicted (``generation.predicted``)
    opts = check_options(
        so.target, so.prompt, so.new_tokens, batches, "paged", dtype, None, weights,
        group_size, so.block_size, so.kv_dtype, so.mode, so.tp,
    )  # fmt: skip
    est, steps = estimated(meta if so.tp == 1 else model, opts)
    length = so.prompt + so.new_tokens
    plan.rows = [
        _row(r, prefill, step, plan, length)
        for r, (prefill, step) in zip(est.sweep, steps, strict=True)
    ]
    # the estimate's own "Fits" note holds its rows to the datasheet memory (the plan's
    # KV budget replaces it), and its column notes name its own table's columns
    skip = {memory_note(est), *column_notes(est)}
    plan.notes = [*plan.rules(), *not_run, *(n for n in est.notes if n not in skip)]
    launched = [r.batch for r in plan.rows if r.bound == "launches"]
    if launched:
        plan.notes.append(
            f"Limit 'launches' (batch {', '.join(map(str, launched))}): the host takes "
            "longer to launch a decode step's kernels than they run, so TPOT is the "
            "launches' time; CUDA graphs (mode='graphs', --mode graphs) replay the step "
            "as one launch."
        )
    plan.analysis = est.analysis
    return plan


def _sized(
    so: ServingOptions, eo: Options, meta: nn.Module, scheme: Any, run_dtype: str, name: str
) -> ServingPlan:
    """The plan's memory: the weights, the prefill chunk's workspace and each layer's KV
    bytes per token, on one GPU."""
    driver = Driver(meta, eo, roof_of(eo.spec, run_dtype))
    return ServingPlan(
        model=name,
        target=so.target,
        device_label=eo.spec.label,
        usable_bytes=eo.spec.usable_memory_bytes or eo.spec.memory_bytes or 0,
        memory_utilization=so.utilization,
        dtype=run_dtype,
        weights=scheme.name if scheme else None,
        kv_dtype=so.kv_dtype or run_dtype,
        block_size=so.block_size,
        max_context=so.max_context,
        prompt=so.prompt,
        new_tokens=so.new_tokens,
        weight_bytes=stored_bytes(meta, scheme),
        workspace_bytes=workspace(driver, so.prefill_chunk),
        prefill_chunk=so.prefill_chunk,
        reserve_bytes=so.reserve,
        mode=so.mode,
        layers=kv_layers(driver, so.max_context),
        tp=so.tp,
    )


__all__ = ["BLOCK_SIZE", "KV_WIDTHS", "MODES", "PREFILL_CHUNK", "RESERVE_BYTES", "plan_serving"]
