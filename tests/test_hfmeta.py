"""``collect.hfmeta``: transformers' packed-sequence check is answered for meta tensors
once per analysis, and put back after.

A stand-in ``transformers.masking_utils`` counts how often the helper is replaced; the
model calls the helper as transformers' mask code does.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest
import torch
from torch import nn

import layerscope as ls

NAME = "find_packed_sequence_indices"
#: What the helper answered, call by call.
ANSWERS: list[Any] = []


class Masking(types.ModuleType):
    """A ``transformers.masking_utils`` whose helper counts its replacements."""

    def __init__(self) -> None:
        super().__init__("transformers.masking_utils")
        self.installs = 0
        self.original = self.find_packed_sequence_indices

    def find_packed_sequence_indices(self, position_ids: Any) -> str:
        return "real"

    def __setattr__(self, name: str, value: Any) -> None:
        if name == NAME and value != self.__dict__.get("original"):
            self.installs += 1
        super().__setattr__(name, value)


class Asks(nn.Module):
    """A Linear whose forward asks the helper about its position ids (the answers go to
    ``ANSWERS``: a meta copy shares no list with its model)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        masking = sys.modules["transformers.masking_utils"]
        positions = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
        ANSWERS.append(masking.find_packed_sequence_indices(positions))
        out: torch.Tensor = self.lin(x)
        return out


@pytest.fixture
def masking(monkeypatch: pytest.MonkeyPatch) -> Masking:
    fake = Masking()
    ANSWERS.clear()
    monkeypatch.setitem(sys.modules, "transformers.masking_utils", fake)
    return fake


def test_once_per_profile_on_meta(masking: Masking) -> None:
    model = Asks()
    meta = ls.to_meta(model)
    ls.profile(meta, torch.zeros(2, 4, device="meta"), backward=True, memory=True)
    # one analysis: one replacement; meta position ids: "no packed sequences"
    assert (masking.installs, ANSWERS) == (1, [None])
    assert getattr(masking, NAME) == masking.original  # put back


def test_once_per_profile_with_timing(masking: Masking) -> None:
    model = Asks()
    ls.profile(model, torch.zeros(2, 4), timing={"repeats": 2, "warmup": 1})
    # the timed calls run outside the analysis: still one replacement, and real
    # position ids reach the real helper in every call
    assert masking.installs == 1
    assert len(ANSWERS) > 1 and set(ANSWERS) == {"real"}
    assert getattr(masking, NAME) == masking.original


def test_once_per_staged_call(masking: Masking) -> None:
    model = Asks()
    meta = ls.to_meta(model)
    with ls.Profiler(meta, stages=lambda args, kwargs: "step"):
        for _ in range(3):
            meta(torch.zeros(1, 4, device="meta"))
    # three calls, each its own analysis: three replacements, three meta answers
    assert (masking.installs, ANSWERS) == (3, [None, None, None])
    assert getattr(masking, NAME) == masking.original
