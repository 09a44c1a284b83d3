"""Models for the CLI's documented runs and error cases (docs/cli.md)."""

from __future__ import annotations

import torch
from helper import block  # a sibling module: the file's directory is importable
from torch import nn


class Net(nn.Module):
    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.body = nn.Sequential(block(4, width), block(width, width))
        self.head = nn.Linear(width, 2)

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return self.head(self.body(x)) * scale


def build(width: int = 8) -> nn.Module:
    return Net(width)


def with_inputs() -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """A factory that brings its own (keyword) inputs."""
    return Net(), {"x": torch.ones(3, 4)}


def needs_args(width: int) -> nn.Module:
    return Net(width)


def raises() -> nn.Module:
    raise ValueError("no checkpoint for this size")


def not_a_module() -> int:
    return 42


class Mismatch(nn.Module):
    """Its second layer expects 5 features but gets 4: the model raises."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 4), nn.Linear(5, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)
