"""CUDA autocast's casting rules on any device, for analyses on ``meta``.

``torch.autocast("cuda", dtype)`` casts the inputs of the ops it lists, in the
dispatcher, and only tensors on a GPU. An analysis on ``meta`` of a model trained under
autocast on a GPU needs the same dtypes: the 16-bit copies of weights and activations
that matmuls read and save, and the float32 islands (norms, softmax, losses, the
residual stream that a float32 embedding starts). ``emulate_cuda_autocast`` gives them:
a torch-function mode (``CudaAutocast``) that applies the four policies of torch's
``aten/src/ATen/autocast_mode.h`` to the torch functions of those ops:

- lower precision (matmuls, convolutions, attention, RNN cells): every floating input
  (not float64) cast to the 16-bit dtype; a float32 leaf parameter that needs a
  gradient is cast once per autocast region (autocast's weight cache);
- float32 (pointwise transcendentals, norms, losses, upsampling): inputs cast to float32;
- float32 through a ``dtype`` argument (softmax, log_softmax, sum, prod, cumsum,
  cumprod, vector and matrix norms): ``dtype=float32`` when the first input is floating
  and the caller gave none, so the input is read as it is and the output is float32;
- promote (addcmul, atan2, dot, index_put, ...): every floating input to the widest.

``tests/test_autocast_emulation.py`` holds this table equal to the ops that the installed
torch registers a CUDA autocast kernel for. Two composite functions follow their C++
bodies: ``cross_entropy`` (``log_softmax`` in the input's dtype, then ``nll_loss`` in
float32) and ``normalize`` (a float32 norm, so a float32 result).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves, tree_map_only

from layerscope.collect.dispatch import remove_function_mode

#: ops whose inputs autocast casts to its 16-bit dtype (``AT_FORALL_LOWER_PRECISION_FP``;
#: ``cudnn_convolution``'s are internal and reached through ``convolution``)
LOWER_PRECISION = frozenset(
    {
        "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d",
        "conv_transpose2d", "conv_transpose3d", "convolution", "prelu", "addmm", "addmv",
        "addr", "matmul", "einsum", "mm", "mv", "linalg_vecdot", "linear", "addbmm",
        "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot", "_thnn_fused_lstm_cell",
        "_thnn_fused_gru_cell", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
        "_scaled_dot_product_flash_attention", "scaled_dot_product_attention",
    }
)  # fmt: skip
#: ops whose inputs autocast casts to float32 (``AT_FORALL_FP32``)
FLOAT32 = frozenset(
    {
        "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
        "reciprocal", "rsqrt", "sinh", "tan", "pow", "softplus", "layer_norm",
        "native_layer_norm", "rms_norm", "group_norm", "frobenius_norm", "nuclear_norm",
        "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss",
        "nll_loss2d", "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss",
        "huber_loss", "mse_loss", "margin_ranking_loss", "multilabel_margin_loss",
        "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
        "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
        "upsample_nearest1d", "_upsample_nearest_exact1d", "upsample_nearest2d",
        "_upsample_nearest_exact2d", "upsample_nearest3d", "_upsample_nearest_exact3d",
        "upsample_linear1d", "upsample_bilinear2d", "_upsample_bilinear2d_aa",
        "upsample_trilinear3d", "upsample_bicubic2d", "_upsample_bicubic2d_aa",
    }
)  # fmt: skip
#: ops run in float32 through their dtype argument (``AT_FORALL_FP32_SET_OPT_DTYPE``, and
#: ``norm``'s overloads without a dtype, which autocast gives float32)
FLOAT32_DTYPE = frozenset(
    {
        "prod", "softmax", "log_softmax", "cumprod", "cumsum", "linalg_vector_norm",
        "linalg_matrix_norm", "sum", "norm",
    }
)  # fmt: skip
#: ops run in the widest floating dtype of their inputs (``AT_FORALL_PROMOTE``)
PROMOTE = frozenset(
    {
        "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler",
        "index_put", "tensordot", "scatter_add",
    }
)  # fmt: skip
#: torch functions whose names differ from the op autocast lists
ALIASES = {
    "__matmul__": "matmul",
    "__rmatmul__": "matmul",
    "__pow__": "pow",
    "__rpow__": "pow",
    "grid_sample": "grid_sampler",
    "vector_norm": "linalg_vector_norm",
    "matrix_norm": "linalg_matrix_norm",
    "multi_dot": "linalg_multi_dot",
    "vecdot": "linalg_vecdot",
}


def policy(name: str) -> str | None:
    """The autocast policy of a torch function or op name: "lower", "float32",
    "float32_dtype", "promote", or None (run as given)."""
    name = ALIASES.get(name, name)
    if name in LOWER_PRECISION:
        return "lower"
    if name in FLOAT32:
        return "float32"
    if name in FLOAT32_DTYPE:
        return "float32_dtype"
    if name in PROMOTE:
        return "promote"
    return None


def _eligible(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64


class CudaAutocast(TorchFunctionMode):
    """``torch.autocast("cuda", dtype)``'s policies applied to tensors on any device
    (module doc). ``cache`` holds the 16-bit copies of float32 leaf tensors that need a
    gradient, as autocast's weight cache does until its region ends: ``clear()``."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        if dtype not in (torch.bfloat16, torch.float16):
            raise ValueError(f"autocast runs in bfloat16 or float16, not {dtype}")
        self.dtype = dtype
        self.cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def clear(self) -> None:
        self.cache.clear()

    def _cast(self, t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        if not _eligible(t) or t.dtype == dtype:
            return t
        cached = dtype == self.dtype and t.dtype == torch.float32 and t.requires_grad and t.is_leaf
        if not cached:
            return t.to(dtype)
        hit = self.cache.get(id(t))
        if hit is None or hit[0] is not t:
            hit = (t, t.to(dtype))
            self.cache[id(t)] = hit
        return hit[1]

    def _all(self, dtype: torch.dtype, args: Any, kwargs: Any) -> tuple[Any, Any]:
        def cast(t: torch.Tensor) -> torch.Tensor:
            return self._cast(t, dtype)

        out: tuple[Any, Any] = tree_map_only(torch.Tensor, cast, (args, kwargs))
        return out

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = dict(kwargs or {})
        if func is F.cross_entropy:
            return self._cross_entropy(args, kwargs)
        if func is F.normalize:
            return func(*self._all(torch.float32, args, kwargs)[0], **kwargs)
        rule = policy(getattr(func, "__name__", ""))
        if rule == "lower":
            args, kwargs = self._all(self.dtype, args, kwargs)
        elif rule == "float32":
            args, kwargs = self._all(torch.float32, args, kwargs)
        elif rule == "float32_dtype":
            first = args[0] if args else kwargs.get("input")
            given = kwargs.get("dtype") is not None or any(isinstance(a, torch.dtype) for a in args)
            if _eligible(first) and not given:
                kwargs["dtype"] = torch.float32
        elif rule == "promote":
            tensors = [t for t in tree_leaves((args, kwargs)) if _eligible(t)]
            widest = torch.float32 if any(t.dtype == torch.float32 for t in tensors) else None
            args, kwargs = self._all(widest or self.dtype, args, kwargs)
        return func(*args, **kwargs)

    def _cross_entropy(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``cross_entropy``'s C++ body: ``log_softmax`` with the input's own dtype (which
        autocast keeps), ``nll_loss`` in float32. Label smoothing and probability targets
        run as given."""
        names = ("input", "target", "weight", "size_average", "ignore_index", "reduce")
        call = dict(zip(names, args, strict=False)) | kwargs
        x, target = call.get("input"), call.get("target")
        simple = (
            _eligible(x)
            and isinstance(target, torch.Tensor)
            and not target.is_floating_point()
            and not call.get("label_smoothing")
            and call.get("size_average") is None
            and call.get("reduce") is None
        )
        if not simple:
            return F.cross_entropy(*args, **kwargs)
        assert isinstance(x, torch.Tensor) and isinstance(target, torch.Tensor)
        logp = F.log_softmax(x, 1 if x.dim() > 1 else 0, dtype=x.dtype)
        weight = call.get("weight")
        return F.nll_loss(
            self._cast(logp, torch.float32),
            target,
            weight=self._cast(weight, torch.float32) if isinstance(weight, torch.Tensor) else None,
            ignore_index=call.get("ignore_index", -100),
            reduction=call.get("reduction", "mean"),
        )


@contextmanager
def emulate_cuda_autocast(
    model: nn.Module, dtype: torch.dtype, loss_fn: Callable[[Any], torch.Tensor]
) -> Iterator[Callable[[Any], torch.Tensor]]:
    """Run ``model``'s forward, and the loss that the context gives (``loss_fn`` under
    the same rules), as under ``torch.autocast("cuda", dtype)`` on a GPU: the mode is
    entered at each call of the model (above any mode already active, as autocast sits
    above a kernel's selection) and at the loss; the weight cache lives from the forward
    to the loss's end, as an autocast region around both keeps it."""
    mode = CudaAutocast(dtype)

    def enter(_module: nn.Module, _args: Any) -> None:
        mode.__enter__()  # type: ignore[no-untyped-call]

    def leave(_module: nn.Module, _args: Any, _out: Any) -> None:
        remove_function_mode(mode)

    def loss(out: Any) -> torch.Tensor:
        try:
            with mode:
                return loss_fn(out)
        finally:
            mode.clear()

    handles = [
        model.register_forward_pre_hook(enter),
        model.register_forward_hook(leave, always_call=True),
    ]
    try:
        yield loss
    finally:
        for handle in handles:
            handle.remove()
        # a forward interrupted by a BaseException other than an Exception (Ctrl-C,
        # SystemExit) skips ``leave``: the mode is still on the stack, once per call
        while remove_function_mode(mode):
            pass
        mode.clear()
