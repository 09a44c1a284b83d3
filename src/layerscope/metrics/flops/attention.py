"""Fused attention kernels (SDPA backends, FlashAttention, memory-efficient, cuDNN) and
the ``nn.MultiheadAttention`` / ``nn.TransformerEncoderLayer`` fast paths.

Conventions, for B*H query heads (grouped-query attention counts the query heads),
query length Lq, key length Lk, head dims Dk (query/key) and Dv (value), and A = the
number of score entries the kernel computes per head:

- A = Lq*Lk without a causal mask. With ``is_causal`` only the unmasked entries are
  counted: SDPA's top-left alignment (query i sees keys j <= i) gives
  A = sum_i min(i + 1, Lk), i.e. Lq*(Lq+1)/2 when Lq == Lk; FlashAttention's own kernels
  (``_flash_attention_forward``, ``_scaled_dot_product_flash_attention``) and the
  memory-efficient kernel's ``custom_mask_type=2`` align bottom-right (query i sees keys
  j <= i + Lk - Lq). Sliding windows (``window_size_left/right``) are counted exactly.
- forward MACs: A*Dk (S = Q K^T) + A*Dv (O = P V); forward flops: 2*MACs + per entry
  1 (scale) + 5 (softmax, as ``aten._softmax``) + 1 if a mask/bias is added + 1 if
  dropout multiplies.
- backward (every fused kernel keeps only the logsumexp, so it recomputes S): 5 matmuls,
  MACs A*(3*Dk + 2*Dv) (S = Q K^T, dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q);
  flops 2*MACs + per entry 6 (recompute P: scale, -lse, exp; dS = P*(dP - D): sub, mul;
  scale dS) + 1 for a mask, + 2 for dropout, + 1 when a bias gradient is summed, plus
  2*B*H*Lq*Dv for D = rowsum(dO * O).
- variable-length (nested/jagged) inputs: per-sequence lengths live in a tensor's values,
  which formulas never read, so A is the upper bound (total query tokens)*max_k per head.
  (The CPU runs jagged SDPA as nested ``matmul``s, counted per sequence by ``contraction``.)
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from layerscope.metrics.flops._common import first_tensor, nested_sizes
from layerscope.metrics.flops.norms import train_norm_flops
from layerscope.metrics.flops.pointwise import GELU, RELU
from layerscope.metrics.flops.reductions import SOFTMAX
from layerscope.metrics.flops.registry import (
    Cost,
    aten_ops,
    aten_overloads,
    register_flop_formula,
)

SCALE = 1
BACKWARD_PER_ENTRY = 6

NO_MASK, TOP_LEFT, BOTTOM_RIGHT = 0, 1, 2


def _sum_clamped(a: int, n: int, cap: int) -> int:
    """sum_{i=0}^{n-1} clamp(i + a, 0, cap), in O(1)."""
    if n <= 0 or cap <= 0:
        return 0
    lo = min(max(-a, 0), n)  # first i with i + a >= 0 (terms before are 0)
    hi = min(max(cap - a, lo), n)  # first i with i + a >= cap (terms from here are cap)
    linear = (hi - lo) * a + (lo + hi - 1) * (hi - lo) // 2
    return linear + (n - hi) * cap


def attended_entries(
    lq: int,
    lk: int,
    causal: int = NO_MASK,
    window_left: int | None = None,
    window_right: int | None = None,
) -> int:
    """Score entries per head that a kernel computes.

    ``causal``: NO_MASK, TOP_LEFT (query i sees keys j <= i) or BOTTOM_RIGHT (j <= i + Lk
    - Lq). Windows (FlashAttention semantics, bottom-right aligned, None or negative =
    unbounded): query i sees keys in [i + Lk - Lq - left, i + Lk - Lq + right].
    """
    wl = window_left if window_left is not None and window_left >= 0 else None
    wr = window_right if window_right is not None and window_right >= 0 else None
    d = 0 if causal == TOP_LEFT else lk - lq  # diagonal offset of the alignment
    if causal != NO_MASK:
        wr = 0 if wr is None else min(wr, 0)
    if wl is None and wr is None:
        return lq * lk
    upper = lq * lk if wr is None else _sum_clamped(d + wr + 1, lq, lk)
    lower = 0 if wl is None else _sum_clamped(d - wl, lq, lk)
    return upper - lower


def _dims(q: Tensor, k: Tensor, v: Tensor, seq_dim: int) -> tuple[int, int, int, int, int]:
    """(query heads * batch, Lq, Lk, Dk, Dv) for a layout whose sequence dim is
    ``seq_dim`` (-2 for (B, H, L, D), -3 for (B, L, H, D))."""
    lq = q.shape[seq_dim]
    dk = q.shape[-1]
    rows = lq * dk
    bh = q.numel() // rows if rows else 0
    return bh, lq, k.shape[seq_dim], dk, v.shape[-1]


def _forward(bh: int, a: int, dk: int, dv: int, mask: bool, dropout: float) -> Cost:
    entries = bh * a
    macs = entries * (dk + dv)
    per_entry = SCALE + SOFTMAX + int(mask) + int(dropout > 0)
    return Cost(macs, 2 * macs + per_entry * entries)


def _backward(
    bh: int, lq: int, a: int, dk: int, dv: int, mask: bool, dropout: float, bias_grad: bool
) -> Cost:
    entries = bh * a
    macs = entries * (3 * dk + 2 * dv)
    per_entry = BACKWARD_PER_ENTRY + int(mask) + 2 * int(dropout > 0) + int(bias_grad)
    return Cost(macs, 2 * macs + per_entry * entries + 2 * bh * lq * dv)


def _has(t: Any) -> bool:
    return isinstance(t, Tensor) and t.numel() > 0


# --- SDPA backends with (B, H, L, D) inputs -----------------------------------------------


@register_flop_formula(*aten_ops("_scaled_dot_product_flash_attention_for_cpu"))
def sdpa_flash_cpu_flop(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *_: Any,
    out: Any = None,
    attn_mask: Tensor | None = None,
    **__: Any,
) -> Cost:
    """CPU flash attention (what ``F.scaled_dot_product_attention`` runs on CPU)."""
    bh, lq, lk, dk, dv = _dims(q, k, v, -2)
    a = attended_entries(lq, lk, TOP_LEFT if is_causal else NO_MASK)
    return _forward(bh, a, dk, dv, _has(attn_mask), dropout_p)


@register_flop_formula(*aten_ops("_scaled_dot_product_flash_attention_for_cpu_backward"))
def sdpa_flash_cpu_backward_flop(
    grad: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o: Tensor,
    lse: Tensor,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *_: Any,
    out: Any = None,
    attn_mask: Tensor | None = None,
    **__: Any,
) -> Cost:
    """CPU flash attention backward: 5 matmuls (S recomputed)."""
    bh, lq, lk, dk, dv = _dims(q, k, v, -2)
    a = attended_entries(lq, lk, TOP_LEFT if is_causal else NO_MASK)
    return _backward(bh, lq, a, dk, dv, _has(attn_mask), dropout_p, False)


@register_flop_formula(*aten_ops("_scaled_dot_product_flash_attention"))
def sdpa_flash_flop(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """CUDA FlashAttention-2 via SDPA (causal: bottom-right, same as top-left when
    Lq == Lk, the only case SDPA sends here)."""
    bh, lq, lk, dk, dv = _dims(q, k, v, -2)
    a = attended_entries(lq, lk, BOTTOM_RIGHT if is_causal else NO_MASK)
    return _forward(bh, a, dk, dv, False, dropout_p)


@register_flop_formula(*aten_overloads("_scaled_dot_product_flash_attention", ("quantized",)))
def sdpa_flash_quantized_flop(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    q_descale: Any = None,
    k_descale: Any = None,
    v_descale: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """As ``_scaled_dot_product_flash_attention`` (descaling not counted)."""
    return sdpa_flash_flop(q, k, v, dropout_p, is_causal, out=out)


@register_flop_formula(*aten_ops("_scaled_dot_product_flash_attention_backward"))
def sdpa_flash_backward_flop(
    grad: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o: Tensor,
    lse: Tensor,
    cum_seq_q: Any,
    cum_seq_k: Any,
    max_q: int,
    max_k: int,
    dropout_p: float,
    is_causal: bool,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """CUDA FlashAttention-2 backward via SDPA."""
    bh, lq, lk, dk, dv = _dims(q, k, v, -2)
    a = attended_entries(lq, lk, BOTTOM_RIGHT if is_causal else NO_MASK)
    return _backward(bh, lq, a, dk, dv, False, dropout_p, False)


@register_flop_formula(
    *aten_ops(
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
    )
)
def sdpa_efficient_flop(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn_bias: Tensor | None = None,
    compute_log_sumexp: bool = False,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """Memory-efficient / cuDNN attention via SDPA (causal: top-left)."""
    bh, lq, lk, dk, dv = _dims(q, k, v, -2)
    a = attended_entries(lq, lk, TOP_LEFT if is_causal else NO_MASK)
    return _forward(bh, a, dk, dv, _has(attn_bias), dropout_p)


@register_flop_formula(*aten_ops("_scaled_dot_product_fused_attention_overrideable"))
def sdpa_overrideable_flop(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn_bias: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """Out-of-tree backends' SDPA (causal: top-left)."""
    bh, lq, lk, dk, dv = _dims(q, k, v, -2)
    a = attended_entries(lq, lk, TOP_LEFT if is_causal else NO_MASK)
    return _forward(bh, a, dk, dv, _has(attn_bias), dropout_p)


@register_flop_formula(*aten_ops("_scaled_dot_product_efficient_attention_backward"))
def sdpa_efficient_backward_flop(
    grad: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn_bias: Tensor | None,
    o: Tensor,
    lse: Tensor,
    philox_seed: Any,
    philox_offset: Any,
    dropout_p: float,
    grad_input_mask: Any,
    is_causal: bool = False,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """Memory-efficient attention backward via SDPA."""
    bh, lq, lk, dk, dv = _dims(q, k, v, -2)
    a = attended_entries(lq, lk, TOP_LEFT if is_causal else NO_MASK)
    bias_grad = bool(grad_input_mask[3]) if len(grad_input_mask) > 3 else False
    return _backward(bh, lq, a, dk, dv, _has(attn_bias), dropout_p, bias_grad)


@register_flop_formula(*aten_ops("_scaled_dot_product_cudnn_attention_backward"))
def sdpa_cudnn_backward_flop(
    grad: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o: Tensor,
    lse: Tensor,
    philox_seed: Any,
    philox_offset: Any,
    attn_bias: Tensor | None,
    cum_seq_q: Any,
    cum_seq_k: Any,
    max_q: int,
    max_k: int,
    dropout_p: float,
    is_causal: bool,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """cuDNN attention backward via SDPA."""
    bh, lq, lk, dk, dv = _dims(q, k, v, -2)
    a = attended_entries(lq, lk, TOP_LEFT if is_causal else NO_MASK)
    return _backward(bh, lq, a, dk, dv, _has(attn_bias), dropout_p, False)


@register_flop_formula(*aten_ops("_scaled_dot_product_fused_attention_overrideable_backward"))
def sdpa_overrideable_backward_flop(
    grad: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn_bias: Tensor | None,
    grad_input_mask: Any,
    o: Tensor,
    lse: Tensor,
    cum_seq_q: Any,
    cum_seq_k: Any,
    max_q: int,
    max_k: int,
    dropout_p: float,
    is_causal: bool,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """Out-of-tree backends' SDPA backward."""
    bh, lq, lk, dk, dv = _dims(q, k, v, -2)
    a = attended_entries(lq, lk, TOP_LEFT if is_causal else NO_MASK)
    bias_grad = bool(grad_input_mask[3]) if len(grad_input_mask) > 3 else False
    return _backward(bh, lq, a, dk, dv, _has(attn_bias), dropout_p, bias_grad)


# --- raw kernels: (B, L, H, D) or variable-length (total, H, D) inputs --------------------


def _raw_dims(
    q: Tensor, k: Tensor, v: Tensor, varlen: bool, max_q: Any, max_k: Any
) -> tuple[int, int, int, int, int, bool]:
    """(B*H, Lq, Lk, Dk, Dv, exact). Variable-length inputs give the bound
    (heads * total query tokens) rows of ``max_k`` keys each."""
    if not varlen:
        bh, lq, lk, dk, dv = _dims(q, k, v, -3)
        return bh, lq, lk, dk, dv, True
    dk = q.shape[-1]
    rows = q.numel() // dk if dk else 0  # heads * total query tokens
    return rows, 1, int(max_k), dk, v.shape[-1], False


@register_flop_formula(*aten_ops("_flash_attention_forward"))
def flash_attention_forward_flop(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cum_seq_q: Tensor | None,
    cum_seq_k: Tensor | None,
    max_q: int,
    max_k: int,
    dropout_p: float,
    is_causal: bool,
    *_: Any,
    out: Any = None,
    window_size_left: int | None = None,
    window_size_right: int | None = None,
    alibi_slopes: Tensor | None = None,
    block_table: Tensor | None = None,
    **__: Any,
) -> Cost:
    """FlashAttention-2 kernel: bottom-right causal, sliding windows, ALiBi (+1 per
    entry), paged KV (``block_table``: Lk = max_k)."""
    bh, lq, lk, dk, dv, exact = _raw_dims(q, k, v, cum_seq_q is not None, max_q, max_k)
    if block_table is not None and exact:
        lk = int(max_k)
    if exact:
        causal = BOTTOM_RIGHT if is_causal else NO_MASK
        a = attended_entries(lq, lk, causal, window_size_left, window_size_right)
    else:
        a = lk
    return _forward(bh, a, dk, dv, alibi_slopes is not None, dropout_p)


@register_flop_formula(*aten_overloads("_flash_attention_forward", ("quantized",)))
def flash_attention_forward_quantized_flop(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cum_seq_q: Tensor | None,
    cum_seq_k: Tensor | None,
    max_q: int,
    max_k: int,
    dropout_p: float,
    is_causal: bool,
    *_: Any,
    out: Any = None,
    **kwargs: Any,
) -> Cost:
    """As ``_flash_attention_forward`` (descaling not counted)."""
    return flash_attention_forward_flop(
        q, k, v, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, out=out, **kwargs
    )


@register_flop_formula(*aten_ops("_flash_attention_forward_no_dropout_inplace"))
def flash_attention_forward_inplace_flop(
    out_buffer: Tensor, q: Tensor, *args: Any, out: Any = None, **kwargs: Any
) -> Cost:
    """As ``_flash_attention_forward`` (the first argument is the output buffer)."""
    return flash_attention_forward_flop(q, *args, out=out, **kwargs)


@register_flop_formula(*aten_ops("_flash_attention_backward"))
def flash_attention_backward_flop(
    grad: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o: Tensor,
    lse: Tensor,
    cum_seq_q: Tensor | None,
    cum_seq_k: Tensor | None,
    max_q: int,
    max_k: int,
    dropout_p: float,
    is_causal: bool,
    *_: Any,
    out: Any = None,
    window_size_left: int | None = None,
    window_size_right: int | None = None,
    **__: Any,
) -> Cost:
    """FlashAttention-2 backward kernel."""
    bh, lq, lk, dk, dv, exact = _raw_dims(q, k, v, cum_seq_q is not None, max_q, max_k)
    if exact:
        causal = BOTTOM_RIGHT if is_causal else NO_MASK
        a = attended_entries(lq, lk, causal, window_size_left, window_size_right)
    else:
        a = lk
    return _backward(bh, lq, a, dk, dv, False, dropout_p, False)


_EFFICIENT_MASK = {0: NO_MASK, 1: TOP_LEFT, 2: BOTTOM_RIGHT}


@register_flop_formula(*aten_ops("_efficient_attention_forward"))
def efficient_attention_forward_flop(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    bias: Tensor | None,
    cu_seqlens_q: Tensor | None,
    cu_seqlens_k: Tensor | None,
    max_seqlen_q: int | None,
    max_seqlen_k: int | None,
    dropout_p: float,
    custom_mask_type: int,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """Memory-efficient (CUTLASS) kernel: ``custom_mask_type`` 0 none, 1 causal top-left,
    2 causal bottom-right (``window_size`` is not modeled)."""
    varlen = cu_seqlens_q is not None
    bh, lq, lk, dk, dv, exact = _raw_dims(q, k, v, varlen, max_seqlen_q, max_seqlen_k)
    a = attended_entries(lq, lk, _EFFICIENT_MASK.get(custom_mask_type, NO_MASK)) if exact else lk
    return _forward(bh, a, dk, dv, _has(bias), dropout_p)


@register_flop_formula(*aten_ops("_efficient_attention_backward"))
def efficient_attention_backward_flop(
    grad: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    bias: Tensor | None,
    o: Tensor,
    cu_seqlens_q: Tensor | None,
    cu_seqlens_k: Tensor | None,
    max_seqlen_q: int,
    max_seqlen_k: int,
    lse: Tensor,
    dropout_p: float,
    philox_seed: Any,
    philox_offset: Any,
    custom_mask_type: int,
    bias_requires_grad: bool,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """Memory-efficient kernel backward."""
    varlen = cu_seqlens_q is not None
    bh, lq, lk, dk, dv, exact = _raw_dims(q, k, v, varlen, max_seqlen_q, max_seqlen_k)
    a = attended_entries(lq, lk, _EFFICIENT_MASK.get(custom_mask_type, NO_MASK)) if exact else lk
    return _backward(bh, lq, a, dk, dv, _has(bias), dropout_p, bool(bias_requires_grad))


@register_flop_formula(*aten_ops("_cudnn_attention_forward"))
def cudnn_attention_forward_flop(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn_bias: Tensor | None,
    cum_seq_q: Tensor | None,
    cum_seq_k: Tensor | None,
    max_q: int,
    max_k: int,
    compute_log_sumexp: bool,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """cuDNN kernel, (B, H, L, D) or variable-length (total, H, D); causal top-left."""
    if cum_seq_q is None:
        bh, lq, lk, dk, dv = _dims(q, k, v, -2)
        a = attended_entries(lq, lk, TOP_LEFT if is_causal else NO_MASK)
    else:
        bh, lq, lk, dk, dv, _exact = _raw_dims(q, k, v, True, max_q, max_k)
        a = lk
    return _forward(bh, a, dk, dv, _has(attn_bias), dropout_p)


@register_flop_formula(*aten_ops("_cudnn_attention_backward"))
def cudnn_attention_backward_flop(
    grad: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o: Tensor,
    lse: Tensor,
    philox_seed: Any,
    philox_offset: Any,
    attn_bias: Tensor | None,
    cum_seq_q: Tensor | None,
    cum_seq_k: Tensor | None,
    max_q: int,
    max_k: int,
    dropout_p: float,
    is_causal: bool,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """cuDNN kernel backward."""
    if cum_seq_q is None:
        bh, lq, lk, dk, dv = _dims(q, k, v, -2)
        a = attended_entries(lq, lk, TOP_LEFT if is_causal else NO_MASK)
    else:
        bh, lq, lk, dk, dv, _exact = _raw_dims(q, k, v, True, max_q, max_k)
        a = lk
    return _backward(bh, lq, a, dk, dv, _has(attn_bias), dropout_p, False)


# --- nn.MultiheadAttention / nn.TransformerEncoderLayer fast paths ------------------------


def _mha_cost(
    b: int, lq: int, lk: int, e: int, heads: int, need_weights: bool, average: bool, mask: bool
) -> Cost:
    """In-projection (3 linears with bias), attention, out-projection with bias.

    With ``need_weights`` the kernel scales q by 1/sqrt(d) (once per query element), runs
    Q K^T, a masked softmax (the mask is a select: 0) and P V, and averaging the returned
    weights over heads adds B*H*Lq*Lk adds + B*Lq*Lk divides. Without weights it calls
    SDPA, counted as the SDPA kernels are (scale per score entry, +1 per entry for a
    mask). Either way this equals the cost of the same module's non-fast path."""
    proj_macs = b * lq * e * e + 2 * b * lk * e * e
    attn_macs = 2 * b * lq * lk * e  # QK^T and PV over all heads: H * Lq * Lk * (E/H)
    out_macs = b * lq * e * e
    macs = proj_macs + attn_macs + out_macs
    entries = b * heads * lq * lk
    flops = 2 * macs
    flops += b * lq * e + 2 * b * lk * e  # in-projection biases
    flops += SOFTMAX * entries
    flops += b * lq * e  # out-projection bias
    if need_weights:
        flops += SCALE * b * lq * e  # q * 1/sqrt(d)
        if average:
            flops += entries + b * lq * lk
    else:
        flops += SCALE * entries + (entries if mask else 0)
    return Cost(macs, flops)


def _nested_lengths(t: Tensor) -> list[int]:
    """The sequence length of each component of a nested (B, L_i, E) tensor."""
    return [size[0] for size in nested_sizes(t)]


def _nested_mha_cost(
    lengths: list[int], e: int, heads: int, need_weights: bool, average: bool
) -> Cost:
    """The fast path on a nested tensor (no mask: the nesting is the padding mask), as
    its kernels run it: the in- and out-projections over the real tokens; the bias add
    and q scaling over the padded (B, T, 3E) projection; both attention matmuls over the
    padded length T; the softmax over each sequence's own L_i x L_i scores."""
    tokens, b, t = sum(lengths), len(lengths), max(lengths, default=0)
    padded = b * t
    macs = 3 * tokens * e * e + 2 * padded * t * e + tokens * e * e
    flops = 2 * macs
    flops += 3 * padded * e + SCALE * padded * e  # as _transform_bias_rescale_qkv
    flops += SOFTMAX * heads * sum(n * n for n in lengths)
    flops += tokens * e  # out-projection bias
    if need_weights and average:  # the padded weights, summed over heads and divided
        flops += heads * padded * t + padded * t
    return Cost(macs, flops)


@register_flop_formula(*aten_ops("_native_multi_head_attention"))
def native_mha_flop(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    embed_dim: int,
    num_head: int,
    qkv_weight: Tensor,
    qkv_bias: Tensor,
    proj_weight: Tensor,
    proj_bias: Tensor,
    mask: Tensor | None = None,
    need_weights: bool = True,
    average_attn_weights: bool = True,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """``nn.MultiheadAttention`` fast path (eval, batch_first, no grad)."""
    e = embed_dim
    if query.is_nested:
        if key is not query or value is not query:
            raise ValueError("nested query, key and value that are not one tensor")
        return _nested_mha_cost(
            _nested_lengths(query), e, num_head, need_weights, average_attn_weights
        )
    lq = query.shape[-2]
    lk = key.shape[-2]
    b = query.numel() // (lq * e) if lq * e else 0
    return _mha_cost(b, lq, lk, e, num_head, need_weights, average_attn_weights, mask is not None)


@register_flop_formula(*aten_ops("_transformer_encoder_layer_fwd"))
def transformer_encoder_layer_flop(
    src: Tensor,
    embed_dim: int,
    num_heads: int,
    qkv_weight: Tensor,
    qkv_bias: Tensor,
    proj_weight: Tensor,
    proj_bias: Tensor,
    use_gelu: bool,
    norm_first: bool,
    eps: float,
    norm_weight_1: Tensor,
    norm_bias_1: Tensor,
    norm_weight_2: Tensor,
    norm_bias_2: Tensor,
    ffn_weight_1: Tensor,
    ffn_bias_1: Tensor,
    ffn_weight_2: Tensor,
    ffn_bias_2: Tensor,
    mask: Tensor | None = None,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """``nn.TransformerEncoderLayer`` fast path: self-attention (as the MHA fast path,
    weights not returned) + 2 residual adds + 2 layer norms (8 per element + 4 per row)
    + FFN (linear, ReLU 1 or exact GELU 5 per hidden element, linear). On a nested
    ``src`` everything but the attention scores runs over the real tokens only."""
    e = embed_dim
    hidden = ffn_weight_1.shape[0]
    if src.is_nested:  # a padding mask, turned into nesting by nn.TransformerEncoder
        lengths = _nested_lengths(src)
        tokens = sum(lengths)
        cost = _nested_mha_cost(lengths, e, num_heads, False, False)
    else:
        lq = src.shape[-2]
        tokens = src.numel() // e if e else 0
        b = tokens // lq if lq else 0
        cost = _mha_cost(b, lq, lq, e, num_heads, False, False, mask is not None)
    ffn_macs = 2 * tokens * e * hidden
    act = GELU if use_gelu else RELU
    flops = 2 * ffn_macs + tokens * hidden + tokens * e  # FFN matmuls and biases
    flops += act * tokens * hidden
    flops += 2 * tokens * e  # residual adds
    flops += 2 * train_norm_flops(tokens * e, tokens, norm_weight_1, norm_bias_1)
    return cost + Cost(ffn_macs, flops)


@register_flop_formula(*aten_ops("_transform_bias_rescale_qkv"))
def transform_bias_rescale_qkv_flop(
    qkv: Tensor, qkv_bias: Tensor, num_heads: int, *_: Any, out: Any = None, **__: Any
) -> Cost:
    """The fast path's bias add on the packed (B, L, 3E) projection + scaling q (a nested
    projection is padded first: its outputs are (B, H, T, E/H) each)."""
    n = 3 * first_tensor(out).numel()
    return Cost(0, n + SCALE * (n // 3))
