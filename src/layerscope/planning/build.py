"""A plan from an analysis: the replay (``timeline``) set up by the strategy
(``planning.strategies``), the checkpointed modules (``"auto"`` included), the step
time (the strategy's collectives and overlap, ``timemodel``), predicted on the target's
achievable rates (``planning.kernels``) and bounded by its roofline, and the per-module
rows."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from math import prod
from typing import Any

from layerscope.analysis.rates import Rates, rates_of
from layerscope.analysis.roofline import roof_of, roof_times
from layerscope.collect.meta import NOT_RUN
from layerscope.hardware import DeviceSpec
from layerscope.metrics.memory.records import policy_name
from layerscope.planning import timeline as tl
from layerscope.planning.axescomm import cp_seconds, ep_seconds, step_comm, tp_seconds
from layerscope.planning.checkpointing import (
    CheckpointChoice,
    checkpoint_moments,
    choose_checkpoints,
    resolve,
)
from layerscope.planning.compiled import compiled_memory
from layerscope.planning.expertparallel import late_grads
from layerscope.planning.facts import CACHE_OFF, Param, check_paths, frozen, input_bytes, trainable
from layerscope.planning.kernels import Predicted, kernels_of, predict
from layerscope.planning.loss import loss_timeline
from layerscope.planning.mfu import published_flops, routed_note, unfused_attention_note
from layerscope.planning.options import OUT_OF_SCOPE, Options
from layerscope.planning.result import LOWER_BOUND, PREDICTED, Plan
from layerscope.planning.states import OPTIMIZER_STATES, ModelStates
from layerscope.planning.strategy import Step, Times
from layerscope.planning.tensorparallel import tp_notes
from layerscope.profile import Profile


# ---- the plan ----------------------------------------------------------------------------
def build(prof: Profile, opts: Options) -> Plan:
    """The plan from an analysis (``opts.checkpoint`` resolved here, ``"auto"``
    included); a pipeline's: ``pipelineplan.build_plan``."""
    checkpoint = opts.checkpoint
    if checkpoint == "auto":
        return _auto(prof, opts)
    if isinstance(checkpoint, tuple):
        check_paths(prof, "checkpoint", list(checkpoint))
    return _build(prof, opts, resolve(prof, checkpoint), checkpoint)


def _auto(prof: Profile, opts: Options) -> Plan:
    """``checkpoint="auto"``: the least recompute whose plan fits the budget, by the
    greedy rule of ``planning.checkpointing`` on the activation bytes, the activation
    budget lowered by the plan's overshoot until the plan fits (or every block is
    checkpointed)."""
    choice = resolve(prof, None)
    plan = _build(prof, opts, choice, "auto")
    if opts.budget is None or plan.fits:
        return plan
    # the targets are eager's bytes, which choose_checkpoints counts (compiled: more
    # than the plan's kept bytes)
    kept = choice.kept_activation_bytes
    for _ in range(16):
        over = -int(plan.headroom_bytes or 0)
        kept = max(0, kept - over)
        choice = choose_checkpoints(prof, kept)
        plan = _build(prof, opts, choice, "auto")
        if plan.fits or not choice.fits or not kept:
            break
        kept = choice.kept_activation_bytes
    return plan


def _build(
    prof: Profile,
    opts: Options,
    choice: CheckpointChoice,
    asked: Any,
    internals: dict[str, Any] | None = None,
) -> Plan:
    """The plan of ``prof`` with ``choice``; ``internals`` gets what a pipeline reads."""
    params, kept = trainable(prof), frozen(prof)
    shapes = [p.shape for p in params]
    strategy = opts.strategy
    states = _whole_grads(_states(opts, shapes, [p.shape for p in kept or ()]), params, opts)
    unrecorded = _unrecorded(prof, params, kept)
    buffers = int(prof.root.metrics.get("buffer_bytes", 0))
    inputs, float_inputs, tokens = input_bytes(prof)
    mixed = opts.mixed
    grads_by_module: dict[str, int] = {}
    for p in params:
        grads_by_module[p.module] = grads_by_module.get(p.module, 0) + p.nbytes
    # the user's input: float inputs in float32 under mixed precision, cast once (an
    # analysis under autocast's rules holds them in float32 and has the casts already)
    emulated = bool(prof.model.get("autocast"))
    cast_input = float_inputs if mixed and not emulated else 0
    held_input = inputs + cast_input
    rest = {
        "param_bytes": states.param_bytes + unrecorded,
        "optimizer_state_bytes": states.optimizer_state_bytes,
        "master_weight_bytes": states.master_weight_bytes,
        "other_bytes": held_input + buffers,
    }
    first = next((m.path for m in prof.nodes() if m.path and m.calls), "")
    setup = tl.Setup(rest, grads=grads_by_module, cast_input=cast_input, first_module=first,
                     grads_after=late_grads(prof, params))  # fmt: skip
    work = Step(prof, opts, params, setup, strategy.grad_size(opts), kept or ())
    prepared = strategy.prepare(work)
    units, unit_rows, comm = prepared.units, prepared.rows, step_comm(prepared.comm, prof, opts)
    checkpoint_moments(prof, choice, setup)
    compiled, uncompiled = compiled_memory(prof, choice, setup) if opts.compile else ("", {})
    timeline, loss_notes, loss_kept = loss_timeline(prof, setup, opts.loss)
    kept_bytes = choice.kept_activation_bytes - sum(uncompiled.values()) + loss_kept
    local = states.optimizer_state_bytes // max(1, OPTIMIZER_STATES[opts.optimizer] or 1)
    # the strategy's own temporaries of the step (ZeRO's float32 gradient partition), and
    # Adam's
    setup.optimizer_temp += local if opts.optimizer in ("adam", "adamw") else 0
    points = tl.replay(setup, timeline, accumulated=opts.grad_accum > 1)
    top = max(points, key=lambda p: p.total)
    timed = _time(work, choice)
    time, bound, model_flops = timed.time, timed.bound, timed.model_flops
    if internals is not None:
        internals.update(tp=timed.tp, params=params, kept=kept or [], timed=timed)
    step, step_bound = _step(time), _step(bound)
    peak_flops = opts.target.peak(str(opts.compute_dtype).removeprefix("torch."))
    accum, routed = opts.grad_accum, prof.model.get("routed")
    published = published_flops(params, kept, tokens, timed.predicted.attention_flops, accum,
                                opts.tp, routed)  # fmt: skip
    # a tensor-parallel group's GPUs share one micro-batch: each GPU's share of its tokens
    tokens_per_gpu = tokens / opts.tp if tokens else None
    notes = [
        *timed.notes,
        *_notes(opts, choice, asked, unrecorded, strategy.notes(opts), emulated),
        *_frozen_notes(kept, states.param_bytes, shapes, opts),
        *loss_notes,
        *([compiled] if compiled else []),
        *routed_note(routed),
        *unfused_attention_note(kernels_of(prof), published),
        *(n for n in prof.notices if n.startswith((NOT_RUN, CACHE_OFF))),
    ]
    return Plan(
        options=opts.section(units, prof.model.get("tp_plan")),
        device=_device(opts.target),
        states={"param_bytes": states.param_bytes, "grad_bytes": states.grad_bytes,
                "optimizer_state_bytes": states.optimizer_state_bytes,
                "master_weight_bytes": states.master_weight_bytes},
        peak_bytes=top.total,
        memory=dict(top.parts),
        peak_phase={"phase": top.phase, "event": top.event, "path": top.path,
                    **({"micro_batch": "2"} if top.later else {})},
        budget=opts.budget,
        reserve_bytes=opts.reserve_bytes,
        checkpoint=list(choice.paths),
        kept_activation_bytes=kept_bytes,
        recompute_flops=choice.recompute_flops * opts.grad_accum,
        timeline=_columns(points),
        time=time,
        step_time=step,
        model_flops=model_flops,
        mfu=published / (step * peak_flops) if published is not None and step > 0 else None,
        tokens=tokens,
        tokens_per_s=tokens_per_gpu * accum / step if tokens_per_gpu and step > 0 else None,
        modules=_module_rows(prof, choice, unit_rows, comm, uncompiled, kept_bytes),
        comm=comm,
        notes=notes,
        step_time_bound=step_bound,
        tokens_per_s_bound=(
            tokens_per_gpu * accum / step_bound if tokens_per_gpu and step_bound > 0 else None
        ),
        time_bound=bound,
        mfu_counted=model_flops / (step * peak_flops) if step > 0 else None,
        mfu_flops=published,
        kernels=timed.predicted.kernels * accum,
        rates=timed.rates.name + ("" if timed.rates.calibrated else " (uncalibrated)"),
        analysis=prof,
    )  # fmt: skip


def _device(spec: DeviceSpec) -> dict[str, Any]:
    """The plan's ``device``: the target's names, memory and interconnect."""
    return {
        "name": spec.name, "label": spec.label, "memory_bytes": spec.memory_bytes,
        **({"usable_memory_bytes": spec.usable_memory_bytes}
           if spec.usable_memory_bytes else {}),
        "interconnect": spec.interconnect, "interconnect_kind": spec.interconnect_kind,
        "node_size": spec.node_size,
    }  # fmt: skip


def _columns(points: list[tl.Point]) -> dict[str, list[Any]]:
    """The timeline as columns: phase, event, path, total, then one per part."""
    columns: dict[str, list[Any]] = {
        "phase": [p.phase for p in points],
        "event": [p.event for p in points],
        "path": [p.path for p in points],
        "total": [p.total for p in points],
    }
    for part in tl.PARTS:
        columns[part] = [p.parts[part] for p in points]
    return columns


def _notes(
    opts: Options,
    choice: CheckpointChoice,
    asked: Any,
    frozen: int,
    own: list[str],
    emulated: bool,
) -> list[str]:
    """What the figures assume, beside them (``emulated``: the analysis followed
    autocast's rules)."""
    notes = [OUT_OF_SCOPE]
    if opts.mesh is not None:
        sizes = ", ".join(f"{a}={n}" for a, n in opts.mesh.to_dict().items() if n > 1)
        where = opts.mesh.placement_words(opts.network.gpus_per_node)
        notes.append(f"mesh {sizes or 'of one GPU'}: {where}")
    if opts.tp > 1:
        notes.extend(tp_notes(opts.tp, opts.sequence_parallel, opts.tp_plan is None))
    if choice.paths:
        notes.append(
            "recompute as torch's non-reentrant checkpoint with early stop off; with early "
            "stop (torch's default) the real recompute can end sooner: an upper bound"
        )
    notes.extend(own)  # the strategy's
    if frozen:
        notes.append("frozen parameters are counted replicated, in the analysed dtype")
    if asked == "op":
        notes.append(
            "checkpoint='op': torchtitan's per-op policy in every block: attention and every "
            "other matmul's outputs kept to the backward, the rest recomputed"
        )
    elif callable(asked):
        notes.append(
            f"checkpoint={policy_name(asked)}: the policy in every block, as "
            "create_selective_checkpoint_contexts runs it: the outputs of the calls it saves "
            "(called once after each forward op, in order, with is_recompute False) kept "
            "to the backward, the rest recomputed (PREFER_CPU_OFFLOAD counted as recomputed)"
        )
    if asked == "auto" and not choice.fits:
        notes.append("checkpoint='auto': even every block checkpointed does not fit")
    spec = opts.target
    if spec.usable_memory_bytes and opts.budget == spec.usable_memory_bytes:
        datasheet = f", not the datasheet's {spec.memory_bytes:,}" if spec.memory_bytes else ""
        notes.append(
            f"budget: the {spec.usable_memory_bytes:,} B a process can use on the "
            f"{spec.label} (the total torch.cuda.mem_get_info() reports){datasheet}"
        )
    if opts.autocast and not emulated:
        notes.append(
            "the profile ran every op in 16 bits; autocast keeps norms, softmax, losses and "
            "a float32 residual stream in float32: pass the model, whose analysis follows "
            "autocast's rules"
        )
    return notes


def _unrecorded(prof: Profile, params: list[Param], kept: list[Param] | None) -> int:
    """A profile without records of its frozen parameters: their bytes, as analysed."""
    if kept is not None:
        return 0
    return int(prof.root.metrics["param_bytes"]) - sum(p.nbytes for p in params)


def _states(
    opts: Options, shapes: list[tuple[int, ...]], frozen: list[tuple[int, ...]]
) -> ModelStates:
    """What one GPU holds at rest, by the strategy's rule."""
    return opts.strategy.states(
        shapes, world_size=opts.shard_size, precision=opts.precision,
        optimizer=opts.optimizer, rank=opts.rank, frozen=frozen,
    )  # fmt: skip


def _whole_grads(states: ModelStates, params: list[Param], opts: Options) -> ModelStates:
    """DTensor gives some gradients another layout than their parameters' (a vocabulary-
    parallel embedding's whole on every rank): their extra elements, held where the
    strategy keeps gradients unsharded (FSDP2 and ZeRO-2 reduce-scatter them to the
    parameters' shards)."""
    extra = sum(p.grad_elements - prod(p.shape) for p in params if p.grad_elements)
    if not extra or opts.strategy.shards_grads:
        return states
    per = states.grad_bytes // sum(prod(p.shape) for p in params)
    return replace(states, grad_bytes=states.grad_bytes + extra * per)


def _frozen_notes(
    kept: list[Param] | None, held: int, shapes: list[tuple[int, ...]], opts: Options
) -> list[str]:
    """The frozen parameters' bytes per GPU, beside the figures."""
    if not kept:
        return []
    alone = _states(opts, shapes, []).param_bytes
    elements = sum(prod(p.shape) for p in kept)
    return [
        f"{elements:,} frozen parameter elements (requires_grad=False): {held - alone:,} B "
        "of parameters per GPU, no gradient and no optimizer state"
    ]


@dataclass
class _Timed:
    """The step time by part, predicted (``time``) and bounded (``bound``)."""

    time: dict[str, float]
    bound: dict[str, float]
    model_flops: int
    predicted: Predicted
    rates: Rates
    notes: list[str]
    #: tensor parallelism's collectives per micro-batch, seconds (in ``exposed_comm``)
    tp: float = 0.0


def _step(time: Mapping[str, float]) -> float:
    return sum(time.get(k, 0.0) for k in ("compute", "recompute", "exposed_comm", "contention",
                                           "bubble", "optimizer"))  # fmt: skip


#: Every kernel at the datasheet's peak and bandwidth, without launches: the roofline of
#: a compiled or float8 plan's own kernels.
DATASHEET = Rates("datasheet", matmul=1.0, bandwidth=1.0, launch=0.0)


def _time(work: Step, choice: CheckpointChoice) -> _Timed:
    """The bound (roofline per module; compiled or float8: of the kernels predicted) and
    the prediction (achievable rates per kernel, ``planning.kernels``), each with the
    strategy's collectives and overlap, and tensor parallelism's collectives."""
    prof, opts = work.prof, work.opts
    dtype = str(opts.compute_dtype).removeprefix("torch.")
    roof = roof_of(opts.target, dtype)
    notes: list[str] = []
    tp = sum(f(work, choice, notes) for f in (tp_seconds, ep_seconds, cp_seconds))
    fwd, bwd = roof_times(prof, roof, "forward"), roof_times(prof, roof, "backward")
    bound = _parts(work, choice, fwd, bwd, opts.target.bandwidth, tp)
    rates = rates_of(opts.target)
    predicted = price_kernels(prof, opts, rates)
    if (opts.compile or opts.float8 or opts.cp > 1) and predicted.recorded:
        # other kernels than the analysis's modules ran: the bound is the predicted
        # kernels' own roofline (each at the datasheet's peak and bandwidth, no launch)
        ideal = price_kernels(prof, opts, DATASHEET)
        bound = _parts(work, choice, ideal.forward, ideal.backward, opts.target.bandwidth, tp)
    time = _parts(
        work, choice, predicted.forward, predicted.backward,
        opts.target.bandwidth * min(1.0, rates.bandwidth), tp, rates.overlap,
    )  # fmt: skip
    root = prof.root
    flops = int(root.metrics.get("flops", 0)) + int(root.metrics.get("backward_flops", 0))
    notes[:0] = _time_notes(rates, predicted)
    if time.get("contention"):
        notes.append(
            f"contention: compute beside a hidden collective takes {rates.overlap:g} times as "
            "long (they share the SMs and memory bandwidth; 1.189: the average Lee et al. "
            "measured on A100, H100, MI250 and MI210, arXiv 2507.03114), so each second of "
            f"hidden collectives adds {1 - 1 / rates.overlap:.3f} s"
        )
    if opts.compile:
        notes.append(COMPILED)
    if opts.float8:
        notes.append(FLOAT8)
    if opts.float8_all_gather:
        notes.append(FLOAT8_GATHER)
    return _Timed(time, bound, flops * opts.grad_accum, predicted, rates, notes, tp)


def price_kernels(prof: Profile, opts: Options, rates: Rates) -> Predicted:
    """The analysis's kernels priced on ``rates`` (``planning.kernels``) at the target's
    peak and bandwidth for the compute dtype, as ``compile`` and ``float8`` run them,
    and under context parallelism with attention at its share of the whole sequence."""
    roof = roof_of(opts.target, str(opts.compute_dtype).removeprefix("torch."))
    fp8 = opts.target.peak("float8_e4m3fn") if opts.float8 else None
    return predict(
        prof, rates, roof.peak, roof.bandwidth, opts.compile, fp8, attention_scale=opts.cp,
        float8_shard=opts.shard_size if opts.float8_all_gather else 1,
    )  # fmt: skip


def _parts(
    work: Step,
    choice: CheckpointChoice,
    fwd: Mapping[int, float],
    bwd: Mapping[int, float],
    bandwidth: float,
    tp: float = 0.0,
    overlap: float = 1.0,
) -> dict[str, float]:
    """The step's parts from each node's forward and backward seconds: compute,
    recompute, the strategy's collectives and ``tp``, tensor parallelism's (on the
    critical path, none hidden), the optimizer's bytes over ``bandwidth`` (the
    parameters it updates, its states and master weights read and written, the
    gradients read); with
    ``overlap`` above 1 (compute beside a collective takes that many times as long:
    ``Rates.overlap``), ``contention``, what the hidden collectives slow compute by."""
    prof, opts, setup = work.prof, work.opts, work.setup
    root = prof.root
    compute = fwd[id(root)] + bwd[id(root)]
    recompute = sum(fwd[id(prof.node(p))] * _share(prof, choice, p) for p in choice.paths)
    total, exposed = opts.strategy.comm_time(work, Times(fwd, bwd, choice.paths))
    total, exposed = total + tp, exposed + tp
    st = setup.rest
    # the step reads and writes the parameters it updates: the trainable ones (frozen
    # ones are not touched), under ZeRO this rank's partition of them
    updated = _states(opts, [p.shape for p in work.params], []).param_bytes
    if opts.strategy.updates_partition:
        updated = -(-updated // opts.dp_size)
    moved = (
        2 * (updated + st["optimizer_state_bytes"] + st["master_weight_bytes"]) + setup.final_grads
    )
    accum = opts.grad_accum
    parts = {
        "compute": compute * accum,
        "recompute": recompute * accum,
        "exposed_comm": exposed * accum,
        "optimizer": moved / bandwidth,
        "comm": total * accum,
    }
    hidden = max(0.0, total - exposed)
    if overlap > 1 and hidden > 0:
        # compute worth h / overlap runs in the h seconds a hidden collective takes
        parts["contention"] = hidden * (1 - 1 / overlap) * accum
    return parts


#: What ``compile=True`` changes, in the plan's notes.
COMPILED = (
    "compiled (torch.compile): each module's pointwise and reduction kernels of a phase "
    "are priced as one fused kernel that moves the bytes of the largest of them, with one "
    "launch; matmuls and attention as they are"
)


#: What ``float8=True`` changes, in the plan's notes.
FLOAT8 = (
    "float8 (torchao, tensorwise): every nn.Linear but the output projection runs its three "
    "matmuls on float8 operands at the float8 peak, with each operand's amax and cast "
    "charged; memory as in bfloat16 (the float8 copies and their savings are not counted)"
)
FLOAT8_GATHER = (
    "float8_all_gather (torchao's enable_fsdp_float8_all_gather): FSDP2 casts each "
    "float8 linear's weight shard to float8 before the all-gather, so those weights are "
    "gathered and held unsharded at 1 byte an element; their per-tensor scales (4 B "
    "each, one all-reduce of the amaxes a step) are not counted"
)


def _share(prof: Profile, choice: CheckpointChoice, path: str) -> float:
    """The share of ``path``'s forward its recompute runs (all of it but under
    ``checkpoint="op"``: its FLOPs less the saved ops')."""
    if path not in choice.recomputed:
        return 1.0
    flops = int(prof.node(path).metrics.get("flops", 0))
    return choice.recomputed[path] / flops if flops else 1.0


def _time_notes(rates: Rates, predicted: Predicted) -> list[str]:
    """What the predicted figures rest on."""
    where = (
        "" if rates.calibrated else " (uncalibrated: " + (rates.notes or "stated defaults") + ")"
    )
    notes = [f"{PREDICTED} Rates: {rates.name}{where}.", LOWER_BOUND]
    if not predicted.recorded:
        notes.append(
            "the analysis has no kernel records (a given or loaded profile): each module's "
            "own work is priced at the large-matmul rate and the achievable bandwidth, "
            "without launches"
        )
    return notes


def _module_rows(
    prof: Profile,
    choice: CheckpointChoice,
    units: Mapping[str, dict[str, Any]],
    comm: Any,
    uncompiled: Mapping[str, int],
    kept_bytes: int,
) -> list[dict[str, Any]]:
    """One row per FSDP unit or checkpointed module, in the model's order. Kept bytes: a
    checkpointed module keeps its inputs; another its saved bytes less what the
    checkpointed modules inside it drop and, compiled, what the partitioner recomputes
    in the blocks it holds (``uncompiled``; the root: the plan's exact figure,
    ``kept_bytes``)."""
    table = prof.memory.get("storages") or {"paths": [], "rows": []}
    index = {p: i for i, p in enumerate(table["paths"])}
    kept = dict.fromkeys(choice.paths, 0)
    path_at = {index[p]: p for p in choice.paths if p in index}
    for nbytes, _savers, inputs, _outputs, param in table["rows"]:
        if not param:
            for i in set(inputs).intersection(path_at):
                kept[path_at[i]] += nbytes

    def saved(path: str) -> int:
        return int(prof.node(path).metrics.get("activation_bytes", 0))

    rows = []
    for node in prof.nodes():
        if node.path not in units and node.path not in kept:
            continue
        checkpointed = node.path in kept
        if checkpointed:
            mine = kept[node.path] + choice.policy_kept.get(node.path, 0)
        elif node.path == "":
            mine = kept_bytes
        else:
            inner = [p for p in kept if p.startswith(node.path + ".")]
            mine = saved(node.path) - sum(saved(p) - kept[p] for p in inner)
            mine -= sum(n for p, n in uncompiled.items() if tl.inside(p, node.path))
        phases = comm.get(node.path, {})
        rows.append({
            "path": node.path,
            "type": node.type,
            "params": int(node.metrics.get("params", 0)),
            "unit": node.path in units,
            "checkpointed": checkpointed,
            "activation_bytes": saved(node.path),
            "kept_activation_bytes": mine,
            "recompute_bytes": saved(node.path) if checkpointed else 0,
            "recompute_flops": int(
                choice.recomputed.get(node.path, node.metrics.get("flops", 0))
            ) if checkpointed else 0,
            "shard_elements": units.get(node.path, {}).get("shard_elements", 0),
            "unsharded_bytes": units.get(node.path, {}).get("unsharded_bytes", 0),
            "gather_bytes": sum(ph.get("all_gather", {}).get("bytes", 0) for ph in phases.values()),
            "reduce_bytes": sum(
                ph.get(k, {}).get("bytes", 0)
                for ph in phases.values()
                for k in ("reduce_scatter", "all_reduce")
            ),
        })  # fmt: skip
    return rows


__all__ = ["build"]
