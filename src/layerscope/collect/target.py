"""A ``meta`` analysis that follows the kernels of the device the model will run on.

On ``meta`` some ops take another kernel than on a real device, and that changes what
is saved for backward, the peaks and the FLOPs. With ``target="cpu"`` a session on meta
tensors makes them take the CPU's:

- ``F.scaled_dot_product_attention``: torch's CPU backend choice
  (``_fused_sdp_choice`` asked with the CPU dispatch key, which answers on meta tensors);
  for the flash choice, the CPU's input preparation (a boolean mask becomes an additive
  float mask through ``where``) and ``_scaled_dot_product_flash_attention_for_cpu``, which saves the
  log-sum-exp instead of the attention matrix. Otherwise the math path, as on meta.
- eval-mode ``native_batch_norm``: the CPU kernel returns empty saved statistics.

``Steering`` is a ``TorchFunctionMode`` entered around the model's run (above the
session's dispatch mode, so the aten ops it calls are seen and counted as usual), and
``adjust_output`` is called by the dispatch mode for each op. ``kernels`` counts the
choices made, for the profile. CUDA targets are not steered (their SDPA selection rules
are not ported): asking for one is an error.

Known difference left: oneDNN's LSTM (``mkldnn_rnn_layer``) on CPU keeps a workspace its
meta kernel reports as 0 bytes; on meta, RNNs run decomposed cells.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from layerscope.errors import InvalidInputError

TARGETS = ("cpu",)
_aten = torch.ops.aten
_SDPA_FLASH = 1  # torch's SDPBackend.flash_attention
_CPU = torch._C.DispatchKey.CPU


def check_target(target: object) -> str | None:
    """``target=``: None or "cpu"."""
    if target is None or target == "cpu":
        return target
    if (isinstance(target, str) and target.lower() in ("cuda", "gpu")) or (
        isinstance(target, str) and target.lower().startswith(("h1", "h2", "a1", "l4", "rtx"))
    ):
        raise InvalidInputError(
            f"target={target!r}: following a GPU's kernels on meta is not supported yet "
            "(torch's CUDA attention selection is not ported); use target='cpu', or "
            "analyse on the GPU itself"
        )
    raise InvalidInputError(f"target must be 'cpu' or None, got {target!r}")


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], i: int, name: str, default: Any) -> Any:
    return args[i] if len(args) > i else kwargs.get(name, default)


class Steering(TorchFunctionMode):
    """Runs SDPA on meta tensors through the CPU's kernel choice; counts choices."""

    def __init__(self) -> None:
        super().__init__()
        self.kernels: dict[str, dict[str, int]] = {}

    def count(self, op: str, kernel: str) -> None:
        per_op = self.kernels.setdefault(op, {})
        per_op[kernel] = per_op.get(kernel, 0) + 1

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention and args and args[0].is_meta:
            return self._sdpa(args, kwargs)
        return func(*args, **kwargs)

    def _sdpa(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        q, k, v = args[0], _arg(args, kwargs, 1, "key", None), _arg(args, kwargs, 2, "value", None)
        mask = _arg(args, kwargs, 3, "attn_mask", None)
        dropout = _arg(args, kwargs, 4, "dropout_p", 0.0)
        causal = _arg(args, kwargs, 5, "is_causal", False)
        scale = kwargs.get("scale")
        gqa = kwargs.get("enable_gqa", False)
        choice = _aten._fused_sdp_choice.default._op_dk(
            _CPU, q, k, v, mask, dropout, causal, scale=scale, enable_gqa=gqa
        )
        if choice != _SDPA_FLASH:
            self.count("scaled_dot_product_attention", "math")
            return F.scaled_dot_product_attention(*args, **kwargs)
        if mask is not None and mask.dtype == torch.bool:  # the ops the CPU runs for it
            neg = torch.scalar_tensor(float("-inf"), dtype=q.dtype, device=q.device)
            zero = torch.scalar_tensor(0.0, dtype=q.dtype, device=q.device)
            mask = torch.where(mask, zero, neg)
            del neg, zero  # temporaries, freed before the kernel runs as in C++
        self.count("scaled_dot_product_attention", "flash_attention_cpu")
        out, _ = _aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, dropout, causal, attn_mask=mask, scale=scale
        )
        return out


def adjust_output(func: Any, args: tuple[Any, ...], out: Any) -> Any:
    """The output the CPU kernel would have given, for an op run on meta."""
    if func is _aten.native_batch_norm.default and not args[5] and args[0].is_meta:
        x = args[0]
        return out[0], x.new_empty(0), x.new_empty(0)  # eval mode: no saved statistics
    return out


__all__ = ["TARGETS", "Steering", "adjust_output", "check_target"]
