"""``collect.hfmeta``: transformers' value-reading mask helpers run on meta tensors
inside an analysis (their boolean reads answered True: no packing, no padding), once per
analysis, and are put back after.

A stand-in ``transformers.masking_utils`` counts how often the helper is replaced; the
model calls the helper as transformers' mask code does. Real transformers models check
the numbers: the same FLOPs and bytes on meta as on the CPU.
"""

from __future__ import annotations

import sys
import threading
import time
import types
from typing import Any, Literal

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

    def find_packed_sequence_indices(self, position_ids: Any) -> str | None:
        """As transformers' helper: a boolean value read chooses the answer (True, so
        None, for meta position ids inside an analysis; False for the real ones here)."""
        return None if bool(position_ids.eq(-1).all()) else "real"

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
    position ids get None and real ones the helper's own answer; outside, even while
    others are inside, meta's value read raises as it does without layerscope; after the
    last block the helper is the original (no wrapper chained on a wrapper)."""
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
            try:
                outside.append(getattr(masking, NAME)(meta))
            except RuntimeError as e:
                outside.append("raised" if "meta" in str(e) else str(e))

    flags = {name: getattr(python_dispatch, name) for name in DISPATCH_FLAGS}
    threads = [threading.Thread(target=analyse) for _ in range(8)]
    threads.append(threading.Thread(target=user))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # the meta answers' dispatch mode, entered and left by 8 threads at once, may leave
    # torch's process-wide "a dispatch mode is active" flags set: put them back
    for name, value in flags.items():
        setattr(python_dispatch, name, value)
    assert inside == [(None, "real")] * 400
    assert outside == ["raised"] * 200  # the user's thread is in no analysis
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


def _cpu_and_meta(
    model: nn.Module, kwargs: dict[str, torch.Tensor], mode: Literal["train", "eval"]
) -> Any:
    cpu = ls.profile(model, kwargs=kwargs, mode=mode)
    meta = ls.profile(
        ls.to_meta(model), kwargs={k: v.to("meta") for k, v in kwargs.items()}, mode=mode
    )
    return cpu, meta


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_a_mask_of_ones_on_meta_runs_as_on_the_cpu(mode: Literal["train", "eval"]) -> None:
    """A Llama given an attention mask of ones: the mask check reads it (it raised on
    meta before), and meta's FLOPs and bytes are the CPU's, with a notice of the
    reading; without a mask, the packed-sequence check's ops (in training mode) count
    on meta too: per row of L positions, sub + the diff's sub + ne + cumsum over L, and
    sub, eq, all over 1: 3·2·10 + 3·2 = 66 FLOPs in the model's own ops."""
    pytest.importorskip("transformers")
    from helpers.models import tiny_llama

    model = tiny_llama(use_cache=False)  # a cache skips the packed-sequence check
    ids = torch.randint(0, 64, (2, 10))
    cpu, meta = _cpu_and_meta(
        model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, mode
    )
    for key in ("flops", "bytes_accessed"):
        assert meta.root.metrics[key] == cpu.root.metrics[key]
    assert any("read the attention mask as all ones (no padding)" in n for n in meta.notices)
    assert not any("mask as all ones" in n for n in cpu.notices)
    cpu, meta = _cpu_and_meta(model, {"input_ids": ids}, mode)
    # 66 of the model's own 76 FLOPs are the packed check's (meta counted 10 before)
    assert [p.node("model").self_metrics["flops"] for p in (cpu, meta)] == [76, 76]
    assert meta.root.metrics["flops"] == cpu.root.metrics["flops"]
    assert meta.root.metrics["bytes_accessed"] == cpu.root.metrics["bytes_accessed"]
    assert not any("mask as all ones" in n for n in meta.notices)


def test_bart_profiles_on_meta() -> None:
    """BART's decoder builds a padding mask of its own and checks it: meta ran into
    ``Tensor.item()`` before; now its FLOPs are the CPU's (3,308,213 on the CPU in
    training mode for this config, by the CPU run itself)."""
    transformers = pytest.importorskip("transformers")
    config = transformers.BartConfig(
        vocab_size=128, d_model=64, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=96,
        decoder_ffn_dim=96, max_position_embeddings=64, use_cache=False, pad_token_id=1,
        bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.BartForConditionalGeneration(config)
    kwargs = {
        "input_ids": torch.randint(3, 128, (2, 12)),
        "decoder_input_ids": torch.randint(3, 128, (2, 7)),
    }
    cpu, meta = _cpu_and_meta(model, kwargs, "train")
    assert meta.root.metrics["flops"] == cpu.root.metrics["flops"]
    assert meta.root.metrics["bytes_accessed"] == cpu.root.metrics["bytes_accessed"]


def test_a_profiler_block_on_meta_answers_the_checks() -> None:
    """A training step of a transformers Llama inside ``ls.Profiler`` on meta (the packed
    check reads position ids): it ran into ``Tensor.item()`` before; now its FLOPs, forward
    and backward, are the same block's on the CPU."""
    pytest.importorskip("transformers")
    from helpers.models import tiny_llama

    model = tiny_llama(use_cache=False).train()
    flops = []
    for m, ids in (
        (model, torch.zeros(2, 8, dtype=torch.long)),
        (ls.to_meta(model), torch.zeros(2, 8, dtype=torch.long, device="meta")),
    ):
        with ls.Profiler(m) as p:
            m(input_ids=ids).logits.sum().backward()
        flops.append((p.profile.root.metrics["flops"], p.profile.root.metrics["backward_flops"]))
    assert flops[0] == flops[1]
