"""A sibling module that models.py imports."""

from torch import nn


def block(n_in: int, n_out: int) -> nn.Module:
    return nn.Sequential(nn.Linear(n_in, n_out), nn.ReLU())
