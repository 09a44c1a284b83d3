"""A ``meta`` analysis follows the CPU's kernels (``target="cpu"``, the default on meta):
per module, FLOPs, bytes saved for backward, output bytes, peak bytes and bytes moved
equal a real CPU run's, forward and backward, on the example models and on transformers
GPT-2, Llama (grouped-query attention) and BERT built from configs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import layerscope as ls
from layerscope import examples

KEYS = (
    "flops",
    "backward_flops",
    "activation_bytes",
    "output_bytes",
    "peak_bytes",
    "backward_peak_bytes",
    "bytes_accessed",
    "backward_bytes_accessed",
)


def _meta(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        meta = torch.empty(value.shape, dtype=value.dtype, device="meta")
        return meta.requires_grad_(value.requires_grad)
    if isinstance(value, dict):
        return {k: _meta(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return type(value)(_meta(v) for v in value)
    return value


def _compare(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None) -> None:
    kwargs = kwargs or {}
    cpu = ls.profile(model, args=args, kwargs=kwargs, memory=True, backward=True)
    meta = ls.profile(
        ls.to_meta(model), args=_meta(args), kwargs=_meta(kwargs), memory=True, backward=True
    )
    assert meta.model["target"] == "cpu"
    wrong = []
    for node in cpu.root.walk():
        other = meta.node(node.path)
        for key in KEYS:
            if node.metrics.get(key) != other.metrics.get(key):
                wrong.append((node.path, key, node.metrics.get(key), other.metrics.get(key)))
    assert not wrong, wrong[:10]


def _gpt2() -> tuple[nn.Module, tuple[Any, ...]]:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128)
    return transformers.GPT2LMHeadModel(config).eval(), (torch.randint(0, 128, (2, 16)),)


def _llama() -> tuple[nn.Module, tuple[Any, ...]]:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        num_hidden_layers=2,
        vocab_size=128,
    )
    return transformers.LlamaForCausalLM(config).eval(), (torch.randint(0, 128, (1, 16)),)


def _bert() -> tuple[nn.Module, tuple[Any, ...]]:
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        hidden_size=64,
        num_attention_heads=4,
        intermediate_size=128,
        num_hidden_layers=2,
        vocab_size=128,
    )
    return transformers.BertModel(config).eval(), (torch.randint(0, 128, (2, 16)),)


class _MaskedAttention(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, m: torch.Tensor) -> Any:
        return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m)


def _masked() -> tuple[nn.Module, tuple[Any, ...]]:
    """A boolean mask: the CPU turns it into an additive float mask (where(mask, 0,
    -inf)) before its flash kernel; steered meta runs the same ops."""
    q, k, v = (torch.randn(2, 4, 16, 8, requires_grad=True) for _ in range(3))
    return _MaskedAttention(), (q, k, v, torch.rand(2, 1, 16, 16) > 0.3)


def _example(name: str) -> Callable[[], tuple[nn.Module, tuple[Any, ...]]]:
    def build() -> tuple[nn.Module, tuple[Any, ...]]:
        ex = examples.EXAMPLES[name]
        return ex.build().eval(), (ex.example_input(),)

    return build


@pytest.mark.parametrize(
    "build",
    [_gpt2, _llama, _bert, _masked, _example("tiny_resnet"), _example("tiny_gpt")],
    ids=["gpt2", "llama", "bert", "masked_sdpa", "tiny_resnet", "tiny_gpt"],
)
def test_meta_equals_cpu(build: Callable[[], tuple[nn.Module, tuple[Any, ...]]]) -> None:
    torch.manual_seed(0)
    model, args = build()
    _compare(model, args)


def test_the_kernels_are_recorded_and_shown(tmp_path: Any) -> None:
    """tiny_gpt has 2 blocks, one attention call each: 2 flash kernels on the CPU."""
    ex = examples.EXAMPLES["tiny_gpt"]
    x = ex.example_input()
    prof = ls.profile(ls.to_meta(ex.build()), torch.empty(x.shape, dtype=x.dtype, device="meta"))
    assert prof.model["kernels"] == {"scaled_dot_product_attention": {"flash_attention_cpu": 2}}
    text = prof.render(width=200)
    assert "following cpu kernels (scaled_dot_product_attention flash_attention_cpu ×2)" in text
    prof.save(tmp_path / "p.json")
    assert ls.load(tmp_path / "p.json").model["kernels"] == prof.model["kernels"]


def test_target_is_checked() -> None:
    model = nn.Linear(4, 4)
    with pytest.raises(ls.InvalidInputError, match="not supported yet"):
        ls.profile(ls.to_meta(model), torch.empty(2, 4, device="meta"), target="h100")
    with pytest.raises(ls.InvalidInputError, match="must be 'cpu' or None"):
        ls.profile(model, torch.randn(2, 4), target="tpu")
