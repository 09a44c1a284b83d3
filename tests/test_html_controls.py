"""Control characters in a model's names reach the HTML report's data intact (as JSON
escapes) and its title made visible, never raw: ``cat report.html`` must not run them
in a terminal."""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from torch import nn

import layerscope as ls

#: ESC (a colour sequence), BEL, CSI (C1) in a module name; ESC and NEL (C1) in the class
NAME = "a\x1b[31mred\x07\x9b"
CLASS = "Ev\x1bil\x85"


class Evil(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.add_module(NAME, nn.Linear(4, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for child in self.children():
            x = child(x)
        return x


Evil.__name__ = Evil.__qualname__ = CLASS


def raw_controls(text: str) -> list[str]:
    return [c for c in text if (ord(c) < 0x20 and c not in "\n\t\r") or 0x7F <= ord(c) <= 0x9F]


def test_a_reports_names_carry_no_raw_control_character(tmp_path: Path) -> None:
    prof = ls.profile(Evil(), torch.randn(2, 4))
    prof.to_html(tmp_path / "p.html")
    text = (tmp_path / "p.html").read_text(encoding="utf-8")
    assert raw_controls(text) == []
    # the title as the terminal views show it: control pictures, C1 as U+FFFD
    assert "<title>Ev\u241bil\ufffd — layerscope report</title>" in text
    # the data holds the names as they are, JSON-escaped
    data = re.search(r'<script type="application/json" id="ls-data">(.*?)</script>', text, re.S)
    assert data is not None
    assert "\\u001b[31mred\\u0007\\u009b" in data.group(1)
    assert json.loads(data.group(1))["model"]["name"] == CLASS


def test_a_plans_report_carries_no_raw_control_character(tmp_path: Path) -> None:
    plan = ls.plan(
        Evil(), torch.randn(2, 4), target="h100", world_size=1, sharding="none", precision="fp32"
    )
    plan.to_html(tmp_path / "plan.html")
    assert raw_controls((tmp_path / "plan.html").read_text(encoding="utf-8")) == []
