"""An importable package: `layerscope profile mypkg.models:tiny` from this directory."""

from torch import nn


def tiny() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
