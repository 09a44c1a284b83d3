"""No layerscope call moves a random number generator the user can see: torch's CPU
generator, Python's ``random`` and numpy's global one. Each entry point runs for the
first time in a fresh interpreter, where lazy imports happen (rich draws from Python's
``random`` when it is first imported; the CPU's calibration ran ``torch.randn``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a fresh interpreter runs every entry point: 8 s

CHILD = textwrap.dedent(
    """
    import json, random, sys, tempfile
    from pathlib import Path
    import numpy as np
    import torch
    from torch import nn
    import layerscope as ls

    def state():
        return (random.getstate(), torch.get_rng_state().tolist(),
                np.random.get_state()[1].tolist())

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    x = torch.randn(2, 8)
    out = Path(tempfile.mkdtemp())
    held = {}

    def profiled():
        held["prof"] = ls.profile(model, x, memory=True, backward=True)

    def planned():
        held["plan"] = ls.plan(model, x, target="h100", world_size=1, sharding="none",
                               precision="fp32")

    import transformers

    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, attention_dropout=0.5,
    )
    llama = transformers.LlamaForCausalLM(config).train()  # dropout draws when run
    ids = torch.randint(0, 64, (1, 5))

    calls = {
        "ls.profile_generate (train mode, timed)": lambda: ls.profile_generate(
            llama, ids, max_new_tokens=3, timing=2
        ),
        "ls.profile": profiled,
        "Profile.render": lambda: held["prof"].render(width=100),
        "Profile.render(view='top')": lambda: held["prof"].render(view="top", width=100),
        "Profile.to_html": lambda: held["prof"].to_html(out / "p.html"),
        "Profile.save and ls.load": lambda: (held["prof"].save(out / "p.json"),
                                             ls.load(out / "p.json")),
        "Profile.to_csv": lambda: held["prof"].to_csv(out / "p.csv"),
        "ls.estimate": lambda: ls.estimate(held["prof"], "h100"),
        "ls.device_spec('cpu')": lambda: ls.device_spec("cpu"),
        "ls.plan": planned,
        "Plan.render": lambda: held["plan"].render(width=100),
        "Plan.to_html": lambda: held["plan"].to_html(out / "plan.html"),
    }
    moved = []
    for name, call in calls.items():
        before = state()
        call()
        if state() != before:
            moved.append(name)
    print(json.dumps(moved))
    """
)


def test_no_entry_point_moves_an_rng() -> None:
    src = Path(__file__).resolve().parent.parent / "src"
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(src)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
