"""What the benches of published training runs share: their arguments, the table of
runs against their plans, the medians and the JSON they write."""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable, Sequence
from typing import Any

import torch


def arguments(doc: str | None) -> argparse.Namespace:
    """``--only NAME`` and ``--json OUT.json``, described by the bench's docstring."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--only", help="runs whose name contains this")
    parser.add_argument("--json", help="write the rows here")
    return parser.parse_args()


def table(
    runs: Sequence[Any],
    only: str | None,
    plan_run: Callable[[Any], dict[str, Any]],
    line: Callable[[dict[str, Any]], str],
    header: str,
) -> list[dict[str, Any]]:
    """Each run (whose name contains ``only``) planned and printed as it comes."""
    print(header)
    rows = []
    for run in runs:
        if only and only not in run.name:
            continue
        rows.append(plan_run(run))
        print(line(rows[-1]), flush=True)
    return rows


def medians(ratios: Sequence[float]) -> str:
    """The median measured / predicted, its range and the median |error|."""
    error = 100 * statistics.median(abs(x - 1) for x in ratios)
    return (
        f"{len(ratios)} runs planned; median measured / predicted "
        f"{statistics.median(ratios):.2f} ({min(ratios):.2f} to {max(ratios):.2f}); "
        f"median |error| {error:.1f} %"
    )


def save(path: str | None, source: str, rows: list[dict[str, Any]]) -> None:
    """The rows as JSON, with their source and the torch that planned them."""
    if path:
        with open(path, "w") as f:
            json.dump({"source": source, "torch": torch.__version__, "rows": rows}, f, indent=1)
