"""Status lines for long planning: what ``progress=`` callbacks are told, in order, and
that nothing reaches stderr unless the work lasts the threshold."""

from __future__ import annotations

import time
from typing import Any, cast

import pytest
import torch
from torch import nn

import layerscope as ls
from layerscope import busy
from layerscope.errors import InvalidInputError


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))


def test_a_plan_tells_its_two_phases() -> None:
    said: list[str] = []
    ls.plan(_model(), torch.randn(2, 4), precision="fp32", progress=said.append)
    assert said == [
        "layerscope: planning: analysing the model on meta",
        "layerscope: planning: the step's memory and time",
    ]


def test_a_sweep_counts_its_plans() -> None:
    said: list[str] = []
    ls.plan_sweep(_model(), torch.randn(2, 4), precision="fp32", world_size=[1, 2],
                  sharding="ddp", micro_batch=[1, 2], progress=said.append)  # fmt: skip
    # 2 micro-batches x 2 world sizes: 4 plans
    assert said == ["layerscope: planning the sweep"] + [
        f"layerscope: planning the sweep: plan {k} of 4" for k in (1, 2, 3, 4)
    ]


def test_max_micro_batch_names_each_size_it_tries() -> None:
    """Budget for about 3 rows: from the analysed 2, 4 is tried (too big), then 3."""
    plan = ls.plan(_model(), torch.randn(2, 4), precision="fp32", sharding="none",
                   world_size=1)  # fmt: skip
    per_row = ls.plan(_model(), torch.randn(3, 4), precision="fp32", sharding="none",
                      world_size=1).peak_bytes  # fmt: skip
    budgeted = ls.plan(_model(), torch.randn(2, 4), precision="fp32", sharding="none",
                       world_size=1, budget=per_row, reserve_bytes=0)  # fmt: skip
    said: list[str] = []
    assert budgeted.max_micro_batch(limit=8, progress=said.append) == 3
    head = "layerscope: the largest micro-batch that fits"
    assert said == [head, f"{head}: trying 4", f"{head}: trying 3"]
    assert plan.peak_bytes < per_row


def test_nothing_on_stderr_before_the_threshold(capsys: pytest.CaptureFixture[str]) -> None:
    ls.plan(_model(), torch.randn(2, 4), precision="fp32", progress=True)
    assert capsys.readouterr().err == ""


def test_a_spinner_once_the_threshold_passes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(busy, "THRESHOLD_S", 0.01)
    with busy.busy("layerscope: waiting", True) as status:
        time.sleep(0.2)
        status.update("layerscope: still waiting")
        time.sleep(0.2)
    # not a terminal: a line per status text once the threshold passed
    assert capsys.readouterr().err == "layerscope: waiting\nlayerscope: still waiting\n"


def test_progress_is_checked() -> None:
    with pytest.raises(InvalidInputError, match="progress must be None, True, False or a "):
        ls.plan(_model(), torch.randn(2, 4), precision="fp32", progress=cast(Any, "yes"))
