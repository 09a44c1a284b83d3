"""A pipeline's plan (``mesh={"pp": S}``): each stage's one-microbatch plan
(``planning.build``), composed per rank over the schedule (``planning.pipeline``), the
step time with the bubble, and a row per rank."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from math import prod
from typing import Any

from layerscope.analysis.merge import add_comm
from layerscope.analysis.rates import rates_of
from layerscope.planning import pipeline as pl
from layerscope.planning import timeline as tl
from layerscope.planning.build import _build, _columns, _step, build, price_kernels
from layerscope.planning.checkpointing import CheckpointChoice, choose_checkpoints, resolve
from layerscope.planning.facts import analyse_stages, check_paths, input_bytes
from layerscope.planning.mfu import published_flops
from layerscope.planning.options import Options
from layerscope.planning.result import Plan
from layerscope.profile import Profile

Point = tuple[str, str, str, dict[str, int]]


def balanced_split(profs: list[Profile], opts: Options) -> tuple[str, ...] | None:
    """The pieces the stages after the first start at so that the slowest stage is as
    fast as it can be (each piece's predicted forward and backward, from the stages as
    analysed), where that differs from the cut analysed; None where it does not."""
    rates = rates_of(opts.target)
    seconds: dict[str, float] = {}
    for prof in profs:  # the kernels priced as the plan prices them
        predicted = price_kernels(prof, opts, rates)
        for path in prof.model["stage"]["pieces"]:
            node = prof.node(path)
            seconds[path] = predicted.forward[id(node)] + predicted.backward[id(node)]
    pieces = [p for prof in profs for p in prof.model["stage"]["pieces"]]
    starts = pl.balanced([seconds[p] for p in pieces], len(profs))
    split = tuple(pieces[k] for k in starts)
    analysed = tuple(prof.model["stage"]["pieces"][0] for prof in profs[1:])
    return None if split == analysed else split


def analysed(
    model: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
    input_shape: Any,
    opts: Options,
    profile_options: Mapping[str, Any],
) -> list[Profile]:
    """``facts.analyse_stages``' analyses; a pipeline whose cut is not given is analysed
    again cut where its slowest stage's predicted time is least (``balanced_split``),
    when that is not the even cut of the blocks."""
    profs = analyse_stages(model, args, kwargs, input_shape, opts, profile_options)
    if opts.pp == 1 or opts.pp_split is not None:
        return profs
    split = balanced_split(profs, opts)
    if split is None:
        return profs
    again = opts.replace(pp_split=list(split))
    profs = analyse_stages(model, args, kwargs, input_shape, again, profile_options)
    for prof in profs:
        prof.model["stage"]["balanced"] = True
    return profs


def build_plan(analyses: Sequence[Profile], opts: Options) -> Plan:
    """The plan from ``facts.analyse_stages``' analyses: one (``build.build``), or a
    pipeline's, one per stage."""
    if len(analyses) == 1:
        return build(analyses[0], opts)
    return pipeline_plan(list(analyses), opts)


@dataclass
class _Stage:
    """One stage (model chunk): its one-microbatch plan, what composing reads of it."""

    plan: Plan
    prof: Profile
    step: pl.StageStep
    #: seconds per microbatch: tensor parallelism's collectives, the sends
    tp: float
    p2p: float
    #: the stage's parameters (the whole tensors'), and its FLOPs per microbatch in the
    #: published convention (``mfu.published_flops``)
    params: int
    published: int
    #: the shares of a microbatch's seconds its forward takes, and of its backward's the
    #: weights' gradients take (zero bubble's weight half; ``_shares``)
    forward_share: float = 0.5
    weight_share: float = 0.5

    def per_micro(self, bound: bool = False) -> float:
        """Seconds per microbatch: compute, recompute, tensor-parallel collectives and
        the sends."""
        t = self.plan.time_bound if bound and self.plan.time_bound else self.plan.time
        return float(t["compute"] + t["recompute"] + self.tp + self.p2p)

    def seconds(self, bound: bool = False) -> dict[str, float]:
        """A microbatch's forward (``F``), backward (``B``) and the backward's input and
        weight halves (``I``, ``W``), seconds."""
        whole = self.per_micro(bound)
        fwd = whole * self.forward_share
        weight = (whole - fwd) * self.weight_share
        return {"F": fwd, "B": whole - fwd, "I": whole - fwd - weight, "W": weight}


@dataclass
class _Rank:
    """A pipeline rank: its stages (one, or ``virtual_stages`` interleaved) and its
    composed timeline."""

    index: int
    stages: list[_Stage]
    points: list[Point]

    @property
    def peak(self) -> int:
        return max(sum(p[3].values()) for p in self.points)

    def per_micro(self, bound: bool = False) -> float:
        return sum(s.per_micro(bound) for s in self.stages)


def pipeline_plan(profs: list[Profile], opts: Options) -> Plan:
    """A pipeline's plan (``planning.pipeline``): each stage's one-microbatch plan,
    composed per rank over the schedule; the plan of the rank asked for (``opts.stage``)
    or of the one whose peak is highest, with a row per rank."""
    size, virtual, micro = opts.pp, opts.virtual, opts.microbatches or opts.pp
    asked = opts.checkpoint
    if isinstance(asked, tuple):
        everywhere = set().union(*(_paths(p) for p in profs))
        check_paths(profs[0], "checkpoint", [c for c in asked if c not in everywhere])
    stages, ranks = _auto(profs, opts) if asked == "auto" else _ranks(profs, opts)
    peaks = [r.peak for r in ranks]
    chosen = opts.stage if opts.stage is not None else peaks.index(max(peaks))
    rank = ranks[chosen]
    accum = opts.grad_accum

    # the schedule run once on the predicted times and once on the bounds
    span, span_bound = (_span(ranks, stages, opts, b) for b in (False, True))
    time, bound = _step_parts(rank, opts, False, span), _step_parts(rank, opts, True, span_bound)
    assert time is not None
    step_s, step_b = _step(time), (_step(bound) if bound else None)
    peak_flops = opts.target.peak(str(opts.compute_dtype).removeprefix("torch."))
    tokens = input_bytes(profs[0])[2]
    # the published convention over the whole model, per GPU: every stage's share
    published = sum(s.published for s in stages) * micro * accum // size if tokens else None
    model_flops = sum(s.plan.model_flops for s in rank.stages) * micro * accum
    tokens_per_gpu = tokens * micro * accum / (opts.tp * size) if tokens else None
    points = [tl.Point(*p) for p in rank.points]
    top = max(points, key=lambda p: p.total)
    why = "asked for" if opts.stage is not None else "the highest peak"
    first = rank.stages[0].plan
    split = [prof.model["stage"]["pieces"][0] for prof in profs[1:]]
    idle = max(0.0, 1 - max(micro * r.per_micro() for r in ranks) / span) if span > 0 else 0.0
    notes = [
        *first.notes,
        *pl.notes(opts.schedule, size, virtual, micro, chosen, why, opts.sharding == "fsdp",
                  idle),
    ]  # fmt: skip
    if profs[0].model["stage"].get("balanced"):
        notes.append(
            f"stages cut where the slowest one's predicted time is least, not evenly by "
            f"blocks: pp_split={split} (give pp_split to cut elsewhere)"
        )
    # the rank's units, every stage's it holds (in stage order, each once)
    units = [u for s in rank.stages for u in s.plan.options["fsdp_units"]]
    options = opts.section(list(dict.fromkeys(units)), first.options.get("tp_plan"))
    options["pp_split"] = split  # the cut planned
    # the stages' collectives summed: two stages on a rank share paths (the root's)
    comm: dict[str, Any] = {}
    for s in rank.stages:
        add_comm(comm, s.plan.comm)
    add_comm(comm, {"": _p2p_comm(rank, opts, micro)})
    states = {k: sum(s.plan.states[k] for s in rank.stages) for k in first.states}
    return replace(
        first,
        options=options,
        states=states,
        peak_bytes=top.total,
        memory=dict(top.parts),
        peak_phase={"phase": top.phase, "event": top.event, "path": top.path},
        budget=opts.budget,
        checkpoint=[c for s in rank.stages for c in s.plan.checkpoint],
        kept_activation_bytes=sum(s.plan.kept_activation_bytes for s in rank.stages),
        recompute_flops=sum(s.plan.recompute_flops for s in rank.stages) * micro * accum,
        timeline=_columns(points),
        time=time,
        step_time=step_s,
        model_flops=model_flops,
        mfu=published / (step_s * peak_flops) if published and step_s > 0 else None,
        tokens=tokens,
        tokens_per_s=tokens_per_gpu / step_s if tokens_per_gpu and step_s > 0 else None,
        modules=[m for s in rank.stages for m in s.plan.modules],
        comm=comm,
        notes=notes,
        step_time_bound=step_b,
        tokens_per_s_bound=tokens_per_gpu / step_b if tokens_per_gpu and step_b else None,
        time_bound=bound,
        mfu_counted=model_flops / (step_s * peak_flops) if step_s > 0 else None,
        mfu_flops=published,
        kernels=sum(s.plan.kernels or 0 for s in rank.stages) * micro * accum,
        pipeline={
            "schedule": opts.schedule, "microbatches": micro, "stages": size,
            "virtual_stages": virtual, "stage": chosen, "chosen": why,
            "bubble": idle,
            "rows": [_row(r, opts, micro) for r in ranks],
        },
        analysis=rank.stages[0].prof,
    )  # fmt: skip


def _ranks(
    profs: list[Profile], opts: Options, choices: list[CheckpointChoice] | None = None
) -> tuple[list[_Stage], list[_Rank]]:
    """Each stage's plan, and each rank's stages and composed timeline."""
    stages = _stage_plans(profs, opts, choices)
    size, micro = opts.pp, opts.microbatches or opts.pp
    ranks = [
        _Rank(r, mine, pl.compose([s.step for s in mine], opts.schedule, size, r, micro,
                                  opts.return_outputs, opts.grad_accum > 1))
        for r in range(size)
        for mine in [[stages[g] for g in _held(opts, r)]]
    ]  # fmt: skip
    return stages, ranks


def _auto(profs: list[Profile], opts: Options) -> tuple[list[_Stage], list[_Rank]]:
    """``checkpoint="auto"`` over a pipeline: no checkpointing first; then, while a rank's
    peak does not fit, each of its stages' kept activations lowered by the rank's
    overshoot over the microbatches it holds at once (each holds a stage's kept bytes),
    chosen by ``choose_checkpoints``' greedy rule, until every rank fits or checkpointing
    more frees nothing."""
    choices = [resolve(prof, None) for prof in profs]
    stages, ranks = _ranks(profs, opts, choices)
    if opts.budget is None:
        return stages, ranks
    room = opts.budget - opts.reserve_bytes
    micro = opts.microbatches or opts.pp
    for _ in range(16):
        changed = False
        for rank in ranks:
            over = rank.peak - room
            if over <= 0:
                continue
            order = pl.actions(opts.schedule, opts.pp, rank.index, micro, opts.virtual)
            share = -(-over // max(1, pl.in_flight(order)))
            for v, stage in enumerate(rank.stages):
                index = _held(opts, rank.index)[v]
                target = max(0, stage.plan.kept_activation_bytes - share)
                choice = choose_checkpoints(stage.prof, target)
                if choice.paths != choices[index].paths:
                    choices[index], changed = choice, True
        if not changed:
            break
        stages, ranks = _ranks(profs, opts, choices)
    return stages, ranks


def _step_parts(rank: _Rank, opts: Options, bound: bool, span: float) -> dict[str, float] | None:
    """A rank's step by part: ``M`` microbatches of its stages' work, the bubble (the
    schedule's ``span``, ``_span``, less this rank's own work), the data-parallel
    collectives not hidden and the optimizer, once; None for the bound where a stage has
    none."""
    micro, accum = opts.microbatches or opts.pp, opts.grad_accum
    parts = [s.plan.time_bound if bound else s.plan.time for s in rank.stages]
    if any(t is None for t in parts):
        return None
    times = [t for t in parts if t is not None]
    sends = micro * sum(s.tp + s.p2p for s in rank.stages)
    pairs = list(zip(times, rank.stages, strict=True))
    contention = sum(t.get("contention", 0.0) for t in times) * accum
    return {
        "compute": micro * sum(t["compute"] for t in times) * accum,
        "recompute": micro * sum(t["recompute"] for t in times) * accum,
        "exposed_comm": (sends + sum(max(0.0, t["exposed_comm"] - s.tp) for t, s in pairs)) * accum,
        # the span less the work in it: never below 0 (a float difference can be -1e-19)
        "bubble": max(0.0, span - micro * rank.per_micro(bound)) * accum,
        "optimizer": sum(t["optimizer"] for t in times),
        "comm": (sends + sum(max(0.0, t["comm"] - s.tp) for t, s in pairs)) * accum,
        **({"contention": contention} if contention else {}),
    }


def _span(ranks: list[_Rank], stages: list[_Stage], opts: Options, bound: bool) -> float:
    """Seconds from the pipeline's first forward to its last rank's last backward, as
    ``pipeline.simulate`` runs the schedule on the stages' predicted times."""
    micro = opts.microbatches or opts.pp
    seconds = {
        (g, kind): t for g, stage in enumerate(stages) for kind, t in stage.seconds(bound).items()
    }
    orders = [pl.actions(opts.schedule, opts.pp, r.index, micro, opts.virtual) for r in ranks]
    return max(pl.simulate(opts.pp, opts.virtual, orders, seconds, opts.schedule))


def _stage_plans(
    profs: list[Profile], opts: Options, choices: list[CheckpointChoice] | None = None
) -> list[_Stage]:
    """Each stage's one-microbatch plan (no accumulation; under FSDP2 torch's pipeline
    rule, ``reshard_after_forward=False``; ``choices``: each stage's checkpointed
    modules, ``checkpoint="auto"``'s) and what composing reads of it."""
    fsdp = opts.sharding == "fsdp"
    one = opts.replace(grad_accum=1, **({"reshard_after_forward": False} if fsdp else {}))
    asked, count = opts.checkpoint, len(profs)
    link = (opts.network, opts.pp, opts.world_size // opts.pp)  # pp: the outermost axis
    grad_size = opts.strategy.grad_size(opts)
    tokens = input_bytes(profs[0])[2]
    out: list[_Stage] = []
    for s, prof in enumerate(profs):
        mine = asked
        if isinstance(asked, tuple):
            mine = tuple(c for c in asked if c in _paths(prof))
        internals: dict[str, Any] = {}
        choice = choices[s] if choices is not None else resolve(prof, mine)
        plan = _build(prof, one.replace(checkpoint=mine), choice, mine, internals)
        line = plan.timeline
        points = [
            (line["phase"][i], line["event"][i], line["path"][i],
             {k: line[k][i] for k in tl.PARTS})
            for i in range(len(line["phase"]))
        ]  # fmt: skip
        params, kept = internals["params"], internals["kept"]
        step = pl.StageStep(
            points=points,
            input_bytes=int(prof.model["stage"]["input_bytes"]) if s else input_bytes(prof)[0],
            # what the next stage receives (under sequence parallelism a shard of it)
            output_bytes=int(profs[s + 1].model["stage"]["input_bytes"])
            if s + 1 < count else pl.spec_bytes(prof.root.outputs),
            unsharded=max(p[3]["unsharded_param_bytes"] for p in points) if fsdp else 0,
            unsharded_grads=sum(prod(p.shape) for p in params) * grad_size if fsdp else 0,
        )  # fmt: skip
        step.wait_bytes, step.weight_inputs = _waits(prof, opts.schedule in pl.ZERO_BUBBLE)
        # what crosses to another rank (ZB-V's stages S - 1 and S share one)
        sent = (step.input_bytes if s and not _local(opts, s - 1, s) else 0) + (
            step.output_bytes if s + 1 < count and not _local(opts, s, s + 1) else 0
        )
        predicted = internals["timed"].predicted
        out.append(_Stage(
            plan, prof, step, internals["tp"], pl.p2p_seconds(sent, *link),
            sum(p.elements for p in params) + sum(p.elements for p in kept),
            published_flops(params, kept, tokens, predicted.attention_flops, 1, opts.tp,
                            prof.model.get("routed")) or 0,
            *_shares(prof, predicted, first=s == 0),
        ))  # fmt: skip
    return out


def _holders(prof: Profile) -> list[Any]:
    """The modules that hold trainable parameters of their own."""
    return [n for n in prof.nodes() if n.self_metrics.get("trainable_params", 0)]


def _shares(prof: Profile, predicted: Any, first: bool) -> tuple[float, float]:
    """(the forward's share of a microbatch's predicted seconds, the weights' gradients'
    share of its backward): each module that holds parameters computes their gradients
    at the cost of its forward (a matmul's weight gradient is the forward's size); all
    of the first stage's backward (torch runs it whole as the weight half)."""
    root = prof.root
    fwd, bwd = predicted.forward[id(root)], predicted.backward[id(root)]
    if fwd + bwd <= 0:
        return 0.5, 0.5
    forward = predicted.forward  # a node's own: less its children's
    weight = sum(forward[id(n)] - sum(forward[id(c)] for c in n.children) for n in _holders(prof))
    return fwd / (fwd + bwd), 1.0 if first or bwd <= 0 else min(1.0, weight / bwd)


def _waits(prof: Profile, zero_bubble: bool) -> tuple[int, int]:
    """Zero bubble: (the gradients of the outputs of the modules that hold parameters,
    their inputs), bytes per microbatch, as each call of those modules made them."""
    if not zero_bubble:
        return 0, 0
    holders = _holders(prof)
    wait = sum(pl.spec_bytes(n.grad_outputs) * max(1, n.calls) for n in holders)
    return wait, sum(pl.spec_bytes(n.inputs) * max(1, n.calls) for n in holders)


def _row(rank: _Rank, opts: Options, micro: int) -> dict[str, Any]:
    """A rank's row (``Plan.pipeline["rows"]``): its stages' pieces, parameters, model
    states, held bytes per microbatch, the most microbatches in flight, its peak, its
    time per microbatch and its sends."""
    chunks = [s.prof.model["stage"]["pieces"] for s in rank.stages]
    pieces = [p for c in chunks for p in c]
    words = ", ".join(c[0] if len(c) == 1 else f"{c[0]} .. {c[-1]}" for c in chunks)
    order = pl.actions(opts.schedule, opts.pp, rank.index, micro, opts.virtual)
    p2p = _p2p_comm(rank, opts, micro)
    sent, received = (
        sum(kinds.get(kind, {}).get("bytes", 0) for kinds in p2p.values())
        for kind in ("send", "recv")
    )
    fits = None if opts.budget is None else opts.budget - opts.reserve_bytes >= rank.peak
    return {
        "stage": rank.index, "first": pieces[0], "last": pieces[-1], "pieces": len(pieces),
        "modules": words,
        "params": sum(s.params for s in rank.stages),
        "state_bytes": sum(sum(s.plan.states.values()) for s in rank.stages),
        "held_bytes": sum(pl.held_bytes(s.step.points) for s in rank.stages),
        "in_flight": pl.in_flight(order), "peak_bytes": rank.peak, "fits": fits,
        "time": rank.per_micro(), "sent_bytes": sent, "received_bytes": received,
    }  # fmt: skip


def _held(opts: Options, rank: int) -> list[int]:
    """The stages a pipeline rank runs, in its chunks' order."""
    return [pl.stage_of(opts.schedule, opts.pp, rank, v) for v in range(opts.virtual)]


def _local(opts: Options, stage: int, other: int) -> bool:
    """Whether two stages run on one rank (no send between them)."""
    return pl.rank_of(opts.schedule, opts.pp, stage) == pl.rank_of(opts.schedule, opts.pp, other)


def _p2p_comm(rank: _Rank, opts: Options, micro: int) -> dict[str, Any]:
    """A rank's sends and receives per step in ``profile.comm``'s form: forward, the
    output sent on and the input received; backward, their gradients the other way (none
    between two stages of the rank)."""
    out: dict[str, dict[str, dict[str, int]]] = {}

    def add(phase: str, kind: str, nbytes: int) -> None:
        if nbytes:
            row = out.setdefault(phase, {}).setdefault(kind, {"calls": 0, "bytes": 0})
            row["calls"] += micro
            row["bytes"] += micro * nbytes

    count = opts.pp * opts.virtual
    for index, s in zip(_held(opts, rank.index), rank.stages, strict=True):
        if index < count - 1 and not _local(opts, index, index + 1):
            add("forward", "send", s.step.output_bytes)
            add("backward", "recv", s.step.output_bytes)
        if index > 0 and not _local(opts, index - 1, index):
            add("forward", "recv", s.step.input_bytes)
            add("backward", "send", s.step.input_bytes)
    return out


def _paths(prof: Profile) -> set[str]:
    return {n.path for n in prof.nodes()}


__all__ = ["balanced_split", "build_plan", "pipeline_plan"]
