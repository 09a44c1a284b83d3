"""The ``ignore`` view option (``--ignore``): the matching modules' work is taken out of
their ancestors and the Total, the profile itself is unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import layerscope as ls
from layerscope.analysis.transforms import ignore_modules
from layerscope.cli import main
from layerscope.profile import Node
from layerscope.render.options import view_options
from viewmodels import build, node, small


def _mlp_profile() -> ls.Profile:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    return ls.profile(model, torch.randn(2, 4))


def test_ignoring_a_linear_takes_exactly_its_flops_out_of_the_total() -> None:
    prof = _mlp_profile()
    # Linear(4, 8) on [2, 4]: 2*4*8 = 64 MACs -> 128 FLOPs + 2*8 = 16 bias adds = 144
    # ReLU on [2, 8]: 16; Linear(8, 3) on [2, 8]: 2*8*3 = 48 MACs -> 96 + 6 = 102
    assert prof.root.metrics["flops"] == 144 + 16 + 102
    shown = ignore_modules(prof, ["2"])
    root = shown.profile.root
    assert root.metrics["flops"] == 144 + 16
    assert root.metrics["macs"] == 64
    assert root.metrics["params"] == 4 * 8 + 8  # 40: Linear(8, 3)'s 27 taken out
    assert [n.path for n in shown.profile.root.walk()] == ["", "0", "1"]
    assert [n.path for n in shown.nodes] == ["2"]
    shown.profile.self_check()
    # the profile itself is unchanged
    assert prof.root.metrics["flops"] == 262
    assert [n.path for n in prof.root.walk()] == ["", "0", "1", "2"]
    prof.self_check()


def test_table_with_ignore_exact() -> None:
    text = small().render(width=80, ignore="enc.attn", columns=["params", "flops"])
    # mlp keeps its id 1.2 (attn's 1.1 is a gap, as with exclude)
    # without attn (params 40, flops 400): Net 100 - 40 = 60 params, 1000 - 400 = 600
    # FLOPs; enc 90 - 40 = 50 and 900 - 400 = 500; % of 600: mlp 500 -> 83.3%,
    # head 80 -> 13.3%
    assert text == (
        "Module                Params   FLOPs   % FLOPs\n"
        "──────────────────────────────────────────────\n"
        "Net                       60     600      100%\n"
        "├─ (1) enc Encoder        50     500     83.3%\n"
        "│  └─ (1.2) mlp MLP       50     500     83.3%\n"
        "├─ (2) head Linear         8      80     13.3%\n"
        "└─ (3) drop Dropout        0       0        0%\n"
        "\n"
        "Total                     60     600      100%\n"
        "Ignored enc.attn (Attention): its work is taken out of its ancestors' values and\n"
        "  out of the Total.\n"
        "Params: 100 (trainable 0, frozen 100), 0 B; buffers: 0 (0 B)\n"
        "Run: eval mode, grad enabled, device cpu, float32.\n"
    )


def test_ignore_by_type_repeated_and_comma_separated() -> None:
    prof = small()
    for ignore in (["Attention", "Linear"], "Attention,Linear", ["Attention, Linear"]):
        shown = ignore_modules(prof, view_options(ignore=ignore).ignore)
        # 1000 - 400 (attn) - 80 (head) = 520 FLOPs; 100 - 40 - 8 = 52 params
        assert shown.profile.root.metrics["flops"] == 520
        assert shown.profile.root.metrics["params"] == 52
        assert [n.path for n in shown.nodes] == ["enc.attn", "head"]


def test_only_the_outermost_match_is_listed_and_the_root_never_ignored() -> None:
    prof = small()
    shown = ignore_modules(prof, ["enc*", "Net", ""])
    # enc and enc.attn/enc.mlp match; enc is outermost: 1000 - 900 = 100 FLOPs
    assert [n.path for n in shown.nodes] == ["enc"]
    assert shown.profile.root.metrics["flops"] == 100
    assert [n.path for n in shown.profile.root.walk()] == ["", "head", "drop"]


def test_no_match_leaves_the_profile_and_says_so() -> None:
    prof = small()
    assert ignore_modules(prof, ["nothing*"]).profile is prof
    text = prof.render(width=80, ignore="nothing*", columns=["flops"])
    lines = text.splitlines()
    assert lines[9:11] == [
        "Total                          1 K      100%",
        "ignore nothing* matched no module.",
    ]


def _timed() -> ls.Profile:
    """Peaks and per-call times: not additive (set on every node, self and inclusive)."""

    def leaf(name: str) -> Node:
        return node(name, "Linear", flops=10, peak_bytes=64, forward_time=2e-3, input_bytes=8)

    prof = build(
        node(
            "Net",
            "Net",
            node("a", "Block", leaf("x"), leaf("y")),
            node("b", "Block", leaf("z")),
            flops=1,
        )
    )
    for n in prof.root.walk():
        n.metrics["peak_bytes"] = n.self_metrics["peak_bytes"] = 100
        n.metrics["forward_time"] = 5e-3
        n.self_metrics["forward_time"] = 1e-3
        n.metrics["input_bytes"] = n.self_metrics["input_bytes"] = 8
    return prof


def test_non_additive_values_are_left_out_for_the_ancestors_only() -> None:
    prof = _timed()
    shown = ignore_modules(prof, ["a.x"])
    assert shown.dropped == ["peak_bytes", "forward_time"]
    by_path = {n.path: n for n in shown.profile.root.walk()}
    for path in ("", "a"):  # ancestors: no peak, no inclusive time; self time kept
        n = by_path[path]
        assert "peak_bytes" not in n.metrics and "forward_time" not in n.metrics
        assert "peak_bytes" not in n.self_metrics
        assert n.self_metrics["forward_time"] == 1e-3
        # its own inputs: whatever its children do
        assert n.metrics["input_bytes"] == n.self_metrics["input_bytes"] == 8
    # 1 + 10 + 10 + 10 = 31 FLOPs, less x's 10
    assert by_path[""].metrics["flops"] == 21
    for path in ("a.y", "b", "b.z"):  # not ancestors: as measured
        assert by_path[path].metrics["peak_bytes"] == 100
        assert by_path[path].metrics["forward_time"] == 5e-3
    columns = ["flops", "peak_bytes", "forward_time", "self_forward_time"]
    text = prof.render(width=100, ignore="a.x", columns=columns, pct=False)
    assert text == (
        "Module                 FLOPs    Peak   Fwd time   Self fwd\n"
        "──────────────────────────────────────────────────────────\n"
        "Net                       21                          1 ms\n"
        "├─ (1) a Block            10                          1 ms\n"
        "│  └─ (1.2) y Linear      10   100 B       5 ms       1 ms\n"
        "└─ (2) b Block            10   100 B       5 ms       1 ms\n"
        "   └─ (2.1) z Linear      10   100 B       5 ms       1 ms\n"
        "\n"
        "Total                     21\n"
        "Ignored a.x (Linear): its work is taken out of its ancestors' values and out of the "
        "Total. Peak, Fwd\n"
        "  time are not additive: left out for its ancestors.\n"
        "Run: eval mode, grad enabled, device cpu, float32.\n"
    )


def test_ignore_is_checked() -> None:
    with pytest.raises(ls.InvalidInputError, match="ignore"):
        small().render(ignore=3)


def test_cli_ignore(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.json"
    small().save(path)
    argv = ["show", str(path), "--columns", "flops", "--width", "80", "--no-pct"]
    assert main([*argv, "--ignore", "enc.attn", "--ignore", "head"]) == 0
    first = capsys.readouterr().out
    assert main([*argv, "--ignore", "enc.attn,head"]) == 0
    assert capsys.readouterr().out == first
    # 1000 - 400 - 80 = 520 FLOPs
    assert first.splitlines()[:10] == [
        "Module                FLOPs",
        "───────────────────────────",
        "Net                     520",
        "├─ (1) enc Encoder      500",
        "│  └─ (1.2) mlp MLP     500",
        "└─ (3) drop Dropout       0",
        "",
        "Total                   520",
        "Ignored enc.attn (Attention), head (Linear): their work is taken out of their",
        "  ancestors' values and out of the Total.",
    ]


def test_filtered_footer_says_the_total_excludes_the_ignored() -> None:
    text = small().render(width=80, ignore="enc.attn", columns=["params", "flops"], max_depth=1)
    flat = " ".join(text.split())
    # enc's child mlp is past depth 1: 4 of the 5 rows left after ignoring attn are shown
    assert (
        "Showing 4 of 5 rows (max_depth 1); the Total row is the whole model less the "
        "ignored modules." in flat
    )


class Features(nn.Module):
    """Conv, (ReLU, Conv) x 2 (folded as "1–4 Repeat ×2"), ReLU, MaxPool, Conv, ReLU."""

    def __init__(self) -> None:
        super().__init__()
        conv = [nn.Conv2d(3 if i == 0 else 4, 4, 3, padding=1) for i in range(4)]
        self.features = nn.Sequential(
            conv[0], nn.ReLU(), conv[1], nn.ReLU(), conv[2], nn.ReLU(), nn.MaxPool2d(2),
            conv[3], nn.ReLU(),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.features(x)
        return out


def _ids(text: str) -> list[str]:
    return [line.split("(", 1)[1].split(")", 1)[0] for line in text.splitlines() if "─ (" in line]


def test_ignore_keeps_the_folded_ids_as_exclude_does() -> None:
    prof = ls.profile(Features(), torch.randn(1, 3, 8, 8))
    options = {"view": "table", "columns": ["macs"], "width": 100}
    ignored = _ids(prof.render(ignore="features.6", **options))
    excluded = _ids(prof.render(exclude="features.6", **options))
    # the whole fold: 1, 1.1 (0), 1.2 (1–4 ×2) with 1.2.1 and 1.2.2, 1.3 (5), 1.4 (the
    # pool), 1.5 (7), 1.6 (8): the pool's 1.4 is a gap, 7 and 8 keep 1.5 and 1.6
    assert ignored == excluded == ["1", "1.1", "1.2", "1.2.1", "1.2.2", "1.3", "1.5", "1.6"]
