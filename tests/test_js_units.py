"""The HTML report's JS unit tests (tests/js: number formats, sorting rules, the tree's
decoding), run by node's own test runner on the asset files as they ship; skipped where
``node`` is not installed. Also: every asset file is embedded in a page."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from layerscope.export.html import ASSETS

JS_TESTS = Path(__file__).resolve().parent / "js"
ASSET_DIR = Path(__file__).resolve().parents[1] / "src" / "layerscope" / "export" / "assets"
NODE = shutil.which("node")


@pytest.mark.skipif(
    NODE is None, reason="node is not installed: the JS unit tests (tests/js) need it"
)
def test_the_js_unit_tests_pass() -> None:
    assert NODE is not None
    done = subprocess.run(
        [NODE, "--test", str(JS_TESTS)], capture_output=True, text=True, timeout=300
    )
    report = done.stdout + done.stderr
    assert done.returncode == 0, report
    # node's summary: every test file ran (17 tests in 3 files), none failed
    passed = re.search(r"^# pass (\d+)$", report, re.M)
    assert passed is not None and int(passed.group(1)) >= 17, report
    assert re.search(r"^# fail 0$", report, re.M), report


def test_every_asset_is_embedded_once() -> None:
    """An asset file missing from ``ASSETS`` would ship without reaching any page."""
    listed = [f for styles, scripts in ASSETS.values() for f in (*styles, *scripts)]
    shipped = sorted(p.name for p in ASSET_DIR.iterdir() if p.suffix in (".js", ".css"))
    assert sorted(listed) == shipped
