"""Sequence parallelism in a tensor-parallel plan (``sequence_parallel=True``, a plan of
style names): the stream between the tensor-parallel regions sharded along the sequence
(dimension 1), as Megatron-LM and torchtitan shard it: a DTensor from the embeddings'
outputs (or, without embeddings, the first block's input) to the output head's input (or
the last block's output). The norms on it run on their shard (``SequenceParallel``);
each module whose column-wise linears read it all-gathers it first (one reduce-scatter
in the backward); the row-wise linears reduce-scatter their outputs instead of
all-reducing them; a module of a block that the plan leaves whole gathers it and splits
its output again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor, nn

from layerscope.errors import InvalidInputError

#: What sequence parallelism assumes of the activations' layout (batch-first).
SEQUENCE_DIM = 1


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


def sequence_styles(model: nn.Module, planned: Mapping[str, Any]) -> dict[str, Any]:
    """Sequence parallelism's styles (module doc): the stream between the tensor-parallel
    regions a DTensor sharded along the sequence, from the embeddings' outputs (or the
    first block's input) to the head's input (or the last block's output)."""
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel

    seq = Shard(SEQUENCE_DIM)
    gathered: dict[str, None] = {}
    blocks: dict[str, None] = {}
    out: dict[str, Any] = {}
    for path, style in planned.items():
        block = _block_of(model, path)
        if block is not None and style == "colwise":
            blocks[block] = None
            parent = path.rpartition(".")[0]
            if parent == block:  # a linear of the block's own: it gathers its input
                out[path] = ColwiseParallel(input_layouts=seq)
            gathered[parent if parent != block else path] = None
    if not gathered:
        raise InvalidInputError(
            "sequence_parallel=True shards the stream between the repeated blocks' "
            "column-wise linears, but no 'colwise' entry of the plan lies in a block of an "
            "nn.ModuleList"
        )
    out.update((path, _Stream(gather=True)) for path in gathered if path not in out)
    whole = {  # a module of the block the plan leaves whole: runs on the whole sequence
        f"{block}.{child}": None
        for block in blocks
        for child, module in model.get_submodule(block).named_children()
        if f"{block}.{child}" not in out
        and f"{block}.{child}" not in planned
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


__all__ = ["SEQUENCE_DIM", "sequence_styles"]
