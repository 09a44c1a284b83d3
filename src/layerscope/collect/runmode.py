"""How the model was called: train or eval mode, the autograd mode and autocast, as its
calls found them. A profile's run line says what the code around the calls set (an
``m.eval()``, a ``torch.no_grad()`` or a ``torch.autocast`` inside a Profiler's block),
not what held when profiling began."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from layerscope.collect.signature import dtype_name

#: autocast's device types whose state is read (those a model's tensors can be on)
_AUTOCAST_DEVICES = ("cuda", "cpu")


def grad_mode() -> str:
    """The autograd mode in force: "inference_mode", "no_grad" or "enabled"."""
    if torch.is_inference_mode_enabled():
        return "inference_mode"
    return "enabled" if torch.is_grad_enabled() else "no_grad"


def autocast_dtype(device_type: str) -> str | None:
    """The dtype autocast runs ``device_type``'s ops in, or None where it is off."""
    if device_type not in _AUTOCAST_DEVICES or not torch.is_autocast_enabled(device_type):
        return None
    return dtype_name(torch.get_autocast_dtype(device_type))


def run_state(model: nn.Module, device_type: str) -> dict[str, Any]:
    """The model's mode now: ``training``, ``grad_mode`` and, where autocast is on for
    the device type its tensors are on, ``autocast`` (its dtype's name) and
    ``autocast_device`` (that device type: its rules are that device's)."""
    state: dict[str, Any] = {"training": model.training, "grad_mode": grad_mode()}
    cast = autocast_dtype(device_type)
    if cast is not None:
        state["autocast"], state["autocast_device"] = cast, device_type
    return state


def _words(key: str, value: Any) -> str:
    """A field's value as the notice says it."""
    if key == "training":
        return "train mode" if value else "eval mode"
    return "off" if value is None else str(value)


def describe_modes(states: list[dict[str, Any]]) -> str:
    """A notice for a model called in more than one mode: each field that differed, with
    its values in the order first seen."""
    differ = []
    for key, say in (("training", ""), ("grad_mode", "grad "), ("autocast", "autocast ")):
        seen = list(dict.fromkeys(_words(key, s.get(key)) for s in states))
        if len(seen) > 1:
            differ.append(say + " then ".join(seen))
    return (
        "the model was called in more than one mode (" + "; ".join(differ) + "): the Run "
        "line gives its first call's"
    )


__all__ = ["autocast_dtype", "describe_modes", "grad_mode", "run_state"]
