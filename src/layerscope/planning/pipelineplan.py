"""A pipeline's plan (``mesh={"pp": S}``): each stage's one-microbatch plan
(``planning.build``), composed over the schedule (``planning.pipeline``), the step time
with the bubble, and a row per stage."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from math import prod
from typing import Any

from layerscope.planning import timeline as tl
from layerscope.planning.build import _build, _published, _step, build
from layerscope.planning.checkpointing import resolve
from layerscope.planning.facts import check_paths, input_bytes
from layerscope.planning.options import Options
from layerscope.planning.result import Plan
from layerscope.profile import Profile

#: A stage's one-microbatch plan, what composing it read, and its composed timeline.
Made = tuple[Plan, dict[str, Any], list[tuple[str, str, str, dict[str, int]]]]


def build_plan(analyses: Sequence[Profile], opts: Options) -> Plan:
    """The plan from ``facts.analyse_stages``' analyses: one (``build.build``), or a
    pipeline's, one per stage."""
    if len(analyses) == 1:
        return build(analyses[0], opts)
    return pipeline_plan(list(analyses), opts)


def pipeline_plan(stages: list[Profile], opts: Options) -> Plan:
    """A pipeline's plan (``planning.pipeline``): each stage's one-microbatch plan,
    composed over the schedule; the plan of the stage asked for (``opts.stage``) or of
    the one whose peak is highest, with a row per stage."""
    from layerscope.planning import pipeline as pl

    size, micro = len(stages), opts.microbatches or opts.pp
    fsdp = opts.sharding == "fsdp"
    # one microbatch of a stage: no accumulation, and under FSDP2 torch's pipeline rule
    one = opts.replace(grad_accum=1, **({"reshard_after_forward": False} if fsdp else {}))
    asked = opts.checkpoint
    if asked is not None and not isinstance(asked, str):
        everywhere = set().union(*(_paths(p) for p in stages))
        check_paths(stages[0], "checkpoint", [c for c in asked if c not in everywhere])
    made = _stage_plans(stages, opts, one, size, micro)
    tokens = input_bytes(stages[0])[2]

    peaks = [max(sum(p[3].values()) for p in c) for _, _, c in made]
    chosen = opts.stage if opts.stage is not None else peaks.index(max(peaks))
    mb, internals, composed = made[chosen]
    slowest = max(_per_micro(m, i) for m, i, _ in made)
    slowest_bound = max(_per_micro(m, i, True) for m, i, _ in made)
    accum = opts.grad_accum

    def step_parts(t: Mapping[str, float], worst: float, bound: bool) -> dict[str, float]:
        """This stage's step by part: ``M`` microbatches of its own work, the bubble
        (the pipeline's ``(M + S - 1) x`` the slowest stage less that), the data-parallel
        collectives not hidden and the optimizer once."""
        own = _per_micro(mb, internals, bound)
        sends = micro * (internals["tp"] + internals["p2p"])
        dp_exposed = max(0.0, t["exposed_comm"] - internals["tp"])
        dp_total = max(0.0, t["comm"] - internals["tp"])
        return {
            "compute": micro * t["compute"] * accum,
            "recompute": micro * t["recompute"] * accum,
            "exposed_comm": (sends + dp_exposed) * accum,
            "bubble": ((micro + size - 1) * worst - micro * own) * accum,
            "optimizer": t["optimizer"],
            "comm": (sends + dp_total) * accum,
        }

    time = step_parts(mb.time, slowest, False)
    bound = step_parts(mb.time_bound, slowest_bound, True) if mb.time_bound else None
    step_s, step_b = _step(time), (_step(bound) if bound else None)
    peak_flops = opts.target.peak(str(opts.compute_dtype).removeprefix("torch."))
    # the published convention over the whole model, per GPU: every stage's share
    shares = [
        _published(i["params"], i["kept"], tokens, i["timed"].predicted.attention_flops, 1, opts.tp)
        for _, i, _ in made
    ]
    published = sum(s or 0 for s in shares) * micro * accum // size if tokens else None
    model_flops = mb.model_flops * micro * accum
    tokens_per_gpu = tokens * micro * accum / (opts.tp * size) if tokens else None
    top = max(composed, key=lambda p: sum(p[3].values()))
    columns: dict[str, list[Any]] = {
        "phase": [p[0] for p in composed], "event": [p[1] for p in composed],
        "path": [p[2] for p in composed], "total": [sum(p[3].values()) for p in composed],
    }  # fmt: skip
    for part in tl.PARTS:
        columns[part] = [p[3][part] for p in composed]
    rows = _rows(made, stages, opts, size, micro, peaks)
    why = "asked for" if opts.stage is not None else "the highest peak"
    notes = [
        *mb.notes,
        *pl.notes(opts.schedule, size, micro, chosen, why, fsdp, pl.bubble(size, micro)),
    ]
    comm = dict(mb.comm)
    for phase, kinds in _p2p_comm(rows[chosen], made[chosen][1]["step"], size, micro).items():
        comm.setdefault("", {}).setdefault(phase, {}).update(kinds)
    return replace(
        mb,
        options=opts.section(mb.options["fsdp_units"], mb.options.get("tp_plan")),
        peak_bytes=sum(top[3].values()),
        memory=dict(top[3]),
        peak_phase={"phase": top[0], "event": top[1], "path": top[2]},
        budget=opts.budget,
        recompute_flops=mb.recompute_flops * micro * accum,
        timeline=columns,
        time=time,
        step_time=step_s,
        model_flops=model_flops,
        mfu=published / (step_s * peak_flops) if published and step_s > 0 else None,
        tokens=tokens,
        tokens_per_s=tokens_per_gpu / step_s if tokens_per_gpu and step_s > 0 else None,
        comm=comm,
        notes=notes,
        step_time_bound=step_b,
        tokens_per_s_bound=tokens_per_gpu / step_b if tokens_per_gpu and step_b else None,
        time_bound=bound,
        mfu_counted=model_flops / (step_s * peak_flops) if step_s > 0 else None,
        mfu_flops=published,
        kernels=(mb.kernels or 0) * micro * accum,
        pipeline={
            "schedule": opts.schedule, "microbatches": micro, "stages": size,
            "stage": chosen, "chosen": why, "bubble": pl.bubble(size, micro), "rows": rows,
        },
    )  # fmt: skip


def _paths(prof: Profile) -> set[str]:
    return {n.path for n in prof.nodes()}


def _p2p_comm(row: Mapping[str, Any], step: Any, size: int, micro: int) -> dict[str, Any]:
    """A stage's sends and receives per step in ``profile.comm``'s form: forward, the
    output sent on and the input received; backward, their gradients the other way."""
    stage = row["stage"]
    out: dict[str, dict[str, dict[str, int]]] = {}

    def add(phase: str, kind: str, nbytes: int) -> None:
        if nbytes:
            out.setdefault(phase, {})[kind] = {"calls": micro, "bytes": micro * nbytes}

    if stage < size - 1:
        add("forward", "send", step.output_bytes)
        add("backward", "recv", step.output_bytes)
    if stage > 0:
        add("forward", "recv", step.input_bytes)
        add("backward", "send", step.input_bytes)
    return out


def _stage_plans(
    stages: list[Profile], opts: Options, one: Options, size: int, micro: int
) -> list[Made]:
    """Each stage's one-microbatch plan, what composing it reads, and its composed
    timeline (``planning.pipeline``)."""
    from layerscope.planning import pipeline as pl

    asked = opts.checkpoint
    fsdp = opts.sharding == "fsdp"
    stride = opts.world_size // size  # the pipeline axis is the outermost
    link_args = (opts.network, size, stride)
    grad_size = opts.strategy.grad_size(opts)
    made: list[Made] = []
    for s, prof in enumerate(stages):
        mine = asked
        if asked is not None and not isinstance(asked, str):
            mine = tuple(c for c in asked if c in _paths(prof))
        internals: dict[str, Any] = {}
        choice = resolve(prof, mine)
        mb = _build(prof, one.replace(checkpoint=mine), choice, mine, internals)
        points = list(zip(mb.timeline["phase"], mb.timeline["event"], mb.timeline["path"],
                          ({k: mb.timeline[k][i] for k in tl.PARTS}
                           for i in range(len(mb.timeline["phase"]))), strict=True))  # fmt: skip
        step = pl.StageStep(
            points=points,
            input_bytes=int(prof.model["stage"]["input_bytes"]) if s else input_bytes(prof)[0],
            # what the next stage receives (under sequence parallelism a shard of it)
            output_bytes=int(stages[s + 1].model["stage"]["input_bytes"])
            if s + 1 < size else pl.spec_bytes(prof.root.outputs),
            unsharded=max(p[3]["unsharded_param_bytes"] for p in points) if fsdp else 0,
            unsharded_grads=sum(prod(p.shape) for p in internals["params"]) * grad_size
            if fsdp else 0,
        )  # fmt: skip
        composed = pl.compose(step, opts.schedule, size, s, micro, opts.return_outputs)
        p2p = (step.input_bytes if s else 0) + (step.output_bytes if s < size - 1 else 0)
        internals.update(step=step, p2p=pl.p2p_seconds(p2p, *link_args) if p2p else 0.0)
        made.append((mb, internals, composed))
    return made


def _rows(
    made: list[Made],
    stages: list[Profile],
    opts: Options,
    size: int,
    micro: int,
    peaks: list[int],
) -> list[dict[str, Any]]:
    """A row per stage (``Plan.pipeline["rows"]``)."""
    from layerscope.planning import pipeline as pl

    rows = []
    for s, ((m, i, _), prof) in enumerate(zip(made, stages, strict=True)):
        pieces = prof.model["stage"]["pieces"]
        order = pl.actions(opts.schedule, size, s, micro)
        st = i["step"]
        rows.append({
            "stage": s, "first": pieces[0], "last": pieces[-1], "pieces": len(pieces),
            "params": sum(p.elements for p in i["params"]) + sum(p.elements for p in i["kept"]),
            "state_bytes": sum(m.states.values()),
            "held_bytes": pl.held_bytes(st.points), "in_flight": pl.in_flight(order),
            "peak_bytes": peaks[s],
            "fits": None if opts.budget is None else opts.budget - opts.reserve_bytes >= peaks[s],
            "time": _per_micro(m, i),
            "sent_bytes": micro * ((st.output_bytes if s < size - 1 else 0)
                                   + (st.input_bytes if s else 0)),
            "received_bytes": micro * ((st.input_bytes if s else 0)
                                       + (st.output_bytes if s < size - 1 else 0)),
        })  # fmt: skip
    return rows


def _per_micro(mb: Plan, internals: Mapping[str, Any], bound: bool = False) -> float:
    """A stage's seconds per microbatch: compute, recompute, tensor-parallel collectives
    and its sends."""
    t = mb.time_bound if bound and mb.time_bound else mb.time
    return float(t["compute"] + t["recompute"] + internals["tp"] + internals["p2p"])


__all__ = ["build_plan", "pipeline_plan"]
