"""Small helpers shared by the formula families (plain Python; no torch ops but a nested
tensor's metadata query)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from layerscope.metrics.flops.registry import Cost, Formula


def first_tensor(out: Any) -> Tensor:
    """The op's (first) output tensor: ``out`` itself or the first element of a tuple."""
    if isinstance(out, Tensor):
        return out
    if isinstance(out, (tuple, list)):
        for item in out:
            if isinstance(item, Tensor):
                return item
    raise TypeError(f"expected a tensor output, got {type(out).__name__}")


def per_output_element(flops: int, doc: str = "") -> Formula:
    """A formula costing ``flops`` per element of the op's (first) output."""

    def formula(*_args: Any, out: Any = None, **_kwargs: Any) -> Cost:
        return Cost(0, flops * first_tensor(out).numel())

    formula.__doc__ = doc or f"{flops} flop(s) per output element."
    formula.__name__ = f"per_output_element_{flops}"
    return formula


def per_input_element(flops: int, doc: str = "") -> Formula:
    """A formula costing ``flops`` per element of the op's first argument."""

    def formula(x: Tensor, *_args: Any, out: Any = None, **_kwargs: Any) -> Cost:
        return Cost(0, flops * x.numel())

    formula.__doc__ = doc or f"{flops} flop(s) per element of the first argument."
    formula.__name__ = f"per_input_element_{flops}"
    return formula


def nested_sizes(t: Tensor) -> list[list[int]]:
    """The shape of each component of a nested tensor: a strided one's from its size
    metadata; a jagged one's (``layout=torch.jagged``) from its offsets (or lengths),
    the ragged dimension (``_ragged_idx``, wherever a transpose moved it) one length per
    component."""
    if t.layout != torch.jagged:
        return [[int(n) for n in size] for size in t._nested_tensor_size().tolist()]
    njt: Any = t
    lengths = njt._lengths if njt._lengths is not None else njt._offsets.diff()
    ragged = njt._ragged_idx - 1  # the component's dims are the tensor's less the batch
    dims = list(t.shape[1:])
    return [
        [int(n) if i == ragged else int(d) for i, d in enumerate(dims)] for n in lengths.tolist()
    ]
