"""The device table (``hardware._BUILTIN``, ``ALIASES``, ``_GPU_NAMES``) is the one place a
device is declared, and docs/architecture.md's "A device." recipe names every other file
a new device touches.

A made-up device added to the table's rows (in a fresh interpreter, before anything reads
the table) is a name for ``ls.device_spec``, ``target=`` and the CLI's help texts with no
other change; the recipe's files exist, and they are exactly the tracked files that name
every built-in GPU spec (the hand lists a new device must join).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from layerscope import hardware
from layerscope.hardware import GPU_SPECS, SPECS

ROOT = Path(__file__).resolve().parent.parent
RECIPE_START = "- **A device.**"
#: The kinds of file a device's name may be written in by hand.
TEXT = frozenset({".py", ".md", ".js", ".html", ".css", ".toml", ".yaml", ".yml", ".txt"})

#: Run in a fresh interpreter: a row, an alias and a CUDA name rule added to the table,
#: then what the API and the CLI make of the new device, as JSON.
PROBE = """
import contextlib, io, json
import layerscope.hardware as hw

fake = hw.DeviceSpec("fake9000", "Fake 9000 96GB", "gpu", "sm100", 9e12,
                     {"float32": 1e14, "tfloat32": 2e14, "bfloat16": 4e14}, 96 * 10**9)
hw._BUILTIN = (*hw._BUILTIN, fake)
hw.ALIASES["fk9"] = "fake9000"
hw._GPU_NAMES = (*hw._GPU_NAMES, (("fake", "9000"), (), "fake9000"))
hw._index()

import layerscope as ls
from layerscope.cli import main
from layerscope.collect.target import parse_target

def help_of(*command):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main([*command, "--help"])
    return " ".join(out.getvalue().split())

print(json.dumps({
    "spec": ls.device_spec("FAKE9000").label,
    "alias": ls.device_spec("fk9").name,
    "target": parse_target("fk9").describe(),
    "gpu": hw.spec_of_gpu("NVIDIA Fake 9000"),
    "profile": help_of("profile"),
    "plan": help_of("plan"),
    "generate": help_of("generate"),
}))
"""


def test_every_gpu_spec_has_a_cuda_name_rule() -> None:
    """``_GPU_NAMES`` is checked against the table: one rule or more per GPU spec, none
    for a name the table does not have."""
    ruled = [spec for _, _, spec in hardware._GPU_NAMES]
    assert set(ruled) == set(GPU_SPECS)
    assert set(ruled) <= set(SPECS)


def test_a_device_added_to_the_table_reaches_the_api_and_the_cli() -> None:
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert (seen["spec"], seen["alias"]) == ("Fake 9000 96GB", "fake9000")
    assert seen["target"] == "fk9 (cuda sm100)"
    assert seen["gpu"] == "fake9000"
    gpus = ", ".join([*GPU_SPECS, "fake9000"])  # the built-in ones, then the new row
    # profile: --target (kernels) and --spec (roof); plan and generate: --target
    assert f"cuda, {gpus}, an alias or a device profile's .json" in seen["profile"]
    assert f"(cpu, {gpus} or an alias)" in seen["profile"]
    assert f"the GPU: {gpus} (default h100)" in seen["plan"]
    assert f"the GPU: {gpus} (default h100)" in seen["generate"]


def _recipe() -> str:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    start = text.index(RECIPE_START)
    end = text.index("\n- **", start + 1)
    return text[start:end]


def _names_every_gpu(text: str) -> bool:
    lower = text.lower()
    return all(re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", lower) for n in GPU_SPECS)


def test_the_device_recipe_lists_every_file_a_device_touches() -> None:
    recipe = _recipe()
    listed = set(re.findall(r"`((?:src|docs|tests)/[\w./-]+)`", recipe))
    assert listed, recipe
    for path in listed:
        assert (ROOT / path).exists(), path
    files = {p for p in listed if (ROOT / p).is_file() and p != "tests/test_device_table.py"}
    # every listed file names every built-in GPU spec: a hand list the new one joins...
    assert [p for p in files if not _names_every_gpu((ROOT / p).read_text("utf-8"))] == []
    # ... a listed folder reads the table
    for folder in listed - files - {"tests/test_device_table.py"}:
        assert any("BY_NAME" in f.read_text("utf-8") for f in (ROOT / folder).rglob("*.py"))
    # and every source, doc and test file that names them all is listed (hardware.py: the
    # table itself)
    naming = set()
    for path in _text_files():
        if _names_every_gpu(path.read_text("utf-8")):
            naming.add(path.relative_to(ROOT).as_posix())
    assert naming == files


def _text_files() -> list[Path]:
    found = [ROOT / "README.md"]
    for top in ("src", "docs", "tests", "bench"):
        for path in (ROOT / top).rglob("*"):
            if path.suffix in TEXT and path.is_file() and "__pycache__" not in path.parts:
                found.append(path)
    return found
