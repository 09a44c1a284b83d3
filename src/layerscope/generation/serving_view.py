"""The text of a serving plan (``ls.plan_serving(...).show()``), drawn from its JSON data
alone (``ServingPlan.to_dict()``): the setting, the memory split, the KV cache's
capacity and the concurrency, a row per batch size, then the notes."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import IO, Any

from layerscope.generation.estimate_view import sweep_page
from layerscope.generation.fields import SERVING_FIELDS
from layerscope.render import units
from layerscope.render.layout import Line, plain_text, terminal_width, too_narrow
from layerscope.render.terminal import check_file, print_lines
from layerscope.validate import check_int, refuse

__all__ = ["no_room", "render_serving", "serving_lines", "show_serving"]


def render_serving(data: Mapping[str, Any], *, width: int | None = None) -> str:
    """The plan as plain text, ``width`` characters wide (default: the terminal's)."""
    return plain_text(_builder(data, width)(width or terminal_width()))


def show_serving(
    data: Mapping[str, Any], *, width: int | None = None, file: IO[str] | None = None
) -> None:
    """Print the plan to the terminal (colours when it is one, at its width) or to
    ``file``."""
    check_file(file)
    print_lines(_builder(data, width), width, file)


def _builder(data: Mapping[str, Any], width: int | None) -> Callable[[int], list[Line]]:
    if not isinstance(data, Mapping) or not isinstance(data.get("rows"), list):
        refuse("data", data, "a serving plan's data (ServingPlan.to_dict())")
    if width is not None:
        check_int("width", width, 1)
    return lambda w: too_narrow(w) or serving_lines(data, w)


def _heading(d: Mapping[str, Any]) -> list[tuple[str, str]]:
    m, kv = d["memory"], d["kv"]
    weights = f", weights {d['weights']}" if d.get("weights") else ""
    tp = d.get("tp") or 1
    where = f" x {tp} (tensor parallel: memory per GPU, rows the {tp} together)" if tp > 1 else ""
    title = (
        f"Serving {d['model']} on {d['target']} ({d['device_label']}){where}, {d['dtype']}"
        f"{weights}, KV cache {d['kv_dtype']} in blocks of {d['block_size']} tokens"
    )
    left = m["kv_budget_bytes"]
    memory = (
        f"Memory: {units.nbytes(m['usable_bytes'])} usable x {m['memory_utilization']:g} = "
        f"{units.nbytes(m['budget_bytes'])}: weights {units.nbytes(m['weight_bytes'])}, "
        f"workspace {units.nbytes(m['workspace_bytes'])} (a "
        f"{units.count(m['prefill_chunk'])}-token prefill), reserve "
        f"{units.nbytes(m['reserve_bytes'])}, "
        + (
            f"KV cache {units.nbytes(left)}."
            if left > 0
            else f"nothing left for the KV cache (over by {units.nbytes(-left)})."
        )
    )
    capacity = (
        f"KV cache: {units.nbytes(kv['bytes_per_token'])} per token; "
        f"{units.count(kv['tokens'])} tokens ({units.count(kv['blocks'])} blocks); "
        f"{units.nbytes(kv['bytes_per_sequence'])} per sequence of "
        f"{units.count(d['max_context'])} tokens."
    )
    most = (
        f"Max concurrency at {units.count(d['max_context'])} tokens: "
        f"{units.plural(d['max_concurrency'], 'sequence')}."
    )
    if not d["max_concurrency"]:
        most += " " + no_room(d)
    return [(title, "layerscope.header"), (memory, ""), (capacity, ""), (most, "layerscope.header")]


def serving_lines(data: Mapping[str, Any], width: int) -> list[Line]:
    """The styled lines of a serving plan at ``width``: heading, rows, notes."""
    if "mode" in data:
        times = (
            "TTFT: the prefill of every prompt at once, predicted; TPOT: one decode step, "
            "predicted (Bound TPOT: its roofline; Launch: the host's launches)"
        )
    else:  # a plan saved before TTFT and TPOT were predicted: its rows are their bounds
        times = (
            "TTFT: the prefill of every prompt at once, its roofline bound; TPOT: one decode "
            "step, its roofline bound (a plan saved before they were predicted: Bound TPOT "
            "is TPOT; Launch: not priced)"
        )
    legend = (
        f"Rows: prompts of {units.count(data['prompt'])} tokens, "
        f"{units.count(data['new_tokens'])} new tokens each. {times}; Tok/s = Batch / TPOT, "
        "Tok/s/seq = 1 / TPOT; KV cache: at the last token; Fits: within the KV cache's "
        "budget."
    )
    return sweep_page(_heading(data), SERVING_FIELDS, data, "rows", legend, width)


def no_room(d: Mapping[str, Any]) -> str:
    """Why no sequence of ``max_context`` tokens fits, and what would help: a smaller
    ``reserve_bytes`` or a larger ``memory_utilization`` when the weights, the workspace
    and one sequence's KV cache would fit with it, else the model's own needs (narrower
    weights or cache, a shorter context, more GPUs, more memory)."""
    m, kv = d["memory"], d["kv"]
    usable, share, budget = m["usable_bytes"], m["memory_utilization"], m["budget_bytes"]
    reserve = m["reserve_bytes"]
    own = m["weight_bytes"] + m["workspace_bytes"] + kv["bytes_per_sequence"]
    needs = f"the weights, the workspace and one sequence's KV cache take {units.nbytes(own)}"
    helps = []
    if share < 1 and own + reserve <= usable:  # a larger share would leave room
        least = min(math.ceil((own + reserve) / usable * 100) / 100, 1.0)
        helps.append(f"memory_utilization (--memory-utilization) of at least {least:g}")
    if own <= budget:  # the reserve leaves no room
        helps.append(f"reserve_bytes of at most {budget - own:,} B")
    if not helps and own < usable:  # only both would: the reserve and the whole memory
        helps.append(f"memory_utilization 1 and reserve_bytes below {usable - own:,} B")
    if helps:
        return (
            f"It does not fit: the budget ({units.nbytes(usable)} usable x "
            f"memory_utilization {share:g} = {units.nbytes(budget)}) less reserve_bytes "
            f"({units.nbytes(reserve)}) leaves no room, where {needs}: give "
            + " or ".join(helps)
            + "."
        )
    return (
        "It does not fit: store the weights narrower (weights=int8 or int4), the cache "
        "narrower (kv_dtype=fp8), serve a shorter context, split the model over more "
        "GPUs (tp=), or a GPU with more memory."
    )
