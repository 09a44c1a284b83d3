"""``F.scaled_dot_product_attention`` as the target device runs it.

Two parts:

- the *backend choice* (``sdpa_backend``): torch's own CPU rule for a CPU target (asked
  through the CPU dispatch key, which answers on meta tensors), and for CUDA targets a
  port of torch's CUDA rule, which a CPU-only torch does not contain;
- the *kernel call* (``run_sdpa``): the ops ``at::scaled_dot_product_attention``
  (aten/src/ATen/native/transformers/attention.cpp) runs for that choice, with the
  target's input preparation, so that a dispatch mode below sees the ops a real run
  shows.

The CUDA rule follows aten/src/ATen/native/transformers/cuda/sdp_utils.cpp and
sdp_utils_cpp.h as torch 2.13 has them (release branch cut in June 2026): the stored
copy read for this port is newer, so the one later change to the rules,
pytorch/pytorch#191085 (July 2026: implicit multi-query broadcasting without
``enable_gqa`` for all fused backends, grouped-query attention for the memory-efficient
one), is left out; the 2.13 CPU wheel confirms it is absent there (a (2, 4, 16, 8) query
with (2, 1, 16, 8) keys and ``enable_gqa=False`` gets the math backend on the CPU). Each
check below names the C++ function it follows.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor

from layerscope.collect.target.spec import Target
from layerscope.torchapi import fa3_sdp_enabled, sdp_priority_order

_aten = torch.ops.aten
_CPU_KEY = torch._C.DispatchKey.CPU
#: torch.backends.cuda's flags (``sdpa_kernel`` and ``enable_*_sdp`` set them)
_MATH_ON = cast(Callable[[], bool], torch.backends.cuda.math_sdp_enabled)
_FLASH_ON = cast(Callable[[], bool], torch.backends.cuda.flash_sdp_enabled)
_MEM_EFFICIENT_ON = cast(Callable[[], bool], torch.backends.cuda.mem_efficient_sdp_enabled)
_CUDNN_ON = cast(Callable[[], bool], torch.backends.cuda.cudnn_sdp_enabled)

#: torch's ``SDPBackend`` values (``torch.nn.attention.SDPBackend``).
MATH, FLASH, EFFICIENT, CUDNN, OVERRIDEABLE = 0, 1, 2, 3, 4
BACKEND_NAMES = {
    MATH: "math",
    FLASH: "flash_attention",
    EFFICIENT: "efficient_attention",
    CUDNN: "cudnn_attention",
    OVERRIDEABLE: "overrideable",
}
#: ``at::globalContext().sDPPriorityOrder()`` before anything changed it (Context.h).
_DEFAULT_ORDER = (FLASH, EFFICIENT, MATH, CUDNN, OVERRIDEABLE)


@dataclass(frozen=True)
class SdpaCall:
    """The arguments of one ``F.scaled_dot_product_attention`` call."""

    query: Tensor
    key: Tensor
    value: Tensor
    attn_mask: Tensor | None = None
    dropout_p: float = 0.0
    is_causal: bool = False
    scale: float | None = None
    enable_gqa: bool = False

    @classmethod
    def from_args(cls, args: Sequence[Any], kwargs: dict[str, Any]) -> SdpaCall:
        """As ``F.scaled_dot_product_attention(query, key, value, attn_mask=None,
        dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False)`` binds them."""
        names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal")
        bound = dict(zip(names, args, strict=False))
        for name, value in kwargs.items():
            if name in bound:
                raise TypeError(f"scaled_dot_product_attention got two values for {name}")
            bound[name] = value
        return cls(**bound)

    @property
    def nested(self) -> bool:
        """Any of query, key, value a (strided) nested tensor (``has_for_nested_inputs``)."""
        return any(t.is_nested and t.layout == torch.strided for t in self._qkv)

    @property
    def dense(self) -> bool:
        """No input nested (``has_only_dense_inputs``)."""
        return not any(t.is_nested for t in self._qkv)

    @property
    def _qkv(self) -> tuple[Tensor, Tensor, Tensor]:
        return self.query, self.key, self.value


# ---- the CPU choice ------------------------------------------------------------------


def cpu_backend(call: SdpaCall) -> int:
    """torch's CPU choice (``select_sdp_backend_cpp`` in sdp_utils_cpp.cpp: flash when
    its checks pass, else math), asked with the CPU dispatch key so that it answers for
    meta tensors too. ``_fused_sdp_choice`` itself never reaches a dispatch mode."""
    choice = _aten._fused_sdp_choice.default._op_dk(
        _CPU_KEY,
        call.query,
        call.key,
        call.value,
        call.attn_mask,
        call.dropout_p,
        call.is_causal,
        scale=call.scale,
        enable_gqa=call.enable_gqa,
    )
    return int(choice)


# ---- the CUDA choice: a port of sdp_utils.cpp ------------------------------------------


@dataclass(frozen=True)
class _Env:
    """What the CUDA rule reads besides the call: the device and global state."""

    major: int
    minor: int
    cudnn_version: int
    grad_enabled: bool
    check_device: bool  # check_all_tensors_on_device: only for real tensors

    def sm_between(self, low: tuple[int, int], high: tuple[int, int]) -> bool:
        """``check_sm_version<lower, upper>``: inclusive range of compute capabilities."""
        return low <= (self.major, self.minor) <= high


_Check = Callable[[SdpaCall, _Env], bool]


def _input_requires_grad(c: SdpaCall, env: _Env) -> bool:
    # sdp_utils_cpp.h input_requires_grad: any of q, k, v requires grad, grad mode on
    return env.grad_enabled and any(t.requires_grad for t in (c.query, c.key, c.value))


def _all_on_device(c: SdpaCall, env: _Env) -> bool:
    # check_all_tensors_on_device: query on CUDA (meta tensors stand for the target's)
    return not env.check_device or c.query.device.type == "cuda"


def _tensor_shapes(c: SdpaCall, env: _Env) -> bool:
    # check_tensor_shapes: query, key and value all 4-dimensional
    return c.query.dim() == c.key.dim() == c.value.dim() == 4


def _dtype_in(c: SdpaCall, allowed: Sequence[torch.dtype]) -> bool:
    # check_tensor_dtype: q, k, v of one dtype, among the allowed ones
    dtype = c.query.dtype
    return dtype == c.key.dtype == c.value.dtype and dtype in allowed


def _low_precision(c: SdpaCall, env: _Env) -> bool:
    # check_dtypes_low_precision: fp16/bf16 from sm80 on, fp16 before
    allowed = (torch.float16, torch.bfloat16) if env.major >= 8 else (torch.float16,)
    return _dtype_in(c, allowed)


def _flash_dtypes(c: SdpaCall, env: _Env) -> bool:
    # check_dtypes_flash_attention: FlashAttention-3 (sm90+, when enabled) adds fp8 e4m3
    if env.major >= 9 and fa3_sdp_enabled():
        return _dtype_in(c, (torch.float8_e4m3fn, torch.float16, torch.bfloat16))
    return _low_precision(c, env)


def _no_attn_mask(c: SdpaCall, env: _Env) -> bool:
    # check_for_attn_mask: flash takes no arbitrary mask (is_causal is its only one)
    return c.attn_mask is None


def _attn_mask_shape(c: SdpaCall, env: _Env) -> bool:
    # check_attn_mask_shape: no grad on the mask; 2-D (Lq|1, Lk|1) or
    # 4-D (B|1, H|1, Lq|1, Lk|1)
    m = c.attn_mask
    if m is None:
        return True
    if m.requires_grad:
        return False
    b, h, lq = c.query.shape[0], c.query.shape[1], c.query.shape[2]
    lk = c.key.shape[2]
    if m.shape[-2] not in (lq, 1) or m.shape[-1] not in (lk, 1):
        return False
    if m.dim() == 2:
        return True
    return m.dim() == 4 and m.shape[0] in (b, 1) and m.shape[1] in (h, 1)


def _nonzero_seq_lengths(c: SdpaCall, env: _Env) -> bool:
    # check_nonzero_sequence_lengths_dense: no zero-length query or key sequence
    return c.query.shape[-2] != 0 and c.key.shape[-2] != 0


def _last_dim_stride_1(ignore_singleton_dim: bool) -> _Check:
    # check_last_dim_stride_equals_1_dense<ignore_singleton_dim>: q, k, v (and on GPUs the
    # mask) have stride 1 in the last dimension; head dim 1 excused when asked
    def check(c: SdpaCall, env: _Env) -> bool:
        ok = all(t.stride(-1) == 1 for t in (c.query, c.key, c.value))
        if ignore_singleton_dim:
            ok = ok or c.query.shape[-1] == 1
        mask_ok = c.attn_mask is None or c.attn_mask.stride(-1) == 1
        return ok and mask_ok

    return check


def _batch_and_heads(supports_gqa: bool, requires_same_num_heads: bool = True) -> _Check:
    # check_batch_size_and_num_heads_dense<supports_gqa, requires_same_num_heads>: one
    # batch size; with enable_gqa and a backend supporting it, the key/value heads must
    # divide the query heads (check_grouped_query_attention; key and value heads equal
    # unless requires_same_num_heads is false, cuDNN's case); otherwise equal heads
    def check(c: SdpaCall, env: _Env) -> bool:
        q, k, v = c.query, c.key, c.value
        if not q.shape[0] == k.shape[0] == v.shape[0]:
            return False
        hq, hk, hv = q.shape[-3], k.shape[-3], v.shape[-3]
        if c.enable_gqa and supports_gqa:
            if requires_same_num_heads and hk != hv:
                return False
            return hq % hk == 0 and (requires_same_num_heads or hq % hv == 0)
        return hq == hk == hv

    return check


def _nested_sizes(t: Tensor) -> list[list[int]] | None:
    if not t.is_nested:
        return None
    return [list(map(int, row)) for row in t._nested_tensor_size().tolist()]


def _batch_size_nested(c: SdpaCall, env: _Env) -> bool:
    # check_batch_size_nested: batch sizes equal, or (without grad) broadcastable, and
    # when only one of key/value broadcasts, the other has a regular sequence length
    bq, bk, bv = (t.size(0) for t in (c.query, c.key, c.value))
    if bq == bk == bv:
        return True
    if _input_requires_grad(c, env):
        return False
    top = max(bq, bk, bv)
    if any(b not in (top, 1) for b in (bq, bk, bv)):
        return False

    def regular_seq(t: Tensor) -> bool:  # check_safe_kv_broadcast: opt_size(2)
        try:
            t.size(2)
        except RuntimeError:
            return False
        return True

    if bk == 1 and bv != 1 and not regular_seq(c.value):
        return False
    return not (bv == 1 and bk != 1 and not regular_seq(c.key))


def _seq_len_0_nested(c: SdpaCall, env: _Env) -> bool:
    # check_for_seq_len_0_nested_tensor: regular head counts, no empty sequence, and
    # differing head counts only broadcast without grad
    heads = []
    for t in (c.query, c.key, c.value):
        sizes = _nested_sizes(t)
        if sizes is None:
            heads.append(t.size(1))
            continue
        try:
            heads.append(t.size(1))
        except RuntimeError:
            return False  # ragged num_heads
        if any(row[1] == 0 for row in sizes):
            return False
    if heads[0] == heads[1] == heads[2]:
        return True
    if _input_requires_grad(c, env):
        return False
    top = max(heads)
    return all(h in (top, 1) for h in heads)


def _head_dim_flash(c: SdpaCall, env: _Env) -> bool:
    # check_head_dim_size_flash: q, k, v head dims equal and at most 256
    d = c.query.size(-1)
    return d == c.key.size(-1) == c.value.size(-1) and d <= 256


def _head_dim_flash_nested(c: SdpaCall, env: _Env) -> bool:
    # check_head_dim_size_flash_nested: also a multiple of 8
    d = c.query.size(-1)
    return d == c.key.size(-1) == c.value.size(-1) and d % 8 == 0 and d <= 256


def _flash_hardware(c: SdpaCall, env: _Env) -> bool:
    # check_flash_attention_hardware_support: sm80 to sm121
    return env.sm_between((8, 0), (12, 1))


def _flash_head_dim_grad_sm86_89_120(c: SdpaCall, env: _Env) -> bool:
    # check_requires_grad_and_head_dim_gt192_constraints_on_sm86_89_or_120: training on
    # sm86-sm89 or sm120-sm121 needs head dim <= 192, or > 224 without dropout
    consumer = env.sm_between((8, 6), (8, 9)) or env.sm_between((12, 0), (12, 1))
    if not (_input_requires_grad(c, env) and consumer):
        return True
    d = c.query.size(-1)
    return d <= 192 or (c.dropout_p <= 0.0 and d > 224)


def _flash_causal_square(c: SdpaCall, env: _Env) -> bool:
    # check_flash_causal_non_square_seqlens: is_causal needs seqlen_q == seqlen_k
    if c.is_causal and not c.query.is_nested and not c.key.is_nested:
        return c.query.shape[-2] == c.key.shape[-2]
    return True


def _min_gemm_alignment(c: SdpaCall, env: _Env) -> int:
    # minimum_gemm_alignment: 4 elements from sm80 on; with tensor cores (sm80+, or sm70+
    # in half precision) at least 128 bits: 8 for fp16/bf16, 4 for fp32
    is_half = c.query.dtype in (torch.float16, torch.bfloat16)
    use_tc = env.major >= 8 or (env.major >= 7 and is_half)
    alignment = 4 if env.major >= 8 else 1
    if use_tc:
        alignment = max(alignment, 128 // (16 if is_half else 32))
    return alignment


def _head_dim_mem_efficient(c: SdpaCall, env: _Env) -> bool:
    # check_head_dim_size_mem_efficient: q and k head dims equal; q and v head dims
    # positive multiples of minimum_gemm_alignment
    a = _min_gemm_alignment(c, env)
    dq, dk, dv = c.query.size(-1), c.key.size(-1), c.value.size(-1)
    return dq == dk and dq % a == 0 and dq > 0 and dv % a == 0 and dv > 0


def _mem_efficient_alignment(c: SdpaCall, env: _Env) -> bool:
    # check_data_ptr_alignment_mem_efficient (pytorch/pytorch#184258, May 2026): dense
    # inputs on sm80+ must start at a multiple of minimum_gemm_alignment * element_size
    # bytes; the caching allocator aligns bases to 256+ bytes, so the storage offset
    # decides (meta tensors keep the views' offsets: a split of a fused qkv projection)
    if not c.dense or env.major < 8:
        return True
    align = _min_gemm_alignment(c, env) * c.query.element_size()
    return all(
        t.numel() == 0 or (t.storage_offset() * t.element_size()) % align == 0
        for t in (c.query, c.key, c.value)
    )


def _mem_efficient_hardware(c: SdpaCall, env: _Env) -> bool:
    # check_mem_efficient_hardware_support: sm50 to sm121
    return env.sm_between((5, 0), (12, 1))


def _requires_grad_and_nested(c: SdpaCall, env: _Env) -> bool:
    # check_requires_grad_and_nested: no training with nested inputs
    return not _input_requires_grad(c, env)


def _mem_efficient_dtypes(c: SdpaCall, env: _Env) -> bool:
    # can_use_mem_efficient_attention's last check: fp16/fp32/bf16 from sm80 on
    if env.major >= 8:
        return _dtype_in(c, (torch.float16, torch.float32, torch.bfloat16))
    return _dtype_in(c, (torch.float16, torch.float32))


def _runtime_enabled(getter: Callable[[], bool]) -> _Check:
    # check_runtime_disabled_{flash,mem_efficient,cudnn}: torch.backends.cuda flags and
    # torch.nn.attention.sdpa_kernel, global state that a real run reads too
    return lambda c, env: bool(getter())


def _cudnn_nested(c: SdpaCall, env: _Env) -> bool:
    # check_for_nested_inputs: nested inputs only with TORCH_CUDNN_SDPA_NESTED_TENSOR_ENABLED
    # and only on sm9x/sm10x
    if not c.nested:
        return True
    if not _env_flag("TORCH_CUDNN_SDPA_NESTED_TENSOR_ENABLED"):
        return False
    return env.major in (9, 10)


def _cudnn_deterministic(c: SdpaCall, env: _Env) -> bool:
    # check_cudnn_deterministic: not with deterministic algorithms (unless warn-only)
    if torch.are_deterministic_algorithms_enabled():
        return bool(torch.is_deterministic_algorithms_warn_only_enabled())
    return True


def _cudnn_hardware(c: SdpaCall, env: _Env) -> bool:
    # check_cudnn_hardware_support: sm80 to sm121
    return env.sm_between((8, 0), (12, 1))


def _cudnn_dropout(c: SdpaCall, env: _Env) -> bool:
    # check_cudnn_dropout (pytorch/pytorch#174245, Feb 2026): dropout a multiple of 1/16
    return c.dropout_p * 16.0 == math.floor(c.dropout_p * 16.0)


def _sm90_or_sm10x(env: _Env) -> bool:
    return (env.major == 9 and env.minor == 0) or env.major == 10


def _cudnn_supports_d256(env: _Env) -> bool:
    # kCuDNNFrontendSupportsD256 (frontend >= 1.24, bundled with 2.13) and a runtime
    # cuDNN newer than 9.22 on sm90/sm10x (sm107 only after 9.25)
    unsupported_sm107 = env.major == 10 and env.minor == 7 and env.cudnn_version <= 92500
    return _sm90_or_sm10x(env) and not unsupported_sm107 and env.cudnn_version > 92200


def _cudnn_tensor_shapes(c: SdpaCall, env: _Env) -> bool:
    # check_cudnn_tensor_shapes
    b, h, s_q, d_qk = c.query.shape
    s_k, d_v = c.key.shape[2], c.value.shape[3]
    version = env.cudnn_version
    if b > 65535 or h > 65535:  # batch size and heads at most 65535
        return False
    if version < 8903:  # SDPA needs cuDNN 8.9.3
        return False
    if version < 8906 and c.dropout_p != 0.0:  # dropout from 8.9.6
        return False
    # head dim limit: 128; 256 on sm90/sm10x with cuDNN > 9.22; (192, 128) q/v head
    # dims on sm90/sm10x from 9.11
    limit = 128
    if _cudnn_supports_d256(env):
        limit = 256
    elif _sm90_or_sm10x(env) and version >= 91100 and d_qk == 192 and d_v == 128:
        limit = 192
    if d_qk > limit or d_v > limit:
        return False
    if d_qk % 8 != 0 or d_v % 8 != 0:  # head dims multiples of 8
        return False
    if version < 8906 and s_k % 64 != 0:
        return False
    if version < 90000:
        if s_q < 64:
            return False
        if c.dropout_p != 0.0 and (s_q % 64 != 0 or s_k % 64 != 0):
            return False
    if s_k == 1:  # no key/value sequence of length 1
        return False
    return not (c.dropout_p != 0.0 and s_q == 1)  # no query length 1 with dropout


def _cudnn_d256_backward(c: SdpaCall, env: _Env) -> bool:
    # check_cudnn_d256_bprop_head_dim: where head dim 256 is allowed, training needs
    # (d_qk, d_v) <= 128, (192, 128) or (256, 256)
    if not _input_requires_grad(c, env) or not _cudnn_supports_d256(env):
        return True
    d_qk, d_v = c.query.shape[3], c.value.shape[3]
    return (d_qk <= 128 and d_v <= 128) or (d_qk, d_v) in ((192, 128), (256, 256))


def _cudnn_query_seq_len_nested(c: SdpaCall, env: _Env) -> bool:
    # check_cudnn_query_seq_len_nested: nested queries need a longest sequence > 128
    sizes = _nested_sizes(c.query)
    if sizes is None:
        return True
    return max(row[1] for row in sizes) > 128


def _all(checks: Sequence[_Check], c: SdpaCall, env: _Env) -> bool:
    return all(check(c, env) for check in checks)


def _can_use_cudnn(c: SdpaCall, env: _Env) -> bool:
    """``can_use_cudnn_attention``."""
    # dropout is broken in runtime cuDNN 9.11-9.13
    if c.dropout_p > 0.0 and 91100 < env.cudnn_version < 91400:
        return False
    general = (
        _runtime_enabled(_CUDNN_ON),
        _cudnn_nested,
        _all_on_device,
        _tensor_shapes,
        _cudnn_deterministic,
        _low_precision,
        _attn_mask_shape,
        _cudnn_hardware,
        _cudnn_dropout,
    )
    if not _all(general, c, env):
        return False
    dense = (
        _nonzero_seq_lengths,
        _last_dim_stride_1(True),
        # grouped-query attention, key and value heads may differ
        _batch_and_heads(supports_gqa=True, requires_same_num_heads=False),
        _cudnn_tensor_shapes,
        _cudnn_d256_backward,
    )
    if c.dense and not _all(dense, c, env):
        return False
    return not (c.nested and not _cudnn_query_seq_len_nested(c, env))


def _can_use_flash(c: SdpaCall, env: _Env) -> bool:
    """``can_use_flash_attention``."""
    general = (
        _runtime_enabled(_FLASH_ON),
        _all_on_device,
        _tensor_shapes,
        _no_attn_mask,
        _head_dim_flash,
        _flash_hardware,
        _flash_head_dim_grad_sm86_89_120,
        _flash_causal_square,
        _flash_dtypes,
    )
    if not _all(general, c, env):
        return False
    nested = (_batch_size_nested, _head_dim_flash_nested, _seq_len_0_nested)
    if c.nested and not _all(nested, c, env):
        return False
    dense = (
        _batch_and_heads(supports_gqa=True),
        _nonzero_seq_lengths,
        _last_dim_stride_1(True),
    )
    return not c.dense or _all(dense, c, env)


def _can_use_mem_efficient(c: SdpaCall, env: _Env) -> bool:
    """``can_use_mem_efficient_attention``."""
    general = (
        _runtime_enabled(_MEM_EFFICIENT_ON),
        _all_on_device,
        _mem_efficient_hardware,
        _tensor_shapes,
        _head_dim_mem_efficient,
        _mem_efficient_alignment,
    )
    if not _all(general, c, env):
        return False
    if c.nested and not _all(
        (_requires_grad_and_nested, _batch_size_nested, _seq_len_0_nested), c, env
    ):
        return False
    dense = (
        _nonzero_seq_lengths,
        _last_dim_stride_1(False),
        # no grouped-query attention for this backend in 2.13 (#191085 came later)
        _batch_and_heads(supports_gqa=False),
    )
    if c.dense and not _all(dense, c, env):
        return False
    return _mem_efficient_dtypes(c, env)


def _env_flag(name: str) -> bool:
    # c10::utils::check_env: "1"/"ON"/"TRUE"/"YES"/"Y" (any case) are true
    return os.environ.get(name, "").strip().upper() in ("1", "ON", "TRUE", "YES", "Y")


def _prefers_cudnn(env: _Env) -> bool:
    # check_prefer_cudnn_attention: cuDNN first on sm9x/sm10x with a runtime cuDNN newer
    # than 9.15 (the seqlen-not-divisible-by-128 fix, #169849), unless
    # TORCH_CUDNN_SDPA_DEPRIORITIZED is set; CUDA 12 builds only on minor 0 or 3 (sm90,
    # sm100, sm103), which covers every target here
    if _env_flag("TORCH_CUDNN_SDPA_DEPRIORITIZED"):
        return False
    return env.cudnn_version > 91500 and env.major in (9, 10) and env.minor in (0, 3)


def _priority_order(env: _Env) -> tuple[int, ...]:
    # priority_order: the global order (torch.nn.attention.sdpa_kernel(set_priority=True)
    # changes it), where cuDNN comes first when preferred and nothing changed the default
    order = tuple(int(b) for b in sdp_priority_order())
    if order == _DEFAULT_ORDER and _prefers_cudnn(env):
        return (CUDNN, FLASH, EFFICIENT, MATH, OVERRIDEABLE)
    return order


def cuda_backend(
    call: SdpaCall,
    capability: tuple[int, int],
    cudnn_version: int,
    *,
    check_device: bool = False,
) -> int:
    """torch 2.13's CUDA choice (``select_sdp_backend``) for a GPU of compute capability
    ``capability`` with runtime cuDNN ``cudnn_version``: the first backend of the
    priority order whose checks pass. ``check_device`` also requires CUDA tensors (as
    ``torch.backends.cuda.can_use_*`` do); meta tensors stand for the target's."""
    env = _Env(
        major=capability[0],
        minor=capability[1],
        cudnn_version=cudnn_version,
        grad_enabled=torch.is_grad_enabled(),
        check_device=check_device,
    )
    usable: dict[int, _Check] = {
        CUDNN: _can_use_cudnn,
        FLASH: _can_use_flash,
        EFFICIENT: _can_use_mem_efficient,
        MATH: lambda c, e: bool(_MATH_ON()),
    }
    flags = (
        _MATH_ON(),
        _FLASH_ON(),
        _MEM_EFFICIENT_ON(),
        _CUDNN_ON(),
    )
    if any(flags):
        for backend in _priority_order(env):
            check = usable.get(backend)  # overrideable: never on CUDA
            if check is not None and check(call, env):
                return backend
    raise RuntimeError(
        "No viable backend for scaled_dot_product_attention was found on the target "
        "(every enabled backend's checks failed)"
    )


def sdpa_backend(target: Target, call: SdpaCall) -> int:
    """The ``SDPBackend`` value the target picks for ``call``."""
    if target.device_type == "cpu":
        return cpu_backend(call)
    capability = target.capability
    assert capability is not None and target.cudnn_version is not None
    return cuda_backend(call, capability, target.cudnn_version)


# ---- the kernel calls ------------------------------------------------------------------


def _bool_mask_to_additive(mask: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    """``convert_boolean_attn_mask`` (and ``_cudnn``, the same ops with another fill): a
    boolean mask becomes ``where(mask, 0, -inf)`` in the query's dtype. The two scalar
    tensors are temporaries, freed before the kernel runs, as in C++; the order of the
    ops is the one a CPU run shows."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    neg_inf = torch.scalar_tensor(float("-inf"), dtype=dtype, device=mask.device)
    zero = torch.scalar_tensor(0.0, dtype=dtype, device=mask.device)
    return torch.where(mask, zero, neg_inf)


def _should_compute_logsumexp(c: SdpaCall) -> bool:
    # should_compute_logsumexp: any input requires grad, grad mode on
    return torch.is_grad_enabled() and any(t.requires_grad for t in (c.query, c.key, c.value))


def _pad_last_dim(t: Tensor, alignment: int) -> Tensor:
    """``pad_last_dim<alignment, false>``: zero-pad the last dim to a multiple."""
    size = t.shape[-1]
    if size % alignment == 0:
        return t
    return F.pad(t, (0, alignment - size % alignment))


def _preprocess_mask(mask: Tensor, c: SdpaCall) -> Tensor:
    """``preprocess_mask`` for memory-efficient attention: a bias whose strides are not
    multiples of 8 (or whose last stride is not 1) is padded by ``8 - size % 8`` and
    sliced back (``pad_bias<8>``), then expanded to (B, H, Lq, Lk)."""
    aligned = all(mask.stride(i) % 8 == 0 for i in range(mask.dim() - 1))
    if not (aligned and mask.stride(-1) == 1):
        size = mask.shape[-1]
        padded = F.pad(mask, (0, 8 - size % 8))
        mask = _aten.slice.Tensor(padded, -1, 0, size)
    q, k = c.query, c.key
    return mask.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])


def run_sdpa(target: Target, call: SdpaCall, backend: int, original: Callable[..., Any]) -> Any:
    """The output of ``call`` through the ops the target runs for ``backend``;
    ``original`` (``F.scaled_dot_product_attention``) runs the math path, which is the
    same composite on every device."""
    c = call
    if backend == MATH:
        return original(
            c.query,
            c.key,
            c.value,
            attn_mask=c.attn_mask,
            dropout_p=c.dropout_p,
            is_causal=c.is_causal,
            scale=c.scale,
            enable_gqa=c.enable_gqa,
        )
    mask = _bool_mask_to_additive(c.attn_mask, c.query.dtype)
    if backend == FLASH and target.device_type == "cpu":
        # the CPU needs no padding; the kernel takes the (additive) mask
        out, _ = _aten._scaled_dot_product_flash_attention_for_cpu(
            c.query, c.key, c.value, c.dropout_p, c.is_causal, attn_mask=mask, scale=c.scale
        )
        return out
    if backend == FLASH:
        # CUDA FlashAttention-2 needs head dims padded to a multiple of 8; the scale is
        # the one of the original head dim (calculate_scale); the output is sliced back
        head_dim = c.query.shape[-1]
        q = _pad_last_dim(c.query, 8)
        k = _pad_last_dim(c.key, 8)
        v = _pad_last_dim(c.value, 8)
        scale = c.scale if c.scale is not None else 1.0 / math.sqrt(head_dim)
        out = _aten._scaled_dot_product_flash_attention(
            q, k, v, c.dropout_p, c.is_causal, False, scale=scale
        )[0]
        if out.shape[-1] != head_dim:  # post_process_flash_output
            out = _aten.slice.Tensor(out, -1, 0, head_dim)
        return out
    if backend == EFFICIENT:
        if mask is not None:
            mask = _preprocess_mask(mask, c)
        return _aten._scaled_dot_product_efficient_attention(
            c.query,
            c.key,
            c.value,
            mask,
            _should_compute_logsumexp(c),
            c.dropout_p,
            c.is_causal,
            scale=c.scale,
        )[0]
    if backend == CUDNN:
        return _aten._scaled_dot_product_cudnn_attention(
            c.query,
            c.key,
            c.value,
            mask,
            _should_compute_logsumexp(c),
            c.dropout_p,
            c.is_causal,
            False,
            scale=c.scale,
        )[0]
    raise RuntimeError(f"no kernel call for SDPA backend {backend} on {target.describe()}")


def kernel_name(target: Target, backend: int) -> str:
    """The name a KernelLog records: ``flash_attention_cpu`` for the CPU's flash kernel,
    else the backend's (``cudnn_attention``, ``flash_attention``, ...)."""
    name = BACKEND_NAMES[backend]
    return f"{name}_cpu" if backend == FLASH and target.device_type == "cpu" else name


__all__ = [
    "BACKEND_NAMES",
    "CUDNN",
    "EFFICIENT",
    "FLASH",
    "MATH",
    "SdpaCall",
    "cpu_backend",
    "cuda_backend",
    "kernel_name",
    "run_sdpa",
    "sdpa_backend",
]
