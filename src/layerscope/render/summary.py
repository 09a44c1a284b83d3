"""The facts below every view: totals, per-dtype breakdown, unsupported ops, memory,
timing, numerics, shared tensors, notices and how the run was made.

Built from the profile as measured (never a folded or filtered copy), so every report
names real module paths. Each line is ``(text, style)``; views wrap them to their width.
"""

from __future__ import annotations

from typing import Any

import layerscope.metricspec as ms
from layerscope.analysis.catalog import column, has_column
from layerscope.profile import Profile, describe_nonfinite
from layerscope.render import units

Fact = tuple[str, str]


def run_line(profile: Profile) -> Fact | None:
    """How the run was made: train/eval mode, grad mode, device, dtype and autocast, as
    the model's first call found them."""
    m = profile.model
    if not m.get("ran", True):
        return ("Not run: structure and parameters only (give an input for shapes).", "")
    parts = []
    if "training" in m:
        parts.append("train mode" if m["training"] else "eval mode")
    grad = m.get("grad_mode")
    if grad is not None:
        parts.append(
            {
                "enabled": "grad enabled",
                "no_grad": "no_grad",
                "inference_mode": "inference_mode",
            }.get(grad, f"grad mode {grad}")
        )
    if m.get("device"):
        parts.append(f"device {m['device']}")
    if m.get("dtype"):
        parts.append(str(m["dtype"]))
    if m.get("autocast"):
        parts.append(f"autocast {m['autocast']}")
    target = m.get("target")
    if isinstance(target, str):
        kernels = m.get("kernels")
        chosen = [
            f"{op} {kernel} ×{n}"
            for op, by_kernel in (kernels.items() if isinstance(kernels, dict) else ())
            if isinstance(by_kernel, dict)
            for kernel, n in by_kernel.items()
        ]
        parts.append(f"following {target} kernels" + (f" ({', '.join(chosen)})" if chosen else ""))
    if not parts:
        return None
    return ("Run: " + ", ".join(parts) + ".", "")


def summary_lines(profile: Profile) -> list[Fact]:
    root = profile.root
    m = root.metrics
    lines: list[Fact] = []
    if ms.PARAMS in m:
        trainable = m.get(ms.TRAINABLE_PARAMS, 0)
        lines.append(
            (
                f"Params: {units.count(m[ms.PARAMS])} "
                f"(trainable {units.count(trainable)}, "
                f"frozen {units.count(m[ms.PARAMS] - trainable)}), "
                f"{units.nbytes(m.get(ms.PARAM_BYTES, 0))}; "
                f"buffers: {units.count(m.get(ms.BUFFERS, 0))} "
                f"({units.nbytes(m.get(ms.BUFFER_BYTES, 0))})",
                "",
            )
        )
    if root.by_dtype:
        parts = []
        for dtype, row in root.by_dtype.items():
            what = [
                units.plural(row[k], label)
                for k, label in ((ms.PARAMS, "param"), (ms.BUFFERS, "buffer value"))
                if row[k]
            ]
            size = units.nbytes(row[ms.PARAM_BYTES] + row[ms.BUFFER_BYTES])
            parts.append(f"{dtype} {' + '.join(what)} ({size})")
        lines.append(("By dtype: " + "; ".join(parts), ""))
    if profile.unsupported_ops:
        ops = sorted(profile.unsupported_ops.items(), key=lambda kv: -int(kv[1]["count"]))
        listed = ", ".join(
            f"{name} ×{e['count']} (in {', '.join(sorted(e['modules']))})" for name, e in ops
        )
        lines.append(
            (
                f"Partial {', '.join(profile.partial_metrics)} (marked *): "
                f"no FLOP formula for {listed}. Register one with ls.register_flop_formula.",
                "layerscope.notice",
            )
        )
    lines.extend(_outside_lines(profile))
    lines.extend(_memory_lines(profile))
    lines.extend(_timing_lines(profile))
    lines.extend(_numerics_lines(profile))
    shared = sorted({s for n in root.walk() for s in n.shared})
    if shared:
        lines.append(("Shared tensors, counted once: " + ", ".join(shared), ""))
    for notice in profile.notices:
        lines.append((f"Note: {notice}", "layerscope.notice"))
    run = run_line(profile)
    if run is not None:
        lines.append(run)
    return lines


def _outside_lines(profile: Profile) -> list[Fact]:
    """Work done while no call of the model ran, which its totals leave out."""
    parts = []
    for key, value in profile.outside.items():
        if value and has_column(key):
            col = column(key)
            parts.append(f"{col.header} {units.BY_KIND[col.kind](value)}")
    if not parts:
        return []
    return [
        (
            "Outside the model (the loss, code around the calls; not in the totals): "
            + ", ".join(parts),
            "",
        )
    ]


def _numerics_lines(profile: Profile) -> list[Fact]:
    """The NaN/Inf verdict and the range warnings of a numerics check."""
    report = profile.numerics
    if not report:
        return []
    lines: list[Fact] = []
    if report.get("skipped"):
        lines.append((f"Numerics not checked: {report['skipped']}.", "layerscope.notice"))
    event = report.get("origin") or report.get("first_nonfinite")
    if event:
        text = describe_nonfinite(event, origin=report.get("origin") is not None)
        lines.append((text, "layerscope.error"))
    elif not report.get("skipped"):
        checked = units.plural(report.get("checked_calls", 0), "checked module call")
        lines.append((f"No NaN/Inf in {checked}.", ""))
    for flag, what in (
        ("fp16_overflow", "|x| > 65504 (overflows float16)"),
        ("bf16_overflow", "|x| beyond bfloat16's range"),
    ):
        paths = [n.path or "<root>" for n in profile.root.walk() if n.numerics.get(flag)]
        if paths:
            lines.append((f"{what} in: {', '.join(paths)}", "layerscope.notice"))
    return lines


def _timing_lines(profile: Profile) -> list[Fact]:
    """Whole-model latency and throughput of a timing pass, and how it was measured."""
    t = profile.timing
    compiled = t.get("compiled")
    lines = _timing_pass_lines(t)
    if isinstance(compiled, dict) and isinstance(compiled.get("latency"), dict):
        median = compiled["latency"].get("median")
        if isinstance(median, int | float):
            lines.append(
                (
                    f"Compiled (torch.compile) forward latency: median {units.seconds(median)}"
                    f" over {_counted(compiled.get('repeats'), 'run')}; the rows are the eager "
                    "module's.",
                    "",
                )
            )
    return lines


def _counted(n: object, word: str) -> str:
    """``units.plural`` of a number read from a profile's JSON, ``? words`` if absent."""
    if isinstance(n, int | float) and not isinstance(n, bool):
        return units.plural(n, word)
    return f"? {word}s"


#: A loop's step parts, as ``timing[key]`` summaries, in the order they add up.
STEP_PARTS = (
    ("step_forward", "forward"),
    ("step_backward", "backward"),
    ("step_optimizer", "optimizer"),
    ("step_other", "other"),
)


def _step_line(t: dict[str, Any]) -> list[Fact]:
    """A loop's timed steps: the median step and the medians of its parts."""
    step = t.get("step_time")
    if not isinstance(step, dict) or not isinstance(step.get("median"), int | float):
        return []
    parts = [  # a part no step had (no backward, no optimizer) is left out
        f"{label} {units.seconds(t[key]['median'])}"
        for key, label in STEP_PARTS
        if isinstance(t.get(key), dict)
        and isinstance(t[key].get("median"), int | float)
        and (key in ("step_forward", "step_other") or t[key].get("max"))
    ]
    text = f"Step (median of {_counted(t.get('timed_steps', step.get('n')), 'timed step')}): "
    text += units.seconds(step["median"])
    if parts:
        text += " = " + " + ".join(parts) + " (medians of each part)"
    if t.get("throughput"):
        text += (
            f"; throughput {units.inputs_per_second(t['throughput'])} "
            f"(batch {t.get('batch_size')}, {t.get('batch_source')})"
        )
    return [(text + ".", "")]


def _timing_pass_lines(t: dict[str, Any]) -> list[Fact]:
    if t.get("source") == "loop":
        return _step_line(t)
    latency = t.get("latency")
    if not latency:
        return []
    what = "forward + backward" if t.get("backward") else "forward"
    text = (
        f"Latency ({what}): median {units.seconds(latency['median'])}, "
        f"p90 {units.seconds(latency['p90'])}, IQR {units.seconds(latency['iqr'])}"
    )
    if t.get("throughput"):
        text += (
            f"; throughput {units.inputs_per_second(t['throughput'])} "
            f"(batch {t['batch_size']}, {t['batch_source']})"
        )
    repeats = _counted(t["repeats"], "repeat")
    text += f". Timer {t['timer']}, {repeats} after {_counted(t['warmup'], 'warmup run')}."
    return [(text, "")]


def _saved_words(profile: Profile) -> tuple[str, str]:
    """What the whole-model forward peak and saved bytes are, when the model ran more
    than once or work outside it saved tensors (a loop's micro-batches and its loss).

    One analysis session holds every storage saved while it ran, each once: the sum over
    the model's calls and what the code outside them saved. A loop cycle of several
    analysed steps keeps the largest step's figures (``analysis.merge``)."""
    loop = profile.model.get("loop")
    steps = loop.get("analysed_steps", 1) if isinstance(loop, dict) else 1
    calls = profile.root.calls
    outside = profile.outside.get(ms.ACTIVATION_BYTES, 0)
    peak = f" (the highest of {calls} calls)" if calls > 1 else ""
    if isinstance(steps, int) and steps > 1:
        saved = f" (the largest of {steps} analysed steps: its model calls summed"
        if outside:
            saved += ", the loss and other code outside the model included"
        return peak, saved + ")"
    parts = [f"summed over {calls} model calls"] if calls > 1 else []
    if outside:
        parts.append(
            f"{units.nbytes(outside)} of it saved outside the model, by the loss or code "
            "around the calls"
        )
    return peak, f" ({', '.join(parts)})" if parts else ""


#: The baseline's kinds as the memory line names them.
BASELINE_WORDS = {
    "parameters": "params",
    "gradients": "grads",
    "optimizer_states": "optimizer states",
    "buffers": "buffers",
    "other": "other tensors",
}


def _baseline_line(mem: dict[str, Any]) -> str:
    """What the rank held when the session began, by kind, and its peak counting it."""
    total, peak = mem.get("baseline_bytes"), mem.get("session_peak_bytes")
    if not isinstance(total, int) or not isinstance(peak, int):
        return ""
    kinds = mem.get("baseline")
    parts = [
        f"{word} {units.nbytes(kinds[key])}"
        for key, word in BASELINE_WORDS.items()
        if isinstance(kinds, dict) and kinds.get(key)
    ]
    held = f" ({', '.join(parts)})" if parts else ""
    return f"Held at start: {units.nbytes(total)}{held}; absolute peak {units.nbytes(total + peak)}"


def _by_kind_line(by_kind: dict[str, Any]) -> str:
    """FSDP2's unsharded parameters and the buffers of collectives, at most at once."""
    parts = []
    fsdp = by_kind.get("fsdp_units") or {}
    if fsdp:
        parts.append(
            f"unsharded params up to {units.nbytes(by_kind.get('unsharded_params_peak_bytes', 0))}"
            f" at once ({_counted(len(fsdp), 'FSDP unit')})"
        )
    parts.append(
        f"buffers of collectives up to {units.nbytes(by_kind.get('comm_buffer_peak_bytes', 0))}"
        f" at once ({units.nbytes(by_kind.get('comm_buffer_bytes', 0))} in all)"
    )
    return "In the session: " + ", ".join(parts)


def _memory_lines(profile: Profile) -> list[Fact]:
    """Whole-model peaks and, when recorded, the training footprint."""
    mem = profile.memory
    if "forward_peak_bytes" not in mem:
        return []
    peak, saved = _saved_words(profile)
    text = f"Memory ({mem.get('allocator', 'simulated')}): forward peak "
    text += units.nbytes(mem["forward_peak_bytes"]) + peak
    if ms.ACTIVATION_BYTES in mem:
        text += f", saved for backward {units.nbytes(mem[ms.ACTIVATION_BYTES])}{saved}"
    if ms.BACKWARD_PEAK_BYTES in mem:
        text += f", backward peak {units.nbytes(mem[ms.BACKWARD_PEAK_BYTES])}"
    lines: list[Fact] = [(text, "")]
    baseline = _baseline_line(mem)
    if baseline:
        lines.append((baseline, ""))
    by_kind = mem.get("by_kind")
    if isinstance(by_kind, dict):
        lines.append((_by_kind_line(by_kind), ""))
    training = mem.get("training")
    if training:
        parts = ", ".join(
            f"{label} {units.nbytes(training[key])}"
            for key, label in (
                (ms.PARAM_BYTES, "params"),
                (ms.GRAD_BYTES, "grads"),
                ("optimizer_state_bytes", "optimizer"),
                (ms.ACTIVATION_BYTES, "activations"),
            )
            if training.get(key)
        )
        lines.append(
            (
                f"Training step ({training.get('optimizer', '?')}): {parts}; "
                f"total {units.nbytes(training['total_bytes'])}",
                "",
            )
        )
    return lines
