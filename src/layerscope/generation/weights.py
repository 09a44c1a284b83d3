"""Weights as deployed: a decoder's linear weights stored at a narrower width than the
model computes in, weight-only, as serving engines load quantized checkpoints.

Which weights: every ``nn.Linear`` except the output projection (the module whose weight
is the output embeddings: ``get_output_embeddings()``, else one named ``lm_head``), as
AutoAWQ and GPTQ quantize (both leave ``lm_head`` and the embeddings at the model's
width). Bytes per element of a quantized weight, with its scales:

- ``"int4"``: AWQ/GPTQ-style, 4 bits per weight packed in int32, and per group of
  ``group_size`` input channels (default 128) one float16 scale and one 4-bit zero point:
  ``0.5 + (2 + 0.5) / group_size`` bytes.
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

from dataclasses import dataclass

from torch import nn

from layerscope.generation.narrowing import read_less
from layerscope.metrics.params import local
from layerscope.profile import Profile
from layerscope.validate import check_choice, check_int

#: The schemes ``weights=`` names: bits per weight, scale bytes per group or row.
SCHEMES = ("bf16", "fp16", "fp8", "int8", "int4")


@dataclass(frozen=True)
class WeightScheme:
    """How the quantized linears' weights are stored (module docstring)."""

    name: str
    group_size: int = 128

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
    """``weights=`` and ``group_size=`` checked (None: the model's own weights)."""
    if weights is None:
        return None
    name = check_choice("weights", weights, list(SCHEMES))
    return WeightScheme(name, check_int("group_size", group_size, 1))


def quantized_linears(model: nn.Module) -> dict[str, nn.Linear]:
    """The linears a scheme stores narrower, by path: all but the output projection."""
    head = None
    get = getattr(model, "get_output_embeddings", None)
    if callable(get):
        try:
            head = get()
        except (NotImplementedError, AttributeError):
            head = None
    return {
        path: m
        for path, m in model.named_modules()
        if isinstance(m, nn.Linear)
        and m is not head
        and path.rsplit(".", 1)[-1] != "lm_head"
        and m.weight.dim() == 2
    }


def stored_bytes(model: nn.Module, scheme: WeightScheme | None) -> int:
    """Bytes of the parameters and buffers as stored (each tensor once; tied weights
    once): the quantized linears' weights at the scheme's width, the rest as they are; a
    DTensor's (tensor parallelism) this GPU's shard."""
    total = sum(local(t).nbytes for t in (*model.parameters(), *model.buffers()))
    if scheme is None:
        return total
    seen: set[int] = set()
    for m in quantized_linears(model).values():
        w = local(m.weight)
        if id(m.weight) in seen:
            continue
        seen.add(id(m.weight))
        total += round(scheme.bytes_of(*w.shape)) - w.nbytes
    return total


def narrow(prof: Profile, linears: dict[str, nn.Linear], scheme: WeightScheme) -> None:
    """Make ``prof`` (an analysis of the model at its own width) read every quantized
    linear's weight at the scheme's width: each call of the linear reads its weight once,
    so its bytes moved, and its parents', drop by the difference times its calls."""
    for path, m in linears.items():
        try:
            calls = prof.node(path).calls
        except KeyError:
            continue  # not called in this analysis
        w = local(m.weight)  # tensor parallelism: this GPU's shard, as analysed
        read_less(prof, path, round(w.nbytes - scheme.bytes_of(*w.shape)) * calls)


__all__ = [
    "SCHEMES",
    "WeightScheme",
    "check_scheme",
    "narrow",
    "quantized_linears",
    "stored_bytes",
]
