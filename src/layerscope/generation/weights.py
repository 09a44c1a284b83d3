"""Weights as deployed: a decoder's matmul weights stored at a narrower width than the
model computes in, weight-only, as serving engines load quantized checkpoints.

Which weights: every ``nn.Linear`` and transformers ``Conv1D`` (GPT-2's projections, a
linear with its weight stored transposed) except the output projection (the module
whose weight is the output embeddings: ``get_output_embeddings()``, else one named
``lm_head``) and a mixture of experts' router (a linear beside the fused experts), as
AutoAWQ and GPTQ quantize (both leave ``lm_head``, the embeddings and the routers at the
model's width); and the 3-D weights of transformers' fused experts (``(experts, out,
in)``: one matrix an expert, quantized as one linear each). Bytes per element of a
quantized weight, with its scales:

- ``"int4"``: AWQ/GPTQ-style, 4 bits per weight packed in int32, and per group of
  ``group_size`` input channels (default 128) one float16 scale and one 4-bit zero point:
  ``0.5 + (2 + 0.5) / group_size`` bytes. The group size divides every such weight's
  input channels (AWQ and GPTQ refuse one that does not); a weight narrower than one
  group is one group.
- ``"int8"``: 8 bits per weight with one float16 scale per output channel (symmetric,
  as vLLM's W8A16 and bitsandbytes' int8 weights): ``1`` byte, ``+ 2`` per row.
- ``"fp8"``: float8 e4m3 per weight with one float32 scale per output channel (vLLM's
  per-channel FP8 checkpoints): ``1`` byte, ``+ 4`` per row.
- ``"bf16"``/``"fp16"``: 2 bytes, no scales (the model's width when it runs in one).

A decode step reads each quantized weight once at its stored width. The int matmuls run
at the model's compute dtype (weight-only: the weight is widened in the kernel, the
activations are not quantized); FP8 ones run at the target's FP8 peak where it has one
(W8A8, as FP8 serving engines do; the activations' casts are not charged), else at the
compute dtype's. FLOPs are unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from layerscope.errors import InvalidInputError
from layerscope.generation.narrowing import read_less
from layerscope.metrics.params import local
from layerscope.planning.expertparallel import experts_modules
from layerscope.profile import Profile
from layerscope.validate import check_choice, check_int

#: The schemes ``weights=`` names: bits per weight, scale bytes per group or row.
SCHEMES = ("bf16", "fp16", "fp8", "int8", "int4")
#: int4's group of input channels when none is given (AWQ's and GPTQ's usual)
GROUP_SIZE = 128


@dataclass(frozen=True)
class WeightScheme:
    """How the quantized weights are stored (module docstring)."""

    name: str
    group_size: int = GROUP_SIZE

    def bytes_of(self, rows: int, columns: int) -> float:
        """Bytes of one ``rows`` x ``columns`` weight (out x in features), scales included."""
        n = rows * columns
        if self.name == "int4":
            groups = rows * -(-columns // self.group_size)
            return n * 0.5 + groups * (2 + 0.5)
        if self.name == "int8":
            return n + rows * 2
        if self.name == "fp8":
            return n + rows * 4
        return n * 2.0

    def words(self) -> str:
        """The scheme in a sentence, for the notes."""
        return {
            "int4": f"int4 weight-only, group {self.group_size} (AWQ/GPTQ-style: 4 bits a "
            "weight, a float16 scale and a 4-bit zero per group)",
            "int8": "int8 weight-only, a float16 scale per output channel",
            "fp8": "float8 e4m3, a float32 scale per output channel (W8A8: the matmuls "
            "at the target's FP8 peak where it has one, else at the compute dtype's)",
        }.get(self.name, f"{self.name}, no scales")


def check_scheme(weights: object, group_size: object) -> WeightScheme | None:
    """``weights=`` and ``group_size=`` checked (None: the model's own weights); a group
    size is int4's only."""
    size = check_int("group_size", group_size, 1)
    name = None if weights is None else check_choice("weights", weights, list(SCHEMES))
    if size != GROUP_SIZE and name != "int4":
        raise InvalidInputError(
            f"group_size ({size}) is int4's scale group: it needs weights='int4', got "
            f"weights={name!r}"
        )
    return None if name is None else WeightScheme(name, size)


def check_groups(weights: Mapping[str, Quantized], scheme: WeightScheme | None) -> None:
    """int4's groups split every quantized weight's input channels evenly (AWQ and GPTQ
    refuse a group size that does not divide them); refused, naming the first that it
    does not and the group sizes that would do (``group_sizes``). A weight narrower than
    one group is one group (a small model's)."""
    if scheme is None or scheme.name != "int4":
        return
    channels = [q.matrices(w)[2] for q in weights.values() for w in q.weights]
    for path, q in weights.items():
        for w in q.weights:
            columns = q.matrices(w)[2]
            if columns > scheme.group_size and columns % scheme.group_size:
                sizes = group_sizes(channels)
                instead = (
                    f"e.g. {', '.join(map(str, sizes))}: powers of two that divide every "
                    "quantized weight's input channels"
                    if sizes
                    else "no power of two divides every quantized weight's input channels; "
                    "weights='int8' scales each output channel instead"
                )
                raise InvalidInputError(
                    f"group_size={scheme.group_size} does not divide the {columns:,} input "
                    f"channels of {path}'s weight: int4's groups split them evenly; give a "
                    f"group size that divides {columns:,} ({instead})"
                )


def group_sizes(channels: Sequence[int], most: int = 3) -> list[int]:
    """Up to ``most`` group sizes for int4, largest first: the powers of two from 2 up that
    divide every count of input channels in ``channels``."""
    common = math.gcd(*channels)
    largest = common & -common  # the largest power of two dividing them all
    return [s for s in (largest >> i for i in range(most)) if s >= 2]


@dataclass(frozen=True)
class Quantized:
    """One module's weight a scheme stores narrower: ``kind`` ``"linear"`` (``(out,
    in)``), ``"conv1d"`` (``(in, out)``) or ``"experts"`` (``(experts, out, in)`` each)."""

    kind: str
    weights: tuple[torch.Tensor, ...]

    def matrices(self, weight: torch.Tensor) -> tuple[int, int, int]:
        """(matrices, rows, columns) of ``weight`` as this GPU holds it (a DTensor's
        shard): rows are output channels, columns input channels."""
        shape = tuple(local(weight).shape)
        if self.kind == "experts":
            return shape[0], shape[1], shape[2]
        if self.kind == "conv1d":
            return 1, shape[1], shape[0]
        return 1, shape[0], shape[1]

    def saved(self, scheme: WeightScheme) -> int:
        """Bytes its weights take less at the scheme's width than as they are."""
        return sum(self.saved_of(w, scheme) for w in self.weights)

    def saved_of(self, weight: torch.Tensor, scheme: WeightScheme) -> int:
        """Bytes one of its weights takes less at the scheme's width than as it is."""
        count, rows, columns = self.matrices(weight)
        return local(weight).nbytes - round(count * scheme.bytes_of(rows, columns))


def _head(model: nn.Module) -> nn.Module | None:
    get = getattr(model, "get_output_embeddings", None)
    if callable(get):
        try:
            found = get()
        except (NotImplementedError, AttributeError):
            return None
        return found if isinstance(found, nn.Module) else None
    return None


def _is_conv1d(m: nn.Module) -> bool:
    """transformers' ``Conv1D`` (a linear whose weight is ``(in, out)``)."""
    w = getattr(m, "weight", None)
    return type(m).__name__ == "Conv1D" and isinstance(w, nn.Parameter) and w.dim() == 2


def quantized_weights(model: nn.Module) -> dict[str, Quantized]:
    """The weights a scheme stores narrower, by module path (module doc)."""
    head = _head(model)
    experts = {path for path, _ in experts_modules(model)}
    routers = {path.rsplit(".", 1)[0] for path in experts if "." in path}
    out: dict[str, Quantized] = {}
    for path, m in model.named_modules():
        parent = path.rsplit(".", 1)[0] if "." in path else ""
        if path in experts:
            kept = tuple(p for p in m.parameters(recurse=False) if p.dim() == 3)
            if kept:
                out[path] = Quantized("experts", kept)
        elif m is head or path.rsplit(".", 1)[-1] == "lm_head" or parent in routers:
            continue
        elif isinstance(m, nn.Linear) and m.weight.dim() == 2:
            out[path] = Quantized("linear", (m.weight,))
        elif _is_conv1d(m):
            out[path] = Quantized("conv1d", (m.weight,))
    return out


def stored_bytes(model: nn.Module, scheme: WeightScheme | None) -> int:
    """Bytes of the parameters and buffers as stored (each tensor once; tied weights
    once): the quantized weights at the scheme's width, the rest as they are; a
    DTensor's (tensor parallelism) this GPU's shard."""
    total = sum(local(t).nbytes for t in (*model.parameters(), *model.buffers()))
    if scheme is None:
        return total
    seen: set[int] = set()
    for q in quantized_weights(model).values():
        for w in q.weights:
            if id(w) not in seen:
                seen.add(id(w))
                total -= q.saved_of(w, scheme)
    return total


def narrow(prof: Profile, weights: dict[str, Quantized], scheme: WeightScheme) -> None:
    """Make ``prof`` (an analysis of the model at its own width) read every quantized
    linear's weight at the scheme's width: each call of the linear reads its weight once,
    so its bytes moved, and its parents', drop by the difference times its calls. The
    experts' weights are read as their routing says (``generation.moe``)."""
    for path, q in weights.items():
        if q.kind == "experts":
            continue
        try:
            calls = prof.node(path).calls
        except KeyError:
            continue  # not called in this analysis
        read_less(prof, path, q.saved(scheme) * calls)


__all__ = [
    "GROUP_SIZE",
    "SCHEMES",
    "Quantized",
    "WeightScheme",
    "check_groups",
    "check_scheme",
    "group_sizes",
    "narrow",
    "quantized_weights",
    "stored_bytes",
]
