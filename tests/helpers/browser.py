"""The HTML report in a headless Chromium: finding it, loading a page, reading it."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def embedded(text: str, data_id: str = "ls-data") -> dict[str, Any]:
    """The JSON inside a page's ``<script type="application/json" id=data_id>``: the
    report's data (``ls-data``), a plan's or a generation's section."""
    m = re.search(rf'<script type="application/json" id="{data_id}">(.*?)</script>', text, re.S)
    assert m is not None
    data: dict[str, Any] = json.loads(m.group(1))
    return data


BROWSER_NEEDED = (
    "needs a headless Chromium: apt-get install -y chromium chromium-driver, and the "
    "playwright Python package (pip install -e '.[test]')"
)


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class Page:
    """A loaded report and everything the browser reported while it ran."""

    page: Any
    url: str
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    def rows(self) -> list[str]:
        """Module names of the rows in the DOM, in order."""
        names: list[str] = self.page.eval_on_selector_all(
            "#ls-table tbody tr:not(.sp) .nm", "els => els.map(e => e.textContent)"
        )
        return names

    def clean(self) -> None:
        assert self.errors == []
        assert self.dialogs == []
        assert self.requests == [self.url]  # the file itself, nothing else


def load_page(browser: Any, path: Path, width: int, ready: str = "body[data-ready]") -> Page:
    """The HTML file at ``path`` in a new page of ``width`` pixels, once ``ready`` is in
    it, with every console error, failed or made request and dialog recorded."""
    page = browser.new_page(viewport={"width": width, "height": 900})
    p = Page(page, path.as_uri())
    page.on("console", lambda m: p.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: p.errors.append(str(e)))
    page.on("requestfailed", lambda r: p.errors.append(f"failed: {r.url}"))
    page.on("request", lambda r: p.requests.append(r.url))

    def on_dialog(d: Any) -> None:
        p.dialogs.append(d.message)
        d.dismiss()

    page.on("dialog", on_dialog)
    page.goto(p.url)
    page.wait_for_selector(ready)
    return p


def texts(page: Any, selector: str) -> list[str]:
    """The text of every element of a Playwright ``page`` that ``selector`` matches."""
    found: list[str] = page.eval_on_selector_all(selector, "els => els.map(e => e.textContent)")
    return found


@contextmanager
def report_pages(browser: Any, folder: Path) -> Iterator[Callable[..., Page]]:
    """``open(prof, width=1280, device=None, name=None)``: the profile's HTML report
    written in ``folder`` and loaded at that width; every page opened is closed after."""
    from layerscope.export.html import to_html

    pages: list[Any] = []

    def open_(prof: Any, width: int = 1280, device: Any = None, name: str | None = None) -> Page:
        out = folder / (name or f"r{len(pages)}.html")
        to_html(prof, out, device=device)
        p = load_page(browser, out, width)
        pages.append(p.page)
        return p

    try:
        yield open_
    finally:
        for page in pages:
            page.close()
