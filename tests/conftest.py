"""Shared pytest setup: importable ``helpers``, the ``cuda`` marker's auto-skip, and the
seeded single-thread setting the timing tests use."""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from helpers.browser import BROWSER_NEEDED, Page, find_chromium, load_page

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False)")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


@pytest.fixture
def seeded_one_thread() -> Iterator[None]:
    """Fixed RNG states (so "unchanged" means something) and one intra-op thread: on a
    loaded machine, spinning OpenMP workers make small convolutions 100x slower."""
    torch.manual_seed(1234)
    random.seed(99)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def default_display_config(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The shipped display config, whatever LAYERSCOPE_CONFIG says or a test loads."""
    from layerscope.render import config

    monkeypatch.delenv(config.ENV_VAR, raising=False)
    config.reset()
    yield
    config.reset()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium (the system's; never downloaded), or the test skipped."""
    executable = find_chromium()
    if executable is None:
        pytest.skip(BROWSER_NEEDED)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip(BROWSER_NEEDED)
    pw = sync_playwright().start()
    try:
        b = pw.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()
    finally:
        pw.stop()


@pytest.fixture
def open_html(browser: Any, tmp_path: Path) -> Iterator[Any]:
    """``open_html(text, width=1400, ready="body[data-ready]")``: the HTML ``text`` as a
    file, loaded in a new page of the browser (``load_page``); the pages closed after."""
    pages: list[Any] = []

    def open_(text: str, width: int = 1400, ready: str = "body[data-ready]") -> Page:
        out = tmp_path / f"page{len(pages)}.html"
        out.write_text(text, encoding="utf-8")
        p = load_page(browser, out, width, ready)
        pages.append(p.page)
        return p

    yield open_
    for page in pages:
        page.close()
