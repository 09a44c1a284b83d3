"""Matmul times by shape against the plan's matmul model (``analysis.rates``), and against
the candidate where a matmul writes its output after its main loop (docs/plan.md,
"Published runs": the H100 model is 9 % too fast for large outputs of XLA's measured
sm_90 table).

    python bench/matmul_grid.py --out DIR                  # measure on the GPU present
    python bench/matmul_grid.py --table rows.json          # a measured table instead
    python bench/matmul_grid.py --table bench/data/xla_sm90_bf16_matmuls.json  # XLA's

On a GPU it times ``torch.mm`` (B = 1) and ``torch.bmm`` (B = 4) in bfloat16 over M, N, K
in 256 to 8,192 (the median of 5 after a warm-up, as ``layerscope calibrate`` times) and
writes ``matmul_grid.json`` under ``--out``: ``{"device", "torch", "rows": [[B, M, N,
K, FLOP/s], ...]}``; ``--table`` reads rows in that form. Printed, for every row and
for outputs of 1,024 x 1,024 and more: the median |log(predicted / measured)| and its
signed median, for the model as the plan prices matmuls (``max(FLOPs / (peak x share x
q), bytes / (bandwidth x b)) + launch``) and for the candidate (``max(FLOPs / (peak x s
x q), operand bytes / (bandwidth x b)) + output bytes / (bandwidth x b) + launch``) at
the ``s`` whose signed median error on the large outputs is closest to 0.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from layerscope.analysis.rates import Rates, rates_of
from layerscope.hardware import device_spec
from layerscope.planning.calibrate import _timed as timed  # layerscope calibrate's timer

SIZES = (256, 512, 1024, 2048, 4096, 8192)
Row = tuple[int, int, int, int, float]


def measure() -> list[Row]:
    """(B, M, N, K, FLOP/s) of each shape on the GPU present."""
    out: list[Row] = []
    for b in (1, 4):
        for m in SIZES:
            for n in SIZES:
                for k in SIZES:
                    x = torch.randn(b, m, k, device="cuda", dtype=torch.bfloat16)
                    y = torch.randn(b, k, n, device="cuda", dtype=torch.bfloat16)
                    out.append((b, m, n, k, 2 * b * m * n * k / timed(_product(x, y))))
    return out


def _product(x: torch.Tensor, y: torch.Tensor) -> Callable[[], object]:
    """``torch.mm`` of one pair of matrices, ``torch.bmm`` of a batch."""
    if x.shape[0] == 1:
        return lambda: torch.mm(x[0], y[0])
    return lambda: torch.bmm(x, y)


def current(rates: Rates, peak: float, bandwidth: float) -> Callable[..., float]:
    """The plan's matmul time (``planning.kernels._price``) of a (B, M, N, K) bfloat16
    matmul."""

    def seconds(b: int, m: int, n: int, k: int) -> float:
        flops, nbytes = 2 * b * m * n * k, 2 * (b * m * k + b * k * n + b * m * n)
        fast = max(
            flops / (peak * rates.matmul_fraction(m, n, b)), nbytes / (bandwidth * rates.bandwidth)
        )
        return fast + rates.launch

    return seconds


def epilogue(rates: Rates, peak: float, bandwidth: float, s: float) -> Callable[..., float]:
    """The candidate: the output written after the main loop, which runs at ``s``."""

    def seconds(b: int, m: int, n: int, k: int) -> float:
        flops, operands, output = 2 * b * m * n * k, 2 * (b * m * k + b * k * n), 2 * b * m * n
        loop = max(
            flops / (peak * s * rates.quantisation(m, n, b)),
            operands / (bandwidth * rates.bandwidth),
        )
        return loop + output / (bandwidth * rates.bandwidth) + rates.launch

    return seconds


def errors(rows: Sequence[Row], model: Callable[..., float]) -> tuple[float, float]:
    """(median |log(predicted / measured)|, signed median)."""
    logs = [math.log(model(b, m, n, k) / (2 * b * m * n * k / f)) for b, m, n, k, f in rows]
    return statistics.median(abs(x) for x in logs), statistics.median(logs)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="measure here and write matmul_grid.json")
    parser.add_argument("--table", type=Path, help="rows already measured (JSON)")
    parser.add_argument("--target", default="h100", help="the part whose model is compared")
    args = parser.parse_args(argv)
    if args.table:
        rows = [tuple(r) for r in json.loads(args.table.read_text())["rows"]]
    elif torch.cuda.is_available() and args.out:
        rows = measure()
        args.out.mkdir(parents=True, exist_ok=True)
        found = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}
        (args.out / "matmul_grid.json").write_text(json.dumps(found), encoding="utf-8")
    else:
        print("matmul_grid: give --table, or --out on a machine with a CUDA GPU", file=sys.stderr)
        return 2
    spec = device_spec(args.target)
    rates, peak, bandwidth = rates_of(spec), spec.peak("bfloat16"), spec.bandwidth
    large = [r for r in rows if r[1] >= 1024 and r[2] >= 1024]
    fits = [(abs(errors(large, epilogue(rates, peak, bandwidth, s / 100))[1]), s / 100)
            for s in range(70, 100)]  # fmt: skip
    s = min(fits)[1]
    models = (
        ("plan's model", current(rates, peak, bandwidth)),
        (f"output after the loop, s={s:.2f}", epilogue(rates, peak, bandwidth, s)),
    )
    for name, model in models:
        for label, part in (("all", rows), (">= 1,024 x 1,024", large)):
            med, signed = errors(part, model)
            print(f"{name:34s} {label:17s} n={len(part):4d} median |log err| {med:.3f}, "
                  f"signed {signed:+.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
