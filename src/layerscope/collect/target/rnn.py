"""``nn.LSTM``/``nn.GRU``/``nn.RNN`` as the CPU runs them, for meta tensors.

``at::lstm``, ``at::gru``, ``at::rnn_tanh`` and ``at::rnn_relu`` are composite: the ops
they run depend on the device. On the CPU (aten/src/ATen/native/RNN.cpp and
mkldnn/RNN.cpp, torch 2.13):

- ``lstm`` (padded input, no projection, float32, bfloat16 where oneDNN supports it,
  float16 without grad where it does) runs oneDNN, one ``mkldnn_rnn_layer`` per layer
  and direction (``mkldnn_rnn``);
- everything else (GRU, RNN, projected or packed LSTMs) runs the generic cells, where
  the CPU computes each layer's input projection for the whole sequence at once
  (``FullLayer``/``PackedLayer``: ``pre_compute_input``), which meta does step by step.

This is a line-by-line port of those paths: the same aten ops in the same order, and
the same tensors alive at each op (C++ scopes end where the comments say), so that the
FLOPs, saved bytes and peaks a dispatch mode measures are the CPU's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, cast

import torch
import torch.nn.functional as F
from torch import Tensor

_aten = torch.ops.aten
_MKLDNN_BUILT = cast(Callable[[], bool], torch.backends.mkldnn.is_available)

#: ``ideep::rnn_kind`` / cuDNN modes.
RNN_RELU, RNN_TANH, LSTM, GRU = 0, 1, 2, 3

Hidden: TypeAlias = Tensor | tuple[Tensor, Tensor]


@dataclass(frozen=True)
class _Params:
    """``CellParams``: one layer and direction's weights."""

    w_ih: Tensor
    w_hh: Tensor
    b_ih: Tensor | None
    b_hh: Tensor | None
    w_hr: Tensor | None

    def linear_ih(self, x: Tensor) -> Tensor:
        return F.linear(x, self.w_ih, self.b_ih)

    def linear_hh(self, h: Tensor) -> Tensor:
        return F.linear(h, self.w_hh, self.b_hh)

    def matmul_hr(self, h: Tensor) -> Tensor:
        return h if self.w_hr is None else torch.matmul(h, self.w_hr.t())


def _gather_params(
    params: Sequence[Tensor], has_biases: bool, has_projections: bool = False
) -> list[_Params]:
    """``gather_params``: the flat weight list, per layer and direction."""
    step = (4 if has_biases else 2) + (1 if has_projections else 0)
    if len(params) % step:
        raise RuntimeError("got an incorrect number of RNN parameters")
    out = []
    for i in range(0, len(params), step):
        w = params[i : i + step]
        b_ih, b_hh = (w[2], w[3]) if has_biases else (None, None)
        out.append(_Params(w[0], w[1], b_ih, b_hh, w[-1] if has_projections else None))
    return out


Cell: TypeAlias = Callable[[Tensor, Any, _Params, bool], Any]


def _simple_cell(nonlinearity: Callable[[Tensor], Tensor]) -> Cell:
    """``SimpleCell<tanh_f|relu_f>``."""

    def cell(x: Tensor, h: Tensor, p: _Params, pre: bool) -> Tensor:
        return nonlinearity(p.linear_hh(h).add_(x if pre else p.linear_ih(x)))

    return cell


def _lstm_cell(x: Tensor, hidden: tuple[Tensor, Tensor], p: _Params, pre: bool) -> Any:
    """``LSTMCell`` (the non-CUDA branch)."""
    hx, cx = hidden
    gates = p.linear_hh(hx).add_(x if pre else p.linear_ih(x))
    chunked = gates.unsafe_chunk(4, 1)
    ingate = chunked[0].sigmoid_()
    forgetgate = chunked[1].sigmoid_()
    cellgate = chunked[2].tanh_()
    outgate = chunked[3].sigmoid_()
    cy = (forgetgate * cx).add_(ingate * cellgate)
    hy = outgate * cy.tanh()
    hy = p.matmul_hr(hy)
    return hy, cy


def _gru_cell(x: Tensor, h: Tensor, p: _Params, pre: bool) -> Tensor:
    """``GRUCell`` (the non-CUDA branch)."""
    igates = x.unsafe_chunk(3, 1) if pre else p.linear_ih(x).unsafe_chunk(3, 1)
    hgates = p.linear_hh(h).unsafe_chunk(3, 1)
    reset_gate = hgates[0].add_(igates[0]).sigmoid_()
    input_gate = hgates[1].add_(igates[1]).sigmoid_()
    new_gate = igates[2].add(hgates[2].mul_(reset_gate)).tanh_()
    return (h - new_gate).mul_(input_gate).add_(new_gate)


def _as_output(hidden: Any) -> Tensor:
    """``hidden_as_output``."""
    return hidden[0] if isinstance(hidden, tuple) else hidden  # type: ignore[no-any-return]


def _hidden_slice(hidden: Any, start: int, end: int) -> Any:
    """``hidden_slice``: ``narrow`` on the batch dim; for an LSTM, ``make_tuple``'s
    arguments, which GCC evaluates last to first (cell state first)."""
    if isinstance(hidden, tuple):
        cell = _hidden_slice(hidden[1], start, end)
        state = _hidden_slice(hidden[0], start, end)
        return state, cell
    return hidden.narrow(0, start, end - start)


def _hidden_concat(hiddens: Sequence[Any]) -> Any:
    """``hidden_concat``: ``cat`` on the batch dim; for an LSTM, ``make_tuple``'s
    arguments, which GCC evaluates last to first (cell states first)."""
    if isinstance(hiddens[0], tuple):
        cells = torch.cat([h[1] for h in hiddens], 0)
        states = torch.cat([h[0] for h in hiddens], 0)
        return states, cells
    return torch.cat(list(hiddens), 0)


# ---- layers ------------------------------------------------------------------------------


def _run_steps(
    cell: Cell, steps: Sequence[Tensor], hidden: Any, p: _Params, pre: bool
) -> tuple[list[Tensor], Any]:
    """``FullLayer::operator()(step_inputs, ...)``: the cell over a list of steps."""
    outputs: list[Tensor] = []
    for x in steps:
        hidden = cell(x, hidden, p, pre)
        outputs.append(_as_output(hidden))
    return outputs, hidden


def _full_layer(cell: Cell, inputs: Tensor, hidden: Any, p: _Params) -> tuple[Tensor, Any]:
    """``FullLayer`` on the CPU: the input projection of the whole sequence first."""
    inputs_w = p.linear_ih(inputs)
    outputs, final = _run_steps(cell, inputs_w.unbind(0), hidden, p, True)
    if not outputs:
        raise RuntimeError("Expected sequence length to be larger than 0 in RNN")
    return torch.stack(outputs, 0), final


def _full_bidirectional_layer(
    cell: Cell, inputs: Tensor, hidden: tuple[Any, Any], params: tuple[_Params, _Params]
) -> tuple[Tensor, tuple[Any, Any]]:
    """``FullBidirectionalLayer`` on the CPU."""
    input_w = params[0].linear_ih(inputs)
    step_inputs: Sequence[Tensor] = input_w.unbind(0)
    fw_outputs, fw_hidden = _run_steps(cell, step_inputs, hidden[0], params[0], True)
    if not fw_outputs:
        raise RuntimeError("Expected sequence length to be larger than 0 in RNN")
    fw_output = torch.stack(fw_outputs, 0)
    # the backward direction's projection is made while the forward one's is alive
    input_w = params[1].linear_ih(inputs)
    step_inputs = input_w.unbind(0)
    rev_step_inputs = list(reversed(step_inputs))
    rev_outputs, rev_hidden = _run_steps(cell, rev_step_inputs, hidden[1], params[1], True)
    rev_outputs.reverse()
    rev_output = torch.stack(rev_outputs, 0)
    return torch.cat([fw_output, rev_output], fw_output.dim() - 1), (fw_hidden, rev_hidden)


@dataclass(frozen=True)
class _Packed:
    """``PackedSequence``: the data and the (CPU) batch sizes."""

    data: Tensor
    batch_sizes: Tensor
    sizes: tuple[int, ...]


def _packed_layer(cell: Cell, packed: _Packed, hidden: Any, p: _Params) -> tuple[_Packed, Any]:
    """``PackedLayer`` on the CPU."""
    sizes = packed.sizes
    step_outputs: list[Tensor] = []
    hiddens: list[Any] = []
    offset = 0
    last = sizes[0]
    input_w = p.linear_ih(packed.data)
    for batch in sizes:
        step_input = input_w.narrow(0, offset, batch)
        offset += batch
        dec = last - batch
        if dec > 0:
            hiddens.append(_hidden_slice(hidden, last - dec, last))
            hidden = _hidden_slice(hidden, 0, last - dec)
        last = batch
        hidden = cell(step_input, hidden, p, True)
        step_outputs.append(_as_output(hidden))
        del step_input  # a loop-body local in C++
    hiddens.append(hidden)
    hiddens.reverse()
    data = torch.cat(step_outputs, 0)
    return _Packed(data, packed.batch_sizes, sizes), _hidden_concat(hiddens)


def _reversed_packed_layer(
    cell: Cell, packed: _Packed, input_hidden: Any, p: _Params
) -> tuple[_Packed, Any]:
    """``ReversedPackedLayer`` on the CPU."""
    sizes = packed.sizes
    step_outputs: list[Tensor] = []
    offset = packed.data.shape[0]
    last = sizes[-1]
    input_w = p.linear_ih(packed.data)
    hidden = _hidden_slice(input_hidden, 0, sizes[-1])
    for batch in reversed(sizes):
        inc = batch - last
        if inc > 0:
            hidden = _hidden_concat([hidden, _hidden_slice(input_hidden, last, batch)])
        step_input = input_w.narrow(0, offset - batch, batch)
        offset -= batch
        last = batch
        hidden = cell(step_input, hidden, p, True)
        step_outputs.append(_as_output(hidden))
        del step_input
    step_outputs.reverse()
    data = torch.cat(step_outputs, 0)
    return _Packed(data, packed.batch_sizes, sizes), hidden


def _packed_bidirectional_layer(
    cell: Cell, packed: _Packed, hidden: tuple[Any, Any], params: tuple[_Params, _Params]
) -> tuple[_Packed, tuple[Any, Any]]:
    """``PackedBidirectionalLayer``."""
    fw_output, fw_hidden = _packed_layer(cell, packed, hidden[0], params[0])
    rev_output, rev_hidden = _reversed_packed_layer(cell, packed, hidden[1], params[1])
    data = torch.cat([fw_output.data, rev_output.data], -1)
    return _Packed(data, packed.batch_sizes, packed.sizes), (fw_hidden, rev_hidden)


def _dropout(x: Any, p: float) -> Any:
    if isinstance(x, _Packed):
        return _Packed(torch.dropout(x.data, p, True), x.batch_sizes, x.sizes)
    return torch.dropout(x, p, True)


def _rnn_impl(
    cell: Cell,
    inputs: Any,
    params: list[_Params],
    hiddens: Sequence[Any],
    num_layers: int,
    dropout_p: float,
    train: bool,
    bidirectional: bool,
) -> tuple[Any, list[Any]]:
    """``_rnn_impl`` with ``apply_layer_stack``: the layers one after the other (with
    dropout between them in training); returns the output and the final hiddens."""
    packed = isinstance(inputs, _Packed)
    layer: Callable[..., tuple[Any, Any]]
    if bidirectional:
        layer = _packed_bidirectional_layer if packed else _full_bidirectional_layer
        weights: list[Any] = [(params[i], params[i + 1]) for i in range(0, len(params), 2)]
        states: list[Any] = [(hiddens[i], hiddens[i + 1]) for i in range(0, len(hiddens), 2)]
    else:
        layer = _packed_layer if packed else _full_layer
        weights, states = list(params), list(hiddens)
    if num_layers != len(states) or num_layers != len(weights):
        raise RuntimeError("Expected more hidden states / weights in stacked_rnn")
    layer_input = inputs
    final_hiddens: list[Any] = []
    for i in range(num_layers):
        layer_output, final_hidden = layer(cell, layer_input, states[i], weights[i])
        final_hiddens.append(final_hidden)
        layer_input = layer_output
        del layer_output, final_hidden  # LayerOutput ends with the loop body in C++
        if dropout_p != 0 and train and i < num_layers - 1:
            layer_input = _dropout(layer_input, dropout_p)
    if bidirectional:
        final_hiddens = [h for pair in final_hiddens for h in pair]
    return layer_input, final_hiddens


def _unwrap(x: Any) -> Tensor:
    return x.data if isinstance(x, _Packed) else x


# ---- oneDNN LSTM -------------------------------------------------------------------------


def _use_mkldnn(x: Tensor) -> bool:
    """``use_mkldnn`` for a CPU run: oneDNN enabled; float32, or bfloat16 where this CPU
    has oneDNN bf16 support, or float16 without grad where it has fp16 support; not
    empty. (All tensors are the target's CPU tensors.)"""
    if not _MKLDNN_BUILT() or not torch.backends.mkldnn.enabled:
        return False
    dtype = x.dtype
    supported = (
        dtype == torch.float32
        or (dtype == torch.bfloat16 and torch.ops.mkldnn._is_mkldnn_bf16_supported())
        or (
            dtype == torch.float16
            and not torch.is_grad_enabled()
            and torch.ops.mkldnn._is_mkldnn_fp16_supported()
        )
    )
    return bool(supported) and x.numel() != 0


def _zeros_like_weight(w: Tensor) -> Tensor:
    # at::zeros(w.sizes(), w.options())
    return torch.zeros(w.shape, dtype=w.dtype, device=w.device)


def _mkldnn_lstm(
    input_: Tensor,
    hx_: Tensor,
    cx_: Tensor,
    weight: Sequence[Tensor],
    has_biases: bool,
    num_layers: int,
    dropout_p: float,
    train: bool,
    bidirectional: bool,
    batch_first: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """``lstm_mkldnn`` -> ``mkldnn_impl`` -> ``mkldnn_rnn`` (mkldnn/RNN.cpp)."""
    hidden_size = hx_.shape[2]
    stride = 4 if has_biases else 2
    x = input_
    if batch_first:
        x = x.transpose(0, 1)
    x = x.contiguous()
    hx = hx_.contiguous()
    cx = cx_.contiguous()
    num_directions = 2 if bidirectional else 1
    layer_input = x
    layer_output: list[Tensor | None] = [None] * num_directions
    layer_hy: list[Tensor | None] = [None] * (num_layers * num_directions)
    layer_cy: list[Tensor | None] = [None] * (num_layers * num_directions)
    for layer in range(num_layers):
        for direction in range(num_directions):
            index = layer * num_directions + direction
            w = weight[index * stride : (index + 1) * stride]
            layer_hx = hx[index]
            layer_cx = cx[index]
            # without biases, zeros shaped like the weights (sic, as mkldnn_rnn does)
            # (arguments of the mkldnn_rnn_layer call: GCC evaluates them last to first)
            b_hh = w[3] if has_biases else _zeros_like_weight(w[1])
            b_ih = w[2] if has_biases else _zeros_like_weight(w[0])
            outputs = _aten.mkldnn_rnn_layer(
                layer_input,
                w[0],
                w[1],
                b_ih,
                b_hh,
                layer_hx,
                layer_cx,
                direction > 0,
                [],
                LSTM,
                hidden_size,
                num_layers,
                has_biases,
                bidirectional,
                batch_first,
                train,
            )
            layer_output[direction] = outputs[0]
            layer_hy[index] = outputs[1]
            layer_cy[index] = outputs[2]
            del outputs, b_ih, b_hh, layer_hx, layer_cx  # loop-body locals in C++
        done = [t for t in layer_output if t is not None]
        layer_input = done[0] if num_directions == 1 else torch.cat(done, -1)
        if dropout_p != 0 and train and layer < num_layers - 1:
            layer_input = torch.dropout(layer_input, dropout_p, True)
    output = layer_input
    hy = torch.stack(layer_hy, 0)  # type: ignore[arg-type]
    cy = torch.stack(layer_cy, 0)  # type: ignore[arg-type]
    if batch_first:
        output = output.transpose(0, 1)
    return output, hy, cy


# ---- entry points ------------------------------------------------------------------------


def _generic_lstm(
    inputs: Any,
    hx: Tensor,
    cx: Tensor,
    params: list[_Params],
    num_layers: int,
    dropout_p: float,
    train: bool,
    bidirectional: bool,
) -> tuple[Any, Tensor, Tensor]:
    """``_lstm_impl``: per-layer (h, c) pairs through ``_rnn_impl``, states stacked."""
    layer_hx = hx.unbind(0)
    layer_cx = cx.unbind(0)
    hiddens = list(zip(layer_hx, layer_cx, strict=True))
    output, final = _rnn_impl(
        _lstm_cell, inputs, params, hiddens, num_layers, dropout_p, train, bidirectional
    )
    # make_tuple(outputs, stack(hy), stack(cy)): arguments evaluated last to first
    cy = torch.stack([h[1] for h in final], 0)
    hy = torch.stack([h[0] for h in final], 0)
    return output, hy, cy


_CELLS: dict[str, Cell] = {
    "gru": _gru_cell,
    "rnn_tanh": _simple_cell(torch.tanh),
    "rnn_relu": _simple_cell(torch.relu),
}

_INPUT_NAMES = (
    "input",
    "hx",
    "params",
    "has_biases",
    "num_layers",
    "dropout",
    "train",
    "bidirectional",
    "batch_first",
)
_DATA_NAMES = (
    "data",
    "batch_sizes",
    "hx",
    "params",
    "has_biases",
    "num_layers",
    "dropout",
    "train",
    "bidirectional",
)


def _bind(names: Sequence[str], args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    bound = dict(zip(names, args, strict=False))
    bound.update(kwargs)
    missing = [n for n in names if n not in bound]
    if missing:
        raise TypeError(f"missing RNN arguments: {', '.join(missing)}")
    return bound


def is_packed_call(name: str, args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
    """Whether a ``_VF.lstm``/``gru``/``rnn_*`` call is the PackedSequence overload
    (``data, batch_sizes, hx, params, ...``) rather than the padded one."""
    if "batch_sizes" in kwargs or "data" in kwargs:
        return True
    if name == "lstm":
        return len(args) > 1 and isinstance(args[1], Tensor)
    return len(args) > 2 and isinstance(args[2], Tensor)


def uses_onednn(name: str, args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
    """Whether the CPU runs this call through oneDNN (``lstm``: padded input, no
    projection, a dtype oneDNN takes)."""
    if name != "lstm" or is_packed_call(name, args, kwargs):
        return False
    b = _bind(_INPUT_NAMES, args, kwargs)
    h0, c0 = b["hx"]
    return h0.shape[2] == c0.shape[2] and _use_mkldnn(b["input"])


def batch_sizes_known(name: str, args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
    """A packed call's batch sizes are readable (a CPU tensor, as PackedSequence keeps
    them); a padded call always qualifies."""
    if not is_packed_call(name, args, kwargs):
        return True
    sizes = _bind(_DATA_NAMES, args, kwargs)["batch_sizes"]
    return isinstance(sizes, Tensor) and sizes.device.type == "cpu"


def cpu_rnn(name: str, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    """``at::<name>(...)`` as the CPU runs it, for ``name`` in lstm, gru, rnn_tanh,
    rnn_relu and either overload; returns what the ``_VF`` function returns."""
    packed = is_packed_call(name, args, kwargs)
    b = _bind(_DATA_NAMES if packed else _INPUT_NAMES, args, kwargs)
    has_biases = bool(b["has_biases"])
    num_layers = int(b["num_layers"])
    dropout_p = float(b["dropout"])
    train = bool(b["train"])
    bidirectional = bool(b["bidirectional"])
    if name == "lstm":
        h0, c0 = b["hx"]
        has_projections = h0.shape[2] != c0.shape[2]
        if not packed:
            x = b["input"]
            if not has_projections and _use_mkldnn(x):
                return _mkldnn_lstm(
                    x,
                    h0,
                    c0,
                    b["params"],
                    has_biases,
                    num_layers,
                    dropout_p,
                    train,
                    bidirectional,
                    bool(b["batch_first"]),
                )
            batch_first = bool(b["batch_first"])
            inputs = x.transpose(0, 1) if batch_first else x
            params = _gather_params(b["params"], has_biases, has_projections)
            output, hy, cy = _generic_lstm(
                inputs, h0, c0, params, num_layers, dropout_p, train, bidirectional
            )
            if batch_first:
                output = output.transpose(0, 1)
            return output, hy, cy
        sizes = b["batch_sizes"]
        data = _Packed(b["data"], sizes, tuple(int(s) for s in sizes.tolist()))
        params = _gather_params(b["params"], has_biases, has_projections)
        output, hy, cy = _generic_lstm(
            data, h0, c0, params, num_layers, dropout_p, train, bidirectional
        )
        return _unwrap(output), hy, cy
    cell = _CELLS[name]
    hx: Tensor = b["hx"]
    if not packed:
        x = b["input"]
        batch_first = bool(b["batch_first"])
        inputs = x.transpose(0, 1) if batch_first else x
        params = _gather_params(b["params"], has_biases)
        output, final = _rnn_impl(
            cell, inputs, params, hx.unbind(0), num_layers, dropout_p, train, bidirectional
        )
        hy = torch.stack(final, 0)
        del final
        if batch_first:
            output.transpose_(0, 1)
        return output, hy
    sizes = b["batch_sizes"]
    data = _Packed(b["data"], sizes, tuple(int(s) for s in sizes.tolist()))
    params = _gather_params(b["params"], has_biases)
    output, final = _rnn_impl(
        cell, data, params, hx.unbind(0), num_layers, dropout_p, train, bidirectional
    )
    hy = torch.stack(final, 0)
    return _unwrap(output), hy


__all__ = ["batch_sizes_known", "cpu_rnn", "is_packed_call", "uses_onednn"]
