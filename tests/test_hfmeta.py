"""``collect.hfmeta``: transformers' packed-sequence check is answered for meta tensors
once per analysis, and put back after.

A stand-in ``transformers.masking_utils`` counts how often the helper is replaced; the
model calls the helper as transformers' mask code does.
"""

from __future__ import annotations

import sys
import threading
import time
import types
from typing import Any

import pytest
import torch
import torch.utils._python_dispatch as python_dispatch
from torch import nn

import layerscope as ls

NAME = "find_packed_sequence_indices"
#: torch's process-wide flags that say a dispatch mode is active
DISPATCH_FLAGS = (
    "_is_in_torch_dispatch_mode",
    "_is_in_non_infra_torch_dispatch_mode",
    "_is_in_any_mode_without_ignore_compile_internals",
)
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


def test_threads_share_one_patch_and_leave_the_original(masking: Masking) -> None:
    """8 threads x 50 blocks, interleaved with a thread outside any block: inside, meta
    position ids get None and real ones the helper; outside, even while others are
    inside, the helper itself answers; after the last block the helper is the original
    (no wrapper chained on a wrapper)."""
    from layerscope.collect.hfmeta import meta_values

    meta, real = torch.zeros(1, 4, device="meta"), torch.zeros(1, 4)
    inside: list[Any] = []
    outside: list[Any] = []
    start = threading.Barrier(9)

    def analyse() -> None:
        start.wait()
        for _ in range(50):
            with meta_values():
                time.sleep(0.0002)  # let the other threads in while this one is inside
                ask = getattr(masking, NAME)
                inside.append((ask(meta), ask(real)))

    def user() -> None:
        start.wait()
        for _ in range(200):
            time.sleep(0.0001)
            outside.append(getattr(masking, NAME)(meta))

    threads = [threading.Thread(target=analyse) for _ in range(8)]
    threads.append(threading.Thread(target=user))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert inside == [(None, "real")] * 400
    assert outside == ["real"] * 200  # the user's thread is in no analysis
    assert getattr(masking, NAME) == masking.original
    assert 1 <= masking.installs <= 400


def test_threads_planning_a_transformers_model() -> None:
    """8 threads x 6 plans of a tiny Llama in training mode (whose mask code asks the
    helper): every plan is the same, and the helper is transformers' own after."""
    masking = pytest.importorskip("transformers.masking_utils")
    from helpers.models import tiny_llama

    original = getattr(masking, NAME)
    model = tiny_llama().train()
    ids = torch.zeros(1, 8, dtype=torch.long)
    peaks: list[int] = []
    errors: list[BaseException] = []

    def plans() -> None:
        try:
            for _ in range(6):
                plan = ls.plan(model, ids, target="h100", world_size=1, sharding="none")
                peaks.append(plan.peak_bytes)
        except BaseException as e:  # reported below
            errors.append(e)

    flags = {name: getattr(python_dispatch, name) for name in DISPATCH_FLAGS}
    threads = [threading.Thread(target=plans) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # torch keeps its "a dispatch mode is active" flags process-wide, not per thread:
    # sessions that end in other threads' order can leave them set; put them back
    for name, value in flags.items():
        setattr(python_dispatch, name, value)
    assert errors == [] and len(peaks) == 48 and len(set(peaks)) == 1
    assert getattr(masking, NAME) is original
