"""Small built-in models that exercise the hard cases of per-layer profiling.

Each builder returns a fresh ``nn.Module`` with fixed weights and leaves the caller's
global RNG state untouched. No downloads, no torchvision.

- ``tiny_resnet``: conv stem, BatchNorm (running-stat buffers that a train-mode forward
  would update), residual adds outside any submodule, a 1x1 conv+BN downsample branch,
  adaptive pooling and a linear head. Input ``(N, 3, 32, 32)``.
- ``tiny_gpt``: token and position embeddings, two transformer blocks with fused qkv and
  causal ``F.scaled_dot_product_attention``, GELU MLPs, dropout (RNG use in train mode)
  and an LM head whose weight *is* the token embedding's (a tied tensor that must be
  counted once, at the root). Input ``(N, T)`` token ids, ``T <= 16``.
- ``lstm_tagger``: embedding, bidirectional ``nn.LSTM`` (RNN gate matmuls, a tuple output
  with the hidden state) and a per-token linear head. Input ``(N, T)`` token ids.
- ``shared_mlp``: one submodule called twice per forward (``calls == 2``) and work done
  by functional ops and operators (``x @ w``, ``torch.relu``, ``+``, ``F.softmax``) with a
  parameter held directly on the root. Input ``(N, 8)``.

>>> from layerscope import examples
>>> ex = examples.get("tiny_resnet")
>>> tuple(ex.build()(ex.example_input()).shape)
(2, 10)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from layerscope.errors import InvalidInputError
from layerscope.examples.gpt import TinyGPT, tiny_gpt
from layerscope.examples.misc import SharedMLP, shared_mlp
from layerscope.examples.resnet import BasicBlock, TinyResNet, tiny_resnet
from layerscope.examples.rnn import LSTMTagger, lstm_tagger

#: Seed of the generator behind ``Example.example_input``.
INPUT_SEED = 2024


@dataclass(frozen=True)
class Example:
    """A named built-in model: how to build it and what input it takes."""

    name: str
    build: Callable[[], nn.Module]
    input_shape: tuple[int, ...]
    description: str
    #: When set, inputs are token ids in ``[0, vocab_size)`` (int64); else float32 normal.
    vocab_size: int | None = None

    def example_input(self, batch: int | None = None) -> torch.Tensor:
        """A deterministic input of ``input_shape`` (its first dimension set to ``batch``)."""
        shape = self.input_shape
        if batch is not None:
            if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
                raise InvalidInputError(f"batch must be a positive int, got {batch!r}")
            shape = (batch, *shape[1:])
        gen = torch.Generator().manual_seed(INPUT_SEED)
        if self.vocab_size is not None:
            return torch.randint(0, self.vocab_size, shape, generator=gen, dtype=torch.long)
        return torch.randn(shape, generator=gen)


EXAMPLES: dict[str, Example] = {
    ex.name: ex
    for ex in (
        Example(
            "tiny_resnet",
            tiny_resnet,
            (2, 3, 32, 32),
            "ResNet with 2 stages of 2 BasicBlocks (16/32 channels): BatchNorm, residuals, "
            "downsample",
        ),
        Example(
            "tiny_gpt",
            tiny_gpt,
            (2, 16),
            "2-block GPT (d_model 32, 2 heads, vocab 64): causal SDPA, GELU, dropout, tied LM head",
            vocab_size=64,
        ),
        Example(
            "lstm_tagger",
            lstm_tagger,
            (2, 12),
            "Embedding -> bidirectional LSTM -> linear tag head",
            vocab_size=50,
        ),
        Example(
            "shared_mlp",
            shared_mlp,
            (2, 8),
            "one block called twice, functional ops and a parameter on the root",
        ),
    )
}


def get(name: str) -> Example:
    """The example called ``name``; ``InvalidInputError`` naming the known ones if absent."""
    try:
        return EXAMPLES[name]
    except (KeyError, TypeError):
        known = ", ".join(sorted(EXAMPLES))
        raise InvalidInputError(f"unknown example {name!r}; known examples: {known}") from None


def names() -> list[str]:
    """The registered example names, in registry order."""
    return list(EXAMPLES)


__all__ = [
    "EXAMPLES",
    "INPUT_SEED",
    "BasicBlock",
    "Example",
    "LSTMTagger",
    "SharedMLP",
    "TinyGPT",
    "TinyResNet",
    "get",
    "lstm_tagger",
    "names",
    "shared_mlp",
    "tiny_gpt",
    "tiny_resnet",
]
