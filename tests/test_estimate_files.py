"""An estimate read back: ``GenerateEstimate.save`` / ``ls.load_estimate`` (and
``layerscope generate --json`` on meta) give the same document, the same text, and
``layerscope show`` shows it as an estimate; damaged files are refused by JSON path."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import torch

import layerscope as ls
from helpers.browser import embedded
from helpers.models import tiny_llama
from layerscope.cli import main


@cache
def estimate() -> Any:
    with torch.device("meta"):
        model = tiny_llama()
    return ls.estimate_generate(model, target="h100", prompt=32, new_tokens=8, batch=[1, 4])


def test_save_and_load_give_the_same_estimate(tmp_path: Path) -> None:
    est = estimate()
    path = tmp_path / "est.json"
    est.save(path)
    loaded = ls.load_estimate(path)
    assert loaded.to_dict() == est.to_dict()
    assert loaded.render(width=100) == est.render(width=100)
    assert [r.batch for r in loaded.sweep] == [1, 4] and loaded.fit_held == est.fit_held
    est.export(tmp_path / "est.txt")
    assert (tmp_path / "est.txt").read_text() == est.render(width=100) + "\n"


def test_the_html_report_holds_the_estimate_above_its_prefill(tmp_path: Path) -> None:
    """``to_html``/``export(".html")``: the estimate's section (its sweep: batches 1 and 4)
    above the report of the first batch's prefill, whose FLOPs the estimate's first row
    states; the page says no generation was measured."""
    est = estimate()
    est.export(tmp_path / "est.html")
    page = (tmp_path / "est.html").read_text()
    gen = embedded(page, "ls-gen-data")
    assert gen["measured"] is False and gen["calls"]["rows"] == []
    sweep = gen["estimate"]["sweep"]
    batch = [c[0] for c in sweep["columns"]].index("batch")
    assert [r[batch] for r in sweep["rows"]] == [1, 4]
    assert est.analysis is not None
    assert est.analysis.root.metrics["flops"] == est.sweep[0].prefill_flops
    assert embedded(page, "ls-data")["model"]["name"] == est.analysis.model["name"]


def test_layerscope_show_shows_an_estimate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "est.json"
    estimate().save(path)
    assert main(["show", str(path), "--width", "100"]) == 0
    assert capsys.readouterr().out.rstrip("\n") == estimate().render(width=100).rstrip("\n")


@pytest.mark.parametrize(
    ("where", "value", "words"),
    [
        (("prompt",), 0, "$.prompt: expected an integer >= 1, got the integer 0"),
        (("sweep", 0, "kv_bytes"), "x", "$.sweep[0].kv_bytes: expected"),
        (("fit", 0, "points", 0, "time"), "NaN", "$.fit[0].points[0].time: expected a finite"),
        (("notes",), [1], "$.notes[0]: expected a string"),
    ],
)
def test_a_damaged_estimate_is_refused_by_path(
    tmp_path: Path, where: tuple[Any, ...], value: Any, words: str
) -> None:
    doc = json.loads(json.dumps(estimate().to_dict()))
    inner = doc
    for key in where[:-1]:
        inner = inner[key]
    inner[where[-1]] = value
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ls.SchemaError) as info:
        ls.load_estimate(path)
    assert str(info.value).startswith(f"{path}: ") and words in str(info.value)
