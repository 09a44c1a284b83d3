"""Measure the GPU present with ``ls.calibrate`` and write the profile layerscope ships
for its built-in spec (``src/layerscope/analysis/profiles/<spec>.json``), or to ``--out``.

    python bench/calibrate_profiles.py [--out DIR] [--quick]

Run it on an H100 or H200 (one call, a few minutes; ``--quick`` in seconds), copy the
file into ``src/layerscope/analysis/profiles/`` and commit it: plans on that target then
price kernels at the measured rates (``plan.rates`` says ``<spec>`` without
``(uncalibrated)``). Prints the rates measured.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

import layerscope as ls
from layerscope.analysis.rates import PROFILES
from layerscope.hardware import spec_of_gpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=PROFILES)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU here: run this on the GPU to measure")
    spec = spec_of_gpu(torch.cuda.get_device_name(0))
    if spec is None:
        raise SystemExit(f"{torch.cuda.get_device_name(0)} has no built-in spec to ship for")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{spec}.json"
    measured = ls.calibrate(path, name=spec, quick=args.quick)
    rates = measured.rates or {}
    print(json.dumps({k: rates[k] for k in ("matmul", "sms", "bandwidth", "launch")}))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
