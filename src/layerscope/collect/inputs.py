"""Turn what the user gave (a tensor, args/kwargs, or input shapes) into a call."""

from __future__ import annotations

import inspect
import numbers
from collections.abc import Sequence
from itertools import chain
from typing import Any

import torch
from torch import nn

from layerscope.errors import InvalidInputError
from layerscope.validate import check_shape_fits


def model_device_dtype(model: nn.Module) -> tuple[torch.device, torch.dtype]:
    """Device and dtype of the model's first floating tensor (cpu/float32 if none)."""
    device: torch.device | None = None
    # Lazily: the first floating tensor usually comes first, so the rest is never walked.
    for t in chain(model.parameters(), model.buffers()):
        if torch.nn.parameter.is_lazy(t):
            continue
        if device is None:
            device = t.device
        if t.is_floating_point():
            return t.device, t.dtype
    return device or torch.device("cpu"), torch.get_default_dtype()


def first_embedding(model: nn.Module) -> nn.Embedding | nn.EmbeddingBag | None:
    """The embedding that reads the model's token ids: a transformers model's input
    embeddings when its forward takes ``input_ids`` first (a vision-language model
    defines its vision tower first), else the first leaf module in definition order, if
    it is an embedding."""
    get = getattr(model, "get_input_embeddings", None)
    if callable(get) and _first_parameter(model) == "input_ids":
        try:
            found = get()
        except (NotImplementedError, AttributeError):  # a model that does not say
            found = None
        if isinstance(found, nn.Embedding | nn.EmbeddingBag):
            return found
    for m in model.modules():
        if not m._modules:
            return m if isinstance(m, nn.Embedding | nn.EmbeddingBag) else None
    return None


def _first_parameter(model: nn.Module) -> str | None:
    """The name of the forward's first parameter (None: no signature to read)."""
    try:
        names = list(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return None
    return names[0] if names else None


def _is_dim(d: object) -> bool:
    """An integer size: Python's or numpy's (bools too, refused with a precise message)."""
    return isinstance(d, numbers.Integral)


def normalise_shapes(input_shape: Any) -> list[tuple[int, ...]]:
    """``(1, 3, 224, 224)`` is one input; ``[(1, 8), (1, 8)]`` is two. Sizes may be numpy
    integers; they come back as Python ints."""
    if isinstance(input_shape, torch.Size) or (
        isinstance(input_shape, Sequence)
        and not isinstance(input_shape, str)
        and all(map(_is_dim, input_shape))
    ):
        shapes = [tuple(input_shape)]
    elif (
        isinstance(input_shape, Sequence)
        and not isinstance(input_shape, str)
        and input_shape
        and all(
            isinstance(s, Sequence) and not isinstance(s, str) and all(map(_is_dim, s))
            for s in input_shape
        )
    ):
        shapes = [tuple(s) for s in input_shape]
    else:
        raise InvalidInputError(
            "input_shape must be a sequence of ints (one input, e.g. (1, 3, 224, 224)) or a "
            f"list of them (several inputs, e.g. [(1, 8), (1, 8)]), got {input_shape!r}"
        )
    for s in shapes:
        if any(isinstance(d, bool) or d < 0 for d in s):
            raise InvalidInputError(f"input_shape dimensions must be non-negative ints, got {s!r}")
    return [tuple(int(d) for d in s) for s in shapes]


def random_inputs(
    model: nn.Module, input_shape: Any, input_dtype: torch.dtype | None = None
) -> tuple[Any, ...]:
    """Random tensors of the given shapes on the model's device.

    Floating inputs use the model's dtype. When the model starts with an embedding (or
    ``input_dtype`` is an integer type), inputs are token ids in ``[0, num_embeddings)``.
    """
    shapes = normalise_shapes(input_shape)
    device, dtype = model_device_dtype(model)
    emb = first_embedding(model)
    if input_dtype is None:
        input_dtype = torch.long if emb is not None else dtype
    out: list[torch.Tensor] = []
    for shape in shapes:
        check_shape_fits("input_shape", shape, shape, input_dtype.itemsize)
        if input_dtype.is_floating_point or input_dtype.is_complex:
            out.append(torch.randn(shape, dtype=input_dtype, device=device))
        elif input_dtype == torch.bool:
            out.append(torch.randint(0, 2, shape, device=device).bool())
        else:
            high = emb.num_embeddings if emb is not None else 2
            out.append(torch.randint(0, high, shape, dtype=input_dtype, device=device))
    return tuple(out)
