"""Regenerate the saved profiles the golden view tests read (not run by the tests).

    .venv/bin/python tests/data/make_profiles.py

bert_base.json: a BERT-base-shaped transformers model (12 layers, hidden 768, random
weights from a default ``BertConfig``, nothing downloaded) profiled in eval mode on CPU
with memory and a short timing pass, so every kind of column appears. Saved JSON keeps the
golden files independent of the installed transformers release.
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


if __name__ == "__main__":
    prof = bert_base()
    (HERE / "bert_base.json").write_text(prof.to_json(indent=None) + "\n", encoding="utf-8")
    print(repr(prof))
