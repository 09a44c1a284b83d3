"""Flatten any input or output structure into a Signature of tensor and value leaves.

Handles tensors, tuples, lists, named tuples (PackedSequence), dicts and other mappings
(Hugging Face ``ModelOutput``), dataclasses, ``None`` and scalars. Anything else is one
opaque leaf recorded by its type. Bounded in depth and leaf count so a huge cache object
cannot make recording expensive.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from layerscope.profile import Signature, Spec, TensorSpec, ValueSpec

MAX_LEAVES = 64
MAX_DEPTH = 8
_SCALARS = (bool, int, float, complex, str, type(None))


_DTYPE_NAMES: dict[torch.dtype, str] = {}
_DEVICE_NAMES: dict[torch.device, str] = {}


def dtype_name(dtype: torch.dtype) -> str:
    """``float32`` for ``torch.float32``: how a dtype is named in profiles (cached)."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


def tensor_spec(path: str, t: torch.Tensor) -> Spec:
    if t.is_nested:
        return ValueSpec(path, "nested_tensor", None)
    return spec_of(path, t.shape, t.dtype, t.device)


def spec_of(path: str, shape: torch.Size, dtype: torch.dtype, device: torch.device) -> Spec:
    """The spec of a dense tensor of this shape, dtype and device."""
    try:
        dims = tuple(map(int, shape))
    except Exception:  # symbolic sizes that have no concrete value
        return ValueSpec(path, "Tensor", "symbolic shape")
    device_name = _DEVICE_NAMES.get(device)
    if device_name is None:
        device_name = _DEVICE_NAMES[device] = str(device)
    return TensorSpec(path, dims, dtype_name(dtype), device_name)


def value_spec(path: str, v: Any) -> Spec:
    if isinstance(v, _SCALARS):
        text = repr(v)
        return ValueSpec(path, type(v).__name__, text if len(text) <= 40 else text[:37] + "...")
    return ValueSpec(path, type(v).__name__, None)


def _join(prefix: str, key: object) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


def flatten(obj: Any, prefix: str = "") -> Signature:
    """Leaves of ``obj`` in a deterministic order, each named by its path."""
    out: list[Spec] = []
    _walk(obj, prefix, 0, out)
    return tuple(out)


def flatten_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Signature:
    """A call's inputs: positional arguments named by index, keyword arguments by name."""
    out: list[Spec] = []
    for i, a in enumerate(args):
        _walk(a, str(i), 0, out)
    for k, v in kwargs.items():
        _walk(v, str(k), 0, out)
    return tuple(out)


def _walk(obj: Any, path: str, depth: int, out: list[Spec]) -> None:
    if len(out) >= MAX_LEAVES:
        if len(out) == MAX_LEAVES:
            out.append(ValueSpec("...", "truncated", f"more than {MAX_LEAVES} leaves"))
        return
    if isinstance(obj, torch.Tensor):
        out.append(tensor_spec(path, obj))
        return
    if depth >= MAX_DEPTH or isinstance(obj, _SCALARS):
        out.append(value_spec(path, obj))
        return
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            _walk(v, _join(path, k), depth + 1, out)
        return
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        for name in obj._fields:
            _walk(getattr(obj, name), _join(path, name), depth + 1, out)
        return
    if isinstance(obj, list | tuple):
        for i, v in enumerate(obj):
            _walk(v, _join(path, i), depth + 1, out)
        return
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            _walk(getattr(obj, f.name, None), _join(path, f.name), depth + 1, out)
        return
    out.append(value_spec(path, obj))


def iter_tensors(obj: Any) -> list[torch.Tensor]:
    """Every tensor leaf of a structure, by the same traversal rules as ``flatten``."""
    found: list[torch.Tensor] = []
    _tensors(obj, 0, found)
    return found


def _tensors(obj: Any, depth: int, found: list[torch.Tensor]) -> None:
    if isinstance(obj, torch.Tensor):
        found.append(obj)
    elif depth >= MAX_DEPTH or isinstance(obj, _SCALARS):
        return
    elif isinstance(obj, Mapping):
        for v in obj.values():
            _tensors(v, depth + 1, found)
    elif isinstance(obj, list | tuple):
        for v in obj:
            _tensors(v, depth + 1, found)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            _tensors(getattr(obj, f.name, None), depth + 1, found)


def tensor_key(values: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """``(shape, dtype, device)`` of each value if every one is a plain dense tensor (and
    few enough for a Signature to keep them all), else None: what their Signature is
    made of, at a fraction of the cost of building it."""
    if len(values) > MAX_LEAVES:
        return None
    key = []
    for v in values:
        if type(v) is not torch.Tensor or v.is_nested:
            return None
        key.append((v.shape, v.dtype, v.device))
    return tuple(key)


def signature_of(entry: Any, output: bool) -> Signature:
    """The Signature of a recorded call from what the tracker kept of it: a Signature
    already, a ``tensor_key`` (tensors named by position, as ``flatten_call`` and
    ``flatten`` of a tuple name them), or, for an output that is one bare tensor, its
    ``(shape, dtype, device)`` (named ``""``)."""
    if output and entry and type(entry[0]) is torch.Size:
        return (spec_of("", *entry),)
    if not entry or type(entry[0]) is tuple:
        return tuple(spec_of(str(i), *leaf) for i, leaf in enumerate(entry))
    return entry  # type: ignore[no-any-return]
