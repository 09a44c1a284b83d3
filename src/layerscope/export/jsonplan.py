"""The ``plan`` section of a ``layerscope/1`` document (``ls.plan``'s ``Plan.save``): what
``Plan.from_dict`` checks and the JSON Schema says. Bytes, seconds and FLOPs in base
units; docs/plan.md explains every figure."""

from __future__ import annotations

from layerscope.export.jsoncheck import Arr, Bool, Finite, Int, Map, Num, Obj, Opt, Str

_BYTES = Int(0, description="bytes")
#: The parts of a GPU's memory, in order: the plan's ``memory`` keys and the timeline's
#: columns, with the name views give each.
PARTS: tuple[tuple[str, str], ...] = (
    ("param_bytes", "Params"),
    ("unsharded_param_bytes", "Unsharded params"),
    ("grad_bytes", "Grads"),
    ("optimizer_state_bytes", "Optimizer states"),
    ("master_weight_bytes", "Master weights"),
    ("activation_bytes", "Activations"),
    ("recompute_bytes", "Recompute"),
    ("comm_buffer_bytes", "Comm buffers"),
    ("other_bytes", "Other"),
)
#: The parts of the step time that add up to ``step_time`` (``time``'s keys but
#: ``comm``), with the name views give each.
TIME_PARTS: tuple[tuple[str, str], ...] = (
    ("compute", "Compute"),
    ("recompute", "Recompute"),
    ("exposed_comm", "Exposed comm"),
    ("optimizer", "Optimizer"),
)
_PARTS = tuple(key for key, _ in PARTS)
_COLUMN = Arr(Finite(), "one value per point of the timeline")

#: The plan section; every key is written by ``Plan.save``.
PLAN = Obj(
    {
        "options": Obj({}, description="the options the plan was made with"),
        "device": Obj({}, description="the target: name, label, memory, interconnect"),
        "states": Map(_BYTES, "model states at rest on this GPU, by kind"),
        "peak_bytes": _BYTES,
        "memory": Obj(
            {p: _BYTES for p in _PARTS},
            required=_PARTS,
            description="the timeline's peak by part; the parts add up to peak_bytes",
        ),
        "peak_phase": Map(Str(), "where the peak is: phase, event, path"),
        "budget": Opt(Int(0), "bytes per GPU the plan must fit, or null"),
        "reserve_bytes": _BYTES,
        "fits": Opt(Bool(), "peak + reserve <= budget (null without a budget)"),
        "headroom_bytes": Opt(Int(None), "budget - reserve - peak (negative: no fit)"),
        "checkpoint": Arr(Str(), "the checkpointed modules' paths"),
        "kept_activation_bytes": _BYTES,
        "recompute_flops": Int(0, description="FLOPs the backward recomputes per step"),
        "timeline": Obj(
            {
                "phase": Arr(Str()),
                "event": Arr(Str()),
                "path": Arr(Str()),
                "total": _COLUMN,
                **{p: _COLUMN for p in _PARTS},
            },
            required=("phase", "event", "path", "total", *_PARTS),
            description="one GPU's memory over a training step, by part, as columns",
        ),
        "time": Map(Num(), "seconds per step: compute, recompute, exposed_comm, optimizer, comm"),
        "step_time": Num("seconds, a lower bound"),
        "model_flops": Int(0, description="forward + backward FLOPs per step"),
        "mfu": Opt(Num(), "model FLOPs / (step_time x peak): an upper bound"),
        "tokens": Opt(Int(0), "tokens per micro-batch (integer inputs), or null"),
        "tokens_per_s": Opt(Num(), "tokens per second per GPU, or null"),
        "modules": Arr(Obj({"path": Str()}, required=("path",)), "per unit or checkpoint"),
        "comm": Map(Map(Map(Map(Num()))), "collectives per step: path -> phase -> kind"),
        "notes": Arr(Str(), "what the figures assume"),
    },
    required=(
        "options",
        "device",
        "states",
        "peak_bytes",
        "memory",
        "peak_phase",
        "budget",
        "reserve_bytes",
        "checkpoint",
        "kept_activation_bytes",
        "recompute_flops",
        "timeline",
        "time",
        "step_time",
        "model_flops",
        "mfu",
        "tokens",
        "tokens_per_s",
        "modules",
        "comm",
        "notes",
    ),
    description="ls.plan's answer for one GPU of a training run (docs/plan.md)",
)

__all__ = ["PARTS", "PLAN", "TIME_PARTS"]
