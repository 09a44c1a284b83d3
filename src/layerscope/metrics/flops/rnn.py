"""Recurrent layers: the fused RNN kernels (oneDNN, cuDNN, MIOpen), the composite
``lstm``/``gru``/``rnn_*`` entry points and the fused cells.

Per layer, direction and valid time step of each sequence (a "row": T*B for padded
input, sum(batch_sizes) for a PackedSequence), with G gates (4 LSTM, 3 GRU, 1 RNN),
hidden size H, layer input size I and recurrent input size R (H, or proj_size P):

- MACs: G*H*(I + R) for the gate matmuls (+ P*H for the LSTM projection);
- pointwise flops per hidden unit: LSTM 13 (4 adds joining the input and hidden
  products, 4 activations, c' = f*c + i*g: 3, h' = o*tanh(c'): 2), GRU 10 (r, z joins: 2,
  sigmoid r, z: 2, n = tanh(in + r*hn): 3, h' = n + z*(h - n): 3), RNN 2 (join,
  activation); biases add 2 per gate unit (b_ih and b_hh): LSTM 8, GRU 6, RNN 2. These
  are exactly the ops PyTorch's own decomposed cells run (the CPU path for GRU, RNN,
  projected and packed LSTMs), so fused and decomposed runs report the same forward;
- backward: the gate matmuls twice (input/hidden gradients and weight gradients, 2x the
  forward MACs, the input gradient of the first layer only when requested), pointwise
  per hidden unit LSTM 24, GRU 17, RNN-tanh 4, RNN-ReLU 2 (each including the add of the
  incoming output gradient), bias gradients G*H adds per bias per row;
- inter-layer dropout in training: one multiply per element of each non-final layer's
  output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import Tensor

from layerscope.metrics.flops.registry import Cost, aten_ops, register_flop_formula

#: cuDNN/oneDNN ``mode`` values.
RNN_RELU, RNN_TANH, LSTM, GRU = 0, 1, 2, 3

GATES = {RNN_RELU: 1, RNN_TANH: 1, LSTM: 4, GRU: 3}
POINTWISE = {RNN_RELU: 2, RNN_TANH: 2, LSTM: 13, GRU: 10}
BIAS = {RNN_RELU: 2, RNN_TANH: 2, LSTM: 8, GRU: 6}
POINTWISE_BACKWARD = {RNN_RELU: 2, RNN_TANH: 4, LSTM: 24, GRU: 17}
#: the fused cell backward kernels do not add an incoming output gradient (1 less).
CELL_BACKWARD = {LSTM: 23, GRU: 16}


@dataclass(frozen=True, slots=True)
class _Layer:
    input_size: int
    hidden: int
    rec: int  # recurrent input size: hidden, or proj_size
    proj: int  # 0 without projection


def _rows(x: Tensor) -> int:
    """Row-steps of a time-major, batch-major or packed (sum(batch_sizes), I) input."""
    last = x.shape[-1] if x.dim() else 1
    return x.numel() // last if last else 0


def _forward_cost(mode: int, rows: int, layer: _Layer, has_bias: bool) -> Cost:
    g, h = GATES[mode], layer.hidden
    macs = rows * (g * h * (layer.input_size + layer.rec) + layer.proj * h)
    flops = 2 * macs + rows * h * (POINTWISE[mode] + (BIAS[mode] if has_bias else 0))
    return Cost(macs, flops)


def _backward_cost(
    mode: int, rows: int, layer: _Layer, has_bias: bool, input_grad: bool, weight_grad: bool
) -> Cost:
    g, h = GATES[mode], layer.hidden
    per_row = g * h * layer.rec + layer.proj * h  # dh_prev through W_hh (and W_hr)
    if input_grad:
        per_row += g * h * layer.input_size
    if weight_grad:
        per_row += g * h * (layer.input_size + layer.rec) + layer.proj * h
    macs = rows * per_row
    flops = 2 * macs + rows * h * POINTWISE_BACKWARD[mode]
    if weight_grad and has_bias:
        flops += rows * 2 * g * h
    return Cost(macs, flops)


def _layer_of(w_ih: Tensor, w_hh: Tensor, hidden: int, w_hr: Tensor | None) -> _Layer:
    proj = w_hr.shape[0] if w_hr is not None else 0
    return _Layer(w_ih.shape[1], hidden, w_hh.shape[1], proj)


# --- oneDNN (CPU nn.LSTM) ---------------------------------------------------------------


@register_flop_formula(*aten_ops("mkldnn_rnn_layer"))
def mkldnn_rnn_layer_flop(
    x: Tensor,
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor,
    b_hh: Tensor,
    hx: Tensor,
    cx: Tensor,
    reverse: bool,
    batch_sizes: Any,
    mode: int,
    hidden_size: int,
    num_layers: int,
    has_biases: bool,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """One layer and direction of a oneDNN RNN (what CPU ``nn.LSTM`` runs)."""
    layer = _Layer(w_ih.shape[1], hidden_size, w_hh.shape[1], 0)
    return _forward_cost(mode, _rows(x), layer, has_biases)


@register_flop_formula(*aten_ops("mkldnn_rnn_layer_backward"))
def mkldnn_rnn_layer_backward_flop(
    x: Tensor,
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor,
    b_hh: Tensor,
    hx: Tensor,
    cx: Tensor,
    output: Tensor,
    hy: Tensor,
    cy: Tensor,
    grad_output: Any,
    grad_hy: Any,
    grad_cy: Any,
    reverse: bool,
    mode: int,
    hidden_size: int,
    num_layers: int,
    has_biases: bool,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """Backward of one oneDNN RNN layer and direction (computes all gradients)."""
    layer = _Layer(w_ih.shape[1], hidden_size, w_hh.shape[1], 0)
    return _backward_cost(mode, _rows(x), layer, has_biases, True, True)


# --- cuDNN / MIOpen (whole stacks) --------------------------------------------------------


def _stack_layers(
    weights: Any, stride: int, hidden: int, proj_size: int, num_layers: int, dirs: int
) -> list[_Layer]:
    layers: list[_Layer] = []
    has_proj = proj_size > 0
    for i in range(num_layers * dirs):
        base = i * stride
        w_hr = weights[base + stride - 1] if has_proj else None
        layers.append(_layer_of(weights[base], weights[base + 1], hidden, w_hr))
    return layers


def _stack_forward(
    x: Tensor,
    weights: Any,
    stride: int,
    mode: int,
    hidden: int,
    proj_size: int,
    num_layers: int,
    dropout: float,
    train: bool,
    bidirectional: bool,
) -> Cost:
    dirs = 2 if bidirectional else 1
    has_bias = stride >= 4
    rows = _rows(x)
    total = Cost()
    for layer in _stack_layers(weights, stride, hidden, proj_size, num_layers, dirs):
        total = total + _forward_cost(mode, rows, layer, has_bias)
    if train and dropout > 0 and num_layers > 1:
        out_size = proj_size if proj_size > 0 else hidden
        total = total + Cost(0, (num_layers - 1) * rows * dirs * out_size)
    return total


def _stack_backward(
    x: Tensor,
    weights: Any,
    stride: int,
    mode: int,
    hidden: int,
    proj_size: int,
    num_layers: int,
    bidirectional: bool,
    output_mask: Any,
) -> Cost:
    dirs = 2 if bidirectional else 1
    has_bias = stride >= 4
    rows = _rows(x)
    weight_grad = bool(output_mask[3])
    total = Cost()
    layers = _stack_layers(weights, stride, hidden, proj_size, num_layers, dirs)
    for i, layer in enumerate(layers):
        input_grad = i >= dirs or bool(output_mask[0])
        total = total + _backward_cost(mode, rows, layer, has_bias, input_grad, weight_grad)
    return total


@register_flop_formula(*aten_ops("_cudnn_rnn"))
def cudnn_rnn_flop(
    x: Tensor,
    weights: Any,
    weight_stride0: int,
    weight_buf: Any,
    hx: Tensor,
    cx: Any,
    mode: int,
    hidden_size: int,
    proj_size: int,
    num_layers: int,
    batch_first: bool,
    dropout: float,
    train: bool,
    bidirectional: bool,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """A whole cuDNN RNN stack (CUDA ``nn.LSTM``/``GRU``/``RNN``)."""
    return _stack_forward(
        x,
        weights,
        weight_stride0,
        mode,
        hidden_size,
        proj_size,
        num_layers,
        dropout,
        train,
        bidirectional,
    )


@register_flop_formula(*aten_ops("_cudnn_rnn_backward"))
def cudnn_rnn_backward_flop(
    x: Tensor,
    weights: Any,
    weight_stride0: int,
    weight_buf: Any,
    hx: Tensor,
    cx: Any,
    output: Tensor,
    grad_output: Any,
    grad_hy: Any,
    grad_cy: Any,
    mode: int,
    hidden_size: int,
    proj_size: int,
    num_layers: int,
    batch_first: bool,
    dropout: float,
    train: bool,
    bidirectional: bool,
    batch_sizes: Any,
    dropout_state: Any,
    reserve: Any,
    output_mask: Any,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """Backward of a cuDNN RNN stack; ``output_mask`` = (input, hx, cx, weights)."""
    return _stack_backward(
        x,
        weights,
        weight_stride0,
        mode,
        hidden_size,
        proj_size,
        num_layers,
        bidirectional,
        output_mask,
    )


@register_flop_formula(*aten_ops("miopen_rnn"))
def miopen_rnn_flop(
    x: Tensor,
    weights: Any,
    weight_stride0: int,
    hx: Tensor,
    cx: Any,
    mode: int,
    hidden_size: int,
    num_layers: int,
    batch_first: bool,
    dropout: float,
    train: bool,
    bidirectional: bool,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """A whole MIOpen RNN stack (ROCm)."""
    return _stack_forward(
        x, weights, weight_stride0, mode, hidden_size, 0, num_layers, dropout, train, bidirectional
    )


@register_flop_formula(*aten_ops("miopen_rnn_backward"))
def miopen_rnn_backward_flop(
    x: Tensor,
    weights: Any,
    weight_stride0: int,
    weight_buf: Any,
    hx: Tensor,
    cx: Any,
    output: Tensor,
    grad_output: Any,
    grad_hy: Any,
    grad_cy: Any,
    mode: int,
    hidden_size: int,
    num_layers: int,
    batch_first: bool,
    dropout: float,
    train: bool,
    bidirectional: bool,
    batch_sizes: Any,
    dropout_state: Any,
    reserve: Any,
    output_mask: Any,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """Backward of a MIOpen RNN stack."""
    return _stack_backward(
        x, weights, weight_stride0, mode, hidden_size, 0, num_layers, bidirectional, output_mask
    )


# --- composite entry points (reach the dispatcher only in some tracing modes) -------------


def _composite(
    mode: int,
    x: Tensor,
    params: Any,
    has_biases: bool,
    num_layers: int,
    dropout: float,
    train: bool,
    bidirectional: bool,
) -> Cost:
    dirs = 2 if bidirectional else 1
    base_stride = 4 if has_biases else 2
    per = len(params) // (num_layers * dirs) if num_layers * dirs else base_stride
    has_proj = per > base_stride
    hidden = params[0].shape[0] // GATES[mode]
    proj_size = params[per - 1].shape[0] if has_proj else 0
    # per layer and direction: w_ih, w_hh, (b_ih, b_hh), (w_hr)
    total = Cost()
    rows = _rows(x)
    for i in range(num_layers * dirs):
        b = i * per
        w_hr = params[b + per - 1] if has_proj else None
        layer = _layer_of(params[b], params[b + 1], hidden, w_hr)
        total = total + _forward_cost(mode, rows, layer, has_biases)
    if train and dropout > 0 and num_layers > 1:
        total = total + Cost(0, (num_layers - 1) * rows * dirs * (proj_size or hidden))
    return total


def _composite_formula(mode: int) -> Any:
    def formula(x: Tensor, *args: Any, out: Any = None, **__: Any) -> Cost:
        # .input: (input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
        # batch_first); .data: (data, batch_sizes, hx, params, has_biases, ...).
        packed = isinstance(args[0], Tensor) and isinstance(args[2], (list, tuple))
        rest = args[2:] if packed else args[1:]
        params, has_biases, num_layers, dropout, train, bidirectional = rest[:6]
        return _composite(mode, x, params, has_biases, num_layers, dropout, train, bidirectional)

    formula.__doc__ = "A whole RNN stack, as ``_cudnn_rnn``."
    return formula


register_flop_formula(*aten_ops("lstm"))(_composite_formula(LSTM))
register_flop_formula(*aten_ops("gru"))(_composite_formula(GRU))
register_flop_formula(*aten_ops("rnn_tanh"))(_composite_formula(RNN_TANH))
register_flop_formula(*aten_ops("rnn_relu"))(_composite_formula(RNN_RELU))


def _cell_formula(mode: int) -> Any:
    def formula(
        x: Tensor,
        hx: Any,
        w_ih: Tensor,
        w_hh: Tensor,
        b_ih: Tensor | None = None,
        *_: Any,
        out: Any = None,
        **__: Any,
    ) -> Cost:
        hidden = w_hh.shape[1]
        layer = _Layer(w_ih.shape[1], hidden, hidden, 0)
        return _forward_cost(mode, _rows(x), layer, b_ih is not None)

    formula.__doc__ = "One time step of an RNN cell."
    return formula


register_flop_formula(*aten_ops("lstm_cell"))(_cell_formula(LSTM))
register_flop_formula(*aten_ops("gru_cell"))(_cell_formula(GRU))
register_flop_formula(*aten_ops("rnn_tanh_cell"))(_cell_formula(RNN_TANH))
register_flop_formula(*aten_ops("rnn_relu_cell"))(_cell_formula(RNN_RELU))


# --- fused cell kernels (CUDA nn.LSTMCell / nn.GRUCell pointwise part) -------------------


@register_flop_formula(*aten_ops("_thnn_fused_lstm_cell"))
def fused_lstm_cell_flop(
    input_gates: Tensor,
    hidden_gates: Tensor,
    cx: Tensor,
    input_bias: Tensor | None = None,
    hidden_bias: Tensor | None = None,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """Pointwise LSTM cell on precomputed gate products: 13 (+8 with biases) per unit."""
    has_bias = input_bias is not None
    return Cost(0, cx.numel() * (POINTWISE[LSTM] + (BIAS[LSTM] if has_bias else 0)))


@register_flop_formula(
    *aten_ops("_thnn_fused_lstm_cell_backward_impl", "_thnn_fused_lstm_cell_backward")
)
def fused_lstm_cell_backward_flop(
    grad_hy: Any,
    grad_cy: Any,
    cx: Tensor,
    cy: Tensor,
    workspace: Tensor,
    has_bias: bool,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """23 per unit + the gate-bias gradient (4 adds per unit)."""
    n = cx.numel()
    return Cost(0, n * CELL_BACKWARD[LSTM] + (4 * n if has_bias else 0))


@register_flop_formula(*aten_ops("_thnn_differentiable_lstm_cell_backward"))
def differentiable_lstm_cell_backward_flop(
    grad_hy: Any,
    grad_cy: Any,
    input_gates: Tensor,
    hidden_gates: Tensor,
    input_bias: Tensor | None,
    hidden_bias: Tensor | None,
    cx: Tensor,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """As the fused LSTM cell backward."""
    n = cx.numel()
    return Cost(0, n * CELL_BACKWARD[LSTM] + (4 * n if input_bias is not None else 0))


@register_flop_formula(*aten_ops("_thnn_fused_gru_cell"))
def fused_gru_cell_flop(
    input_gates: Tensor,
    hidden_gates: Tensor,
    hx: Tensor,
    input_bias: Tensor | None = None,
    hidden_bias: Tensor | None = None,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """Pointwise GRU cell on precomputed gate products: 10 (+6 with biases) per unit."""
    has_bias = input_bias is not None
    return Cost(0, hx.numel() * (POINTWISE[GRU] + (BIAS[GRU] if has_bias else 0)))


@register_flop_formula(*aten_ops("_thnn_fused_gru_cell_backward"))
def fused_gru_cell_backward_flop(
    grad_hy: Tensor, workspace: Tensor, has_bias: bool, *_: Any, out: Any = None, **__: Any
) -> Cost:
    """16 per unit + the two gate-bias gradients (3 adds per unit each)."""
    n = grad_hy.numel()
    return Cost(0, n * CELL_BACKWARD[GRU] + (6 * n if has_bias else 0))


@register_flop_formula(*aten_ops("_thnn_differentiable_gru_cell_backward"))
def differentiable_gru_cell_backward_flop(
    grad_hy: Tensor,
    input_gates: Tensor,
    hidden_gates: Tensor,
    hx: Tensor,
    input_bias: Tensor | None,
    *_: Any,
    out: Any = None,
    **__: Any,
) -> Cost:
    """As the fused GRU cell backward."""
    n = grad_hy.numel()
    return Cost(0, n * CELL_BACKWARD[GRU] + (6 * n if input_bias is not None else 0))
