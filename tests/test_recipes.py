"""The recipes of docs/architecture.md ("Where to add things") for a view and an export
format, followed to the letter: the files each names are the only ones touched (here by
monkeypatching their tables), and the new entry reaches the API and the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import layerscope as ls
from layerscope.cli import main
from layerscope.export import formats
from layerscope.render import options, views
from layerscope.render.context import ViewContext
from layerscope.render.layout import Line


def _census(ctx: ViewContext) -> Any:
    """A made-up view: one line counting the profile's modules."""
    count = len(ctx.profile.nodes())

    def lines(width: int) -> list[Line]:
        return [[(f"{count} modules in {width} columns", "")]]

    return lines


def _profile() -> ls.Profile:
    return ls.profile(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), torch.randn(2, 4))


def test_every_view_name_has_a_builder() -> None:
    assert list(options.VIEWS) == list(views.BUILDERS)


def test_a_view_added_by_its_recipe(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """One entry in ``render/views.py``'s ``BUILDERS`` and the name in
    ``render/options.py``'s ``VIEWS``: the root, a Linear and a ReLU are 3 modules."""
    monkeypatch.setitem(views.BUILDERS, "census", _census)
    monkeypatch.setattr(options, "VIEWS", (*options.VIEWS, "census"))
    prof = _profile()
    assert prof.render(view="census", width=60).strip() == "3 modules in 60 columns"
    path = tmp_path / "p.json"
    prof.save(path)
    assert main(["show", str(path), "--format", "census", "--width", "50"]) == 0
    assert capsys.readouterr().out.strip() == "3 modules in 50 columns"


def test_an_export_format_added_by_its_recipe(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """One ``ExportFormat`` row in ``export/formats.py`` and its writer: ``export``,
    ``export_text`` and the CLI's ``-o`` pick it by its extension."""

    def text(profile: ls.Profile) -> str:
        return f"{len(profile.nodes())} modules\n"

    def write(profile: ls.Profile, path: Any) -> None:
        Path(path).write_text(text(profile))

    row = formats.ExportFormat("census", (".census",), write, text)
    monkeypatch.setitem(formats.FORMATS, "census", row)
    prof = _profile()
    prof.export(tmp_path / "a.census")
    assert (tmp_path / "a.census").read_text() == "3 modules\n"
    assert formats.export_text(prof, "census") == "3 modules\n"
    saved = tmp_path / "p.json"
    prof.save(saved)
    assert main(["show", str(saved), "-o", str(tmp_path / "b.census")]) == 0
    assert (tmp_path / "b.census").read_text() == "3 modules\n"
