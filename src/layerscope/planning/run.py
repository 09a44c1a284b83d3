"""``ls.plan``: one GPU's memory timeline and step time in a training run that cannot run
here, by arithmetic over one analysis on ``meta`` steered to the target
(``docs/plan.md``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from math import prod
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_map_only

from layerscope.analysis.roofline import roof_of, roof_times
from layerscope.errors import InvalidInputError
from layerscope.hardware import BY_NAME, DeviceSpec, device_spec
from layerscope.metrics.memory.training import OPTIMIZER_STATES
from layerscope.planning import timeline as tl
from layerscope.planning.checkpointing import (
    CheckpointChoice,
    choose_checkpoints,
    repeated_blocks,
    resolve,
)
from layerscope.planning.comm import ddp_buckets, ddp_collectives, fsdp_collectives
from layerscope.planning.result import LOWER_BOUND, Plan
from layerscope.planning.states import PRECISIONS, SHARDINGS, fsdp_shard, model_states
from layerscope.planning.timemodel import UnitWork, ddp_exposed, fsdp_exposed, link_time
from layerscope.profile import Profile
from layerscope.validate import check_bool, check_choice, check_int, check_number, refuse

#: Default bytes kept aside from the budget for what the timeline leaves out: the CUDA
#: context, cuBLAS/cuDNN workspaces, the caching allocator's fragmentation.
RESERVE_BYTES = 2 * 2**30
#: Default inter-node bandwidth per GPU, bytes/s per direction (400 Gb/s: one NIC per GPU).
INTER_NODE_BANDWIDTH = 400e9 / 8
OUT_OF_SCOPE = "tensor, pipeline and context parallelism are not modelled"

_COMPUTE = {"fp32": torch.float32, "bf16": torch.bfloat16, "bf16-mixed": torch.bfloat16,
            "fp16-mixed": torch.float16}  # fmt: skip


@dataclass(frozen=True)
class Options:
    """``ls.plan``'s options, checked."""

    target: DeviceSpec
    world_size: int
    sharding: str
    precision: str
    optimizer: str
    grad_accum: int
    budget: int | None
    reserve_bytes: int
    rank: int
    reshard_after_forward: bool
    units: tuple[str, ...] | None
    inter_node_bandwidth: float
    bucket_cap_mb: float

    @property
    def mixed(self) -> bool:
        return self.precision.endswith("-mixed")

    @property
    def compute_dtype(self) -> torch.dtype:
        return _COMPUTE[self.precision]


def check_options(
    target: Any,
    world_size: Any,
    sharding: Any,
    precision: Any,
    optimizer: Any,
    grad_accum: Any,
    budget: Any,
    extra: Mapping[str, Any],
) -> Options:
    known = {"reserve_bytes", "rank", "reshard_after_forward", "units",
             "inter_node_bandwidth", "bucket_cap_mb"}  # fmt: skip
    unknown = sorted(set(extra) - known)
    if unknown:
        raise InvalidInputError(
            f"unknown option {unknown[0]!r} for ls.plan; known: {', '.join(sorted(known))}"
        )
    spec = device_spec(target)
    if spec.kind != "gpu":
        raise InvalidInputError(f"target must be a GPU spec, got {spec.name!r} ({spec.kind})")
    world = check_int("world_size", world_size, 1)
    check_choice("sharding", sharding, list(SHARDINGS))
    check_choice("precision", precision, list(PRECISIONS))
    check_choice("optimizer", optimizer, list(OPTIMIZER_STATES))
    if sharding == "none" and world != 1:
        raise InvalidInputError("sharding='none' is one GPU: world_size must be 1")
    units = extra.get("units")
    if units is not None:
        if isinstance(units, str) or not all(isinstance(u, str) for u in units):
            refuse("units", units, "a list of module paths")
        units = tuple(units)
    if budget is None:
        budget = spec.memory_bytes
    elif budget is not None:
        budget = check_int("budget", budget, 0)
    return Options(
        target=spec,
        world_size=world,
        sharding=sharding,
        precision=precision,
        optimizer=optimizer,
        grad_accum=check_int("grad_accum", grad_accum, 1),
        budget=budget,
        reserve_bytes=check_int("reserve_bytes", extra.get("reserve_bytes", RESERVE_BYTES), 0),
        rank=check_int("rank", extra.get("rank", 0), 0, world - 1),
        reshard_after_forward=check_bool(
            "reshard_after_forward", extra.get("reshard_after_forward", True)
        ),
        units=units,
        inter_node_bandwidth=check_number(
            "inter_node_bandwidth",
            extra.get("inter_node_bandwidth", INTER_NODE_BANDWIDTH),
            positive=True,
        ),
        bucket_cap_mb=check_number("bucket_cap_mb", extra.get("bucket_cap_mb", 25), positive=True),
    )


@dataclass
class Source:
    """What a plan was analysed from, to analyse again at another micro-batch."""

    model: nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any] | None
    input_shape: Any
    profile_options: dict[str, Any] = field(default_factory=dict)

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


# ---- the analysis ----------------------------------------------------------------------
def analyse(
    model: nn.Module | Profile,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
    input_shape: Any,
    opts: Options,
    profile_options: Mapping[str, Any],
) -> Profile:
    """The one analysis a plan needs: the given profile (checked), or a meta copy of the
    model in the compute dtype, profiled with ``backward=True, memory=True`` and steered
    to the target."""
    want = str(opts.compute_dtype).removeprefix("torch.")
    if isinstance(model, Profile):
        if not isinstance(model.memory.get("storages"), Mapping) or "backward_flops" not in (
            model.root.metrics
        ):
            raise InvalidInputError(
                "ls.plan needs a profile made with backward=True, memory=True (its storage "
                "records and backward); profile the model again, or pass the model"
            )
        if model.model.get("dtype") != want:
            raise InvalidInputError(
                f"precision={opts.precision!r} computes in {want}, but the profile ran in "
                f"{model.model.get('dtype')}: profile the model in {want}, or pass the model"
            )
        return model
    if not isinstance(model, nn.Module):
        raise InvalidInputError(f"ls.plan needs a model or a Profile, got {type(model).__name__}")
    from layerscope.collect.meta import to_meta
    from layerscope.session.run import profile

    meta = to_meta(model).to(opts.compute_dtype)
    name = opts.target.name if opts.target.name in BY_NAME else None
    call: dict[str, Any] = dict(profile_options)

    def on_meta(t: torch.Tensor) -> torch.Tensor:  # the micro-batch, as the GPU computes it
        dtype = opts.compute_dtype if t.is_floating_point() else t.dtype
        return t.detach().to("meta", dtype=dtype).requires_grad_(t.requires_grad)

    if args:
        call["args"] = tree_map_only(torch.Tensor, on_meta, tuple(args))
    if kwargs:
        call["kwargs"] = tree_map_only(torch.Tensor, on_meta, dict(kwargs))
    if input_shape is not None:
        call["input_shape"] = input_shape
    return profile(meta, backward=True, memory=True, target=name, **call)


# ---- facts of the analysis -------------------------------------------------------------
@dataclass(frozen=True)
class Param:
    name: str
    shape: tuple[int, ...]
    module: str
    nbytes: int  # as analysed


def trainable(prof: Profile) -> list[Param]:
    """The trainable parameters (each tensor once) from the storage of their gradients."""
    grads = prof.memory.get("grads")
    if not isinstance(grads, Mapping) or not grads:
        raise InvalidInputError(
            "the profile records no gradients (memory['grads']): ls.plan plans training, "
            "so the model needs trainable parameters and the profile backward=True"
        )
    return [
        Param(name, tuple(int(d) for d in g["shape"]), str(g["module"]), int(g["bytes"]))
        for name, g in grads.items()
    ]


def _input_bytes(prof: Profile) -> tuple[int, int, int | None]:
    """(all input bytes, float input bytes, tokens) of the analysed micro-batch: tokens
    are the elements of the first integer input (token ids), None without one."""
    total = floats = 0
    tokens: int | None = None
    for call in prof.root.inputs[:1]:
        for spec in call:
            shape = getattr(spec, "shape", None)
            if shape is None:
                continue
            dtype = getattr(torch, spec.dtype, None)
            if not isinstance(dtype, torch.dtype):
                continue
            nbytes = prod(shape) * dtype.itemsize
            total += nbytes
            if dtype.is_floating_point:
                floats += nbytes
            elif tokens is None and not dtype.is_complex and dtype != torch.bool:
                tokens = prod(shape)
    return total, floats, tokens


def fsdp_units(prof: Profile, opts: Options) -> list[str]:
    """The FSDP2 units in forward order: the given paths or the repeated blocks, and the
    root (always a unit: ``fully_shard(model)`` last)."""
    paths = list(opts.units) if opts.units is not None else repeated_blocks(prof)
    for path in paths:
        prof.node(path)  # KeyError for an unknown one
    order = {n.path: i for i, n in enumerate(prof.nodes())}
    return ["", *sorted((p for p in set(paths) if p), key=order.__getitem__)]


def _owner(module: str, units: Sequence[str]) -> str:
    best = ""
    for unit in units:
        if unit and (module == unit or module.startswith(unit + ".")) and len(unit) > len(best):
            best = unit
    return best


# ---- the plan ----------------------------------------------------------------------------
def build(prof: Profile, opts: Options, checkpoint: Any) -> Plan:
    """The plan from an analysis (checkpoint resolved here, ``"auto"`` included)."""
    if checkpoint == "auto":
        return _auto(prof, opts)
    return _build(prof, opts, resolve(prof, checkpoint), checkpoint)


def _auto(prof: Profile, opts: Options) -> Plan:
    """``checkpoint="auto"``: the least recompute whose plan fits the budget, by the
    greedy rule of ``planning.checkpointing`` on the activation bytes, the activation
    budget lowered by the plan's overshoot until the plan fits (or every block is
    checkpointed)."""
    plan = _build(prof, opts, resolve(prof, None), "auto")
    if opts.budget is None or plan.fits:
        return plan
    kept = plan.kept_activation_bytes
    for _ in range(16):
        over = -int(plan.headroom_bytes or 0)
        kept = max(0, kept - over)
        choice = choose_checkpoints(prof, kept)
        plan = _build(prof, opts, choice, "auto")
        if plan.fits or not choice.fits or not kept:
            break
        kept = plan.kept_activation_bytes
    return plan


def _build(prof: Profile, opts: Options, choice: CheckpointChoice, asked: Any) -> Plan:
    n, rank = opts.world_size, opts.rank
    params = trainable(prof)
    shapes = [p.shape for p in params]
    states = model_states(
        shapes, world_size=n, sharding=opts.sharding, precision=opts.precision,
        optimizer=opts.optimizer, rank=rank,
    )  # fmt: skip
    trainable_bytes = sum(p.nbytes for p in params)
    frozen = max(0, int(prof.root.metrics.get("param_bytes", 0)) - trainable_bytes)
    buffers = int(prof.root.metrics.get("buffer_bytes", 0))
    inputs, float_inputs, tokens = _input_bytes(prof)
    mixed, low = opts.mixed, opts.compute_dtype.itemsize
    grads_by_module: dict[str, int] = {}
    for p in params:
        grads_by_module[p.module] = grads_by_module.get(p.module, 0) + p.nbytes
    # the user's input: float inputs in float32 under mixed precision, cast once
    held_input = inputs + (float_inputs if mixed else 0)
    rest = {
        "param_bytes": states.param_bytes + frozen,
        "optimizer_state_bytes": states.optimizer_state_bytes,
        "master_weight_bytes": states.master_weight_bytes,
        "other_bytes": held_input + buffers,
    }
    first = next((m.path for m in prof.nodes() if m.path and m.calls), "")
    setup = tl.Setup(opts.sharding, n, rest, grads=grads_by_module,
                     cast_input=float_inputs if mixed else 0, first_module=first)  # fmt: skip
    grad_size = 4 if mixed and opts.sharding in ("fsdp", "ddp") else low
    if opts.sharding == "fsdp":
        units, unit_rows, comm = _fsdp(prof, opts, params, setup, grad_size)
    else:
        units, unit_rows = [], {}
        comm = _replicated(prof, opts, params, setup, grad_size)
    _checkpoints(prof, choice, setup)
    local = states.optimizer_state_bytes // max(1, OPTIMIZER_STATES[opts.optimizer] or 1)
    setup.optimizer_temp = local if opts.optimizer in ("adam", "adamw") else 0
    points = tl.replay(setup, prof.memory["timeline"])
    top = max(points, key=lambda p: p.total)
    columns: dict[str, list[Any]] = {"phase": [], "event": [], "path": [], "total": []}
    columns.update({part: [] for part in tl.PARTS})
    for point in points:
        columns["phase"].append(point.phase)
        columns["event"].append(point.event)
        columns["path"].append(point.path)
        columns["total"].append(point.total)
        for part in tl.PARTS:
            columns[part].append(point.parts[part])
    # time
    time, model_flops = _time(prof, opts, choice, setup, comm)
    step = sum(time[k] for k in ("compute", "recompute", "exposed_comm", "optimizer"))
    peak_flops = opts.target.peak(str(opts.compute_dtype).removeprefix("torch."))
    rows = _module_rows(prof, choice, unit_rows, comm)
    notes = [LOWER_BOUND, OUT_OF_SCOPE]
    if choice.paths:
        notes.append(
            "recompute as torch's non-reentrant checkpoint with early stop off; with early "
            "stop (torch's default) the real recompute can end sooner: an upper bound"
        )
    if opts.sharding in ("zero1", "zero2"):
        notes.append(f"{opts.sharding} is a formula only: no run here checks it")
    if frozen:
        notes.append("frozen parameters are counted replicated, in the analysed dtype")
    if asked == "auto" and not choice.fits:
        notes.append("checkpoint='auto': even every block checkpointed does not fit")
    return Plan(
        options={
            "target": opts.target.name, "world_size": n, "sharding": opts.sharding,
            "precision": opts.precision, "optimizer": opts.optimizer,
            "grad_accum": opts.grad_accum, "rank": rank,
            "reshard_after_forward": opts.reshard_after_forward,
            "checkpoint": asked if isinstance(asked, str | type(None)) else list(asked),
            "units": list(opts.units) if opts.units is not None else None,
            "fsdp_units": units, "inter_node_bandwidth": opts.inter_node_bandwidth,
            "bucket_cap_mb": opts.bucket_cap_mb,
        },
        device={
            "name": opts.target.name, "label": opts.target.label,
            "memory_bytes": opts.target.memory_bytes,
            "interconnect": opts.target.interconnect,
            "interconnect_kind": opts.target.interconnect_kind,
            "node_size": opts.target.node_size,
        },
        states={"param_bytes": states.param_bytes, "grad_bytes": states.grad_bytes,
                "optimizer_state_bytes": states.optimizer_state_bytes,
                "master_weight_bytes": states.master_weight_bytes},
        peak_bytes=top.total,
        memory=dict(top.parts),
        peak_phase={"phase": top.phase, "event": top.event, "path": top.path},
        budget=opts.budget,
        reserve_bytes=opts.reserve_bytes,
        checkpoint=list(choice.paths),
        kept_activation_bytes=choice.kept_activation_bytes,
        recompute_flops=choice.recompute_flops * opts.grad_accum,
        timeline=columns,
        time=time,
        step_time=step,
        model_flops=model_flops,
        mfu=model_flops / (step * peak_flops) if step > 0 else None,
        tokens=tokens,
        tokens_per_s=tokens * opts.grad_accum / step if tokens and step > 0 else None,
        modules=rows,
        comm=comm,
        notes=notes,
        analysis=prof,
    )  # fmt: skip


def _fsdp(
    prof: Profile, opts: Options, params: Sequence[Param], setup: tl.Setup, grad_size: int
) -> tuple[list[str], dict[str, dict[str, Any]], dict[str, Any]]:
    """FSDP2's units (paths, table rows) and collectives, set up for the replay."""
    n, low = opts.world_size, opts.compute_dtype.itemsize
    units = fsdp_units(prof, opts)
    owned: dict[str, list[tuple[int, ...]]] = {u: [] for u in units}
    for p in params:
        owned[_owner(p.module, units)].append(p.shape)
    setup.units = [tl.Unit(u, sum(fsdp_shard(s, n, 0)[1] for s in owned[u])) for u in units]
    setup.param_size, setup.reduce_size = low, grad_size
    setup.cast_gather = opts.mixed
    setup.reshard_after_forward = opts.reshard_after_forward
    setup.final_grads = sum(u.padded for u in setup.units) * grad_size
    comm = fsdp_collectives(
        owned, world_size=n, param_bytes=low, reduce_bytes=grad_size,
        reshard_after_forward=opts.reshard_after_forward,
    )  # fmt: skip
    rows = {
        u.path: {"unit": True, "shard_elements": u.padded, "unsharded_bytes": n * u.padded * low}
        for u in setup.units
    }
    return units, rows, dict(comm)


def _replicated(
    prof: Profile, opts: Options, params: Sequence[Param], setup: tl.Setup, grad_size: int
) -> dict[str, Any]:
    """DDP, ZeRO or one GPU: buckets, gradients and autocast's copies for the replay; the
    collectives."""
    n, low = opts.world_size, opts.compute_dtype.itemsize
    per_param = [(p.shape, grad_size) for p in params]
    elements = sum(prod(p.shape) for p in params)
    comm: dict[str, Any] = {}
    if opts.sharding == "ddp":
        setup.rest["comm_buffer_bytes"] = sum(ddp_buckets(per_param, opts.bucket_cap_mb))
    if opts.sharding != "none" and n > 1:
        reduce = ddp_collectives(per_param, world_size=n, bucket_cap_mb=opts.bucket_cap_mb)
        comm = {"": {"backward": reduce}}
    if opts.sharding == "ddp" and opts.mixed:  # autocast: float32 grads, 16-bit copies
        setup.grad_scale = 4 / low
        setup.weight_copies, setup.saved_copies = _weight_copies(prof, params, low)
        for p in params:
            setup.cast_grads[p.module] = max(setup.cast_grads.get(p.module, 0), p.nbytes)
    if opts.sharding == "zero2":
        setup.grad_partition = -(-elements // n) * grad_size
        setup.final_grads = setup.grad_partition
    else:
        setup.final_grads = elements * grad_size
    return comm


def _checkpoints(prof: Profile, choice: CheckpointChoice, setup: tl.Setup) -> None:
    """What each checkpointed module frees at its exit (storages only its subtree saved,
    not the checkpointed modules' inputs, not saved outside the model either: a loss
    holds those), and its recompute's peak (its forward's)."""
    table = prof.memory["storages"]
    index = {p: i for i, p in enumerate(table["paths"])}
    held = {index[p] for p in choice.paths if p in index}
    drops: dict[str, int] = {}
    for path in choice.paths:
        inside = {index[n.path] for n in prof.node(path).walk() if n.path in index}
        drops[path] = sum(
            int(nbytes)
            for nbytes, savers, inputs, _outputs, param in table["rows"]
            if not param and savers and inside.issuperset(savers) and not held.intersection(inputs)
        )
    setup.drops = drops
    setup.recompute_peak = {p: int(prof.node(p).metrics.get("peak_bytes", 0)) for p in drops}

def _weight_copies(
    prof: Profile, params: Sequence[Param], low: int
) -> tuple[dict[str, int], dict[str, int]]:
    """Autocast's 16-bit copies, per module running a matmul or convolution (own MACs):
    each of its parameters cast once per forward; and of those, the ones its backward
    needs (the parameters the analysis saw saved for backward: storage records)."""
    made: dict[str, int] = {}
    for p in params:
        if prof.node(p.module).self_metrics.get("macs", 0):
            made[p.module] = made.get(p.module, 0) + prod(p.shape) * low
    table = prof.memory["storages"]
    saved: dict[str, int] = {}
    for nbytes, savers, _inputs, _outputs, param in table["rows"]:
        for i in savers[:1] if param else ():
            module = table["paths"][i]
            if module in made:
                saved[module] = saved.get(module, 0) + int(nbytes)
    return made, saved


def _bandwidth(opts: Options) -> float:
    spec = opts.target
    if opts.world_size > spec.node_size or spec.interconnect is None:
        return opts.inter_node_bandwidth
    return spec.interconnect


def _time(
    prof: Profile, opts: Options, choice: CheckpointChoice, setup: tl.Setup, comm: Any
) -> tuple[dict[str, float], int]:
    dtype = str(opts.compute_dtype).removeprefix("torch.")
    roof = roof_of(opts.target, dtype)
    fwd, bwd = roof_times(prof, roof, "forward"), roof_times(prof, roof, "backward")
    root = prof.root
    compute = fwd[id(root)] + bwd[id(root)]
    recompute = sum(fwd[id(prof.node(p))] for p in choice.paths)
    n, bw = opts.world_size, _bandwidth(opts)
    total = exposed = 0.0
    if opts.sharding == "fsdp" and n > 1:
        works = []
        paths = [u.path for u in setup.units]
        for unit in setup.units:
            node = prof.node(unit.path)
            nested = [
                prof.node(p)
                for p in paths
                if p != unit.path and _owner(p, [unit.path]) == unit.path
            ]
            own_f = fwd[id(node)] - sum(fwd[id(m)] for m in nested)
            own_b = bwd[id(node)] - sum(bwd[id(m)] for m in nested)
            own_b += sum(
                fwd[id(prof.node(p))] for p in choice.paths if _owner(p, paths) == unit.path
            )
            works.append(UnitWork(unit.path, own_f, own_b, unit.padded * setup.param_size,
                                  n * unit.padded * setup.reduce_size,
                                  opts.reshard_after_forward and unit.path != ""))  # fmt: skip
        total, exposed = fsdp_exposed(works, n, bw)
    elif opts.sharding in ("ddp", "zero1", "zero2") and n > 1:
        size = 4 if opts.mixed and opts.sharding == "ddp" else opts.compute_dtype.itemsize
        buckets = ddp_buckets([(p.shape, size) for p in trainable(prof)], opts.bucket_cap_mb)
        total, exposed = ddp_exposed(buckets, n, bw, bwd[id(root)])
        if opts.sharding in ("zero1", "zero2"):  # the updated parameters, gathered after the step
            gather = link_time("all_gather", sum(buckets) // n, n, bw)
            total, exposed = total + gather, exposed + gather
    st = setup.rest
    moved = (
        2 * (st["param_bytes"] + st["optimizer_state_bytes"] + st["master_weight_bytes"])
        + setup.final_grads
    )
    accum = opts.grad_accum
    time = {
        "compute": compute * accum,
        "recompute": recompute * accum,
        "exposed_comm": exposed * accum,
        "optimizer": moved / opts.target.bandwidth,
        "comm": total * accum,
    }
    flops = int(root.metrics.get("flops", 0)) + int(root.metrics.get("backward_flops", 0))
    return time, flops * accum


def _module_rows(
    prof: Profile, choice: CheckpointChoice, units: Mapping[str, dict[str, Any]], comm: Any
) -> list[dict[str, Any]]:
    """One row per FSDP unit or checkpointed module, in the model's order."""
    table = prof.memory.get("storages") or {"paths": [], "rows": []}
    index = {p: i for i, p in enumerate(table["paths"])}
    wanted = set(units) | set(choice.paths)
    rows = []
    for node in prof.nodes():
        if node.path not in wanted:
            continue
        checkpointed = node.path in choice.paths
        i = index.get(node.path)
        inputs = sum(r[0] for r in table["rows"] if i is not None and i in r[2] and not r[4])
        phases = comm.get(node.path, {})
        row: dict[str, Any] = {
            "path": node.path,
            "type": node.type,
            "params": int(node.metrics.get("params", 0)),
            "unit": node.path in units,
            "checkpointed": checkpointed,
            "activation_bytes": int(node.metrics.get("activation_bytes", 0)),
            "kept_activation_bytes": inputs
            if checkpointed
            else int(node.metrics.get("activation_bytes", 0)),
            "recompute_bytes": int(node.metrics.get("activation_bytes", 0)) if checkpointed else 0,
            "recompute_flops": int(node.metrics.get("flops", 0)) if checkpointed else 0,
            "shard_elements": units.get(node.path, {}).get("shard_elements", 0),
            "unsharded_bytes": units.get(node.path, {}).get("unsharded_bytes", 0),
            "gather_bytes": sum(ph.get("all_gather", {}).get("bytes", 0) for ph in phases.values()),
            "reduce_bytes": sum(
                ph.get(k, {}).get("bytes", 0)
                for ph in phases.values()
                for k in ("reduce_scatter", "all_reduce")
            ),
        }
        rows.append(row)
    return rows


def plan(
    model_or_profile: nn.Module | Profile,
    *args: Any,
    kwargs: dict[str, Any] | None = None,
    input_shape: Any = None,
    target: Any = "h100",
    world_size: int = 8,
    sharding: str = "fsdp",
    checkpoint: str | Sequence[str] | None = None,
    budget: int | None = None,
    optimizer: str = "adamw",
    precision: str = "bf16-mixed",
    grad_accum: int = 1,
    input_dtype: Any = None,
    loss_fn: Any = None,
    **options: Any,
) -> Plan:
    """Plan one GPU of a training run (``docs/plan.md``). ``args``/``kwargs``/
    ``input_shape`` are one GPU's micro-batch, as in ``ls.profile``; one analysis on
    ``meta`` steered to ``target`` (a given profile is reused), then arithmetic.

    ``sharding``: "none", "ddp", "fsdp" (FSDP2), "zero1", "zero2"; ``checkpoint``: None,
    "blocks", "auto" or module paths; ``precision``: "fp32", "bf16", "bf16-mixed",
    "fp16-mixed"; ``optimizer``: "adamw", "adam", "sgd", "sgd_momentum"; ``budget``:
    bytes per GPU (default: the target's memory). Options: ``units`` (FSDP2 unit paths;
    default the repeated blocks), ``reshard_after_forward`` (True), ``rank`` (0: the
    largest shards), ``reserve_bytes`` (``RESERVE_BYTES``), ``inter_node_bandwidth``
    (bytes/s per GPU, ``INTER_NODE_BANDWIDTH``), ``bucket_cap_mb`` (DDP's, 25)."""
    opts = check_options(
        target, world_size, sharding, precision, optimizer, grad_accum, budget, options
    )
    if checkpoint is not None and not isinstance(checkpoint, str):
        checkpoint = list(checkpoint)
    profile_options: dict[str, Any] = {}
    if input_dtype is not None:
        profile_options["input_dtype"] = input_dtype
    if loss_fn is not None:
        profile_options["loss_fn"] = loss_fn
    prof = analyse(model_or_profile, args, kwargs, input_shape, opts, profile_options)
    result = build(prof, opts, checkpoint)
    if isinstance(model_or_profile, nn.Module):  # to analyse other micro-batches
        result.source = Source(model_or_profile, args, kwargs, input_shape, profile_options)
    return result


__all__ = ["INTER_NODE_BANDWIDTH", "RESERVE_BYTES", "Source", "plan"]
