"""What a training step needs in memory on one device, from a measured profile: the
plan's arithmetic (``planning.states``: the optimizer's state tensors, Adam's ``step``)
over the profile's trainable parameters by dtype.

``training_footprint(profile, optimizer=...)`` adds up parameters, buffers, one gradient
per trainable parameter, the optimizer's state, fp32 master weights when asked, and the
forward activation peak. ``max_batch_size`` (``layerscope.session.batch``) builds on it
to find the largest batch that fits a budget; ``ls.plan`` gives the whole step (the
backward's peak, sharding, checkpointing) from the same arithmetic.
"""

from __future__ import annotations

from typing import Any, Literal

import torch

import layerscope.metricspec as ms
from layerscope.errors import InvalidInputError
from layerscope.planning.states import OPTIMIZER_STATES, optimizer_state_bytes
from layerscope.profile import Profile
from layerscope.validate import check_bool, check_choice, check_instance, check_whole

OptimizerName = Literal["adamw", "adam", "sgd", "sgd_momentum"]
_HALF = frozenset({"float16", "bfloat16"})


def _itemsize(dtype_name: str) -> int:
    dtype = getattr(torch, dtype_name, None)
    if not isinstance(dtype, torch.dtype):
        raise InvalidInputError(f"unknown parameter dtype {dtype_name!r} in the profile")
    return dtype.itemsize


def _trainable_by_dtype(profile: Profile) -> dict[str, dict[str, int]]:
    rows = profile.memory.get("params_by_dtype")
    if rows is not None:
        return {str(k): dict(v) for k, v in rows.items()}
    # A profile made without MemoryObserver: usable only if every parameter trains.
    root = profile.root.metrics
    if root.get(ms.TRAINABLE_PARAMS, 0) != root.get(ms.PARAMS, 0):
        raise InvalidInputError(
            "the profile has frozen parameters but no per-dtype trainable counts; profile "
            "with observers=[MemoryObserver()]"
        )
    out: dict[str, dict[str, int]] = {}
    for dtype, row in profile.root.by_dtype.items():
        if row.get(ms.PARAMS):
            n = row[ms.PARAMS]
            out[dtype] = {
                ms.PARAMS: n,
                ms.TRAINABLE_PARAMS: n,
                "tensors": 0,
                "trainable_tensors": 0,
            }
    return out


def training_footprint(
    profile: Profile,
    optimizer: OptimizerName = "adamw",
    *,
    master_weights: bool = False,
    amsgrad: bool = False,
    activation_bytes: int | None = None,
) -> dict[str, Any]:
    """Bytes one training step needs, by part, from a profile measured with MemoryObserver.

    - parameters and buffers: as counted in the profile (tied tensors once);
    - gradients: one per trainable parameter, in the parameter's dtype;
    - optimizer state: ``OPTIMIZER_STATES[optimizer]`` full-size tensors per trainable
      parameter (Adam/AdamW 2, or 3 with ``amsgrad``; momentum SGD 1; plain SGD 0) in the
      parameter's dtype, as torch.optim allocates them, plus Adam's 4-byte ``step`` per
      parameter tensor;
    - ``master_weights=True`` (mixed precision): an fp32 copy of every fp16/bf16 trainable
      parameter, whose optimizer states are then fp32 too (16 bytes per parameter with
      Adam: 2 weight + 2 grad + 4 master + 8 states);
    - activations: ``activation_bytes`` if given, else the measured forward peak
      (``profile.memory["forward_peak_bytes"]``).

    Transients of the backward pass beyond the forward peak are not included; a profile
    made with ``backward=True`` has them in ``memory["backward_peak_bytes"]``.
    """
    check_instance("profile", profile, Profile, "a Profile (ls.profile(model, x, memory=True))")
    check_choice("optimizer", optimizer, list(OPTIMIZER_STATES))
    master_weights = check_bool("master_weights", master_weights)
    amsgrad = check_bool("amsgrad", amsgrad)
    if amsgrad and optimizer not in ("adam", "adamw"):
        raise InvalidInputError("amsgrad applies to adam and adamw only")
    if activation_bytes is not None:
        activation_bytes = check_whole("activation_bytes", activation_bytes, 0)
    elif "forward_peak_bytes" in profile.memory:
        activation_bytes = int(profile.memory["forward_peak_bytes"])
    else:
        raise InvalidInputError(
            "the profile has no forward peak: profile the model on an input with "
            "observers=[MemoryObserver()], or pass activation_bytes"
        )
    grads = master = state = 0
    trainable = 0
    notes: list[str] = []
    for dtype, row in _trainable_by_dtype(profile).items():
        n = row.get(ms.TRAINABLE_PARAMS, 0)
        size = _itemsize(dtype)
        trainable += n
        grads += n * size
        state_size = size
        if master_weights and dtype in _HALF:
            master += n * 4
            state_size = 4
        state += optimizer_state_bytes(
            optimizer, n, row.get("trainable_tensors", 0), state_size, amsgrad=amsgrad
        )
    if master_weights and not master:
        notes.append("master_weights: no fp16/bf16 trainable parameters, so no fp32 copy")
    root = profile.root.metrics
    parts = {
        ms.PARAM_BYTES: int(root.get(ms.PARAM_BYTES, 0)),
        ms.BUFFER_BYTES: int(root.get(ms.BUFFER_BYTES, 0)),
        ms.GRAD_BYTES: grads,
        "master_weight_bytes": master,
        "optimizer_state_bytes": state,
        ms.ACTIVATION_BYTES: activation_bytes,
    }
    return {
        "optimizer": optimizer,
        "master_weights": master_weights,
        "amsgrad": amsgrad,
        ms.TRAINABLE_PARAMS: trainable,
        **parts,
        "total_bytes": sum(parts.values()),
        "notes": notes,
    }


def record_training_footprint(
    profile: Profile, optimizer: OptimizerName = "adamw", **options: Any
) -> dict[str, Any]:
    """``training_footprint``, also stored as ``profile.memory["training"]``."""
    result = training_footprint(profile, optimizer, **options)
    profile.memory["training"] = result
    return result
