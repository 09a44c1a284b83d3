"""The sentences a ``GenerateEstimate`` carries: where decode turns compute-bound, the
cache model, the affine check, what fits and what the roofline leaves out."""

from __future__ import annotations

from collections.abc import Sequence

from layerscope.generation.estimate_result import GenerateEstimate
from layerscope.planning.headless import headless_generation_note
from layerscope.profile import Profile
from layerscope.render.units import nbytes, seconds


def _count(n: float) -> str:
    return f"{int(n):,}" if float(n).is_integer() else f"{n:,.1f}"


def _batches(values: Sequence[int]) -> str:
    words = [str(v) for v in values]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def bound_note(est: GenerateEstimate) -> str:
    """Whether decode stays memory-bound, or the batch where it turns compute-bound."""
    batches = [r.batch for r in est.sweep]
    span = f"batch {batches[0]}" if len(batches) == 1 else f"every batch ({_batches(batches)})"
    if est.memory_bound:
        return (
            f"By the roofline, decode stays memory-bound at {span}: a step reads the "
            "weights and the KV cache for few FLOPs per byte."
        )
    cross = est.crossover
    below = [b for b in batches if cross is not None and b < cross]
    before = f" (memory-bound up to batch {below[-1]})" if below else ""
    return f"By the roofline, decode turns compute-bound at batch {cross}{before}."


def cache_note(est: GenerateEstimate) -> str:
    total = est.prompt + est.new_tokens
    if est.cache == "paged":
        block = est.block_size or 1
        return (
            f"Paged cache, blocks of {block} tokens: a decode step at cache length L writes "
            f"its token in place and reads the cache once at L + 1 rounded up to whole "
            f"blocks (analysed on a static cache of that length); the prefill holds the "
            f"prompt rounded up likewise, and the cache ends at "
            f"{_count(-(-total // block) * block)} tokens per sequence."
        )
    if est.cache == "static":
        return (
            f"Static cache: it holds {_count(total)} tokens per sequence from the start and "
            "every decode step attends over all of them (the positions not yet written "
            "masked), so a step's cost is constant in the cache length."
        )
    return (
        "Dynamic cache: it grows by torch.cat at every step, which reads and writes every "
        "layer's keys and values again besides attention's read of them: a decode step "
        "moves the KV cache about three times."
    )


def kv_note(est: GenerateEstimate) -> str | None:
    """What ``kv_dtype`` changed, when given."""
    if est.kv_dtype is None:
        return None
    return (
        f"KV cache at {est.kv_dtype}: held and moved at that width (scales not charged), "
        f"the attention and the matmuls at {est.dtype}."
    )


def fit_note(est: GenerateEstimate) -> str:
    first, last = est.prompt, est.prompt + est.new_tokens - 1
    mean = (first + last) / 2
    if est.cache == "paged":
        return (
            f"Decode time per token: the mean over the steps at {_count(first)} to "
            f"{_count(last)} cached tokens of a + b·R, R the tokens a step reads (L + 1 "
            f"rounded up to whole blocks), fitted from the first and the last steps"
            + (" and checked at the middle one." if est.fit_held is not None else ".")
        )
    head = (
        f"Decode time per token: one step's roofline at the mean cache length "
        f"({_count(mean)} tokens) of the steps at {_count(first)} to {_count(last)}"
    )
    if est.fit_held is None:
        return head + " (fewer than three cache lengths: no middle point to check)."
    head += (
        f", fitted as a + b·L from those two lengths and checked at "
        f"{_count(est.prompt + est.new_tokens // 2)}"
    )
    missed = [f for f in est.fit if f.held is False]
    if not missed:
        return head + ": within 1% at every batch (time, FLOPs, MACs and bytes)."
    worst = {f.batch: max(f.errors().values()) for f in missed}
    where = ", ".join(f"batch {b} {100 * e:.1f}% off" for b, e in worst.items())
    return (
        head + f": {where} (a module changes its bound between the lengths), so there the "
        "mean of the broken line through the three lengths is used."
    )


def memory_note(est: GenerateEstimate) -> str:
    usable = est.device.get("usable_bytes")
    memory = usable if usable is not None else est.device.get("memory_bytes")
    weights = est.sweep[0].weight_bytes
    if memory is None:
        return f"Weights {nbytes(weights)}; the target's memory is not known: fits not decided."
    over = [r.batch for r in est.sweep if r.fits is False]
    tokens = est.prompt + est.new_tokens
    if est.block_size:  # a paged cache holds whole blocks
        tokens = -(-tokens // est.block_size) * est.block_size
    text = (
        f"Fits: the weights ({nbytes(weights)}) and the KV cache at "
        f"{_count(tokens)} tokens within {est.target}'s {nbytes(memory)}"
        + (" usable (what torch.cuda.mem_get_info reports)" if usable is not None else "")
        + "; activations, the CUDA context and workspaces are not counted."
    )
    if over:
        text += f" They do not fit at batch {_batches(over)}."
    return text


def kernel_note(est: GenerateEstimate) -> str | None:
    chosen = est.kernels.get("scaled_dot_product_attention") or {}
    if not chosen:
        return None
    names = ", ".join(sorted(chosen))
    text = f"Attention follows {est.target}'s {names} kernel for {est.dtype}"
    if "math" in chosen:
        text += " (the math path writes the score matrix, which the fused kernels do not)"
    return text + "."


def notes_for(est: GenerateEstimate, prefills: Sequence[Profile], keeps_one: bool) -> list[str]:
    """Every note of ``est``, in the order they are shown."""
    notes = [bound_note(est), cache_note(est), fit_note(est), memory_note(est)]
    for extra in (kv_note(est), kernel_note(est)):
        if extra:
            notes.append(extra)
    headless = headless_generation_note(prefills[0]) if prefills else None
    if headless:
        notes.append(headless)
    if not keeps_one:
        head = "" if headless else " (an LM head's too)"
        notes.append(
            f"The forward takes no logits_to_keep: the prefill's output{head} covers every "
            "prompt token, not the last one only."
        )
    missing = sorted({op for p in prefills for op in p.unsupported_ops})
    if missing:
        notes.append(
            f"{len(missing)} op(s) without a FLOP formula ({', '.join(missing[:5])}): their "
            "FLOPs are missing from the compute side."
        )
    return notes + column_notes(est)


def column_notes(est: GenerateEstimate) -> list[str]:
    """What the estimate's time columns are (bounds; ``Pred.``, when predicted): words
    about its own table, which ``ls.plan_serving`` says its own way."""
    predicted = predicted_note(est)
    if predicted:
        return [
            "Bounds (Prefill, Decode and their Tok/s): max(FLOPs / peak, bytes / bandwidth) "
            "per module, summed, so no step runs faster; they leave out kernel efficiency "
            "and launches, which Pred. adds, and sampling and the tokenizer.",
            predicted,
        ]
    return [
        "Times are lower bounds: max(FLOPs / peak, bytes / bandwidth) per module, "
        "summed. They leave out kernel efficiency, launch overhead (decode at small "
        "batch is launch-bound in practice), sampling and the tokenizer."
    ]


def predicted_note(est: GenerateEstimate) -> str | None:
    """What the predicted column rests on (``generation.predicted``)."""
    row = est.sweep[0] if est.sweep else None
    if row is None or row.decode_time_predicted is None or row.launch_time is None:
        return None
    how = (
        f"each of its {row.kernels} kernels launched by the host ({seconds(row.launch_time)} "
        f"at batch {row.batch})"
        if est.mode == "eager"
        else "the step replayed as one CUDA graph, its pointwise kernels fused"
    )
    return (
        "Pred.: a decode step predicted, not bounded: each module's own work at "
        f"{est.target}'s achievable rates (uncalibrated unless a device profile says so), "
        f"{how}; the larger of running and launching, never below the bound. "
        "Sampling and the tokenizer are left out."
    )


__all__ = ["column_notes", "notes_for"]
