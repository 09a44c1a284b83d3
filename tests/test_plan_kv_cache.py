"""A training plan of a model that would return a KV cache: the analysis turns it off (a
training step never reads it) and says so; an explicit use_cache=True is refused."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import layerscope as ls
import layerscope.planning.facts as facts
from layerscope.errors import InvalidInputError

transformers = pytest.importorskip("transformers")
ONE_GPU: dict[str, Any] = {"world_size": 1, "sharding": "none", "precision": "fp32"}


def _gpt2() -> Any:
    config = transformers.GPT2Config(
        n_layer=1, n_embd=16, n_head=2, vocab_size=32, n_positions=16
    )  # use_cache defaults to True
    return transformers.GPT2LMHeadModel(config)


@pytest.mark.slow
def test_the_cache_is_turned_off_with_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    model, ids = _gpt2(), torch.zeros(2, 8, dtype=torch.long)
    plan = ls.plan(model, ids, **ONE_GPU)
    assert model.config.use_cache  # the user's model is untouched
    assert [n for n in plan.notes if n.startswith(facts.CACHE_OFF)] != []
    asked_off = ls.plan(model, ids, kwargs={"use_cache": False}, **ONE_GPU)
    assert asked_off.peak_bytes == plan.peak_bytes
    assert not [n for n in asked_off.notes if n.startswith(facts.CACHE_OFF)]
    # with the cache kept, its K and V of the one layer stay alive at the peak:
    # 2 tensors x batch 2 x 8 tokens x 16 features x 4 B = 2,048 B more
    monkeypatch.setattr(facts, "_cache_off", lambda model, kwargs: False)
    kept = ls.plan(model, ids, **ONE_GPU)
    assert kept.peak_bytes - plan.peak_bytes == 2 * 2 * 8 * 16 * 4


def test_an_explicit_cache_is_refused_with_the_fix() -> None:
    with pytest.raises(InvalidInputError, match="pass use_cache=False"):
        ls.plan(_gpt2(), torch.zeros(2, 8, dtype=torch.long), kwargs={"use_cache": True},
                **ONE_GPU)  # fmt: skip


def test_input_shape_with_the_cache_turned_off() -> None:
    """Shapes instead of tensors: the plan draws the token ids itself, beside its
    ``use_cache=False`` (``ls.profile`` takes shapes or keyword inputs, not both): the
    same plan as with 2 x 8 token ids given."""
    model = _gpt2()
    drawn = ls.plan(model, input_shape=(2, 8), input_dtype=torch.long, **ONE_GPU)
    given = ls.plan(model, torch.zeros(2, 8, dtype=torch.long), **ONE_GPU)
    assert (drawn.tokens, drawn.peak_bytes, drawn.states) == (16, given.peak_bytes, given.states)
    assert [n for n in drawn.notes if n.startswith(facts.CACHE_OFF)] != []
