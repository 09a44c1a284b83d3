"""``ls.calibrate`` / ``layerscope calibrate``: the CUDA microbenchmarks that write a
device profile, and their refusal on a machine without a GPU."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
import torch
from torch import nn

import layerscope as ls
from layerscope.analysis.rates import rates_of
from layerscope.cli import main
from layerscope.errors import InvalidInputError
from layerscope.planning.calibrate import NO_GPU


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_without_a_gpu_it_refuses_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(InvalidInputError, match=r"calibrate measures a CUDA GPU"):
        ls.calibrate()
    code, out, err = run("calibrate", "-o", str(tmp_path / "gpu.json"))
    assert (code, out, err) == (2, "", f"layerscope: error: {NO_GPU}\n")
    assert not (tmp_path / "gpu.json").exists()


@pytest.mark.cuda
def test_calibrate_writes_a_profile_that_plans_accept(tmp_path: Path) -> None:
    path = tmp_path / "mine.json"
    code, out, err = run("calibrate", "--quick", "--name", "mine", "-o", str(path))
    assert code == 0, err
    assert out.endswith(f"wrote {path}\n")
    data = json.loads(path.read_text(encoding="utf-8"))
    rates = data["rates"]
    assert data["name"] == rates["name"] == "mine" and rates["calibrated"] is True
    props = torch.cuda.get_device_properties(0)
    assert rates["sms"] == props.multi_processor_count
    for key in ("matmul", "bandwidth"):
        assert 0 < rates[key] <= 1
    assert 0 < rates["launch"] < 1e-3  # seconds per kernel
    assert rates["attention"], "no sdpa backend ran"
    spec = ls.device_spec(str(path))
    assert rates_of(spec).calibrated and rates_of(spec).sms == props.multi_processor_count
    plan = ls.plan(nn.Linear(64, 64), torch.randn(8, 64), target=str(path), world_size=1)
    assert plan.rates == "mine"
    assert plan.step_time_bound is not None and plan.step_time_bound <= plan.step_time
