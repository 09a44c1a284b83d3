"""A torch.compile'd model: the eager original's analysis and per-module times, plus the
compiled model's own whole-model latency, labelled as such."""

from __future__ import annotations

import json

import torch
from torch import nn

import layerscope as ls


def model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def test_compiled_model_gets_eager_analysis_and_its_own_latency() -> None:
    eager = model()
    compiled: nn.Module = torch.compile(eager, backend="eager")  # type: ignore[assignment]
    x = torch.randn(2, 4)
    prof = ls.profile(compiled, x, timing={"warmup": 1, "repeats": 3})
    assert prof.root.type == "Sequential"
    assert prof.root.metrics["macs"] == 2 * (4 * 8 + 8 * 2)  # 96, the eager module's
    assert any("torch.compile'd model" in n for n in prof.notices)
    latency = prof.timing["compiled"]["latency"]
    assert latency["n"] == 3 and latency["median"] > 0
    assert prof.timing["compiled"]["warmup"] == 1  # the compiling call is never timed
    assert all(n.metrics["forward_time"] > 0 for n in prof.nodes())  # eager, per module
    text = prof.render(width=120)
    assert "Compiled (torch.compile) forward latency: median" in text
    again = ls.Profile.from_dict(json.loads(prof.to_json()))
    assert again == prof


def test_compiled_model_without_timing_has_no_compiled_latency() -> None:
    compiled: nn.Module = torch.compile(model(), backend="eager")  # type: ignore[assignment]
    prof = ls.profile(compiled, torch.randn(2, 4))
    assert "compiled" not in prof.timing


def test_a_compiled_submodule_is_named_in_a_notice_once() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(4, 4)
            self.b = torch.compile(nn.Sequential(nn.Linear(4, 4), nn.ReLU()))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.b(self.a(x))
            return out

    prof = ls.profile(Net(), torch.randn(2, 4))
    said = [n for n in prof.notices if "compile'd submodules" in n]
    assert said == [
        "torch.compile'd submodules (b): layerscope analysed their original eager modules "
        "(under _orig_mod); the compiled graphs may fuse or reorder their ops"
    ]
    assert prof.node("b._orig_mod.0").metrics["macs"] == 2 * 4 * 4
