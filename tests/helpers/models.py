"""Models the tests share: small layers, the generation tests' transformers models,
an autograd function that advances a fake clock, and checkpointed copies."""

from __future__ import annotations

import copy
import functools
import importlib
from collections import OrderedDict
from typing import Any, Protocol

import torch
from torch import Tensor, nn


def lin_relu_lin() -> list[nn.Module]:
    return [nn.Linear(10, 5), nn.ReLU(), nn.Linear(5, 10)]


class SimpleModel(nn.Module):
    """torchmeter's repeat-folding example."""

    def __init__(self) -> None:
        super().__init__()
        self.single_1 = nn.Linear(1, 10)
        self.repeat_1x2 = nn.Sequential(OrderedDict(A=nn.Linear(10, 10), B=nn.Linear(10, 10)))
        self.single_2 = nn.ReLU()
        layers = lin_relu_lin() + lin_relu_lin() + lin_relu_lin()
        self.repeat_2x3 = nn.Sequential(OrderedDict(zip("CDEFGHIJK", layers, strict=True)))
        self.single_3 = nn.Linear(10, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.repeat_1x2(self.single_1(x))
        return self.single_3(self.repeat_2x3(self.single_2(x)))  # type: ignore[no-any-return]


class Advancing(Protocol):
    """A fake clock: ``advance(ns)`` moves it forward."""

    def advance(self, ns: int) -> None: ...


class Burn(torch.autograd.Function):
    """Identity whose backward advances a fake clock by ``ns`` (timing tests)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, clock: Advancing, ns: int) -> Tensor:
        ctx.clock = clock
        ctx.ns = ns
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        ctx.clock.advance(ctx.ns)
        return grad, None, None


def with_checkpoint(model: nn.Module, *paths: str) -> nn.Module:
    """A copy of ``model`` whose modules at ``paths`` run under non-reentrant
    ``torch.utils.checkpoint`` (the ground truth of the checkpoint what-ifs)."""
    from torch.utils.checkpoint import checkpoint

    model = copy.deepcopy(model)
    for path in paths:
        module = model.get_submodule(path)

        def checkpointed(*args: Any, _forward: Any = module.forward, **kwargs: Any) -> Any:
            return checkpoint(_forward, *args, use_reentrant=False, **kwargs)

        module.forward = checkpointed
    return model


# ---- the HTML report in a browser ------------------------------------------------
#: Why a browser test is skipped.
def tiny_llama(**extra: Any) -> Any:
    """The generation tests' Llama, random weights, eval mode: hidden 64, 4 query heads
    and 2 KV heads of 16, MLP 128, 2 layers, vocab 128 (``extra``: config fields)."""
    transformers: Any = importlib.import_module("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, **extra,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(config).eval()


@functools.cache
def meta_tiny_llama() -> Any:
    """``tiny_llama()`` built on meta, once per process (documents' tests share it)."""
    with torch.device("meta"):
        return tiny_llama()


def meta_mixtral(experts: int = 4, dtype: torch.dtype | None = None) -> Any:
    """A Mixtral on meta: 2 layers, hidden 64, 4 query heads and 2 KV heads of 16,
    ``experts`` experts of MLP 128 each, top 2, vocab 256, 1,024 positions."""
    transformers: Any = importlib.import_module("transformers")
    config = transformers.MixtralConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, num_local_experts=experts,
        num_experts_per_tok=2, max_position_embeddings=1024,
    )  # fmt: skip
    with torch.device("meta"):
        model = transformers.MixtralForCausalLM(config)
    return model.to(dtype) if dtype is not None else model


def tiny_gpt2() -> Any:
    """The generation tests' GPT-2, random weights, eval mode: 2 layers of width 32, 2
    heads, vocab 64, 64 positions."""
    transformers: Any = importlib.import_module("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=64)
    return transformers.GPT2LMHeadModel(config).eval()


def tiny_bart() -> Any:
    """The generation tests' BART, random weights, eval mode: width 32, 1 encoder and 2
    decoder layers of 2 heads, MLP 64, vocab 64, 64 positions."""
    transformers: Any = importlib.import_module("transformers")
    torch.manual_seed(0)
    config = transformers.BartConfig(
        vocab_size=64, d_model=32, encoder_layers=1, decoder_layers=2,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_position_embeddings=64,
    )  # fmt: skip
    return transformers.BartForConditionalGeneration(config).eval()
