"""Pipeline parallelism in plans (``mesh={"pp": S}``): the model cut into ``S`` stages,
each analysed on its own, and each stage's step composed from its one-microbatch plan by
the schedule (``docs/plan.md``, "Pipeline parallelism").

**Stages.** The model's pieces in forward order: an ``nn.Sequential``'s children, or a
transformers model's ``_pp_plan`` (``embed_tokens``, the decoder ``layers``, ``norm``,
``lm_head``). The repeated blocks (the longest run of children of one class; the decoder
layers) are split evenly, the extra ones to the middle stages; the pieces before them run
on the first stage, those after on the last. ``pp_split=[paths]`` names the piece each
later stage starts at instead (torchtitan's ``pipeline_parallel_split_points``).

**Each stage analysed.** The analysis's meta copy is shown as the stage only: the other
blocks are taken out of their container (their paths stay the model's), a transformers
stage after the first has no embeddings and takes the previous stage's hidden states as
``inputs_embeds``, and one before the last has its ``norm`` and ``lm_head`` replaced by
identities. A stage's input is the previous stage's output as the analysis recorded it,
a leaf that requires its gradient (a received activation); the stages before the last are
differentiated from their output (as a received gradient drives their backward), the last
by the loss.

**The schedule.** For each microbatch, stage ``s`` runs its forward (``F``) and later its
backward (``B``), in torch.distributed.pipelining's orders: ``gpipe`` every forward, then
every backward; ``1f1b`` ``min(M, S - s)`` forwards, then one backward and one forward
alternately, then the rest of the backwards. The stage's memory over the step is its
one-microbatch timeline repeated in that order, each point raised by what the schedule
holds then:

- the microbatches forwarded and not yet backwarded, each the bytes one forward leaves
  for its backward (``held``: its saved tensors and its output);
- what a finished microbatch keeps to the end of the step: the last stage's output
  (the schedule merges the outputs; not with ``return_outputs=False``), and under
  ``gpipe`` the tensors sent (the output sent on, the input's gradient sent back: their
  sends are waited on at the end); under ``1f1b`` the latest input gradient sent back
  (its send is waited on at the next backward);
- gradients, from the first backward on: a later backward adds into them, so its own new
  gradients are a temporary (held until they are added) above the whole gradients;
- the receive buffers (``M`` of the input's size on every stage but the first, ``M`` of
  the output's gradient on every stage but the last) and the whole batch on the first
  stage, at rest all step;
- under FSDP2, torch's rule for a pipeline: the stage's units are gathered at the first
  forward and not resharded until the last backward, and the gradients are accumulated
  unsharded in the reduce dtype and reduce-scattered in the last backward.

**Time.** A stage's time per microbatch is its plan's compute and recompute, its tensor-
parallel collectives and its point-to-point sends (the output on, the input's gradient
back, over the pipeline axis's link). The pipeline's step is ``(M + S - 1) x`` the
slowest stage's time (the schedules' bubble: ``S - 1`` microbatch slots), plus the
data-parallel collectives not hidden and the optimizer step once.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from math import prod
from typing import Any

import torch
from torch import nn

from layerscope.errors import InvalidInputError
from layerscope.planning.collectives import collective_time, strided
from layerscope.planning.timeline import PARTS

#: ``schedule=``'s values.
SCHEDULES = ("gpipe", "1f1b")


# ---- the stages ------------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """A model's pieces in forward order, as a pipeline cuts them."""

    #: "sequential" (an ``nn.Sequential``'s children) or "transformers" (``_pp_plan``)
    kind: str
    #: module paths: the pieces before the repeated blocks, the blocks, those after
    pre: tuple[str, ...]
    blocks: tuple[str, ...]
    post: tuple[str, ...]
    #: the blocks' container ("" for a Sequential: the model itself)
    container: str
    #: transformers: the keyword a later stage's input is given as (``inputs_embeds``)
    feed: str = ""

    @property
    def pieces(self) -> tuple[str, ...]:
        return (*self.pre, *self.blocks, *self.post)


def layout(model: nn.Module) -> Layout:
    """The pieces of ``model`` (module doc); ``InvalidInputError`` for a model a pipeline
    cannot be cut from here."""
    hf = getattr(model, "_pp_plan", None)
    if isinstance(hf, Mapping) and hf:
        return _transformers_layout(model, hf)
    if isinstance(model, nn.Sequential):
        names = list(model._modules)
        start, length = _longest_run([model._modules[n] for n in names])
        return Layout(
            "sequential",
            tuple(names[:start]),
            tuple(names[start : start + length]),
            tuple(names[start + length :]),
            "",
        )
    raise InvalidInputError(
        f"mesh pp: a pipeline is cut from an nn.Sequential's children or a transformers "
        f"model's _pp_plan (base_model_pp_plan); {type(model).__name__} has neither: "
        "plan it without pp, or wrap its pieces in an nn.Sequential"
    )


def _longest_run(children: Sequence[nn.Module | None]) -> tuple[int, int]:
    """(start, length) of the longest run of consecutive children of one class with as
    many parameters each (the repeated blocks); the whole list when no run is longer
    than one."""

    def key(m: nn.Module | None) -> tuple[type, int]:
        return type(m), sum(p.numel() for p in m.parameters()) if m is not None else 0

    best = (0, 0)
    start = 0
    for i in range(1, len(children) + 1):
        if i == len(children) or key(children[i]) != key(children[start]):
            if i - start > best[1]:
                best = (start, i - start)
            start = i
    return best if best[1] > 1 else (0, len(children))


def _transformers_layout(model: nn.Module, plan: Mapping[str, Any]) -> Layout:
    """The pieces a transformers model's ``_pp_plan`` names, in forward order: the base
    model's entries (embeddings, the layers, the norm), then the head's."""
    prefix = getattr(model, "base_model_prefix", "")
    paths = [p for p in plan if prefix and p.startswith(prefix + ".")]
    paths += [p for p in plan if p not in paths]
    lists = [p for p in paths if isinstance(model.get_submodule(p), nn.ModuleList)]
    if len(lists) != 1:
        raise InvalidInputError(
            f"mesh pp: {type(model).__name__}'s _pp_plan names {len(lists)} module lists; "
            "a pipeline splits one list of decoder layers"
        )
    container = lists[0]
    at = paths.index(container)
    layers = model.get_submodule(container)
    blocks = tuple(f"{container}.{name}" for name in layers._modules)
    feed = plan[paths[at - 1]][1][0] if at else ""
    return Layout("transformers", tuple(paths[:at]), blocks, tuple(paths[at + 1 :]),
                  container, feed)  # fmt: skip


def cut(lay: Layout, stages: int, split: Sequence[str] | None) -> list[tuple[str, ...]]:
    """Each stage's pieces: at the ``split`` paths (each the first piece of a later
    stage), or the blocks split evenly (module doc)."""
    pieces = lay.pieces
    if split is not None:
        if len(split) != stages - 1:
            raise InvalidInputError(
                f"pp_split names {len(split)} module paths; pp={stages} stages start at "
                f"{stages - 1} (each the first piece of a stage after the first)"
            )
        unknown = [p for p in split if p not in pieces]
        if unknown:
            raise InvalidInputError(
                f"pp_split {unknown[0]!r} is not one of the pieces a pipeline cuts: {_few(pieces)}"
            )
        at = [pieces.index(p) for p in split]
        if any(b <= a for a, b in itertools.pairwise([0, *at])):
            raise InvalidInputError(
                "pp_split: the paths must be in forward order, each after the last, and "
                f"not the first piece ({pieces[0]!r})"
            )
        bounds = [0, *at, len(pieces)]
        return [pieces[a:b] for a, b in itertools.pairwise(bounds)]
    n = len(lay.blocks)
    if n < stages:
        raise InvalidInputError(
            f"mesh pp={stages}: the model has {n} repeated blocks "
            f"({_few(lay.blocks)}); a stage needs one at least: lower pp or give pp_split"
        )
    sizes = [n // stages] * stages
    extra = n % stages
    order = [*range(1, stages - 1), 0, stages - 1] if stages > 2 else list(range(stages))
    for s in order[:extra]:
        sizes[s] += 1
    out: list[tuple[str, ...]] = []
    done = 0
    for s, size in enumerate(sizes):
        mine = lay.blocks[done : done + size]
        done += size
        out.append((*(lay.pre if s == 0 else ()), *mine, *(lay.post if s == stages - 1 else ())))
    return out


def _few(paths: Sequence[str]) -> str:
    shown = ", ".join(paths[:6])
    return shown + (f", ... ({len(paths)} in all)" if len(paths) > 6 else "")


@contextmanager
def stage_view(
    model: nn.Module, lay: Layout, pieces: Sequence[str], first: bool, last: bool
) -> Iterator[None]:
    """Inside: ``model`` as one stage (module doc); put back as it was on leaving."""
    mine = set(pieces)
    container = model.get_submodule(lay.container) if lay.container else model
    saved_children = container._modules
    keep = lay.blocks if lay.container else lay.pieces
    prefix = f"{lay.container}." if lay.container else ""
    replaced: list[tuple[nn.Module, str, nn.Module | None]] = []
    try:
        container._modules = OrderedDict(
            (p.removeprefix(prefix), saved_children[p.removeprefix(prefix)])
            for p in keep
            if p in mine
        )
        if lay.kind == "transformers":
            gone = [p for p in lay.pre if not first] + [p for p in lay.post if not last]
            for path in gone:
                parent_path, _, name = path.rpartition(".")
                parent = model.get_submodule(parent_path)
                replaced.append((parent, name, parent._modules[name]))
                # the embeddings are not called when inputs_embeds is given; the norm
                # and the head pass the hidden states on
                setattr(parent, name, None if path in lay.pre else nn.Identity())
        yield
    finally:
        for parent, name, module in reversed(replaced):
            setattr(parent, name, module)
        container._modules = saved_children


def stage_call(
    call: Mapping[str, Any], lay: Layout, stage: int, last: bool, received: torch.Tensor | None
) -> dict[str, Any]:
    """The profiling call of ``stage``: the first's as given; a later stage's input the
    previous stage's output (``received``); a stage before the last differentiates its
    output (the labels and the loss function are the last stage's)."""
    out = dict(call)
    if stage > 0:
        assert received is not None
        out.pop("input_shape", None)
        out.pop("input_dtype", None)
        if lay.kind == "transformers":
            kwargs = {k: v for k, v in dict(out.get("kwargs") or {}).items() if k != "input_ids"}
            out["kwargs"] = {**kwargs, lay.feed: received}
            out.pop("args", None)
        else:
            out["args"] = (received,)
            out.pop("kwargs", None)
    if not last:
        out.pop("loss_fn", None)
        if out.get("kwargs"):
            out["kwargs"] = {k: v for k, v in out["kwargs"].items() if k != "labels"}
    return out


def received(prof: Any, model: nn.Module, sequence_parallel: bool) -> torch.Tensor:
    """The next stage's input: ``prof``'s first floating output, on meta, a leaf that
    requires its gradient. Under sequence parallelism the stream is sent sharded along
    the sequence (as torchtitan sends it): the stage is given a DTensor ``Shard(1)`` over
    ``model``'s tensor-parallel mesh whose local tensor is that leaf, so the stage's own
    code (masks, positions) sees the whole sequence."""
    from layerscope.profile import TensorSpec

    for call in prof.root.outputs[:1]:
        for spec in call:
            if not isinstance(spec, TensorSpec):
                continue
            dtype = getattr(torch, spec.dtype, None)
            if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
                continue
            if not sequence_parallel:
                return torch.empty(spec.shape, dtype=dtype, device="meta", requires_grad=True)
            from torch.distributed.tensor import DTensor, Shard

            mesh = next(p.device_mesh for p in model.parameters() if isinstance(p, DTensor))
            shape = list(spec.shape)
            shape[1] //= mesh.size()
            local = torch.empty(shape, dtype=dtype, device="meta", requires_grad=True)
            return DTensor.from_local(local, mesh, [Shard(1)], run_check=False)
    raise InvalidInputError(
        "mesh pp: a stage's output has no floating tensor to send to the next stage"
    )


def local_bytes(t: torch.Tensor) -> int:
    """Bytes of ``t`` as one rank holds it (a DTensor's local shard)."""
    from torch.distributed.tensor import DTensor

    local = t.to_local() if isinstance(t, DTensor) else t
    return local.numel() * local.element_size()


def spec_bytes(signatures: Sequence[Any]) -> int:
    """Bytes of the first floating tensor of the first call in ``signatures``."""
    from layerscope.profile import TensorSpec

    for call in signatures[:1]:
        for spec in call:
            if isinstance(spec, TensorSpec):
                dtype = getattr(torch, spec.dtype, None)
                if isinstance(dtype, torch.dtype) and dtype.is_floating_point:
                    return prod(spec.shape) * dtype.itemsize
    return 0


# ---- the schedule ----------------------------------------------------------------------
def actions(schedule: str, stages: int, stage: int, microbatches: int) -> list[tuple[str, int]]:
    """Stage ``stage``'s forwards and backwards, in order (module doc)."""
    m = microbatches
    if schedule == "gpipe":
        return [("F", k) for k in range(m)] + [("B", k) for k in range(m)]
    warmup = min(m, stages - stage)
    out = [("F", k) for k in range(warmup)]
    for k in range(m - warmup):
        out += [("B", k), ("F", warmup + k)]
    out += [("B", k) for k in range(m - warmup, m)]
    return out


def in_flight(order: Sequence[tuple[str, int]]) -> int:
    """The most microbatches forwarded and not yet backwarded at once."""
    most = now = 0
    for kind, _ in order:
        now += 1 if kind == "F" else -1
        most = max(most, now)
    return most


@dataclass
class StageStep:
    """What composing one stage's step needs from its one-microbatch plan."""

    #: the one-microbatch timeline: (phase, event, path, parts) per point
    points: list[tuple[str, str, str, dict[str, int]]]
    #: bytes of the stage's input (a received activation; the first stage: the batch's
    #: microbatch) and of its output (sent on; its gradient received)
    input_bytes: int
    output_bytes: int
    #: FSDP2: the units gathered whole, and the unsharded gradients, bytes
    unsharded: int = 0
    unsharded_grads: int = 0


def held_bytes(points: Sequence[tuple[str, str, str, dict[str, int]]]) -> int:
    """Bytes one microbatch's forward leaves for its backward: the activations at the
    backward's first moment less those at the forward's."""
    fwd = next(p for p in points if p[0] == "forward")
    bwd = next(p for p in points if p[0] == "backward")
    return bwd[3]["activation_bytes"] - fwd[3]["activation_bytes"]


def compose(
    step: StageStep,
    schedule: str,
    stages: int,
    stage: int,
    microbatches: int,
    return_outputs: bool = True,
) -> list[tuple[str, str, str, dict[str, int]]]:
    """The stage's timeline over the pipeline's step (module doc): a point per point of
    each forward and backward the schedule runs, then the optimizer step."""
    fwd = [p for p in step.points if p[0] == "forward"]
    bwd = [p for p in step.points if p[0] == "backward"]
    opt = [p for p in step.points if p[0] == "optimizer"]
    if not fwd or not bwd:
        raise InvalidInputError("mesh pp: a stage's analysis has no forward or no backward")

    first, last = stage == 0, stage == stages - 1
    held = held_bytes(step.points)
    after = bwd[-1][3]["grad_bytes"]  # one backward's gradients, at its end
    fsdp = step.unsharded > 0
    whole = step.unsharded_grads if fsdp else after  # the gradients a backward adds into
    kept = step.output_bytes if last and return_outputs else 0  # the merged output
    if schedule == "gpipe":  # the tensors sent, until their sends are waited on
        kept += (step.input_bytes if not first else 0) + (step.output_bytes if not last else 0)
    # 1F1B waits on a backward's send of the input's gradient at the next backward
    pending = step.input_bytes if schedule == "1f1b" and not first else 0
    base = dict.fromkeys(PARTS, 0)
    base["other_bytes"] = (microbatches - 1) * step.input_bytes + (
        microbatches * step.output_bytes if not last else 0
    )
    gathered = step.unsharded
    out: list[tuple[str, str, str, dict[str, int]]] = []
    forwarded = backwarded = 0
    for n, (kind, _) in enumerate(actions(schedule, stages, stage, microbatches)):
        lift = dict(base)
        lift["activation_bytes"] += (forwarded - backwarded) * held + backwarded * kept
        lift["activation_bytes"] += pending if backwarded else 0
        if kind == "F":
            for phase, event, path, parts in fwd:
                now = {k: parts[k] + lift[k] for k in PARTS}
                now["grad_bytes"] += whole if backwarded else 0
                if fsdp and n:  # gathered at the first forward, kept
                    now["unsharded_param_bytes"] = max(now["unsharded_param_bytes"], gathered)
                    now["comm_buffer_bytes"] = 0
                out.append((phase, event, path, now))
            forwarded += 1
            continue
        lift["activation_bytes"] -= held  # this microbatch's own, in its points
        final = backwarded == microbatches - 1
        previous = own_base = 0
        last_path: str | None = None
        for i, (phase, event, path, parts) in enumerate(bwd):
            now = {k: parts[k] + lift[k] for k in PARTS}
            g = parts["grad_bytes"]
            if path != last_path:  # the gradients counted before this module's backward
                own_base, last_path = previous, path
            previous = g
            own = max(0, g - own_base)  # this module's new gradients
            if fsdp and final:  # reduce-scattered as in one microbatch's backward
                now["grad_bytes"] = (whole if backwarded else 0) + g
            elif fsdp:  # kept gathered; the gradients accumulated unsharded
                now["unsharded_param_bytes"] = max(now["unsharded_param_bytes"], gathered)
                now["comm_buffer_bytes"] = 0  # no gather, no reduce-scatter
                now["grad_bytes"] = whole + own if backwarded else whole * (i + 1) // len(bwd)
            elif backwarded:  # added into the gradients: the module's new ones a temporary
                now["grad_bytes"] = whole + own
            out.append((phase, event, path, now))
        backwarded += 1
    out.extend(opt)
    return out


# ---- time ------------------------------------------------------------------------------
def p2p_seconds(nbytes: int, cluster: Any, stages: int, stride: int) -> float:
    """Seconds of one send of ``nbytes`` between neighbouring stages (the pipeline axis's
    link: ranks ``stride`` apart)."""
    if not nbytes:
        return 0.0
    return collective_time("send", nbytes, strided(cluster, stages, stride))


def notes(
    schedule: str, stages: int, micro: int, chosen: int, why: str, fsdp: bool, share: float
) -> list[str]:
    """What a pipeline's plan assumes, beside its figures."""
    out = [
        f"pipeline: {stages} stages, {schedule}, {micro} microbatches of the input given; "
        f"this plan is stage {chosen}'s ({why}), every stage's in plan.pipeline",
        f"bubble: {share:.0%} of the step, (S - 1) / (M + S - 1), at the slowest stage's "
        "pace; the point-to-point sends are not hidden under compute",
    ]
    if fsdp:
        out.append(
            "FSDP2 under a pipeline, as torch.distributed.pipelining runs it: a stage's units "
            "are gathered at its first forward and kept to its last backward "
            "(reshard_after_forward=False, torchtitan's default with pp), its gradients "
            "accumulated unsharded in the reduce dtype and reduce-scattered in the last "
            "backward (counted there on top of the accumulated ones: an upper bound)"
        )
    return out


def bubble(stages: int, microbatches: int) -> float:
    """The share of the step the slowest stage idles: ``(S - 1) / (M + S - 1)``."""
    return (stages - 1) / (microbatches + stages - 1)


__all__ = [
    "SCHEDULES",
    "Layout",
    "StageStep",
    "actions",
    "bubble",
    "compose",
    "cut",
    "held_bytes",
    "in_flight",
    "layout",
    "local_bytes",
    "notes",
    "p2p_seconds",
    "received",
    "spec_bytes",
    "stage_call",
    "stage_view",
]
