"""Cost of an analysis pass: ``ls.profile`` wall time / bare forward time, per example model.

Prints, for each built-in example and a ResNet-50-shaped model, the best-of-N wall time of a
bare forward (``torch.no_grad`` off, as ``ls.profile`` runs it) and of ``ls.profile`` (hooks,
shape recording, parameter counting, state capture and restore, tree building), and their
ratio, all measured in this one run.

    python bench/bench_overhead.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
from torch import nn

import layerscope as ls
from layerscope.examples import EXAMPLES


def best_of(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    cases: list[tuple[str, nn.Module, torch.Tensor]] = [
        (name, ex.build().eval(), ex.example_input()) for name, ex in EXAMPLES.items()
    ]
    cases.append(("resnet50 (1x3x224x224)", resnet50().eval(), torch.randn(1, 3, 224, 224)))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, best of {args.repeats}")
    print(f"{'model':<28}{'bare fwd':>12}{'ls.profile':>12}{'ratio':>8}")
    for name, model, x in cases:
        bare = best_of(lambda m=model, x=x: m(x), args.repeats)  # type: ignore[misc]
        prof = best_of(lambda m=model, x=x: ls.profile(m, x), args.repeats)  # type: ignore[misc]
        print(f"{name:<28}{bare * 1e3:>10.2f}ms{prof * 1e3:>10.2f}ms{prof / bare:>8.2f}")


if __name__ == "__main__":
    main()
