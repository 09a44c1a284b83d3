"""Measure the achievable rates of the CUDA GPU present (matmuls by shape,
attention kernels by backend, head dim and length, copy bandwidth, kernel
launch) and write them as a device profile: a JSON file that --target (and
target= in Python) accepts, so that layerscope plan predicts step times on
this GPU's measured rates (docs/plan.md). Collectives are not measured. On a
machine without a CUDA GPU it refuses.

Examples:
  layerscope calibrate -o h100-mine.json
  layerscope plan examples:tiny_gpt --target h100-mine.json
"""

from __future__ import annotations

import argparse
import json
import sys

NAME = "calibrate"
HELP = "measure this GPU's achievable rates into a device profile for --target"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", metavar="JSON",
                   help="where to write the profile (default: NAME.json)")  # fmt: skip
    p.add_argument("--name", help="the profile's device name (default: SPEC-calibrated)")
    p.add_argument("--dtype", default="bfloat16", help="the dtype measured (default bfloat16)")
    p.add_argument("--device", type=int, default=0, help="the CUDA device index (default 0)")
    p.add_argument("--quick", action="store_true", help="a smaller grid, in seconds")


def run(args: argparse.Namespace) -> int:
    from layerscope.export.files import write_text
    from layerscope.planning.calibrate import calibrate

    spec = calibrate(name=args.name, dtype=args.dtype, device=args.device, quick=args.quick)
    path = args.output or f"{spec.name}.json"
    write_text(path, json.dumps(spec.to_dict(), indent=1) + "\n")
    rates = spec.rates or {}
    sys.stdout.write(
        f"{spec.label}: matmul {100 * rates.get('matmul', 0):.0f}% of peak (large), "
        f"bandwidth {100 * rates.get('bandwidth', 0):.0f}%, launch "
        f"{1e6 * rates.get('launch', 0):.1f} us, attention backends "
        f"{', '.join(rates.get('attention', {})) or 'none'}; wrote {path}\n"
    )
    return 0
