"""What-ifs over plans: ``ls.plan_sweep`` (a table, one row per combination) and
``Plan.max_micro_batch`` (the largest micro-batch that fits).

A micro-batch other than the analysed one is analysed again (dim 0 of every input
tensor, or of ``input_shape``): activation bytes, FLOPs and peaks need not scale
linearly with the batch (attention, padding, workspace), so nothing is extrapolated.
Every other option (world size, sharding, checkpointing, precision's reduce dtype,
optimizer) is arithmetic over the analysis of its micro-batch; precisions that compute
in another dtype get their own analysis.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_map_only

from layerscope.errors import InvalidInputError
from layerscope.planning.build import build
from layerscope.planning.facts import analyse
from layerscope.planning.options import check_options
from layerscope.planning.result import Plan
from layerscope.profile import Profile

#: The sweepable options and the row fields of each plan.
AXES = ("micro_batch", "world_size", "sharding", "checkpoint", "precision", "optimizer",
        "grad_accum")  # fmt: skip
ROW_FIELDS = ("fits", "peak_bytes", "headroom_bytes", "step_time", "tokens_per_s", "mfu")


@dataclass
class Source:
    """What a plan was analysed from, to analyse again at another micro-batch."""

    model: nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any] | None
    input_shape: Any
    profile_options: dict[str, Any] = field(default_factory=dict)

    def max_micro_batch(self, plan: Plan, limit: int) -> int:
        """``Plan.max_micro_batch``, for a plan made from this source."""
        return max_micro_batch(plan, limit)

    def batch(self) -> int:
        if self.input_shape is not None:
            return int(_shape(self.input_shape)[0])
        for t in _tensors(self.args, self.kwargs):
            if t.dim():
                return int(t.shape[0])
        raise InvalidInputError("micro_batch: the input has no tensor with a batch dimension")

    def at(self, batch: int) -> Source:
        """The same input with dim 0 set to ``batch``."""
        if self.input_shape is not None:
            shape = _shape(self.input_shape)
            return Source(self.model, (), None, (batch, *shape[1:]), self.profile_options)

        def resized(t: torch.Tensor) -> torch.Tensor:
            if not t.dim():
                return t
            return torch.empty((batch, *t.shape[1:]), dtype=t.dtype, device="meta")

        args = tree_map_only(torch.Tensor, resized, self.args)
        kwargs = tree_map_only(torch.Tensor, resized, self.kwargs) if self.kwargs else None
        return Source(self.model, args, kwargs, None, self.profile_options)


def _shape(input_shape: Any) -> tuple[int, ...]:
    if isinstance(input_shape, Sequence) and input_shape and isinstance(input_shape[0], int):
        return tuple(input_shape)
    raise InvalidInputError(
        f"micro_batch with input_shape needs one shape (a tuple of ints), got {input_shape!r}"
    )


def _tensors(args: Any, kwargs: Any) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    tree_map_only(torch.Tensor, found.append, (args, kwargs or {}))
    return found


@dataclass
class Sweep:
    """One row per combination: the options swept and the plan's figures."""

    axes: list[str]
    rows: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {"axes": list(self.axes), "rows": [dict(r) for r in self.rows]}

    def render(self, **options: Any) -> str:
        """The sweep as a table (``render.plan``; ``width``)."""
        from layerscope.render.plan import render_sweep

        return render_sweep(self.to_dict(), **options)

    def show(self, **options: Any) -> None:
        from layerscope.render.plan import show_sweep

        show_sweep(self.to_dict(), **options)

    def __str__(self) -> str:
        return self.render()


def _values(name: str, value: Any) -> list[Any]:
    if name == "checkpoint" and (value is None or isinstance(value, str)):
        return [value]
    if isinstance(value, list | tuple):
        if not value:
            raise InvalidInputError(f"{name}: an empty list sweeps nothing")
        paths = all(isinstance(v, str) and v not in ("blocks", "auto") for v in value)
        if name == "checkpoint" and paths:
            return [list(value)]  # one list of module paths
        return list(value)
    return [value]


def plan_sweep(
    model: nn.Module,
    *args: Any,
    kwargs: dict[str, Any] | None = None,
    input_shape: Any = None,
    input_dtype: Any = None,
    loss_fn: Any = None,
    **options: Any,
) -> Sweep:
    """Plans over every combination of the options given as lists (``micro_batch``,
    ``world_size``, ``sharding``, ``checkpoint``, ``precision``, ``optimizer``,
    ``grad_accum``); the rest as ``ls.plan``. One analysis per micro-batch and compute
    dtype; the rest is arithmetic."""
    if not isinstance(model, nn.Module):
        raise InvalidInputError("plan_sweep needs the model (it analyses each micro-batch)")
    extra = {k: v for k, v in options.items() if k not in AXES and k not in ("target", "budget")}
    fixed = {"target": options.get("target", "h100"), "budget": options.get("budget")}
    profile_options = {k: v for k, v in (("input_dtype", input_dtype), ("loss_fn", loss_fn))
                       if v is not None}  # fmt: skip
    source = Source(model, args, kwargs, input_shape, profile_options)
    defaults = {"micro_batch": None, "world_size": 8, "sharding": "fsdp", "checkpoint": None,
                "precision": "bf16-mixed", "optimizer": "adamw", "grad_accum": 1}  # fmt: skip
    grid = {a: _values(a, options.get(a, defaults[a])) for a in AXES}
    swept = [a for a in AXES if a in options and len(grid[a]) > 1]
    analyses: dict[tuple[Any, str], Profile] = {}
    rows: list[dict[str, Any]] = []
    for combo in itertools.product(*grid.values()):
        chosen = dict(zip(AXES, combo, strict=True))
        opts = check_options(
            fixed["target"], chosen["world_size"], chosen["sharding"], chosen["precision"],
            chosen["optimizer"], chosen["grad_accum"], fixed["budget"], extra,
        )  # fmt: skip
        batch = chosen["micro_batch"]
        here = source.at(batch) if batch is not None else source
        key = (batch, str(opts.compute_dtype))
        if key not in analyses:
            analyses[key] = analyse(model, here.args, here.kwargs, here.input_shape, opts,
                                    profile_options)  # fmt: skip
        result = build(analyses[key], opts, chosen["checkpoint"])
        row = {a: chosen[a] for a in AXES}
        row["micro_batch"] = batch if batch is not None else source.batch()
        row.update({f: getattr(result, f) for f in ROW_FIELDS})
        row["checkpointed"] = len(result.checkpoint)
        rows.append(row)
    return Sweep(swept or ["world_size"], rows)


def max_micro_batch(plan: Plan, limit: int = 1024) -> int:
    """The largest micro-batch up to ``limit`` whose plan fits the budget: doubling from
    the analysed one, then bisection, an analysis at each size tried."""
    source: Source | None = plan.source
    if source is None:
        raise InvalidInputError("max_micro_batch needs the plan made from a model")
    if plan.budget is None:
        raise InvalidInputError("max_micro_batch needs a budget (the target has no memory size)")
    opts = check_options(
        plan.options["target"], plan.options["world_size"], plan.options["sharding"],
        plan.options["precision"], plan.options["optimizer"], plan.options["grad_accum"],
        plan.budget, _extra(plan),
    )  # fmt: skip
    asked = plan.options["checkpoint"]

    def fits(batch: int) -> bool:
        here = source.at(batch)
        prof = analyse(source.model, here.args, here.kwargs, here.input_shape, opts,
                       source.profile_options)  # fmt: skip
        return bool(build(prof, opts, asked).fits)

    start = source.batch()
    low, high = 0, None
    batch = start
    if plan.fits:
        low = start
        while high is None and batch < limit:
            batch = min(limit, batch * 2)
            if fits(batch):
                low = batch
            else:
                high = batch
        if high is None:
            return low
    else:
        high = start
    while high - low > 1:
        mid = (low + high) // 2
        if fits(mid):
            low = mid
        else:
            high = mid
    return low


def _extra(plan: Plan) -> Mapping[str, Any]:
    o = plan.options
    out: dict[str, Any] = {
        "rank": o["rank"],
        "reshard_after_forward": o["reshard_after_forward"],
        "inter_node_bandwidth": o["inter_node_bandwidth"],
        "bucket_cap_mb": o["bucket_cap_mb"],
        "reserve_bytes": plan.reserve_bytes,
    }
    if o.get("units") is not None:
        out["units"] = o["units"]
    return out


__all__ = ["Source", "Sweep", "max_micro_batch", "plan_sweep"]
