"""The Hugging Face ``Trainer`` callback: the Trainer's own optimizer steps are the
Profiler's steps. A 2-layer GPT-2 (n_embd 32, vocab 64) built from a config, random
weights, trained on 16 in-memory sequences of 8 tokens, batch 4, on the CPU."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

import layerscope as ls

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from layerscope.integrations.huggingface import LayerscopeCallback  # noqa: E402

BATCH, TOKENS, WIDTH = 4, 8, 32


def _train(tmp_path: Path, cb: LayerscopeCallback, steps: int, accumulate: int = 1) -> Any:
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_embd=WIDTH, n_head=2, vocab_size=64, n_positions=32
    )
    model = transformers.GPT2LMHeadModel(config)
    data = []
    for _ in range(16):
        ids = torch.randint(0, 64, (TOKENS,))
        data.append({"input_ids": ids, "labels": ids})
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=BATCH,
        gradient_accumulation_steps=accumulate,
        max_steps=steps,
        report_to=[],
        logging_strategy="no",
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[cb])
    trainer.train()
    return model


def _no_hooks(model: torch.nn.Module) -> bool:
    return all(
        not (m._forward_hooks or m._forward_pre_hooks or m._backward_hooks)
        and "forward" not in m.__dict__
        for m in model.modules()
    )


def test_trainer_steps_are_profiler_steps(tmp_path: Path) -> None:
    """wait 1, warmup 1, active 2 over 4 Trainer steps: steps 2 and 3 are measured, the
    first analysed, the second timed. With gradient accumulation 2 each step runs the
    model twice: the analysed step has 2 calls of the root.

    mlp.c_fc is a Conv1D(32 -> 128) on 4 x 8 = 32 rows: 2*32*32*128 = 262,144 FLOPs of
    the matmul plus 32*128 = 4,096 bias adds per call, times 2 calls."""
    seen: list[ls.Profile] = []
    cb = LayerscopeCallback(
        schedule=ls.schedule(wait=1, warmup=1, active=2, repeat=1),
        timing=True,
        on_ready=seen.append,
        save_to=tmp_path / "profile.json",
    )
    model = _train(tmp_path, cb, steps=4, accumulate=2)
    prof = cb.profile
    assert prof is not None and seen == [prof] and cb.profiles == [prof]
    loop = prof.model["loop"]
    assert (loop["first_step"], loop["last_step"]) == (2, 3)
    assert (loop["analysed_steps"], loop["timed_steps"]) == (1, 1)
    assert prof.root.calls == 2
    fc = prof.node("transformer.h.0.mlp.c_fc")
    assert fc.metrics["flops"] == 2 * (2 * 32 * WIDTH * 4 * WIDTH + 32 * 4 * WIDTH)
    assert fc.metrics["forward_time"] > 0 and fc.metrics["backward_time"] > 0
    assert prof.timing["step_optimizer"]["max"] > 0
    assert ls.load(tmp_path / "profile.json") == prof
    assert _no_hooks(model)


def test_without_a_schedule_the_whole_training_is_one_profile(tmp_path: Path) -> None:
    cb = LayerscopeCallback()
    _train(tmp_path, cb, steps=2)
    prof = cb.profile
    assert prof is not None and len(cb.profiles) == 1
    # 2 steps of one forward each; a backward per step counted too
    assert prof.root.calls == 2 and prof.root.metrics["backward_flops"] > 0


def test_bad_options() -> None:
    with pytest.raises(ls.InvalidInputError, match="schedule"):
        LayerscopeCallback(schedule=3)  # type: ignore[arg-type]
    with pytest.raises(ls.InvalidInputError, match="on_ready"):
        LayerscopeCallback(on_ready=1)  # type: ignore[arg-type]
    with pytest.raises(ls.InvalidInputError, match="save_to"):
        LayerscopeCallback(save_to=3)  # type: ignore[arg-type]
    assert os.fspath(LayerscopeCallback(save_to="p.json").save_to or "") == "p.json"
