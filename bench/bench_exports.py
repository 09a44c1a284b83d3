"""Time to write every export format of a large profile, against the targets.

    .venv/bin/python bench/bench_exports.py [--layers 10000] [--repeats 3]

Builds one timed profile of ``nn.Sequential(*[nn.Linear(4, 4) for _ in range(LAYERS)])``
on ``torch.randn(2, 4)`` (LAYERS + 1 nodes, with shapes, FLOPs, memory and a one-repeat
timing pass), then prints, best of ``--repeats`` (wall time, ``time.perf_counter``), the
time of ``prof.to_csv()`` (target 0.5 s), ``prof.to_markdown()`` (folded and not),
``prof.to_dataframe()``
(when pandas is installed), ``prof.to_html(path)`` (target 1 s) and ``prof.to_trace(path)``,
and each file's size. JSON save and load have their own bench (``bench_json.py``); the
HTML report's render time in Chromium is measured by ``tests/test_html.py`` (``-s``).
Nothing is asserted: each time is printed beside its target with ``ok`` or ``SLOW``.
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

import layerscope as ls


def best_of(repeats: int, fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def line(name: str, seconds: float, target: float | None, size: int | None = None) -> str:
    text = f"   {name:<24} {seconds * 1e3:9.1f} ms"
    if target is not None:
        text += f"  (target < {target * 1e3:.0f} ms) {'ok' if seconds < target else 'SLOW'}"
    if size is not None:
        text += f"   {size / 1024:,.0f} KiB"
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(args.layers)])
    start = time.perf_counter()
    prof = ls.profile(model, torch.randn(2, 4), memory=True, timing={"warmup": 0, "repeats": 1})
    nodes = len(prof.nodes())
    print(f"{nodes} nodes; ls.profile took {time.perf_counter() - start:.2f} s")
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder)
        csv_s = best_of(args.repeats, prof.to_csv)
        print(line("to_csv()", csv_s, 0.5, len((prof.to_csv() or "").encode())))
        md_s = best_of(args.repeats, prof.to_markdown)
        print(line("to_markdown()", md_s, None, len(prof.to_markdown().encode())))
        flat = prof.to_markdown(fold=False)
        md_s = best_of(args.repeats, lambda: prof.to_markdown(fold=False))
        print(line("to_markdown(fold=False)", md_s, None, len(flat.encode())))
        if importlib.util.find_spec("pandas") is not None:
            print(line("to_dataframe()", best_of(args.repeats, prof.to_dataframe), None))
        html = out / "p.html"
        html_s = best_of(args.repeats, lambda: prof.to_html(html))
        print(line("to_html(path)", html_s, 1.0, html.stat().st_size))
        trace = out / "p.trace.json"
        trace_s = best_of(args.repeats, lambda: prof.to_trace(trace))
        print(line("to_trace(path)", trace_s, None, trace.stat().st_size))


if __name__ == "__main__":
    main()
