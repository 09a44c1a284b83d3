"""The Run line and ``profile.model`` say how the model's calls ran (train or eval mode,
grad mode, autocast), as its first call found them, not as things stood when profiling
began."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import layerscope as ls
from layerscope.errors import InvalidInputError
from layerscope.render.summary import run_line


def _mlp() -> nn.Sequential:
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU())


def test_a_profiler_block_that_sets_eval_and_no_grad_says_so() -> None:
    m, x = _mlp(), torch.randn(2, 8)
    with ls.Profiler(m) as p:
        m.eval()
        with torch.no_grad():
            m(x)
        m.train()
    assert p.profile.model["training"] is False
    assert p.profile.model["grad_mode"] == "no_grad"
    assert run_line(p.profile) == ("Run: eval mode, no_grad, device cpu, float32.", "")
    assert not any("more than one mode" in n for n in p.profile.notices)


def test_autocast_inside_the_block_is_on_the_run_line(tmp_path: Path) -> None:
    m, x = _mlp(), torch.randn(2, 8)
    with ls.Profiler(m) as p, torch.autocast("cpu", dtype=torch.bfloat16):
        m(x).float().sum().backward()
    assert p.profile.model["autocast"] == "bfloat16"
    assert p.profile.model["autocast_device"] == "cpu"
    text = run_line(p.profile)
    assert text == ("Run: train mode, grad enabled, device cpu, float32, autocast bfloat16.", "")
    # the same from ls.profile called under autocast, and through JSON
    with torch.autocast("cpu", dtype=torch.bfloat16):
        r = ls.profile(m, x)
    path = tmp_path / "r.json"
    r.export(str(path))
    assert run_line(ls.load(str(path))) == text


def test_autocast_on_another_device_type_is_not_the_models() -> None:
    m, x = _mlp().to("meta"), torch.randn(2, 8, device="meta")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        r = ls.profile(m, x)  # meta tensors: CPU autocast changes none of their ops
    assert "autocast" not in r.model


def test_calls_in_different_modes_get_a_notice() -> None:
    m, x = _mlp(), torch.randn(2, 8)
    with ls.Profiler(m) as p:
        m(x).sum().backward()
        m.eval()
        with torch.no_grad():
            m(x)
        m.train()
    assert p.profile.model["training"] is True  # the first call's
    assert (
        "the model was called in more than one mode (train mode then eval mode; grad "
        "enabled then no_grad): the Run line gives its first call's"
    ) in p.profile.notices


def test_a_plan_refuses_a_profile_made_under_cpu_autocast() -> None:
    m, x = _mlp(), torch.randn(2, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        r = ls.profile(m, x, backward=True, memory=True)
    with pytest.raises(InvalidInputError, match="ran under cpu autocast, whose rules"):
        ls.plan(r, target="h100", precision="bf16-mixed")
