"""Tensor and sequence parallelism in a plan (``mesh={"tp": N}``, ``tp_plan=``,
``sequence_parallel=``): the model's parallel plan applied, with torch's own
``parallelize_module``, to the analysis's meta copy over a fake process group of ``N``
ranks, and analysed with ``dtensor="local"`` (``collect.dtensors``), which sees one
rank's work: its
shards of every parameter and gradient, its FLOPs and activations, and the collectives
DTensor issues, forward and backward (``docs/plan.md``, "Tensor parallelism").

A plan is keyed by module paths, ``*`` standing for one path segment
(``"model.layers.*.self_attn.q_proj"``), as transformers' ``base_model_tp_plan`` and
torchtitan's ``parallelize_module`` plans are; a value is a torch ``ParallelStyle`` or
one of transformers' style names: applied with torch's styles of the same layouts
(``STYLES``), or, for what those do not express (packed projections, a mixture of
experts' experts, a plan's parameter entries), with transformers' own (``HF_STYLES``,
``hf_style``). Without ``tp_plan=`` the model's own plan is used (a transformers
model's ``_tp_plan``, or its config's ``base_model_tp_plan``).

``sequence_parallel=True``: ``planning.sequenceparallel``.
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
    under = under_base(model)
    return {f"{under}{k}": v for k, v in base.items()}


@dataclass(frozen=True)
class Entry:
    """One module (or parameter) of the model and the style it gets."""

    path: str
    style: Any  # a ParallelStyle or a style name
    pattern: str = ""  # the plan's key that matched it


def expand(model: nn.Module, plan: Mapping[str, Any], given: bool) -> list[Entry]:
    """The plan's patterns matched to the model's modules (or, matching none, to its
    parameters, which transformers' own styles shard: ``hf_style``), in the model's
    order. A pattern of a given plan that matches nothing is refused (a typo); the
    model's own plan may name modules a configuration leaves out."""
    names = [n for n, _ in model.named_modules() if n]
    params = [n for n, _ in model.named_parameters()]
    under = under_base(model)
    out: dict[str, Entry] = {}
    for pattern, style in plan.items():
        if not isinstance(pattern, str):
            raise InvalidInputError(f"tp_plan: keys are module paths, got {pattern!r}")
        _check_style(pattern, style)
        hits = _matches(pattern, style, names, params)
        if not hits and given and under and not pattern.startswith(under):
            # a pattern under the base model, as a config's base_model_tp_plan writes it
            hits = _matches(under + pattern, style, names, params)
        if not hits and given:
            raise InvalidInputError(
                f"tp_plan: {pattern!r} matches no module of the model ('*' stands for one "
                f"path segment, e.g. {_like(pattern, names)!r})"
            )
        for name in hits:
            out[name] = Entry(name, style, pattern)
    order = {n: i for i, n in enumerate([*names, *params])}
    return sorted(out.values(), key=lambda e: order[e.path])


def _matches(pattern: str, style: Any, names: list[str], params: list[str]) -> list[str]:
    """The modules ``pattern`` names (or, naming none, the parameters transformers'
    styles shard)."""
    rx = path_pattern(pattern)
    hits = [n for n in names if rx.fullmatch(n)]
    if not hits and isinstance(style, str):  # a parameter: transformers shards it
        hits = [n for n in params if rx.fullmatch(n) and hf_style(style, True) is not None]
    return hits


def _like(pattern: str, names: list[str]) -> str:
    """A pattern of the model's own paths like ``pattern`` (a module of its last name,
    its numbers as '*'), for a refusal's example."""
    last = pattern.rsplit(".", 1)[-1]
    found = next((n for n in names if n.rsplit(".", 1)[-1] == last), None)
    if found is None:
        return "layers.*.mlp.up_proj"
    return ".".join("*" if part.isdigit() else part for part in found.split("."))


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


def under_base(model: nn.Module) -> str:
    """``"<base_model_prefix>."`` for a transformers model holding its base model under
    that attribute (a head model: ``model.``), else "": what a config's plans, written
    for the base model, are under."""
    prefix = getattr(model, "base_model_prefix", "")
    return f"{prefix}." if prefix and isinstance(getattr(model, prefix, None), nn.Module) else ""


def path_pattern(pattern: str) -> re.Pattern[str]:
    """A plan's module path pattern as a regular expression: ``*`` one path segment."""
    return re.compile(
        "".join("[^.]+" if p == "*" else re.escape(p) for p in re.split(r"(\*)", pattern))
    )


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
        from layerscope.planning.sequenceparallel import sequence_styles

        out.update(sequence_styles(model, {e.path: e.style for e in entries}))
    return out


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
    model: nn.Module,
    size: int,
    plan: Mapping[str, Any] | None,
    sequence: bool,
    *,
    takes_plan: bool = True,
) -> Iterator[list[Entry]]:
    """Inside: ``model`` (the analysis's meta copy) parallelized over ``size`` fake ranks
    by ``plan`` (None: the model's own), rank 0 the process; the plan's entries. A
    session observes that rank's work with ``dtensor="local"``. ``takes_plan``: whether
    the caller's user can give a plan (``ls.plan``'s ``tp_plan``), for the refusal."""
    from torch.distributed.tensor.parallel import parallelize_module

    given = plan is not None
    chosen = dict(plan) if plan is not None else model_plan(model)
    if not chosen and not takes_plan:
        raise InvalidInputError(
            f"tp={size}: {type(model).__name__} has no tensor-parallel plan (a transformers "
            "config's base_model_tp_plan), which the model is split by; run it on one GPU "
            "(tp=1, --tp 1)"
        )
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
    with fake_mesh(size) as mesh, _quiet_cpu_mesh(), _unwrapped_meta_collectives():
        try:
            parallelize_module(model, mesh, styles(model, entries, sequence))
        except NotImplementedError as e:  # a style torch applies to Linear/Embedding only
            raise InvalidInputError(
                f"tensor parallel {size}: torch's parallelize_module refused the plan: {e} "
                "(GPT-2's Conv1D, for one, stores its weight transposed, which colwise and "
                "rowwise cannot split: give those modules no style, or convert them to "
                "nn.Linear)"
            ) from e
        _apply_hf(model, entries, mesh)
        _tie_again(model, tied)
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
def _unwrapped_meta_collectives() -> Iterator[None]:
    """A functional collective's meta output handed on as it is, not through
    ``_c10d_functional._wrap_tensor_autograd``. On a GPU (or gloo) that op wraps the
    output in an ``AsyncCollectiveTensor``, which holds no bytes of its own; its meta
    kernel is ``torch.empty_like``, a second buffer of the output's size, alive beside
    the output until the DTensor op that issued the collective returns: a column-wise
    output head's gathered logits counted twice at its peak (16,384 B more of the
    [2, 16, 128] float32 logits of ``tests/test_tp_steps.py``'s Llama, with or without
    sequence parallelism). Real tensors are still wrapped as torch wraps them."""
    from torch.distributed import _functional_collectives as funcol

    wrap = funcol._maybe_wrap_tensor

    def unwrapped(self: Any) -> Tensor:
        return self if self.is_meta else wrap(self)

    funcol._maybe_wrap_tensor = unwrapped
    try:
        yield
    finally:
        funcol._maybe_wrap_tensor = wrap


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
        from layerscope.planning.sequenceparallel import SEQUENCE_DIM

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
    "STYLES",
    "Entry",
    "comm_seconds",
    "expand",
    "fake_mesh",
    "model_plan",
    "parallelized",
    "path_pattern",
    "plan_words",
    "styles",
    "tp_notes",
    "under_base",
]
