"""``Plan.max_micro_batch``'s limit is a bound on the answer, checked, and an answer of
0 says why."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import layerscope as ls


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))


def test_the_answer_never_passes_the_limit() -> None:
    # the analysed micro-batch is 4 and fits an H100 by far: the limit is the answer
    plan = ls.plan(mlp(), torch.randn(4, 64), target="h100", world_size=1, sharding="none")
    assert plan.fits
    assert plan.max_micro_batch(limit=2) == 2  # not the analysed 4
    assert plan.max_micro_batch(limit=7) == 7
    with pytest.raises(ls.InvalidInputError, match="limit must be an int >= 1, got '64'"):
        plan.max_micro_batch(limit="64")  # type: ignore[arg-type]


def test_nothing_fits_warns() -> None:
    # 1,000 B: less than the 33,280 B of the two layers' weights alone
    plan = ls.plan(
        mlp(), torch.randn(4, 64), target="h100", world_size=1, sharding="none",
        budget=1000, reserve_bytes=0,
    )  # fmt: skip
    assert plan.fits is False
    with pytest.warns(UserWarning, match="not even a micro-batch of 1 fits"):
        assert plan.max_micro_batch(limit=8) == 0
