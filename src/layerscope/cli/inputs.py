"""The inputs of ``layerscope profile``: ``--input-shape``, ``--kwargs``, ``--input FILE.pt``,
built on the model's device with a seeded generator, so a run is repeatable."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from layerscope.collect.inputs import first_embedding, model_device_dtype
from layerscope.errors import InvalidInputError
from layerscope.validate import (
    check_file,
    check_int,
    check_keys,
    check_shape_fits,
    each,
    refuse,
)

#: Keys of a random tensor in ``--kwargs`` (``{"shape": [2, 16], "dtype": "long"}``).
TENSOR_KEYS = ("shape", "dtype", "low", "high")


def parse_shape(
    text: str, flag: str = "--input-shape", *, example: str = "2,3,32,32", what: str = ""
) -> tuple[int, ...]:
    """``"2,3,32,32"`` (or ``2x3x32x32``) as a shape: every piece a positive integer.
    ``example`` and ``what`` (``BATCH,PROMPT``) are the form the flag documents, for the
    refusal."""
    pieces = text.replace("x", ",").split(",")
    if not all(p.strip().isdecimal() and int(p) > 0 for p in pieces):
        if what:
            refuse(flag, text, f"{what} (positive integers, e.g. {example})")
        refuse(flag, text, f"a shape such as {example} (positive integers)")
    return tuple(int(p) for p in pieces)


def parse_dtype(text: str, flag: str) -> torch.dtype:
    """A dtype by its torch name (``float16``, ``torch.bfloat16``, ``long``, ``bool``)."""
    dtype = getattr(torch, str(text).removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        refuse(flag, text, "a torch dtype such as float32, float16, bfloat16, long, int32, bool")
    return dtype


def parse_model_dtype(text: str) -> torch.dtype:
    """``--dtype``: a floating or complex dtype, the ones ``nn.Module.to`` casts a model to."""
    dtype = parse_dtype(text, "--dtype")
    if not (dtype.is_floating_point or dtype.is_complex):
        refuse(
            "--dtype", text, "a floating-point or complex dtype such as float32, float16, bfloat16"
        )
    return dtype


def parse_json_object(text: str, flag: str) -> dict[str, Any]:
    """A JSON object given on the command line."""
    allowed = "a JSON object such as '{\"n_layer\": 2}'"
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        refuse(flag, text, allowed, why=f"not JSON: {e}")
    except RecursionError:
        refuse(flag, text, allowed, why="nested too deeply to read")
    if not isinstance(value, dict):
        refuse(flag, text, allowed, why=f"a JSON {type(value).__name__}")
    return value


class InputMaker:
    """Random tensors for one model: on its device, floating ones in its dtype, integer
    ones in ``[low, high)`` with ``high`` defaulting to the size of the model's first
    embedding; drawn from a generator seeded once, so every run draws the same."""

    def __init__(
        self,
        model: nn.Module,
        seed: int,
        low: int | None = None,
        high: int | None = None,
        device: torch.device | None = None,
    ):
        self.device, self.dtype = model_device_dtype(model)
        if device is not None:
            self.device = device
        self.generator = torch.Generator().manual_seed(seed)
        self.low = 0 if low is None else low
        self.high = high
        #: Token ids by default: the model starts with an embedding.
        self.ids_first = first_embedding(model) is not None
        self.embedding = _first_embedding_size(model)

    def tensor(
        self,
        shape: tuple[int, ...],
        dtype: torch.dtype | None,
        low: int | None = None,
        high: int | None = None,
        what: str = "--input-shape",
    ) -> torch.Tensor:
        """A random tensor of ``shape`` (``what``: the flag it came from, for refusals)."""
        if dtype is None:
            dtype = torch.long if self.ids_first else self.dtype
        check_shape_fits(what, shape, shape, dtype.itemsize)
        if dtype.is_floating_point or dtype.is_complex:
            t = torch.randn(shape, generator=self.generator, dtype=dtype)
        else:
            lo = self.low if low is None else low
            hi = high if high is not None else self.high
            if hi is None:
                hi = 2 if dtype == torch.bool else (self.embedding or 2)
            if hi <= lo:
                raise InvalidInputError(
                    f"{what}: integer inputs are drawn from [low, high), got low={lo}, high={hi}"
                )
            t = torch.randint(lo, hi, shape, generator=self.generator)
            t = t.to(dtype)
        return t.to(self.device)

    def kwarg(self, name: str, spec: Any) -> Any:
        """A ``--kwargs`` value: a random tensor spec, else the JSON value itself."""
        if not isinstance(spec, dict) or "shape" not in spec:
            return spec
        what = f"--kwargs {name!r}"
        check_keys(what, spec, TENSOR_KEYS)
        shape = spec["shape"]
        if not isinstance(shape, list):
            refuse(f"{what} shape", shape, "a list of positive integers")
        dims = each(f"{what} shape", shape, lambda label, d: check_int(label, d, 1))
        if "dtype" in spec:
            dtype: torch.dtype | None = parse_dtype(spec["dtype"], f"{what} dtype")
        else:  # token ids by name (input_ids, decoder_input_ids), else as positional inputs
            dtype = torch.long if name.endswith("_ids") else None
        bounds = {
            key: check_int(f"{what} {key}", spec[key]) for key in ("low", "high") if key in spec
        }
        return self.tensor(tuple(dims), dtype, what=what, **bounds)


def _first_embedding_size(model: nn.Module) -> int | None:
    emb = first_embedding(model)
    if emb is None:  # not the first leaf: the first embedding anywhere (a decoder's ids)
        emb = next((m for m in model.modules() if isinstance(m, nn.Embedding)), None)
    return None if emb is None else int(emb.num_embeddings)


def load_input_file(path: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``--input FILE.pt``: a tensor, a tuple or list of them (positional inputs) or a
    dict (keyword inputs), loaded with ``weights_only=True`` (nothing is executed)."""
    check_file("--input", path)
    try:
        value = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # a pickle with code, a truncated file, not a torch file
        raise InvalidInputError(
            f"--input {path!r}: cannot load it with torch.load(weights_only=True): "
            f"{str(e).splitlines()[0] if str(e) else type(e).__name__}"
        ) from e
    if isinstance(value, torch.Tensor):
        return (value,), {}
    if isinstance(value, tuple | list):
        return tuple(value), {}
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return (), dict(value)
    raise InvalidInputError(
        f"--input {path!r}: expected a tensor, a tuple or list (positional inputs) or a "
        f"dict with string keys (keyword inputs), got {type(value).__name__}"
    )


def to_device(value: Any, device: torch.device, dtype: torch.dtype | None = None) -> Any:
    """Tensors in ``value`` (nested in tuples, lists and dicts) moved to ``device``, the
    floating ones cast to ``dtype`` when one is given."""
    if isinstance(value, torch.Tensor):
        if dtype is not None and value.is_floating_point():
            return value.to(device, dtype)
        return value.to(device)
    if isinstance(value, tuple | list):
        return type(value)(to_device(v, device, dtype) for v in value)
    if isinstance(value, dict):
        return {k: to_device(v, device, dtype) for k, v in value.items()}
    return value


def check_shape_flags(args: Any) -> None:
    """``--input-shape`` (each a shape), ``--input-dtype`` (only with a shape) and
    ``--kwargs`` (a JSON object), checked before the model is built."""
    if args.input_shape:
        for text in args.input_shape:
            parse_shape(text)
    elif args.input_dtype:
        raise InvalidInputError("--input-dtype needs --input-shape")
    if args.input_dtype:
        parse_dtype(args.input_dtype, "--input-dtype")
    if args.kwargs:
        parse_json_object(args.kwargs, "--kwargs")
