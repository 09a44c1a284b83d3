"""Regenerate the saved profiles the golden view tests read (not run by the tests).

    .venv/bin/python tests/data/make_profiles.py

bert_base.json: a BERT-base-shaped transformers model (12 layers, hidden 768, random
weights from a default ``BertConfig``, nothing downloaded) profiled in eval mode on CPU
with memory and a short timing pass, so every kind of column appears. Saved JSON keeps the
golden files independent of the installed transformers release.

gpt2_small.json: ``GPT2LMHeadModel(GPT2Config(n_layer=2))`` (random weights, nothing
downloaded) profiled on a (1, 32) batch of token ids with ``backward=True,
memory=True``: long module names (``resid_dropout``, ``NewGELUActivation``) six levels
deep, for the goldens in which every module name stays whole.
"""

from __future__ import annotations

from pathlib import Path

import torch

import layerscope as ls

HERE = Path(__file__).parent


def bert_base() -> ls.Profile:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig())
    model.train(False)
    return ls.profile(model, input_shape=(1, 32), memory=True, timing={"warmup": 1, "repeats": 3})


def gpt2_small() -> ls.Profile:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2))
    return ls.profile(model, input_shape=(1, 32), backward=True, memory=True)


if __name__ == "__main__":
    for name, make in (("bert_base", bert_base), ("gpt2_small", gpt2_small)):
        prof = make()
        (HERE / f"{name}.json").write_text(prof.to_json(indent=None) + "\n", encoding="utf-8")
        print(repr(prof))
