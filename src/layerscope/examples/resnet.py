"""A CIFAR-sized ResNet: BatchNorm buffers, residual adds, a downsample branch."""

from __future__ import annotations

from torch import Tensor, nn

from layerscope.examples._seed import seeded

SEED = 1001


class BasicBlock(nn.Module):
    """Two 3x3 conv+BN layers with an identity (or 1x1 conv+BN downsample) shortcut."""

    def __init__(self, in_ch: int, out_ch: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.downsample: nn.Sequential | None = None
        if stride != 1 or in_ch != out_ch:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False),
                nn.BatchNorm2d(out_ch),
            )

    def forward(self, x: Tensor) -> Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        result: Tensor = self.relu(out + identity)
        return result


class TinyResNet(nn.Module):
    """Stem (conv 3->16, BN, ReLU), stages of 16 and 32 channels, pool, linear head."""

    def __init__(self, num_classes: int = 10, widths: tuple[int, int] = (16, 32)) -> None:
        super().__init__()
        w1, w2 = widths
        self.conv1 = nn.Conv2d(3, w1, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(w1)
        self.relu = nn.ReLU()
        self.layer1 = nn.Sequential(BasicBlock(w1, w1), BasicBlock(w1, w1))
        self.layer2 = nn.Sequential(BasicBlock(w1, w2, stride=2), BasicBlock(w2, w2))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(w2, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer2(self.layer1(x))
        out: Tensor = self.fc(self.flatten(self.avgpool(x)))
        return out


def tiny_resnet() -> TinyResNet:
    """A fresh TinyResNet with fixed weights; input (N, 3, 32, 32), output (N, 10)."""
    with seeded(SEED):
        return TinyResNet()
