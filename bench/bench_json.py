"""Time to save and load a large profile as JSON, against the 0.5 s targets.

    .venv/bin/python bench/bench_json.py [--layers 10000] [--repeats 3]

Builds one profile of ``nn.Sequential(*[nn.Linear(4, 4) for _ in range(LAYERS)])`` on
``torch.randn(2, 4)`` (LAYERS + 1 nodes, with shapes and FLOPs), then prints, best of
``--repeats`` (wall time, ``time.perf_counter``):

1. ``prof.save(path)``: to_dict, compact C-encoded JSON, atomic write (target 0.5 s);
2. ``ls.load(path)``: parse, check every known key, build the nodes (target 0.5 s);
3. for comparison, the old way of saving: ``json.dumps(prof.to_dict(), indent=2)``
   (Python's pure-Python encoder, which ``indent`` forces) and writing the text, the
   ``json.dumps`` alone, and ``prof.to_json()`` (still indented by default);
4. ``prof.save`` of the same profile with a NaN in every node's numerics (the slower
   path that writes non-finite numbers as strings), and its load;
5. for information only: full validation of the saved file against the shipped JSON
   Schema with ``jsonschema`` (why ``load`` checks inline instead), when installed.

Nothing is asserted: each time is printed beside its target with ``ok`` or ``SLOW``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

import layerscope as ls
from layerscope.export.json import SCHEMA_PATH

TARGET_S = 0.5


def best_s(repeats: int, fn: Callable[[], object]) -> float:
    """Best wall time of ``fn()`` over ``repeats`` runs, in seconds."""
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def line(label: str, seconds: float, target: float | None = TARGET_S) -> None:
    verdict = "" if target is None else ("ok" if seconds < target else "SLOW")
    goal = "" if target is None else f"(target {target:.1f} s)"
    print(f"  {label:<44} {seconds:8.3f} s  {goal:<16} {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(args.layers)])
    prof = ls.profile(model, torch.randn(2, 4))
    nodes = len(prof.nodes())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p.json"
        prof.save(path)
        size = path.stat().st_size
        print(f"profile: {nodes:,} nodes, saved file {size / 2**20:.1f} MiB")
        line("save (prof.save)", best_s(args.repeats, lambda: prof.save(path)))
        line("load (ls.load)", best_s(args.repeats, lambda: ls.load(path)))

        old = Path(tmp) / "old.json"

        def old_save() -> None:
            old.write_text(json.dumps(prof.to_dict(), indent=2) + "\n", encoding="utf-8")

        line("old save: json.dumps(indent=2) + write", best_s(args.repeats, old_save), None)
        data = prof.to_dict()
        line(
            "  of which json.dumps(indent=2)",
            best_s(args.repeats, lambda: json.dumps(data, indent=2)),
            None,
        )
        line("prof.to_json() (indent=2, kept as an API)", best_s(args.repeats, prof.to_json), None)

        for node in prof.nodes():
            node.numerics = {"mean": math.nan, "absmax": math.inf}
        nan_path = Path(tmp) / "nan.json"
        line("save with NaN/Inf in every node", best_s(args.repeats, lambda: prof.save(nan_path)))
        line("load with NaN/Inf in every node", best_s(args.repeats, lambda: ls.load(nan_path)))

        try:
            jsonschema = importlib.import_module("jsonschema")  # untyped: kept as Any
        except ImportError:
            print("  (jsonschema not installed: no full-validation time)")
            return
        validator = jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text()))
        data = json.loads(path.read_text())
        line(
            "jsonschema validation (information)", best_s(1, lambda: validator.validate(data)), None
        )


if __name__ == "__main__":
    main()
