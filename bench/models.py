"""Reference model shapes for the benchmarks, built without torchvision or downloads."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        identity = x if self.downsample is None else self.downsample(x)
        result: torch.Tensor = self.relu(out + identity)
        return result


def resnet50() -> nn.Module:
    """The ResNet-50 layout (3, 4, 6, 3 bottlenecks), built here without torchvision."""
    layers: list[nn.Module] = [
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, 1),
    ]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        stage = []
        for i in range(blocks):
            stage.append(Bottleneck(cin, width, stride if i == 0 else 1))
            cin = width * 4
        layers.append(nn.Sequential(*stage))
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, 1000)]
    return nn.Sequential(*layers)


def gpt2_small() -> nn.Module:
    """GPT-2 small's shape (12 layers, 768 wide, 12 heads), random weights."""
    import transformers

    config = transformers.GPT2Config(n_layer=12, n_embd=768, n_head=12, vocab_size=50257)
    model: nn.Module = transformers.GPT2LMHeadModel(config)
    model.train(False)
    return model


def llama_config(layers: int = 80, hidden: int = 8192) -> Any:
    """A Llama-2-70B-like config: 80 layers, hidden 8192, 64 heads, 8 KV heads."""
    import transformers

    return transformers.LlamaConfig(
        hidden_size=hidden,
        intermediate_size=28672,
        num_hidden_layers=layers,
        num_attention_heads=64,
        num_key_value_heads=8,
        vocab_size=32000,
        max_position_embeddings=4096,
    )


def llama_on_meta(layers: int = 80, hidden: int = 8192) -> nn.Module:
    import transformers

    with torch.device("meta"):
        model: nn.Module = transformers.LlamaForCausalLM(llama_config(layers, hidden))
    model.train(False)
    return model
