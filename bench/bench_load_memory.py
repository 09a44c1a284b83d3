"""Peak memory of loading and showing a saved profile, plan and generation, over the
file's size, for a GPT-2-shaped model of many layers (tiny widths: the file's size grows
with the module count).

    python bench/bench_load_memory.py [--layers 1600] [--dir DIR]

Writes the three documents (1,600 layers give about 50 MB of plan and of generation),
then in a fresh process per case reads the process's peak resident memory (``VmHWM``) less
its peak after the imports: ``ls.load*`` alone, and ``layerscope show`` as the default
view, a tree, CSV, HTML and JSON (the document written again). Linux only (``/proc``).
The default load limit is the memory available over ``MEMORY_FACTOR``
(``layerscope.export.jsonread``); every ratio printed should stay under it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

import layerscope as ls

_PROBE = """
import re, sys, io, contextlib
def hwm():
    return int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) * 1024
import layerscope as ls, layerscope.cli, layerscope.cli.show_cmd
from layerscope.cli import main
base = hwm()
args = sys.argv[1:]
if args[0] == "load":
    getattr(ls, args[1])(args[2])
else:
    with contextlib.redirect_stdout(io.StringIO()):
        main(["show", *args[1:]])
print(hwm() - base)
"""

CASES: tuple[tuple[str, list[str]], ...] = (
    ("load", []),
    ("show", []),
    ("show tree", ["--format", "tree"]),
    ("show csv", ["--format", "csv", "-o", "{out}.csv"]),
    ("show html", ["-o", "{out}.html"]),
    ("show json", ["--format", "json", "-o", "{out}.json"]),
)
LOADERS = {"profile": "load", "plan": "load_plan", "generation": "load_generation"}


def write_documents(layers: int, paths: dict[str, Path]) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=layers, n_embd=16, n_head=2, vocab_size=64, n_positions=64)
    model = GPT2LMHeadModel(config).train(False)
    ids = torch.randint(0, 64, (1, 8))
    ls.profile(model, ids).save(paths["profile"])
    ls.profile_generate(model, ids, max_new_tokens=4).save(paths["generation"])
    with torch.device("meta"):
        meta = GPT2LMHeadModel(config)
    ls.plan(meta, ids.to("meta"), target="h100").save(paths["plan"])


def peak(args: list[str]) -> int:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, check=True
    )
    return int(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=1600)
    parser.add_argument("--dir", type=Path, default=None, help="keep the documents here")
    args = parser.parse_args()
    folder = args.dir or Path(tempfile.mkdtemp(prefix="layerscope-load-"))
    folder.mkdir(parents=True, exist_ok=True)
    paths = {kind: folder / f"{kind}-{args.layers}.json" for kind in LOADERS}
    if not all(p.exists() for p in paths.values()):
        write_documents(args.layers, paths)
    print(f"{'document':<12}{'MB':>8}  " + "  ".join(f"{name:>10}" for name, _ in CASES))
    for kind, path in paths.items():
        size = os.path.getsize(path)
        ratios = []
        for name, extra in CASES:
            out = str(folder / f"out-{kind}")
            if name == "load":
                argv = ["load", LOADERS[kind], str(path)]
            else:
                argv = ["show", str(path), *(a.format(out=out) for a in extra)]
            ratios.append(peak(argv) / size)
        print(f"{kind:<12}{size / 1e6:>8.1f}  " + "  ".join(f"{r:>9.2f}x" for r in ratios),
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
