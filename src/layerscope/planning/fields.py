"""The plan's field table: every figure a plan and a sweep show, written once.

One ``PlanField`` per key of a plan section (``Plan.section()``) or of a sweep row says
what the value is (unit, description, JSON type) and how views show it (header, the word
in sentences, priority, shown by default). The text view (``planning.view``), the JSON
schema and check (``planning.schema``) and the HTML section (``planning.html``) read their
columns and headers here; adding a figure to a view is one row (``register_field``).

Groups (``Group``), one per place a field appears:

- ``plan``: the section's keys (``peak_bytes``, ``step_time``, ``timeline``, ...); no
  column: figures are said in sentences, and on the HTML section's cards under their
  header; structures have their own tables.
- ``memory``: the parts of a GPU's memory, in order: ``memory``'s keys, the timeline's
  columns and the rows of the memory table; they add up to ``peak_bytes``.
- ``time``: the step time by part (``time``'s keys, and ``time_bound``'s); the shown
  ones add up to ``step_time`` (``step_time_bound``), ``comm`` (not shown) is the
  collectives' whole time.
- ``module``: the per-module table's columns (``modules``' rows).
- ``axis``: a sweep's options, ``row``: a sweep row's figures (``SweepRow``'s fields).
- ``comm``: the HTML section's table of collectives.
- ``stage``: a pipeline's row per stage (``pipeline``'s ``rows``).

This module is on ``planning``'s floor: it imports nothing from layerscope but errors.
Read the table through ``fields(group)`` at the time of use to see registered rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

from layerscope.errors import InvalidInputError

__all__ = [
    "BUDGET",
    "CHECKPOINTED",
    "EVENTS",
    "FIELDS",
    "FITS",
    "GROUPS",
    "HEADROOM_BYTES",
    "KEPT_ACTIVATION_BYTES",
    "MFU",
    "MFU_COUNTED",
    "MODEL_FLOPS",
    "PARTS",
    "PEAK_BYTES",
    "RECOMPUTE_FLOPS",
    "RESERVE_BYTES",
    "STEP_TIME",
    "STEP_TIME_BOUND",
    "TOKENS",
    "TOKENS_PER_S",
    "TOKENS_PER_S_BOUND",
    "Group",
    "PlanField",
    "Unit",
    "field",
    "fields",
    "keys",
    "register_field",
    "unregister_field",
]

#: The plan's figures that views read by name (the ``plan`` group's keys).
PEAK_BYTES = "peak_bytes"
BUDGET = "budget"
RESERVE_BYTES = "reserve_bytes"
FITS = "fits"
HEADROOM_BYTES = "headroom_bytes"
KEPT_ACTIVATION_BYTES = "kept_activation_bytes"
RECOMPUTE_FLOPS = "recompute_flops"
STEP_TIME = "step_time"
MODEL_FLOPS = "model_flops"
MFU = "mfu"
TOKENS = "tokens"
TOKENS_PER_S = "tokens_per_s"
STEP_TIME_BOUND = "step_time_bound"
TOKENS_PER_S_BOUND = "tokens_per_s_bound"
MFU_COUNTED = "mfu_counted"
#: The sweep row's count of checkpointed modules (not a ``Plan`` attribute).
CHECKPOINTED = "checkpointed"

#: What a value is; its display format is ``PlanField.kind``.
Unit = Literal[
    "bytes", "seconds", "count", "flops", "rate", "ratio", "flag", "fits", "text", "data"
]
#: Where a field appears (module docstring).
Group = Literal["plan", "memory", "time", "module", "axis", "row", "comm", "stage"]
GROUPS: tuple[Group, ...] = (
    "plan", "memory", "time", "module", "axis", "row", "comm", "stage",
)  # fmt: skip
#: The JSON type of a value: an integer (``minimum`` or more), a number, a bool, a string,
#: anything, a structure (``planning.schema`` says its shape).
JsonType: TypeAlias = Literal["int", "number", "bool", "text", "any", "object", "array"]

#: The display format of each unit (``render.units.BY_KIND`` and the page's ``lsFormat``).
_KIND: dict[str, str] = {"flops": "si", "rate": "si"}


@dataclass(frozen=True, slots=True)
class PlanField:
    """Everything layerscope knows about one field of a plan or a sweep (module docstring)."""

    group: Group
    key: str
    unit: Unit
    #: One line for docs, tooltips and the text view's legend: what the value is.
    description: str
    #: Column header (every view's); empty: no column.
    header: str = ""
    #: The field in a sentence (``world size 8``); empty: the header in lower case.
    short: str = ""
    #: Text view priority: when a narrow table must drop columns, lower goes first;
    #: None: never dropped.
    priority: int | None = 50
    #: Shown by the text view (the HTML section shows every field with a value).
    default: bool = True
    #: The text module table shows the column when some row's value of this key is not
    #: empty (an FSDP unit, a checkpointed module, a gradient reduced); "": always.
    shown_if: str = ""
    #: The text module table's legend explains the column (with ``description``).
    legend: bool = False
    json: JsonType = "int"
    #: The least integer value (None: any).
    minimum: int | None = 0
    #: null is a value (no budget, no token ids).
    nullable: bool = False
    #: Every document has it (False: added after the first documents).
    required: bool = True

    def __post_init__(self) -> None:
        if self.group not in GROUPS:
            raise InvalidInputError(
                f"plan field {self.key!r}: group {self.group!r} is not one of {', '.join(GROUPS)}"
            )

    @property
    def kind(self) -> str:
        """The display format: ``bytes``, ``seconds``, ``count``, ``si``, ``ratio``, ..."""
        return _KIND.get(self.unit, self.unit)

    @property
    def word(self) -> str:
        """The field in a sentence."""
        return self.short or self.header.lower()


def _memory(key: str, header: str, description: str) -> PlanField:
    return PlanField("memory", key, "bytes", description, header)


def _time(
    key: str, header: str, description: str, default: bool = True, required: bool = True
) -> PlanField:
    return PlanField(
        "time", key, "seconds", description, header, default=default, json="number",
        required=required,
    )  # fmt: skip


def _plan(
    key: str, unit: Unit, description: str, json: JsonType = "int", **more: object
) -> PlanField:
    return PlanField("plan", key, unit, description, json=json, **more)  # type: ignore[arg-type]


_MODULE: Group = "module"
_AXIS: Group = "axis"
_ROW: Group = "row"

#: The table, in the order views show each group.
FIELDS: list[PlanField] = [
    # ---- the plan section's keys, in the schema's order ----
    _plan("options", "data", "the options the plan was made with", "object"),
    _plan("device", "data", "the target: name, label, memory, interconnect", "object"),
    _plan("states", "data", "model states at rest on this GPU, by kind", "object"),
    _plan(PEAK_BYTES, "bytes", "the timeline's highest point", header="Peak per GPU"),
    _plan("memory", "data", f"the timeline's peak by part; the parts add up to {PEAK_BYTES}",
          "object"),
    _plan("peak_phase", "data", "where the peak is: phase, event, path", "object"),
    _plan(BUDGET, "bytes", "bytes per GPU the plan must fit, or null", header="Budget",
          nullable=True),
    _plan(RESERVE_BYTES, "bytes", "bytes kept free below the budget"),
    _plan(FITS, "fits", "peak + reserve <= budget (null without a budget)", "bool",
          nullable=True, required=False),
    _plan(HEADROOM_BYTES, "bytes", "budget - reserve - peak (negative: no fit)",
          header="Headroom", minimum=None, nullable=True, required=False),
    _plan("checkpoint", "data", "the checkpointed modules' paths", "array"),
    _plan(KEPT_ACTIVATION_BYTES, "bytes", "activations kept for the backward"),
    _plan(RECOMPUTE_FLOPS, "flops", "FLOPs the backward recomputes per step"),
    _plan("timeline", "data", "one GPU's memory over a training step, by part, as columns",
          "object"),
    _plan("time", "data", "seconds per step", "object"),
    _plan(STEP_TIME, "seconds", "seconds, predicted from achievable rates", "number",
          header="Step time"),
    _plan(MODEL_FLOPS, "flops", "forward + backward FLOPs per step"),
    _plan(MFU, "ratio", "(6 N per token + attention) / (step_time x peak), PaLM's "
          "convention; null without tokens", "number", header="MFU", nullable=True),
    _plan(TOKENS, "count", "tokens per micro-batch (integer inputs), or null", nullable=True),
    _plan(TOKENS_PER_S, "rate", "tokens per second per GPU, predicted, or null", "number",
          header="Tokens/s", nullable=True),
    _plan("modules", "data", "per unit or checkpoint", "array"),
    _plan("comm", "data", "collectives per step: path -> phase -> kind", "object"),
    _plan("notes", "data", "what the figures assume", "array"),
    _plan(STEP_TIME_BOUND, "seconds", "seconds, a lower bound (the roofline)", "number",
          header="Step bound", nullable=True, required=False),
    _plan(TOKENS_PER_S_BOUND, "rate", "tokens per second per GPU, an upper bound, or null",
          "number", header="Tokens/s bound", nullable=True, required=False),
    _plan("time_bound", "data", "seconds per step by part, lower bounds", "object",
          nullable=True, required=False),
    _plan(MFU_COUNTED, "ratio", "model_flops / (step_time x peak): the analysis's FLOPs",
          "number", header="MFU (counted)", nullable=True, required=False),
    _plan("mfu_flops", "flops", "FLOPs per step as mfu counts them (6 N per token + "
          "attention), or null", nullable=True, required=False),
    _plan("kernels", "count", "kernels per step (the analysis's ops that move bytes)",
          nullable=True, required=False),
    _plan("rates", "text", "the achievable rates the prediction used", "text",
          nullable=True, required=False),
    _plan("pipeline", "data", "pipeline parallelism: the schedule, microbatches, the stage "
          "planned and a row per stage, or null", "object", nullable=True, required=False),
    # ---- the parts of a GPU's memory ----
    _memory("param_bytes", "Params", "this GPU's parameters at rest (sharded or replicated)"),
    _memory("unsharded_param_bytes", "Unsharded params", "FSDP2 units' gathered parameters"),
    _memory("grad_bytes", "Grads", "gradients"),
    _memory("optimizer_state_bytes", "Optimizer states", "the optimizer's states"),
    _memory("master_weight_bytes", "Master weights", "float32 copies of 16-bit parameters"),
    _memory("activation_bytes", "Activations", "the analysis's live bytes: activations, "
            "temporaries"),
    _memory("recompute_bytes", "Recompute", "what checkpointed modules' recompute holds"),
    _memory("comm_buffer_bytes", "Comm buffers", "collectives' buffers (all-gather outputs, "
            "reduce-scatter inputs, DDP buckets)"),
    _memory("other_bytes", "Other", "input, buffers, the optimizer's temporaries"),
    # ---- the step time ----
    _time("compute", "Compute", "the forward and backward, each kernel at its achievable rate"),
    _time("recompute", "Recompute", "checkpointed modules' forwards, again"),
    _time("exposed_comm", "Exposed comm", "collectives that compute does not hide"),
    _time("contention", "Contention", "compute slowed by the collectives it hides (they "
          "share the SMs and memory bandwidth)", required=False),
    _time("bubble", "Bubble", "a pipeline's idle time: the schedule's span on the stages' "
          "predicted times, less this stage's own share of it", required=False),
    _time("optimizer", "Optimizer", "the step's bytes over the achievable bandwidth"),
    _time("comm", "Comm", "every collective of the step, hidden or not", default=False),
    # ---- the per-module table ----
    PlanField(_MODULE, "path", "text", "the module's path", "Module", priority=None,
              json="text"),
    PlanField(_MODULE, "type", "text", "the module's class", "Type", priority=20, json="text"),
    PlanField(_MODULE, "params", "count", "parameters of the module and its children",
              "Params", priority=55),
    PlanField(_MODULE, "unit", "flag", "an FSDP unit: its parameters are gathered together",
              "Unit", priority=30, shown_if="unit", json="bool"),
    PlanField(_MODULE, "checkpointed", "flag", "its forward is recomputed in the backward",
              "Ckpt", priority=75, shown_if="checkpointed", json="bool"),
    PlanField(_MODULE, "activation_bytes", "bytes", "bytes its forward saves for the backward",
              "Saved", default=False),
    PlanField(_MODULE, "kept_activation_bytes", "bytes", "activations kept for the backward",
              "Kept", priority=80, legend=True),
    PlanField(_MODULE, "recompute_bytes", "bytes",
              "what a checkpointed module saves again in the backward", "Recomputed",
              priority=70, shown_if="checkpointed", legend=True),
    PlanField(_MODULE, "recompute_flops", "flops", "FLOPs the backward recomputes",
              "Recompute FLOPs", priority=60, shown_if="checkpointed"),
    PlanField(_MODULE, "shard_elements", "count", "elements of this GPU's padded shard",
              "Shard elems", default=False),
    PlanField(_MODULE, "unsharded_bytes", "bytes", "a unit's parameters gathered whole",
              "Unsharded", priority=65, shown_if="unit", legend=True),
    PlanField(_MODULE, "gather_bytes", "bytes", "this GPU's shard, in the dtype gathered, "
              "as the micro-batch's all-gathers send it (their payload): once for the forward, "
              "again for the backward when resharded", "Gather", priority=50, shown_if="unit",
              legend=True),
    PlanField(_MODULE, "reduce_bytes", "bytes", "the whole unsharded gradient, in the reduce "
              "dtype (fp32 under mixed precision), as the micro-batch's reduce-scatter or DDP's "
              "all-reduce takes it in (their payload), plus under HSDP the shard all-reduced",
              "Reduce", priority=45, shown_if="reduce_bytes", legend=True),
    # ---- a sweep: the options swept, then each plan's figures ----
    PlanField(_AXIS, "micro_batch", "count", "inputs per micro-batch (dim 0)", "Micro-batch",
              priority=None),
    PlanField(_AXIS, "world_size", "count", "GPUs in the run", "GPUs", short="world size",
              priority=None),
    PlanField(_AXIS, "sharding", "text", "how model states are split", "Sharding",
              priority=None, json="text"),
    PlanField(_AXIS, "checkpoint", "text", "what is checkpointed", "Checkpoint", priority=None,
              json="any"),
    PlanField(_AXIS, "precision", "text", "the mixed-precision policy", "Precision",
              priority=None, json="text"),
    PlanField(_AXIS, "optimizer", "text", "the optimizer", "Optimizer", priority=None,
              json="text"),
    PlanField(_AXIS, "grad_accum", "count", "micro-batches per optimizer step", "Grad accum",
              priority=None),
    PlanField(_AXIS, "tp", "count", "GPUs each tensor-parallel layer is split over",
              "TP", priority=None, nullable=True, required=False),
    PlanField(_AXIS, "pp", "count", "pipeline stages (ranks) the model is cut into", "PP",
              priority=None, nullable=True, required=False),
    PlanField(_ROW, FITS, "fits", "peak + reserve <= budget", "Fits", priority=None,
              json="bool", nullable=True),
    PlanField(_ROW, PEAK_BYTES, "bytes", "the timeline's highest point", "Peak",
              priority=90),
    PlanField(_ROW, HEADROOM_BYTES, "bytes", "the budget less reserve and peak", "Headroom",
              priority=60, minimum=None, nullable=True),
    PlanField(_ROW, STEP_TIME, "seconds", "predicted", "Step", priority=85,
              json="number"),
    PlanField(_ROW, TOKENS_PER_S, "rate", "tokens per second per GPU, predicted",
              "Tokens/s", priority=70, json="number", nullable=True),
    PlanField(_ROW, MFU, "ratio", "model FLOPs utilisation, PaLM's convention", "MFU",
              priority=65, json="number", nullable=True),
    PlanField(_ROW, CHECKPOINTED, "count", "modules checkpointed", "Checkpointed",
              default=False),
    PlanField(_ROW, STEP_TIME_BOUND, "seconds", "a lower bound (the roofline)", "Step bound",
              priority=40, json="number", nullable=True, required=False),
    PlanField(_ROW, TOKENS_PER_S_BOUND, "rate", "tokens per second per GPU, an upper bound",
              "Tokens/s bound", default=False, json="number", nullable=True, required=False),
    PlanField(_ROW, MFU_COUNTED, "ratio", "model FLOPs utilisation, the analysis's FLOPs",
              "MFU (counted)", default=False, json="number", nullable=True, required=False),
    # ---- the HTML section's collectives ----
    PlanField("comm", "phase", "text", "the step's phase", "Phase", json="text"),
    PlanField("comm", "kind", "text", "the collective", "Collective", json="text"),
    PlanField("comm", "calls", "count", "calls per step", "Calls"),
    PlanField("comm", "bytes", "bytes", "the payload of the calls", "Payload"),
    PlanField("comm", "wire_bytes", "bytes", "bytes each GPU sends", "Wire bytes"),
    # ---- a pipeline's stages ----
    PlanField("stage", "stage", "count", "the stage's index", "Stage", priority=None),
    PlanField("stage", "first", "text", "its first piece (module path)", "First", json="text"),
    PlanField("stage", "last", "text", "its last piece", "Last", json="text"),
    PlanField("stage", "modules", "text", "the pieces it runs, first .. last of each of its "
              "stages", "Modules", json="text"),
    PlanField("stage", "pieces", "count", "pieces it runs", "Pieces", minimum=1),
    PlanField("stage", "params", "count", "its parameters (the whole tensors')", "Params"),
    PlanField("stage", "state_bytes", "bytes", "its model states at rest on a GPU: "
              "parameters, gradients, optimizer states", "States"),
    PlanField("stage", "held_bytes", "bytes", "what one microbatch's forward leaves for "
              "its backward", "Held/mb"),
    PlanField("stage", "in_flight", "count", "the most microbatches forwarded and not yet "
              "backwarded at once", "In flight", minimum=1),
    PlanField("stage", PEAK_BYTES, "bytes", "the stage's peak over the step", "Peak"),
    PlanField("stage", FITS, "fits", "peak + reserve <= budget", "Fits", json="bool",
              nullable=True),
    PlanField("stage", "time", "seconds", "seconds per microbatch: compute, recompute, "
              "tensor-parallel collectives, sends", "Time/mb", json="number"),
    PlanField("stage", "sent_bytes", "bytes", "bytes it sends per step (activations on, "
              "gradients back)", "Sent"),
    PlanField("stage", "received_bytes", "bytes", "bytes it receives per step",
              "Received"),
]  # fmt: skip

#: What each timeline event says before its module (``planning.timeline.Point.event``).
EVENTS: dict[str, str] = {
    "enter": "enter",
    "exit": "exit",
    "peak": "peak in",
    "backward": "backward of",
    "end": "end of the backward",
    "gather": "all-gather for",
    "prefetch": "prefetch all-gather for",
    "reduce_scatter": "reduce-scatter of",
    "recompute": "recompute",
    "loss": "fused loss at",
    "step": "optimizer step",
}


def fields(group: Group) -> tuple[PlanField, ...]:
    """The fields of ``group``, in the table's order."""
    return tuple(f for f in FIELDS if f.group == group)


def keys(group: Group) -> tuple[str, ...]:
    """The keys of ``group``'s fields, in order."""
    return tuple(f.key for f in FIELDS if f.group == group)


def field(group: Group, key: str) -> PlanField:
    """The field ``key`` of ``group``; ``KeyError`` when there is none."""
    for f in FIELDS:
        if f.group == group and f.key == key:
            return f
    raise KeyError(f"{group}.{key}")


def register_field(spec: PlanField) -> None:
    """Add a field at the end of its group (views show it from then on)."""
    if any(f.group == spec.group and f.key == spec.key for f in FIELDS):
        raise InvalidInputError(f"plan field {spec.group}.{spec.key} is already registered")
    FIELDS.append(spec)


def unregister_field(group: Group, key: str) -> None:
    """Remove a field ``register_field`` added."""
    FIELDS.remove(field(group, key))


#: The parts of a GPU's memory as (key, header), in order, as the table has them at import
#: (``planning.timeline`` replays these).
PARTS: tuple[tuple[str, str], ...] = tuple((f.key, f.header) for f in fields("memory"))
