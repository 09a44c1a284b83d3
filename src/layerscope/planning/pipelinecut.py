"""A model cut into pipeline stages (``planning.pipeline``'s "Stages" and "Each stage
analysed"): the pieces in forward order, the cut (even, balanced by time, or given), the
meta copy shown as one stage, a stage's call and the tensor it sends on."""

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
                f"pp_split names {len(split)} module paths; {stages} stages (pp x "
                f"virtual_stages) start at {stages - 1} (each the first piece of a stage "
                "after the first)"
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


def balanced(seconds: Sequence[float], count: int) -> list[int]:
    """Where groups 2 to ``count`` of a contiguous split of ``seconds`` start, so that
    the largest group's sum is least (the linear partition problem, by dynamic
    programming; of equal splits, the one whose groups end earliest)."""
    n = len(seconds)
    total = [0.0, *itertools.accumulate(seconds)]
    inf = float("inf")
    # cost[k][j]: the least largest sum of the first j pieces in k groups
    cost = [[inf] * (n + 1) for _ in range(count + 1)]
    back = [[0] * (n + 1) for _ in range(count + 1)]
    cost[0][0] = 0.0
    for k in range(1, count + 1):
        for j in range(k, n - (count - k) + 1):
            for i in range(k - 1, j):
                worst = max(cost[k - 1][i], total[j] - total[i])
                if worst < cost[k][j]:
                    cost[k][j], back[k][j] = worst, i
    starts, j = [], n
    for k in range(count, 1, -1):
        j = back[k][j]
        starts.append(j)
    return starts[::-1]


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


def _first_float(signatures: Sequence[Any]) -> tuple[list[int], torch.dtype] | None:
    """(shape, dtype) of the first floating tensor of the first call in ``signatures``
    (a node's ``inputs`` or ``outputs``)."""
    from layerscope.profile import TensorSpec

    for call in signatures[:1]:
        for spec in call:
            if isinstance(spec, TensorSpec):
                dtype = getattr(torch, spec.dtype, None)
                if isinstance(dtype, torch.dtype) and dtype.is_floating_point:
                    return list(spec.shape), dtype
    return None


def received(prof: Any, model: nn.Module, sequence_parallel: bool) -> torch.Tensor:
    """The next stage's input: ``prof``'s first floating output, on meta, a leaf that
    requires its gradient. Under sequence parallelism the stream is sent sharded along
    the sequence (as torchtitan sends it): the stage is given a DTensor ``Shard(1)`` over
    ``model``'s tensor-parallel mesh whose local tensor is that leaf, so the stage's own
    code (masks, positions) sees the whole sequence."""
    found = _first_float(prof.root.outputs)
    if found is None:
        raise InvalidInputError(
            "mesh pp: a stage's output has no floating tensor to send to the next stage"
        )
    shape, dtype = found
    if not sequence_parallel:
        return torch.empty(shape, dtype=dtype, device="meta", requires_grad=True)
    from torch.distributed.tensor import DTensor, Shard

    mesh = next(p.device_mesh for p in model.parameters() if isinstance(p, DTensor))
    shape[1] //= mesh.size()
    local = torch.empty(shape, dtype=dtype, device="meta", requires_grad=True)
    return DTensor.from_local(local, mesh, [Shard(1)], run_check=False)


def local_bytes(t: torch.Tensor) -> int:
    """Bytes of ``t`` as one rank holds it (a DTensor's local shard)."""
    from torch.distributed.tensor import DTensor

    local = t.to_local() if isinstance(t, DTensor) else t
    return local.numel() * local.element_size()


def spec_bytes(signatures: Sequence[Any]) -> int:
    """Bytes of the first floating tensor of the first call in ``signatures`` (0: none)."""
    found = _first_float(signatures)
    return prod(found[0]) * found[1].itemsize if found else 0


__all__ = [
    "Layout",
    "balanced",
    "cut",
    "layout",
    "local_bytes",
    "received",
    "spec_bytes",
    "stage_call",
    "stage_view",
]
