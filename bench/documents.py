"""Write a fixed set of plan, sweep, generation and estimate documents and their views.

    python bench/documents.py OUT_DIR

Every file is deterministic (fixed seeds, no wall-clock times, the HTML's generation
stamp taken out), so two runs of two versions of layerscope can be compared byte for
byte with ``diff -r``: a change that should keep every output as it was shows none.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import layerscope as ls

WIDTHS = (("w100", 100), ("w80", 80))
STAMPS = re.compile(r'"(created|generated|timestamp|python|torch|platform|host)": "[^"]*"')


def llama() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2,
    )  # fmt: skip
    model: Any = LlamaForCausalLM(config)
    return model.eval()


def gpt2() -> Any:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=128, n_positions=128)
    return GPT2LMHeadModel(config)


def write(out: Path, name: str, text: str) -> None:
    (out / name).write_text(STAMPS.sub(r'"\1": "-"', text))


def views(out: Path, name: str, obj: Any, renders: dict[str, Callable[[], str]]) -> None:
    write(out, f"{name}.json", json.dumps(obj.to_dict(), indent=1, sort_keys=True))
    for view, render in renders.items():
        write(out, f"{name}.{view}.txt", render())


def plans(out: Path) -> None:
    model = gpt2()
    ids = torch.randint(0, 128, (2, 64), generator=torch.Generator().manual_seed(0))
    cases: dict[str, dict[str, Any]] = {
        "plan_none_fp32": {"world_size": 1, "sharding": "none", "precision": "fp32"},
        "plan_ddp_bf16mixed": {"world_size": 8, "sharding": "ddp", "precision": "bf16-mixed"},
        "plan_fsdp_auto": {
            "world_size": 16, "sharding": "fsdp", "precision": "bf16-mixed",
            "checkpoint": "auto", "budget": 2**27,
        },
        "plan_fsdp_blocks": {
            "world_size": 8, "sharding": "fsdp", "precision": "bf16", "checkpoint": "blocks",
            "grad_accum": 4, "optimizer": "sgd_momentum",
        },
        "plan_hsdp": {"world_size": 8, "sharding": "fsdp", "precision": "fp32", "hsdp": (2, 4)},
        "plan_zero2": {"world_size": 4, "sharding": "zero2", "precision": "fp16-mixed"},
        "plan_zero1": {"world_size": 4, "sharding": "zero1", "precision": "bf16-mixed"},
    }  # fmt: skip
    for name, options in cases.items():
        plan = ls.plan(model, ids, target="h100", **options)
        views(out, name, plan, {w: functools.partial(plan.render, width=n) for w, n in WIDTHS})
        plan.to_html(out / f"{name}.html")
        write(out, f"{name}.html", (out / f"{name}.html").read_text())
        write(out, f"{name}.max_micro_batch.txt", str(plan.max_micro_batch(limit=64)))
    sweep = ls.plan_sweep(
        model, ids, target="h100", world_size=[8, 16], sharding=["fsdp", "zero2"],
        precision="bf16-mixed", checkpoint=[None, "blocks"], micro_batch=[1, 2],
    )  # fmt: skip
    views(out, "sweep", sweep, {"w100": lambda: sweep.render(width=100)})


def generations(out: Path) -> None:
    model = llama()
    ids = torch.randint(0, 128, (2, 6), generator=torch.Generator().manual_seed(0))
    gen = ls.profile_generate(model, ids, 3)
    views(
        out, "generation", gen,
        {
            "w100": lambda: gen.render(width=100),
            "top": lambda: gen.render(view="top", width=100),
            "decode": lambda: gen.render(stage="decode", width=100),
        },
    )  # fmt: skip
    gen.to_html(out / "generation.html")
    write(out, "generation.html", (out / "generation.html").read_text())
    timed = gen.to_dict()  # fixed times: a trace needs them, and measured ones vary
    section = timed["generation"]
    for i, row in enumerate(section.get("calls") or section["decode_steps"]):
        row["time"] = (i + 1) / 1000
    ls.Generation.from_dict(timed).to_trace(out / "generation.trace.json")
    write(out, "generation.trace.json", (out / "generation.trace.json").read_text())
    with ls.Profiler(model, stages=True) as p:
        model.generate(ids, max_new_tokens=3, min_new_tokens=3, do_sample=False)
    staged = p.generation
    views(out, "staged", staged, {"w100": lambda: staged.render(width=100)})
    est = ls.estimate_generate(
        ls.to_meta(model), target="h100", prompt=32, new_tokens=8, batch=[1, 8]
    )
    views(out, "estimate", est, {"w100": lambda: est.render(width=100)})


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    plans(out)
    generations(out)
    print(f"{len(list(out.iterdir()))} files in {out}")


if __name__ == "__main__":
    main()
