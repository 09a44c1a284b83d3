"""A model that reuses one submodule and does real work outside any submodule."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from layerscope.examples._seed import seeded

SEED = 1004


class SharedMLP(nn.Module):
    """``softmax(head(block(h) + block(block(h))))`` with ``h = relu(x @ w)``.

    ``block`` runs twice per forward (``calls == 2``); the matmul with the root's own
    parameter ``w``, ``torch.relu``, the ``+`` and ``F.softmax`` run in no submodule, so
    their cost belongs to the root's self metrics.
    """

    def __init__(self, in_features: int = 8, hidden: int = 16, out_features: int = 4) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(in_features, hidden) / in_features**0.5)
        self.block = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh())
        self.head = nn.Linear(hidden, out_features)

    def forward(self, x: Tensor) -> Tensor:
        h = torch.relu(x @ self.w)
        a = self.block(h)
        b = self.block(a)
        return F.softmax(self.head(a + b), dim=-1)


def shared_mlp() -> SharedMLP:
    """A fresh SharedMLP with fixed weights; input (N, 8), output (N, 4)."""
    with seeded(SEED):
        return SharedMLP()
