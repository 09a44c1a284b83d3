"""Jagged nested tensors (``layout=torch.jagged``): their sizes and strides are symbolic,
so bytes are counted on the values buffer and contractions per component. Two
sequences of 3 and 7 tokens of width 8: a values buffer of 10 x 8 float32 (320 B)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import layerscope as ls

OFFSETS = (0, 3, 10)


def jagged(values: torch.Tensor) -> torch.Tensor:
    return torch.nested.nested_tensor_from_jagged(values, torch.tensor(OFFSETS))


class Doubled(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.transpose(1, 2) * 2


class Projected(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.lin = nn.Linear(8, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.lin(x)
        return out


class Attention(nn.Module):
    """torch's own layout for jagged attention: (B, j, H, D) transposed to (B, H, j, D)."""

    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(8, 8)

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        q = self.q(jagged(v)).view(2, -1, 2, 4).transpose(1, 2)
        return F.scaled_dot_product_attention(q, q, q).transpose(1, 2).values()


def test_a_transposed_jagged_tensor_counts_its_values_bytes() -> None:
    prof = ls.profile(Doubled(), jagged(torch.randn(10, 8)))
    # the multiply reads the 320 B of values and writes 320 B; the transpose is a view
    assert prof.root.metrics["bytes_accessed"] == 320 + 320
    assert prof.root.metrics["flops"] == 10 * 8  # one multiply per element


def test_linear_on_a_jagged_input_counts_every_component() -> None:
    prof = ls.profile(Projected(4), jagged(torch.randn(10, 8)))
    lin = prof.node("lin").metrics
    assert prof.unsupported_ops == {}
    assert lin["macs"] == (3 + 7) * 8 * 4  # rows x in x out over the components
    assert lin["flops"] == 2 * 320 + 10 * 4  # and a bias add per output element
    # reads: values 320 B, weight 4 x 8 x 4 = 128 B, bias 16 B; writes 10 x 4 x 4 = 160 B
    assert lin["bytes_accessed"] == 320 + 128 + 16 + 160


def test_jagged_attention_with_backward() -> None:
    v = torch.randn(10, 8, requires_grad=True)
    prof = ls.profile(Attention(), v, backward=True, memory=True)
    assert prof.unsupported_ops == {}
    q = prof.node("q").metrics
    assert q["macs"] == 10 * 8 * 8
    assert q["backward_macs"] == 2 * 640  # the input's and the weight's gradients
    # per head (2, of 4 dims), per sequence of L tokens: Q K^T and P V, L x L x 4 each
    attention = 2 * 2 * (3 * 3 + 7 * 7) * 4
    assert prof.root.metrics["macs"] == 640 + attention
    # backward: dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q
    assert prof.root.metrics["backward_macs"] == 2 * 640 + 2 * attention
