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


@pytest.mark.parametrize("gpu", ["h100", "h200", "a100-80gb", "a100-40gb"])
def test_a_measured_profile_of_a_built_in_gpu_is_written_and_plans_accept_it(
    gpu: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The profile's assembly, on CPU with the measurements stood in for: a GPU whose
    built-in spec gives usable memory above its datasheet's decimal figure (the H100's
    85,029,158,912 B against "80 GB") still makes a profile that loads. Measured: one
    4096^3 matmul at 0.8 of the dense bf16 peak (132 SMs: 32 x 32 tiles of 128 fill
    1,024 / (8 waves x 132) = 0.97 of them), a copy at 0.9 of the bandwidth, 5 us a
    launch."""
    import types

    import layerscope.planning.calibrate as cal

    base = ls.device_spec(gpu)
    peak = base.peak("bfloat16")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    props = types.SimpleNamespace(multi_processor_count=132)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: props)
    monkeypatch.setattr(cal, "_base", lambda i: (base, base.label))
    monkeypatch.setattr(cal, "_matmul_grid", lambda dt, q: [(4096, 4096, 4096, 0.8 * peak)])
    monkeypatch.setattr(cal, "_bandwidth", lambda: 0.9 * base.bandwidth)
    monkeypatch.setattr(cal, "_launch", lambda: 5e-6)
    monkeypatch.setattr(cal, "_attention_grid", lambda dt, p, q: {})
    path = tmp_path / "mine.json"
    spec = ls.calibrate(path, quick=True)
    assert spec.usable_memory_bytes == base.usable_memory_bytes
    assert spec.memory_bytes == base.memory_bytes
    loaded = rates_of(ls.device_spec(str(path)))
    quantisation = 1024 / (8 * 132)  # 1,024 tiles of 128 x 128 in 8 waves of 132
    assert loaded.calibrated and loaded.matmul == pytest.approx(0.8 / quantisation)
    assert loaded.bandwidth == pytest.approx(0.9) and loaded.launch == 5e-6
    plan = ls.plan(nn.Linear(64, 64), torch.randn(8, 64), target=str(path), world_size=1)
    assert plan.rates == f"{gpu}-calibrated"


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
