"""Tensor and sequence parallelism in a plan (``mesh={"tp": N}``, ``tp_plan=``,
``sequence_parallel=``): the model's parallel plan applied, with torch's own
``parallelize_module``, to the analysis's meta copy over a fake process group of ``N``
ranks, so the analysis sees one rank's work (``collect.dtensors.local_shards``): its
shards of every parameter and gradient, its FLOPs and activations, and the collectives
DTensor issues, forward and backward (``docs/plan.md``, "Tensor parallelism").

A plan is keyed by module paths, ``*`` standing for one path segment
(``"model.layers.*.self_attn.q_proj"``), as transformers' ``base_model_tp_plan`` and
torchtitan's ``parallelize_module`` plans are; a value is a torch ``ParallelStyle`` or
one of transformers' style names (``STYLES``). Without ``tp_plan=`` the model's own plan
is used (a transformers model's ``_tp_plan``, or its config's ``base_model_tp_plan``).

``sequence_parallel=True`` (a plan of style names) shards the stream between the
tensor-parallel regions along the sequence (dimension 1), as Megatron-LM and torchtitan
do: a DTensor from the embeddings' outputs (or, without embeddings, the first block's
input) to the output head's input (or the last block's output). The norms on it run on
their shard (``SequenceParallel``); each module whose column-wise linears read it
all-gathers it first (one reduce-scatter in the backward); the row-wise linears
reduce-scatter their outputs instead of all-reducing them; a module of a block that the
plan leaves whole gathers it and splits its output again.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from layerscope.errors import InvalidInputError

#: transformers' style names layerscope applies with torch's styles (transformers'
#: ``distributed.tensor_parallel``: the same layouts); "replicate": left whole.
STYLES = (
    "colwise", "rowwise", "colwise_rep", "colwise_gather_output", "rowwise_rep",
    "rowwise_split_input", "embedding_rowwise", "sequence_parallel", "replicate",
    "replicated_with_grad_allreduce",
)  # fmt: skip
#: transformers' style names applied with transformers' own styles (``hf_style``): the
#: packed projections and a mixture of experts' experts, as ``apply_tensor_parallelism``
#: applies them (a plan's parameter entries too: "rowwise" on an expert weight).
HF_STYLES = ("packed_colwise", "packed_rowwise", "moe_tp_experts")
#: What ``sequence_parallel`` assumes of the activations' layout.
SEQUENCE_DIM = 1


def _torch_style(name: str) -> Any:
    """torch's ``ParallelStyle`` for a style name (None: left whole)."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
    )

    if name == "colwise":
        return ColwiseParallel()
    if name == "rowwise":
        return RowwiseParallel()
    if name in ("colwise_rep", "colwise_gather_output"):
        return ColwiseParallel(output_layouts=Replicate())
    if name in ("rowwise_rep", "rowwise_split_input", "embedding_rowwise"):
        return RowwiseParallel(input_layouts=Replicate())
    if name == "sequence_parallel":
        return SequenceParallel(use_local_output=True)
    return None  # "replicate", "replicated_with_grad_allreduce": left whole


def model_plan(model: nn.Module) -> dict[str, Any] | None:
    """The model's own tensor-parallel plan: a transformers model's ``_tp_plan`` (its
    head's entries and the base model's, prefixed), else its config's
    ``base_model_tp_plan`` under the base model's attribute; None without one."""
    own = getattr(model, "_tp_plan", None)
    if isinstance(own, Mapping) and own:
        return dict(own)
    config = getattr(model, "config", None)
    base = getattr(config, "base_model_tp_plan", None)
    if not isinstance(base, Mapping) or not base:
        return None
    prefix = getattr(model, "base_model_prefix", "")
    if prefix and isinstance(getattr(model, prefix, None), nn.Module):
        return {f"{prefix}.{k}": v for k, v in base.items()}
    return dict(base)


@dataclass(frozen=True)
class Entry:
    """One module (or parameter) of the model and the style it gets."""

    path: str
    style: Any  # a ParallelStyle or a style name
    pattern: str = ""  # the plan's key that matched it


def expand(model: nn.Module, plan: Mapping[str, Any], given: bool) -> list[Entry]:
    """The plan's patterns matched to the model's modules (and, for transformers' own
    styles, parameters: ``hf_style``), in the model's order. A pattern of a given plan
    that matches nothing is refused (a typo); the model's own plan may name modules a
    configuration leaves out."""
    names = [n for n, _ in model.named_modules() if n]
    params = [n for n, _ in model.named_parameters()]
    out: dict[str, Entry] = {}
    for pattern, style in plan.items():
        if not isinstance(pattern, str):
            raise InvalidInputError(f"tp_plan: keys are module paths, got {pattern!r}")
        _check_style(pattern, style)
        rx = re.compile("".join("[^.]+" if p == "*" else re.escape(p) for p in _split(pattern)))
        hits = [n for n in names if rx.fullmatch(n)]
        if not hits and isinstance(style, str):  # a parameter: transformers shards it
            hits = [n for n in params if rx.fullmatch(n) and hf_style(style, True) is not None]
        if not hits and given:
            raise InvalidInputError(
                f"tp_plan: {pattern!r} matches no module of the model ('*' stands for one "
                "path segment, e.g. 'layers.*.mlp.up_proj')"
            )
        for name in hits:
            out[name] = Entry(name, style, pattern)
    order = {n: i for i, n in enumerate([*names, *params])}
    return sorted(out.values(), key=lambda e: order[e.path])


def hf_style(name: str, param: bool = False) -> Any:
    """transformers' own style of that name, for what torch's styles do not express (a
    packed gate and up projection, a mixture of experts' experts; ``param``: any style,
    to shard a parameter entry): None without transformers or such a style."""
    if name not in HF_STYLES and not param:
        return None
    try:  # registered by transformers.distributed.tensor_parallel on import
        import transformers.distributed.tensor_parallel  # noqa: F401
        from transformers.distributed.parallel_utils import ALL_PARALLEL_STYLES
    except ImportError:
        return None
    try:
        return ALL_PARALLEL_STYLES[name]
    except KeyError:
        return None


def _apply_hf(model: nn.Module, entries: list[Entry], mesh: Any) -> None:
    """transformers' styles as its ``apply_tensor_parallelism`` applies them: a
    parameter's shard, then a module's forward."""
    modules = dict(model.named_modules())
    params = {n for n, _ in model.named_parameters()}
    for e in entries:
        style = hf_style(e.style, e.path in params) if isinstance(e.style, str) else None
        if style is None:
            continue
        if e.path in params:
            owner, _, name = e.path.rpartition(".")
            style.shard_param(modules[owner], name, mesh)
        else:
            style.install_forward(modules[e.path], mesh)


def _split(pattern: str) -> list[str]:
    return re.split(r"(\*)", pattern)


def _check_style(path: str, style: Any) -> None:
    if isinstance(style, str):
        if style not in STYLES and hf_style(style) is None:
            raise InvalidInputError(
                f"tp_plan[{path!r}]: style {style!r} is not planned; known: "
                f"{', '.join(STYLES)}, or a torch ParallelStyle"
            )
        return
    from torch.distributed.tensor.parallel import ParallelStyle

    if not isinstance(style, ParallelStyle):
        raise InvalidInputError(
            f"tp_plan[{path!r}]: a style name ({', '.join(STYLES)}) or a torch "
            f"ParallelStyle, got {type(style).__name__}"
        )


def styles(model: nn.Module, entries: list[Entry], sequence: bool) -> dict[str, Any]:
    """Each module's torch ``ParallelStyle`` (``sequence``: sequence parallelism's
    additions, module doc)."""
    out: dict[str, Any] = {}
    params = {n for n, _ in model.named_parameters()}
    for e in entries:
        if e.path in params or (isinstance(e.style, str) and hf_style(e.style) is not None):
            continue  # transformers' own (``_apply_hf``)
        style = _torch_style(e.style) if isinstance(e.style, str) else e.style
        if style is not None:
            out[e.path] = style
    if sequence:
        if not all(isinstance(e.style, str) for e in entries):
            raise InvalidInputError(
                "sequence_parallel=True derives sequence parallelism from a plan of style "
                "names; a plan of ParallelStyle objects states it itself (SequenceParallel, "
                "PrepareModuleInput): drop sequence_parallel"
            )
        out.update(_sequence_styles(model, entries))
    return out


def _block_of(model: nn.Module, path: str) -> str | None:
    """The repeated block that holds ``path``: the outermost member of an
    ``nn.ModuleList`` on its way, else of an ``nn.Sequential``."""
    parts = path.split(".") if path else []
    for kind in (nn.ModuleList, nn.Sequential):
        for i in range(len(parts)):
            parent = model.get_submodule(".".join(parts[:i])) if i else model
            if isinstance(parent, kind) and parts[i].isdecimal():
                return ".".join(parts[: i + 1])
    return None


def _sequence_styles(model: nn.Module, entries: list[Entry]) -> dict[str, Any]:
    """Sequence parallelism's styles (module doc): the stream between the tensor-parallel
    regions a DTensor sharded along the sequence, from the embeddings' outputs (or the
    first block's input) to the head's input (or the last block's output)."""
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel

    seq = Shard(SEQUENCE_DIM)
    gathered: dict[str, None] = {}
    blocks: dict[str, None] = {}
    out: dict[str, Any] = {}
    for e in entries:
        block = _block_of(model, e.path)
        if block is not None and e.style == "colwise":
            blocks[block] = None
            parent = e.path.rpartition(".")[0]
            if parent == block:  # a linear of the block's own: it gathers its input
                out[e.path] = ColwiseParallel(input_layouts=seq)
            gathered[parent if parent != block else e.path] = None
    if not gathered:
        raise InvalidInputError(
            "sequence_parallel=True shards the stream between the repeated blocks' "
            "column-wise linears, but no 'colwise' entry of the plan lies in a block of an "
            "nn.ModuleList"
        )
    out.update((path, _Stream(gather=True)) for path in gathered if path not in out)
    planned = {e.path: e.style for e in entries}
    whole = {  # a module of the block the plan leaves whole: runs on the whole sequence
        f"{block}.{child}": None
        for block in blocks
        for child, module in model.get_submodule(block).named_children()
        if f"{block}.{child}" not in out | planned
        and "Norm" not in type(module).__name__
        and any(True for _ in module.parameters())
    }
    out.update((path, _Stream(gather=True, local=True, split_output=True)) for path in whole)
    entered = _stream_styles(model, planned, gathered | whole, out)
    first, last = next(iter(blocks)), list(blocks)[-1]
    if not entered:  # no embeddings: the first block splits its input
        out[first] = _Stream(split=True)
    if not _follows(model, last):  # nothing after the blocks: the last one gathers
        out[last] = _Stream(split=not entered and first == last, gather_output=True)
    return out


def _stream_styles(
    model: nn.Module, planned: Mapping[str, Any], gathered: Mapping[str, None], out: dict[str, Any]
) -> bool:
    """The styles of the modules on the stream (into ``out``): the row-wise linears'
    reduce-scatter, the embeddings that start it, the norms that run on it, the heads
    that gather it; whether an embedding starts it."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleOutput,
        RowwiseParallel,
        SequenceParallel,
    )

    seq = Shard(SEQUENCE_DIM)
    entered = False
    for name, module in model.named_modules():
        style = planned.get(name)
        in_block = _block_of(model, name) is not None
        if style == "rowwise" and in_block:
            out[name] = RowwiseParallel(output_layouts=seq, use_local_output=False)
        elif (
            not name
            or any(name == g or name.startswith(g + ".") for g in gathered)
            or (style is not None and style not in _EDGES)
        ):
            continue
        elif style == "embedding_rowwise" or (isinstance(module, nn.Embedding) and not in_block):
            entered = True
            out[name] = (
                RowwiseParallel(input_layouts=Replicate(), output_layouts=seq,
                                use_local_output=False)
                if style else PrepareModuleOutput(output_layouts=Replicate(),
                                                  desired_output_layouts=seq,
                                                  use_local_output=False)
            )  # fmt: skip
        elif style is not None and not in_block:  # a column-wise head: gathers its input
            whole = Replicate() if style != "colwise" else Shard(-1)  # "colwise": loss-parallel
            out[name] = ColwiseParallel(input_layouts=seq, output_layouts=whole)
        elif "Norm" in type(module).__name__:
            out[name] = SequenceParallel()
        elif isinstance(module, nn.Linear) and not in_block:  # a head of its own
            out[name] = _Stream(gather=True, local=True)
    return entered


#: Style names outside the blocks that sequence parallelism changes (the edges).
_EDGES = ("embedding_rowwise", "colwise", "colwise_rep", "colwise_gather_output")


def _follows(model: nn.Module, block: str) -> bool:
    """Whether a module with parameters runs after ``block``'s container (registered
    after it, outside it): a head or a final norm that reads the stream."""
    container = block.rpartition(".")[0]
    if not container:  # the model is its blocks
        return False
    seen = False
    for name, module in model.named_modules():
        if name == container:
            seen = True
        elif (
            seen
            and not name.startswith(container + ".")
            and any(True for _ in module.parameters(recurse=False))
        ):
            return True
    return False


def _first_tensor(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int | str, Tensor]:
    """Where the module's stream comes in: its first tensor argument, positional or
    ``hidden_states``."""
    for i, a in enumerate(args):
        if isinstance(a, Tensor):
            return i, a
    for k in ("hidden_states", *kwargs):
        if isinstance(kwargs.get(k), Tensor):
            return k, kwargs[k]
    raise InvalidInputError("sequence_parallel: a module of the plan was called without a tensor")


def _replace(args: tuple[Any, ...], kwargs: dict[str, Any], at: int | str, t: Tensor) -> Any:
    if isinstance(at, int):
        return (*args[:at], t, *args[at + 1 :]), kwargs
    return args, {**kwargs, at: t}


def _style_base() -> type:
    from torch.distributed.tensor.parallel import ParallelStyle

    return ParallelStyle


class _Stream(_style_base()):  # type: ignore[misc]
    """Where the sequence-sharded stream meets a module called with it positionally or as
    ``hidden_states``: ``split`` (its input, whole on every rank, becomes this rank's
    shard: no communication, an all-gather in the backward), ``gather`` (its input is
    all-gathered on the way in, as torchtitan's ``PrepareModuleInput``; it stays a
    DTensor, so its gradient comes back in the layout its users give it: one
    reduce-scatter for all the column-wise linears that read it; ``local``: a plain
    tensor), ``gather_output`` (its output, the last block's, gathered whole),
    ``split_output`` (its output, whole, split again: a module the plan leaves whole)."""

    def __init__(
        self,
        split: bool = False,
        gather: bool = False,
        local: bool = False,
        gather_output: bool = False,
        split_output: bool = False,
    ) -> None:
        super().__init__()
        self.split, self.gather, self.local = split, gather, local
        self.gather_output, self.split_output = gather_output, split_output

    def _apply(self, module: nn.Module, mesh: Any) -> nn.Module:
        from torch.distributed.tensor import DTensor, Replicate, Shard

        seq = Shard(SEQUENCE_DIM)

        def pre(_m: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            at, t = _first_tensor(args, kwargs)
            if self.split:
                t = DTensor.from_local(t, mesh, [Replicate()], run_check=False)
                t = t.redistribute(mesh, [seq])
            else:
                if not isinstance(t, DTensor):
                    t = DTensor.from_local(t, mesh, [seq], run_check=False)
                t = t.redistribute(mesh, [Replicate()])
                t = t.to_local() if self.local else t
            return _replace(args, kwargs, at, t)

        def post(_m: nn.Module, _args: Any, out: Any) -> Any:
            first: Any = out if isinstance(out, Tensor) else out[0]
            if self.split_output:
                first = DTensor.from_local(first, mesh, [Replicate()], run_check=False)
                first = first.redistribute(mesh, [seq])
            else:
                first = first.redistribute(mesh, [Replicate()]).to_local()
            return first if isinstance(out, Tensor) else type(out)((first, *out[1:]))

        if self.split or self.gather:
            module.register_forward_pre_hook(pre, with_kwargs=True)
        if self.gather_output or self.split_output:
            module.register_forward_hook(post)
        return module


@contextmanager
def fake_mesh(size: int) -> Iterator[Any]:
    """A 1-D device mesh of ``size`` ranks over a fake process group (no communication:
    collectives return their input's shapes), this process rank 0; refused inside a
    process that already has a process group."""
    import torch.distributed as dist

    if dist.is_initialized():
        raise InvalidInputError(
            "planning tensor parallelism sets up a process group of its own, but this "
            "process already has one (torch.distributed is initialised): plan in a "
            "process outside the distributed run"
        )
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=size)
    try:
        yield init_device_mesh("cpu", (size,), mesh_dim_names=("tp",))
    finally:
        dist.destroy_process_group()


@contextmanager
def parallelized(
    model: nn.Module, size: int, plan: Mapping[str, Any] | None, sequence: bool
) -> Iterator[list[Entry]]:
    """Inside: ``model`` (the analysis's meta copy) parallelized over ``size`` fake ranks
    by ``plan`` (None: the model's own), sessions observing rank 0's local work; the
    plan's entries."""
    from torch.distributed.tensor.parallel import parallelize_module

    from layerscope.collect.dtensors import local_shards

    given = plan is not None
    chosen = dict(plan) if plan is not None else model_plan(model)
    if not chosen:
        raise InvalidInputError(
            f"tp={size}: the model has no tensor-parallel plan (a transformers config's "
            "base_model_tp_plan); ls.plan takes one as tp_plan={module path pattern: "
            "style}, e.g. {'layers.*.mlp.up_proj': 'colwise', 'layers.*.mlp.down_proj': "
            "'rowwise'} (--tp-plan)"
        )
    _check_heads(model, size)
    entries = expand(model, chosen, given)
    tied = _tied(model)
    with fake_mesh(size) as mesh, _quiet_cpu_mesh():
        parallelize_module(model, mesh, styles(model, entries, sequence))
        _apply_hf(model, entries, mesh)
        _tie_again(model, tied)
        with local_shards():
            yield entries


def _tied(model: nn.Module) -> list[list[tuple[str, str]]]:
    """The (module path, name) pairs of each parameter shared by several modules (tied
    embeddings)."""
    holders: dict[int, list[tuple[str, str]]] = {}
    for path, module in model.named_modules():
        for name, p in module.named_parameters(recurse=False):
            holders.setdefault(id(p), []).append((path, name))
    return [h for h in holders.values() if len(h) > 1]


def _tie_again(model: nn.Module, tied: list[list[tuple[str, str]]]) -> None:
    """Each shared parameter shared again after the split: its holders' shards, when
    they have one layout (an embedding split by rows and an output projection split by
    columns both shard the [vocabulary, hidden] weight's rows), are one tensor, as a run
    that ties them after ``parallelize_module`` holds it; otherwise left as the split
    made them."""
    for holders in tied:
        modules = [model.get_submodule(path) for path, _ in holders]
        params = [getattr(m, name) for m, (_, name) in zip(modules, holders, strict=True)]
        first = params[0]
        if all(
            p.shape == first.shape and getattr(p, "placements", None)
            == getattr(first, "placements", None) for p in params
        ):  # fmt: skip
            for m, (_, name) in zip(modules[1:], holders[1:], strict=True):
                setattr(m, name, first)


def _check_heads(model: nn.Module, size: int) -> None:
    """A transformers model's attention heads split whole over the ranks (a rank's share
    of a head's columns would not reshape into heads)."""
    config = getattr(model, "config", None)
    get_text = getattr(config, "get_text_config", None)
    config = get_text() if callable(get_text) else config
    for key in ("num_attention_heads", "num_key_value_heads"):
        heads = getattr(config, key, None)
        if isinstance(heads, int) and heads % size:
            raise InvalidInputError(
                f"mesh tp={size}: the model's {heads} {key.removeprefix('num_').replace('_', ' ')} "
                f"do not split evenly over {size} ranks; pick a tp that divides {heads}"
            )


@contextmanager
def _quiet_cpu_mesh() -> Iterator[None]:
    """torch's warnings about a CPU mesh (random ops, all-to-all through all-gather),
    which concern running on it, not analysing a GPU run on it."""
    import logging
    import warnings

    log = logging.getLogger("torch.distributed")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*cpu device mesh")
            yield
    finally:
        log.setLevel(level)


def comm_seconds(
    comm: Mapping[str, Any], link: Any, within: Sequence[str] = ()
) -> tuple[float, float]:
    """(seconds of the analysis's collectives, of the forward ones in the modules
    ``within`` (checkpointed: their recompute issues them again)) per micro-batch, each
    call priced on ``link`` (``collectives.collective_time``)."""
    from layerscope.planning.collectives import collective_time

    total = again = 0.0
    for path, phases in comm.items():
        inside = any(path == p or path.startswith(p + ".") for p in within if p) or "" in within
        for phase, kinds in phases.items():
            for kind, row in kinds.items():
                calls = int(row["calls"])
                t = calls * collective_time(kind, int(row["bytes"]) // max(calls, 1), link)
                total += t
                again += t if inside and phase == "forward" else 0.0
    return total, again


def merge_comm(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Two sets of collectives in ``profile.comm``'s form, summed per module, phase and
    kind."""
    out: dict[str, Any] = {p: {ph: {k: dict(r) for k, r in ks.items()} for ph, ks in v.items()}
                           for p, v in a.items()}  # fmt: skip
    for path, phases in b.items():
        for phase, kinds in phases.items():
            mine = out.setdefault(path, {}).setdefault(phase, {})
            for kind, row in kinds.items():
                was = mine.setdefault(kind, {"calls": 0, "bytes": 0, "wire_bytes": 0})
                for key in ("calls", "bytes", "wire_bytes"):
                    was[key] += row[key]
    return out


def tp_notes(size: int, sequence: bool, own: bool) -> list[str]:
    """What a tensor-parallel plan's figures rest on."""
    whose = "the model's own tensor-parallel plan" if own else "the given tp_plan"
    notes = [
        f"tensor parallel {size}: {whose} applied by torch's parallelize_module to the "
        f"analysis's meta copy over a fake process group of {size} ranks; the figures are "
        "rank 0's shard (its parameters, gradients, FLOPs, activations and the collectives "
        "DTensor issues), those collectives on the critical path, none hidden under compute"
    ]
    if sequence:
        notes.append(
            "sequence parallel: the stream between the tensor-parallel regions, and the norms "
            f"on it, sharded along dimension {SEQUENCE_DIM} from the embeddings' outputs (or "
            "the first block's input) to the output head's input (or the last block's "
            "output); a module of a block the plan leaves whole gathers it and runs on the "
            "whole sequence"
        )
    return notes


def plan_words(entries: list[Entry]) -> dict[str, str]:
    """The plan in its plain form: each pattern that matched a module, with its style's
    name or class."""
    return {
        e.pattern: e.style if isinstance(e.style, str) else type(e.style).__name__ for e in entries
    }


__all__ = [
    "SEQUENCE_DIM",
    "STYLES",
    "Entry",
    "comm_seconds",
    "expand",
    "fake_mesh",
    "merge_comm",
    "model_plan",
    "parallelized",
    "plan_words",
    "styles",
    "tp_notes",
]
