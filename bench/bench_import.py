"""Time of ``import layerscope`` after ``import torch``, in fresh processes.

    python bench/bench_import.py [--runs 3] [--modules]

Each run is a new interpreter that imports torch first (its cost is not layerscope's),
then times ``import layerscope`` with the cyclic garbage collector on, as users run it.
A ``gc.callbacks`` hook times every collection during the import: that share is printed
apart, since ``python -X importtime`` charges it to whichever module happens to be
loading when a collection runs. Prints the median of ``--runs`` processes, and with
``--modules`` the layerscope modules the import loaded.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

#: The child: import torch, then time ``import layerscope`` and the collections in it.
CHILD = """
import gc, json, sys, time
import torch
spent = [0.0, 0.0]
def timer(phase, info):
    if phase == "start":
        spent[1] = time.perf_counter()
    else:
        spent[0] += time.perf_counter() - spent[1]
gc.callbacks.append(timer)
t = time.perf_counter()
import layerscope
seconds = time.perf_counter() - t
gc.callbacks.remove(timer)
mods = sorted(m for m in sys.modules if m == "layerscope" or m.startswith("layerscope."))
print(json.dumps({"seconds": seconds, "gc": spent[0], "modules": mods}))
"""


def one_run() -> dict[str, object]:
    """One fresh interpreter: import seconds, seconds in collections, modules loaded."""
    out = subprocess.run(
        [sys.executable, "-c", CHILD], check=True, capture_output=True, text=True
    ).stdout
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="fresh processes")
    parser.add_argument("--modules", action="store_true", help="list the modules loaded")
    args = parser.parse_args()
    runs = [one_run() for _ in range(args.runs)]
    total = statistics.median(float(str(r["seconds"])) for r in runs)
    collect = statistics.median(float(str(r["gc"])) for r in runs)
    modules = runs[0]["modules"]
    assert isinstance(modules, list)
    print(f"import layerscope after import torch, median of {args.runs} fresh processes:")
    print(f"  total:              {total * 1e3:7.1f} ms")
    print(f"  garbage collection: {collect * 1e3:7.1f} ms (part of the total)")
    print(f"  without it:         {(total - collect) * 1e3:7.1f} ms")
    print(f"  layerscope modules loaded: {len(modules)}")
    if args.modules:
        for name in modules:
            print(f"    {name}")


if __name__ == "__main__":
    main()
