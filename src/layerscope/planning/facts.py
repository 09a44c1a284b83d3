"""The one analysis a plan needs, and the facts a plan reads from it: the trainable
parameters (from the storage of their gradients, so a loaded profile has them too),
the micro-batch's input bytes and tokens, the FSDP2 units."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.utils._pytree import tree_map_only

from layerscope.collect.target.spec import spec_target
from layerscope.errors import InvalidInputError
from layerscope.planning.checkpointing import per_op, repeated_blocks
from layerscope.planning.timeline import enclosing
from layerscope.profile import Profile, TensorSpec
from layerscope.validate import close_matches

if TYPE_CHECKING:
    from layerscope.planning.options import Options


# ---- the analysis ----------------------------------------------------------------------
#: The note of a plan whose model would return a KV cache: the analysis turns it off.
CACHE_OFF = "use_cache=False for the analysis"


def _cache_off(model: nn.Module, kwargs: dict[str, Any] | None) -> bool:
    """Whether to call ``model`` with ``use_cache=False``: a model configured to return a
    KV cache (transformers' ``config.use_cache``) whose forward takes ``use_cache``. A
    training step never reads the cache, yet it would stay alive to the loss; a caller's
    explicit ``use_cache=True`` is refused with the fix."""
    import inspect

    try:
        takes = "use_cache" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        takes = False
    if not takes:
        return False
    asked = (kwargs or {}).get("use_cache")
    if asked:
        raise InvalidInputError(
            "ls.plan plans a training step, which never reads a KV cache, but use_cache=True "
            "keeps one alive until the loss: drop use_cache=True (the plan then passes "
            "use_cache=False), or pass use_cache=False"
        )
    return asked is None and bool(getattr(getattr(model, "config", None), "use_cache", False))


def analyse_stages(
    model: nn.Module | Profile,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
    input_shape: Any,
    opts: Options,
    profile_options: Mapping[str, Any],
) -> list[Profile]:
    """The analyses a plan needs: the given profile (checked), or a meta copy of the
    model in the compute dtype, profiled with ``backward=True, memory=True`` and steered
    to the target, its kernels recorded (``planning.kernels``); one, or one per stage of
    a pipeline (``planning.pipeline``)."""
    want = str(opts.compute_dtype).removeprefix("torch.")
    if isinstance(model, Profile):
        for axis, size in (("tp", opts.tp), ("pp", opts.pp)):
            if size > 1:
                raise InvalidInputError(
                    f"mesh {axis}={size}: the plan analyses the model split as the run "
                    "splits it, which a given profile cannot be: pass the model"
                )
        return [_checked(model, opts, want)]
    if not isinstance(model, nn.Module):
        raise InvalidInputError(f"ls.plan needs a model or a Profile, got {type(model).__name__}")
    from layerscope.collect.meta import meta_copy

    # under autocast the weights and the input stay float32 and each op runs in the
    # dtype autocast's rules give it; otherwise everything is in the compute dtype
    dtype = torch.float32 if opts.autocast else opts.compute_dtype
    copied, not_run = meta_copy(model)
    meta = copied.to(dtype)
    from layerscope.planning.expertparallel import check_kernel, check_split, expert_paths

    check_kernel(meta, opts.compute_dtype, opts.autocast)  # before the analysis, which would raise
    if opts.ep > 1:  # experts that ep ranks cannot split
        check_split(meta, expert_paths(meta), opts.ep)
    target = spec_target(opts.target)
    call: dict[str, Any] = dict(profile_options)

    whole = 0  # context parallelism: one rank's share of the sequence is analysed
    if opts.cp > 1:
        from layerscope.planning.contextparallel import local_inputs

        args, kwargs, input_shape, whole = local_inputs(args, kwargs, input_shape, opts.cp)

    on_meta = _mover(dtype)
    if args:
        call["args"] = tree_map_only(torch.Tensor, on_meta, tuple(args))
    if kwargs:
        call["kwargs"] = tree_map_only(torch.Tensor, on_meta, dict(kwargs))
    cache_off = _cache_off(model, kwargs)
    if cache_off:
        call["kwargs"] = {**call.get("kwargs", {}), "use_cache": False}
    if input_shape is not None and (cache_off or opts.pp > 1):  # drawn here, beside kwargs
        from layerscope.collect.inputs import random_inputs

        call["args"] = random_inputs(meta, input_shape, call.pop("input_dtype", None))
    elif input_shape is not None:
        call["input_shape"] = input_shape
    from contextlib import AbstractContextManager, nullcontext

    from layerscope.planning.tensorparallel import Entry, parallelized, plan_words

    tp_plan = None if opts.tp_plan is None else dict(opts.tp_plan)
    split: AbstractContextManager[list[Entry]] = (
        parallelized(meta, opts.tp, tp_plan, opts.sequence_parallel)
        if opts.tp > 1
        else nullcontext([])
    )
    with split as entries:
        if opts.pp == 1:
            profs = [_profiled(meta, call, opts, target, want)]
        else:
            profs = _stages(meta, call, opts, target, want)
    _annotate(profs, meta, opts, plan_words(entries) if entries else None, not_run, cache_off)
    for prof in profs if whole else ():
        prof.model["cp"] = {"whole": whole, "local": whole // opts.cp}
    return profs


def _mover(dtype: torch.dtype) -> Callable[[torch.Tensor], torch.Tensor]:
    """Moves the micro-batch to meta, as the GPU computes it (floats in ``dtype``); a
    tensor given twice (``labels=ids``) moves once, so the analysis holds it once."""
    moved: dict[int, torch.Tensor] = {}

    def on_meta(t: torch.Tensor) -> torch.Tensor:
        if id(t) not in moved:
            cast = dtype if t.is_floating_point() else t.dtype
            moved[id(t)] = t.detach().to("meta", dtype=cast).requires_grad_(t.requires_grad)
        return moved[id(t)]

    return on_meta


def _annotate(
    profs: list[Profile],
    meta: nn.Module,
    opts: Options,
    tp_plan: dict[str, str] | None,
    not_run: list[str],
    cache_off: bool,
) -> None:
    """What each analysis records beside its figures: the experts modules (expert
    parallelism) and the routed experts' active shares, the tensor-parallel plan used,
    the code left out, the cache turned off."""
    from layerscope.planning.expertparallel import expert_paths, routed_experts

    experts: list[str] = []
    if opts.ep > 1:  # expert parallelism's units (``planning.expertparallel``)
        experts = expert_paths(meta)
    routed = routed_experts(meta)  # the share of its experts a token runs (MFU's N)
    for prof in profs:
        mine = {n.path for n in prof.nodes()}
        if experts:
            prof.model["experts"] = [p for p in experts if p in mine]
        if routed:
            prof.model["routed"] = {p: share for p, share in routed.items() if p in mine}
        if tp_plan:
            prof.model["tp_plan"] = tp_plan
        prof.notices.extend(not_run)
        if cache_off:
            prof.notices.append(
                f"{CACHE_OFF}: the model's config.use_cache would keep a KV cache alive to "
                "the loss, which a training step never reads (pass use_cache=False in your "
                "run too)"
            )


def _stages(
    meta: nn.Module, call: dict[str, Any], opts: Options, target: Any, want: str
) -> list[Profile]:
    """Each pipeline stage's analysis, in order, a stage's input the previous one's
    output (``planning.pipeline``)."""
    from layerscope.planning import pipeline as pl

    lay = pl.layout(meta)
    cuts = pl.cut(lay, opts.pp * opts.virtual, opts.pp_split)
    profs: list[Profile] = []
    received: torch.Tensor | None = None
    for s, pieces in enumerate(cuts):
        first, last = s == 0, s == len(cuts) - 1
        mine = pl.stage_call(call, lay, s, last, received)
        with pl.stage_view(meta, lay, pieces, first, last):
            prof = _profiled(meta, mine, opts, target, want)
        prof.model["stage"] = {"index": s, "pieces": list(pieces)}
        # the model's repeated blocks on this stage (a stage of one block has no run of
        # its own to find)
        prof.model["stage"]["blocks"] = [b for b in lay.blocks if b in pieces]
        if received is not None:  # bytes received per microbatch (this rank's shard)
            prof.model["stage"]["input_bytes"] = pl.local_bytes(received)
        profs.append(prof)
        if not last:
            received = pl.received(prof, meta, opts.sequence_parallel)
    return profs


def _profiled(
    meta: nn.Module, call: dict[str, Any], opts: Options, target: Any, want: str
) -> Profile:
    """One analysis of ``meta`` with ``call`` (module doc), its kernels recorded."""
    from contextlib import nullcontext

    from layerscope.collect.autocast import emulate_cuda_autocast
    from layerscope.collect.common import default_loss
    from layerscope.metrics.memory.opgraph import record_graph
    from layerscope.metrics.memory.records import record_ops
    from layerscope.planning.kernels import KernelRecorder, record
    from layerscope.session.run import output_released, profile

    call = dict(call)
    recorder = KernelRecorder()  # after the user's observers: it reads the counters'
    call["observers"] = [*call.get("observers", ()), recorder]
    asked = opts.checkpoint  # planning.oppolicy: torchtitan's ops, or a policy's
    ops = record_ops(asked if callable(asked) else None) if per_op(asked) else nullcontext()
    graph = record_graph() if opts.compile else nullcontext()  # metrics.memory.remat
    view = "local" if opts.tp > 1 else "logical"  # tensor parallelism: rank 0's work
    # a training loop drops the output once the loss is made; a pipeline stage holds its
    # outputs for their backward (and the last stage returns them: return_outputs)
    released = output_released() if opts.pp == 1 else nullcontext()
    if not opts.autocast:
        with ops, graph, released:
            prof = profile(meta, backward=True, memory=True, target=target, dtensor=view, **call)
    else:
        loss_fn = call.pop("loss_fn", None) or default_loss
        with ops, graph, released, emulate_cuda_autocast(meta, opts.compute_dtype, loss_fn) as loss:
            prof = profile(
                meta, backward=True, memory=True, target=target, loss_fn=loss,
                dtensor=view, **call,
            )  # fmt: skip
        prof.model["autocast"], prof.model["autocast_device"] = want, "cuda"
    record(prof, recorder.kernels)
    return prof


def _checked(prof: Profile, opts: Options, want: str) -> Profile:
    """A given profile, if a plan can read it: storage records and a backward, in the
    compute dtype (under autocast: float32 analysed under autocast's rules, or, as an
    approximation, every op in the compute dtype)."""
    if not isinstance(prof.memory.get("storages"), Mapping) or "backward_flops" not in (
        prof.root.metrics
    ):
        raise InvalidInputError(
            "ls.plan needs a profile made with backward=True, memory=True (its storage "
            "records and backward); profile the model again, or pass the model"
        )
    if callable(opts.checkpoint):
        raise InvalidInputError(
            "a checkpoint policy is called on each op of the model's analysis, which a "
            "given or loaded profile has run already: pass the model"
        )
    asked = [name for name, on in (("compile", opts.compile), ("float8", opts.float8)) if on]
    if asked:
        from layerscope.planning.kernels import kernels_of

        if kernels_of(prof) is None:
            raise InvalidInputError(
                f"{' and '.join(asked)} {'reprices' if len(asked) == 1 else 'reprice'} the "
                "analysis's kernels, which a given or "
                "loaded profile has no records of: pass the model, whose analysis records "
                "them"
            )
    if prof.model.get("autocast") and prof.model.get("autocast_device", "cuda") != "cuda":
        raise InvalidInputError(
            f"the profile ran under {prof.model.get('autocast_device')} autocast, whose "
            "rules (which ops run in 16 bits) are not CUDA's: profile the model on meta "
            "or CUDA, or pass the model"
        )
    if opts.autocast and prof.model.get("autocast") == want:
        return prof
    if prof.model.get("dtype") != want or prof.model.get("autocast"):
        raise InvalidInputError(
            f"precision={opts.precision!r} computes in {want}, but the profile ran in "
            f"{prof.model.get('dtype')}: profile the model in {want}, or pass the model"
        )
    return prof


# ---- facts of the analysis -------------------------------------------------------------
@dataclass(frozen=True)
class Param:
    """One parameter as this rank holds it: under tensor parallelism its shard
    (``shape``, ``nbytes``) of the whole (``logical``)."""

    name: str
    shape: tuple[int, ...]
    module: str
    nbytes: int  # as analysed
    logical: tuple[int, ...] = ()
    #: this rank's elements of its gradient (0: as many as of the parameter)
    grad_elements: int = 0

    @property
    def elements(self) -> int:
        """The whole parameter's elements (the published FLOPs' N)."""
        return prod(self.logical or self.shape)


def _param(name: str, record: Mapping[str, Any]) -> Param:
    """A parameter from its record: a DTensor's local shard where it has one (the
    parameter's, where its gradient has another layout)."""
    logical = tuple(int(d) for d in record["shape"])
    local = record.get("param_local_shape", record.get("local_shape"))
    shape = logical if local is None else tuple(int(d) for d in local)
    nbytes = int(record["bytes"] if local is None else record["local_bytes"])
    grad = record.get("local_shape")
    grad_elements = prod(int(d) for d in grad) if "param_local_shape" in record and grad else 0
    return Param(name, shape, str(record["module"]), nbytes, logical, grad_elements)


def trainable(prof: Profile) -> list[Param]:
    """The trainable parameters (each tensor once) from the storage of their gradients."""
    grads = prof.memory.get("grads")
    if not isinstance(grads, Mapping) or not grads:
        raise InvalidInputError(
            "the profile records no gradients (memory['grads']): ls.plan plans training, "
            "so the model needs trainable parameters and the profile backward=True"
        )
    return [_param(name, g) for name, g in grads.items()]


def frozen(prof: Profile) -> list[Param] | None:
    """The frozen parameters (``requires_grad=False``, each tensor once) from the
    analysis's records of them; None for a profile with frozen bytes but no records (one
    made before they were recorded)."""
    records = prof.memory.get("frozen")
    if not isinstance(records, Mapping):
        held = int(prof.root.metrics.get("param_bytes", 0))
        grads = prof.memory.get("grads")
        trained = sum(int(g["bytes"]) for g in grads.values()) if isinstance(grads, Mapping) else 0
        return None if held > trained else []
    return [_param(name, f) for name, f in records.items()]


def input_bytes(prof: Profile) -> tuple[int, int, int | None]:
    """(all input bytes, float input bytes, tokens) of the analysed micro-batch: tokens
    are the elements of the first integer input (token ids), None without one; a
    storage given twice counts once."""
    total = floats = 0
    tokens: int | None = None
    for call in prof.root.inputs[:1]:
        for spec in call:
            if not isinstance(spec, TensorSpec):
                continue
            shape = spec.shape
            dtype = getattr(torch, spec.dtype, None)
            if not isinstance(dtype, torch.dtype):
                continue
            nbytes = prod(shape) * dtype.itemsize
            total += nbytes
            if dtype.is_floating_point:
                floats += nbytes
            elif tokens is None and not dtype.is_complex and dtype != torch.bool:
                tokens = prod(shape)
    # one storage passed twice (``labels=ids``) is held once: the storage records' rows
    # of the root's inputs, each storage once, where the analysis kept them
    table = prof.memory.get("storages") or {}
    paths = list(table.get("paths") or ())
    if "" in paths:
        root = paths.index("")
        rows = [int(r[0]) for r in table.get("rows") or () if root in r[2] and not r[4]]
        total = min(total, sum(rows))
    return total, floats, tokens


def fsdp_units(prof: Profile, opts: Options) -> list[str]:
    """The FSDP2 units in forward order: the given paths or the repeated blocks, and the
    root (always a unit: ``fully_shard(model)`` last)."""
    paths = list(opts.units) if opts.units is not None else repeated_blocks(prof)
    check_paths(prof, "units", paths)
    if opts.ep > 1:  # each experts module a unit of its own (``planning.expertparallel``)
        paths += [p for p in prof.model.get("experts", ()) if p not in paths]
    order = {n.path: i for i, n in enumerate(prof.nodes())}
    return ["", *sorted((p for p in set(paths) if p), key=order.__getitem__)]


def check_paths(prof: Profile, label: str, paths: Sequence[str]) -> None:
    """Every path a module of the analysis: ``InvalidInputError`` naming the first that
    is not, with the closest ones."""
    known = [n.path for n in prof.nodes()]
    names = set(known)
    for path in paths:
        if path not in names:
            close = close_matches(path, known)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InvalidInputError(f"{label}: no module {path!r} in the model{hint}")


def owner_lookup(units: Iterable[str]) -> Callable[[str], str]:
    """The innermost of ``units`` that is a module or holds it (``""`` when none), for
    many modules: the module's path is walked up, so a lookup costs its depth, not the
    number of units."""
    known = {u for u in units if u}

    def find(module: str) -> str:
        return next((p for p in enclosing(module) if p in known), "")

    return find


__all__ = [
    "Param",
    "analyse_stages",
    "frozen",
    "fsdp_units",
    "input_bytes",
    "owner_lookup",
    "trainable",
]
