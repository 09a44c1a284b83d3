"""ls.diff(a, b): per-module changes between two profiles, with the numbers worked out by
hand (a batch size, a dtype, an edited model, a loaded copy, a metric on one side only),
the rendered view at pinned widths, sorting and filtering, option checks and JSON."""

from __future__ import annotations

import copy
import io
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from rich.console import Console
from torch import nn

import layerscope as ls
from layerscope.analysis.diff import Change, ProfileDiff, diff
from layerscope.errors import InvalidInputError
from layerscope.examples import EXAMPLES
from layerscope.profile import Profile
from viewmodels import build, node, small

pytestmark = pytest.mark.usefixtures("default_display_config")


def mlp() -> nn.Sequential:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def batch_pair() -> ProfileDiff:
    model = mlp()
    return diff(ls.profile(model, torch.zeros(2, 8)), ls.profile(model, torch.zeros(4, 8)))


def net_pair() -> tuple[Profile, Profile]:
    """Hand-built A and B (self FLOPs / params, calls 1 unless noted)::

        A: Net 20/2 ─ enc ─ attn 400/40, mlp 500/50; head 80/8; drop (calls 0)
        B: Net 20/2 ─ enc ─ extra 30/3 (new, first in B), attn 440/40, mlp 500/50;
           head 160/16; drop (calls 0)

    Totals: A flops 20+400+500+80 = 1000, params 2+40+50+8 = 100;
    B flops 20+30+440+500+160 = 1150, params 2+3+40+50+16 = 111.
    """
    a = small()  # tests/viewmodels.py: exactly the A tree above
    b = build(
        node(
            "Net",
            "Net",
            node(
                "enc",
                "Encoder",
                node("extra", "Linear", flops=30, params=3),
                node("attn", "Attention", flops=440, params=40),
                node("mlp", "MLP", flops=500, params=50),
            ),
            node("head", "Linear", flops=160, params=16),
            node("drop", "Dropout", calls=0, flops=0, params=0),
            flops=20,
            params=2,
        )
    )
    return a, b


class Net(nn.Module):
    """Edited: enc.1 ReLU -> GELU, a new enc.2, head renamed proj."""

    def __init__(self, edited: bool) -> None:
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(4, 4), nn.GELU() if edited else nn.ReLU())
        if edited:
            self.enc.append(nn.Linear(4, 4))  # enc.2, new
            self.proj = nn.Linear(4, 2)  # "head" renamed
        else:
            self.head = nn.Linear(4, 2)
        self.out = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.enc(x)
        y: torch.Tensor = self.out(self.proj(x) if hasattr(self, "proj") else self.head(x))
        return y


def edited_pair(dtype: torch.dtype = torch.float32) -> ProfileDiff:
    a = ls.profile(Net(False), torch.zeros(1, 4))
    b = ls.profile(Net(True).to(dtype), torch.zeros(1, 4, dtype=dtype))
    return diff(a, b)


# ---- numbers -------------------------------------------------------------------------


def test_batch_size_doubles_flops_and_keeps_params() -> None:
    d = batch_pair()
    assert [r.path for r in d.rows] == ["", "0", "1", "2"]
    assert d.added == [] and d.removed == [] and d.changed_types == {}
    assert d.facts == {"inputs": ("[2, 8]", "[4, 8]")}
    # Linear(8, 16) on (2, 8): 2*8*16 = 256 MACs; FLOPs 2*256 + 2*16 bias adds = 544
    fc1 = d.row("0")
    assert fc1.metrics["macs"] == Change(256, 512, 256, 2.0)
    assert fc1.metrics["flops"] == Change(544, 1088, 544, 2.0)
    assert fc1.self_metrics["flops"] == Change(544, 1088, 544, 2.0)
    # params 8*16 + 16 = 144 on both sides
    assert fc1.metrics["params"] == Change(144, 144, 0, 1.0)
    # ReLU: one op per element, 2*16 = 32; no params, so no ratio (0 / 0)
    relu = d.row("1")
    assert relu.metrics["flops"] == Change(32, 64, 32, 2.0)
    assert relu.metrics["params"] == Change(0, 0, 0, None)
    # Linear(16, 4): 2*16*4 = 128 MACs, 2*128 + 2*4 = 264 FLOPs
    fc2 = d.row("2")
    assert fc2.metrics["macs"] == Change(128, 256, 128, 2.0)
    assert fc2.metrics["flops"] == Change(264, 528, 264, 2.0)
    root = d.row("")
    assert root.metrics["flops"] == Change(840, 1680, 840, 2.0)  # 544 + 32 + 264
    assert root.metrics["params"] == Change(212, 212, 0, 1.0)  # 144 + 68
    assert root.metrics["calls"] == Change(1, 1, 0, 1.0)
    assert all(r.status == "same" for r in d.rows)


def test_dtype_doubles_param_bytes() -> None:
    model = mlp()
    a = ls.profile(model, torch.zeros(2, 8))
    b = ls.profile(copy.deepcopy(model).double(), torch.zeros(2, 8, dtype=torch.float64))
    d = diff(a, b)
    # 144 params * 4 B = 576 B in float32, * 8 B = 1152 B in float64
    assert d.row("0").metrics["param_bytes"] == Change(576, 1152, 576, 2.0)
    assert d.row("2").metrics["param_bytes"] == Change(272, 544, 272, 2.0)  # 68 params
    assert d.row("").metrics["param_bytes"] == Change(848, 1696, 848, 2.0)
    assert d.row("").metrics["params"] == Change(212, 212, 0, 1.0)
    assert d.row("").metrics["flops"] == Change(840, 840, 0, 1.0)
    assert d.facts == {"model.dtype": ("float32", "float64")}
    assert "they differ in dtype float32 → float64." in d.render(width=120)


def test_added_removed_and_type_changed_modules() -> None:
    d = edited_pair()
    # A's order; B's new paths after their parent's last row
    assert [r.path for r in d.rows] == ["", "enc", "enc.0", "enc.1", "enc.2", "head", "out", "proj"]
    assert d.added == ["enc.2", "proj"]
    assert d.removed == ["head"]
    assert d.changed_types == {"enc.1": ("ReLU", "GELU")}
    assert [d.row(p).status for p in ("enc.1", "enc.2", "head", "out")] == [
        "type_changed",
        "added",
        "removed",
        "same",
    ]
    # an added module: A empty, the change is its whole value; 4*4 + 4 = 20 params
    assert d.row("enc.2").metrics["params"] == Change(None, 20, 20, None)
    # a removed one: B empty; 4*2 + 2 = 10 params
    assert d.row("head").metrics["params"] == Change(10, None, -10, None)
    # the root: enc.0 20 + head 10 = 30 -> enc.0 20 + enc.2 20 + proj 10 = 50
    assert d.row("").metrics["params"] == Change(30, 50, 20, 50 / 30)
    text = d.render(width=120, metrics=["params"])
    assert body(text, marks=True) == [
        "  Net",
        "  enc Sequential",
        "  0 Linear",
        "~ 1 ReLU → GELU",
        "+ 2 Linear",
        "- head Linear",
        "  out Identity",
        "+ proj Linear",
    ]
    assert "Modules: 6 in A, 7 in B; 2 added (+), 1 removed (-), 1 type changed (~)." in text


def test_added_path_comes_after_its_parents_last_row() -> None:
    a, b = net_pair()
    d = diff(a, b)
    # extra is first in B's enc, but A's order is kept and new paths follow it
    assert [r.path for r in d.rows] == [
        "",
        "enc",
        "enc.attn",
        "enc.mlp",
        "enc.extra",
        "head",
        "drop",
    ]
    assert d.added == ["enc.extra"]
    assert d.row("enc.extra").parent is d.row("enc")
    assert d.row("enc").metrics["flops"] == Change(900, 970, 70, 970 / 900)


def test_renamed_module_is_removed_and_added() -> None:
    a = build(node("Net", "Net", node("fc", "Linear", params=8)))
    b = build(node("Net", "Net", node("proj", "Linear", params=8)))
    d = diff(a, b)
    assert (d.removed, d.added, d.changed_types) == (["fc"], ["proj"], {})


def test_root_type_change() -> None:
    a = build(node("Net", "Net", node("fc", "Linear", params=8)))
    b = build(node("Net2", "Net2", node("fc", "Linear", params=8)), name="Net2")
    d = diff(a, b)
    assert d.changed_types == {"": ("Net", "Net2")}
    assert d.facts == {"model.name": ("Net", "Net2")}
    assert d.render(width=80).splitlines()[0] == "A: Net, B: Net2; same run and environment."
    assert "~ Net → Net2" in d.render(width=80)


def test_loaded_copy_has_no_change(tmp_path: Path) -> None:
    model = mlp()
    a = ls.profile(model, torch.zeros(2, 8), backward=True, memory=True)
    a.save(tmp_path / "a.json")
    d = diff(a, ls.load(tmp_path / "a.json"))
    assert d.facts == {}
    assert d.added == d.removed == []
    checked = 0
    for row in d.rows:
        for c in [*row.metrics.values(), *row.self_metrics.values()]:
            assert c.a == c.b and c.delta == 0
            assert c.ratio == (1.0 if c.a else None)
            checked += 1
    assert checked > 4 * 10  # backward FLOPs, memory, ... were all compared
    assert "backward_flops" in d.metric_keys and "activation_bytes" in d.self_keys
    assert "same run and environment" in d.render(width=80)


def test_layerscope_version_and_env_differences(tmp_path: Path) -> None:
    a = ls.profile(mlp(), torch.zeros(2, 8))
    data = a.to_dict()
    data["env"]["layerscope"] = "0.0.9"
    data["env"]["torch"] = "2.0.0"
    data["model"]["training"] = False
    b = Profile.from_dict(data)
    d = diff(a, b)
    assert d.facts == {
        "model.training": (True, False),
        "env.layerscope": (ls.__version__, "0.0.9"),
        "env.torch": (torch.__version__, "2.0.0"),
    }
    first = " ".join(d.render(width=200).splitlines()[:1])
    assert first == (
        f"A: Sequential, B: Sequential; they differ in mode train → eval, layerscope "
        f"{ls.__version__} → 0.0.9, torch {torch.__version__} → 2.0.0."
    )


def test_structure_only_against_a_run() -> None:
    model = mlp()
    d = diff(ls.profile(model), ls.profile(model, torch.zeros(2, 8)))
    assert d.facts["model.ran"] == (False, True)
    assert d.facts["inputs"] == (None, "[2, 8]")
    assert d.only_in_b == ["macs", "flops", "bytes_accessed"]
    assert d.row("0").metrics["flops"] == Change(None, 544, None, None)
    assert d.row("0").metrics["calls"] == Change(0, 1, 1, None)


def timed(prof: Profile) -> Profile:
    """A copy with forward times: 1 ms per Linear, 0.5 ms for the ReLU, root 3 ms."""
    copy_ = Profile.from_dict(prof.to_dict())
    times = {"": 3e-3, "0": 1e-3, "1": 5e-4, "2": 1e-3}
    own = {"": 5e-4, "0": 1e-3, "1": 5e-4, "2": 1e-3}
    for n in copy_.nodes():
        n.metrics["forward_time"] = times[n.path]
        n.self_metrics["forward_time"] = own[n.path]
    return copy_


def test_metric_only_in_b_shows_with_a_empty() -> None:
    a = ls.profile(mlp(), torch.zeros(2, 8))
    d = diff(a, timed(a))
    assert d.row("0").metrics["forward_time"] == Change(None, 1e-3, None, None)
    assert d.row("").self_metrics["forward_time"] == Change(None, 5e-4, None, None)
    assert d.only_in_b == ["forward_time"] and d.only_in_a == []
    assert d.render(width=100, metrics=["flops", "forward_time"]) == (
        "A: Sequential, B: Sequential; same run and environment.\n"
        "               ──────── FLOPs ─────────   ───── Fwd time ─────\n"
        "Module           A     B       Δ      ×   A          B   Δ   ×\n"
        "──────────────────────────────────────────────────────────────\n"
        "  Sequential   840   840       0   1.00           3 ms\n"
        "    0 Linear   544   544       0   1.00           1 ms\n"
        "    1 ReLU      32    32       0   1.00         500 µs\n"
        "    2 Linear   264   264       0   1.00           1 ms\n"
        "Modules: the same 4 paths in A and B.\n"
        "Only B has Fwd time.\n"
    )
    # sorting by it keeps the tree order and says why
    text = d.render(width=100, sort_by="forward_time")
    assert "No module has a change of Fwd time (one profile lacks it)" in text
    # narrow: the empty columns (A, Δ, × of Fwd time) go before any with a number
    narrow = d.render(width=60, metrics=["flops", "forward_time"])
    assert "Hidden to fit 60 columns: Fwd time A (widen" in narrow.replace("\n  ", " ")
    narrower = d.render(width=52, metrics=["flops", "forward_time"])
    assert "Hidden to fit 52 columns: Fwd time A, Δ, × (widen" in narrower.replace("\n  ", " ")
    assert "\n  Sequential   840   840       0   1.00       3 ms\n" in narrower


# ---- the view ----------------------------------------------------------------------------


def test_render_batch_pair_at_80() -> None:
    assert batch_pair().render(width=80) == (
        "A: Sequential, B: Sequential; they differ in inputs [2, 8] → [4, 8].\n"
        "               ──────── Params ─────────   MACs   ────────── FLOPs ──────────\n"
        "Module           A     B        Δ      ×      Δ     A        B       Δ      ×\n"
        "─────────────────────────────────────────────────────────────────────────────\n"
        "  Sequential   212   212        0   1.00   +384   840   1.68 K    +840   2.00\n"
        "    0 Linear   144   144        0   1.00   +256   544   1.09 K    +544   2.00\n"
        "    1 ReLU       0     0        0             0    32       64     +32   2.00\n"
        "    2 Linear    68    68        0   1.00   +128   264      528    +264   2.00\n"
        "Modules: the same 4 paths in A and B.\n"
        "Hidden to fit 80 columns: Trainable params A, B, Δ, ×; Param size A, B, Δ, ×;\n"
        "  MACs A, B, × (widen with --width / width=, or choose with --columns /\n"
        "  metrics=).\n"
    )


def test_render_batch_pair_at_120() -> None:
    assert batch_pair().render(width=120) == (
        "A: Sequential, B: Sequential; they differ in inputs [2, 8] → [4, 8].\n"
        "               ──────── Params ─────────   Trainable params   ──────── MACs ─────────"
        "   ────────── FLOPs ──────────\n"
        "Module           A     B        Δ      ×                  Δ     A     B      Δ      ×"
        "     A        B       Δ      ×\n" + "─" * 115 + "\n"
        "  Sequential   212   212        0   1.00                  0   384   768   +384   2.00"
        "   840   1.68 K    +840   2.00\n"
        "    0 Linear   144   144        0   1.00                  0   256   512   +256   2.00"
        "   544   1.09 K    +544   2.00\n"
        "    1 ReLU       0     0        0                         0     0     0      0       "
        "    32       64     +32   2.00\n"
        "    2 Linear    68    68        0   1.00                  0   128   256   +128   2.00"
        "   264      528    +264   2.00\n"
        "Modules: the same 4 paths in A and B.\n"
        "Hidden to fit 120 columns: Trainable params A, B, ×; Param size A, B, Δ, × (widen with "
        "--width / width=, or choose with\n"
        "  --columns / metrics=).\n"
    )


def test_render_tree_with_an_added_row() -> None:
    a, b = net_pair()
    assert diff(a, b).render(width=80) == (
        "A: Net, B: Net; same run and environment.\n"
        "                       ──────── Params ─────────   ────────── FLOPs ──────────\n"
        "Module                   A     B        Δ      ×     A        B       Δ      ×\n"
        "──────────────────────────────────────────────────────────────────────────────\n"
        "  Net                  100   111      +11   1.11   1 K   1.15 K    +150   1.15\n"
        "    enc Encoder         90    93       +3   1.03   900      970     +70   1.08\n"
        "      attn Attention    40    40        0   1.00   400      440     +40   1.10\n"
        "      mlp MLP           50    50        0   1.00   500      500       0   1.00\n"
        "+     extra Linear             3       +3                    30     +30\n"
        "    head Linear          8    16       +8   2.00    80      160     +80   2.00\n"
        "    drop Dropout         0     0        0            0        0       0\n"
        "Modules: 6 in A, 7 in B; 1 added (+).\n"
    )


def body(text: str, marks: bool = False) -> list[str]:
    """The module labels of the table's rows (Total excluded), with ``marks`` after the
    row's marker (+, -, ~ or a space)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if set(line) == {"─"}) + 1
    out = []
    for line in lines[start:]:
        if not line or line.startswith(("Total", "Modules:")):
            break
        label = re.split(r"\s{3,}", line[2:].strip())[0]
        out.append(f"{line[0]} {label}" if marks else label)
    return out


def test_sort_by_is_a_flat_list_by_largest_absolute_change() -> None:
    a, b = net_pair()
    d = diff(a, b)
    text = d.render(width=80, sort_by="flops")
    # |Δ FLOPs|: head 80, enc 70, attn 40, extra 30 (added: all of it), mlp 0, drop 0
    assert body(text) == [
        "head Linear",
        "enc Encoder",
        "enc.attn Attention",
        "enc.extra Linear",
        "enc.mlp MLP",
        "drop Dropout",
    ]
    assert "\nTotal                  100   111      +11   1.11   1 K   1.15 K    +150   1.15\n" in (
        text
    )
    # the sort metric is shown, first, even when metrics leaves it out
    only_params = d.render(width=80, sort_by="flops", metrics=["params"])
    groups = only_params.splitlines()[1].split()
    assert [w for w in groups if "─" not in w] == ["FLOPs", "Params"]
    assert body(only_params) == body(text)


def test_top_and_min_change_pct() -> None:
    a, b = net_pair()
    d = diff(a, b)
    top = d.render(width=80, sort_by="flops", top=2)
    assert body(top) == ["head Linear", "enc Encoder"]
    assert "Showing 2 of 6 rows (top 2 by |Δ FLOPs|); the Total row is the whole model." in top
    # % of A: head +100 %, attn +10 %, extra added; enc +7.8 %, mlp and drop 0 %
    pct = d.render(width=120, sort_by="flops", min_change_pct=10)
    assert body(pct) == ["head Linear", "enc.attn Attention", "enc.extra Linear"]
    assert "Showing 3 of 6 rows (min_change_pct 10% of FLOPs)" in pct
    # in the tree a kept row keeps its ancestors (enc, for attn and extra)
    tree = d.render(width=120, metrics=["flops", "params"], min_change_pct=10)
    assert body(tree) == ["Net", "enc Encoder", "attn Attention", "extra Linear", "head Linear"]
    assert "Showing 5 of 7 rows (min_change_pct 10% of FLOPs)." in tree
    # without sort_by, the sort metric is the first shown one that changes (params here)
    by_params = d.render(width=120, min_change_pct=10)
    assert body(by_params) == ["Net", "enc Encoder", "extra Linear", "head Linear"]
    assert "min_change_pct 10% of Params" in by_params
    one = d.render(width=120, metrics=["flops"], top=1)
    assert body(one) == ["Net", "head Linear"]
    assert "Showing 2 of 7 rows (top 1 by |Δ FLOPs|)." in one
    assert "Showing" not in d.render(width=120, top=100)


def test_self_metrics_and_calls_by_name() -> None:
    a, b = net_pair()
    text = diff(a, b).render(width=120, metrics=["self_flops", "calls"])
    assert [w for w in text.splitlines()[1].split() if "─" not in w] == ["Self", "FLOPs", "Calls"]
    # the root's own work is 20 FLOPs on both sides; enc does nothing itself
    assert "\n  Net                   20    20            0   1.00   1   1       0   1.00\n" in text
    # flat, the Total row holds the whole model's own work: all of it (1000 -> 1150)
    flat = diff(a, b).render(width=120, metrics=["self_flops"], sort_by="self_flops")
    assert "\nTotal                  1 K   1.15 K         +150   1.15\n" in flat
    assert "\n    enc Encoder                                        1   1       0   1.00\n" in text
    assert "\n+     extra Linear            30          +30              1      +1\n" in text


def test_narrow_widths_drop_columns_never_cut_numbers() -> None:
    a, b = net_pair()
    d = diff(a, b)
    full = d.render(width=200, metrics=["params", "flops"])
    numbers = set(re.findall(r"[+-]?\d[\d,.]*(?: [KMG])?", full))
    for width in range(20, 90, 3):
        text = d.render(width=width, metrics=["params", "flops"])
        assert max(len(line) for line in text.splitlines()) <= width
        for line in text.splitlines():
            if "…" in line:  # only the label is ever shortened
                assert line.index("…") < 24
        assert set(re.findall(r"[+-]?\d[\d,.]*(?: [KMG])?", text)) <= numbers | {
            str(width),
            "20",
        }
    # the metrics named first are kept longest; Δ is the last column of a metric to go
    narrow = d.render(width=40, metrics=["params", "flops"])
    header = next(line for line in narrow.splitlines() if line.startswith("Module"))
    assert header.split() == ["Module", "Δ", "×"]
    assert "Hidden to fit 40 columns: Params A, B; FLOPs A, B, Δ, × (widen" in narrow.replace(
        "\n  ", " "
    )


def test_long_label_is_shortened_in_the_middle() -> None:
    name = "a_rather_long_module_name_for_a_test"
    a = build(node("Net", "Net", node(name, "Linear", flops=10, params=1)))
    b = build(node("Net", "Net", node(name, "Linear", flops=20, params=1)))
    d = diff(a, b)
    assert f"    {name} Linear   10   20     +10   2.00\n" in d.render(width=120, metrics=["flops"])
    # wider than half the width: the label keeps 45 % of it, numbers stay whole
    text = d.render(width=44, metrics=["flops"])
    assert "\n    a_r…test Linear   10   20     +10   2.00\n" in text
    assert "Hidden" not in text
    # narrower: columns go first, then the label gives way
    text = d.render(width=30, metrics=["flops"])
    assert "\n    a_rat…_test Linear     +10\n" in text
    assert "Hidden to fit 30 columns: FLOPs A, B, × (widen" in text.replace("\n  ", " ")


def test_too_narrow() -> None:
    text = batch_pair().render(width=19)
    assert text == (
        "(19 columns is too narrow for layerscope's views: give a width of at least 20)\n"
    )


# ---- printing ------------------------------------------------------------------------------


def test_show_rich_print_and_str_agree(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    d = batch_pair()
    expected = d.render(width=80)
    buf = io.StringIO()
    Console(file=buf, width=80, color_system=None).print(d)
    assert buf.getvalue() == expected
    out = io.StringIO()
    d.show(file=out, width=80)
    assert out.getvalue() == expected
    monkeypatch.setenv("COLUMNS", "80")
    assert str(d) == expected
    d.show()
    assert capsys.readouterr().out == expected


def test_markers_are_styled_with_theme_names() -> None:
    a, b = net_pair()
    buf = io.StringIO()
    Console(file=buf, width=80, force_terminal=True, color_system="standard").print(diff(a, b))
    assert "\x1b[32m+" in buf.getvalue()  # layerscope.diff.added: green


# ---- options and JSON ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"colour": True},
            "unknown option 'colour' in the diff options; known: metrics, sort_by, top, ",
        ),
        ({"metrics": "bogus"}, "metrics must be one of params, "),
        ({"metrics": "bogus"}, "self_bytes_accessed, got 'bogus'"),
        ({"metrics": ["forward_time"]}, "got 'forward_time' (neither profile has it)"),
        ({"metrics": []}, "metrics must be one or more of params,"),
        ({"metrics": [1]}, "metrics must be a string or a list of strings"),
        ({"sort_by": "nope"}, "sort_by must be one of params,"),
        ({"top": 0}, "top must be an int >= 1, got 0"),
        ({"top": True}, "top must be an int >= 1, got True"),
        ({"top": 1.5}, "top must be an int >= 1, got 1.5"),
        ({"min_change_pct": -1}, "min_change_pct must be a number >= 0, got -1"),
        ({"min_change_pct": "5"}, "min_change_pct must be a number >= 0, got '5'"),
        ({"min_change_pct": float("nan")}, "min_change_pct must be a number >= 0, got nan"),
        ({"width": 0}, "width must be an int >= 1, got 0"),
    ],
)
def test_option_errors_name_the_allowed_values(options: dict[str, Any], message: str) -> None:
    d = batch_pair()
    with pytest.raises(InvalidInputError) as err:
        d.render(**options)
    assert message in str(err.value)
    with pytest.raises(InvalidInputError):
        d.show(**options)


def test_allowed_metrics_are_listed() -> None:
    with pytest.raises(InvalidInputError) as err:
        batch_pair().render(sort_by="x")
    assert str(err.value) == (
        "sort_by must be one of params, trainable_params, buffers, param_bytes, buffer_bytes, "
        "macs, flops, bytes_accessed, calls, self_params, self_trainable_params, self_buffers, "
        "self_param_bytes, self_buffer_bytes, self_macs, self_flops, self_bytes_accessed, "
        "got 'x'"
    )


def test_diff_takes_profiles() -> None:
    a = ls.profile(mlp(), torch.zeros(2, 8))
    with pytest.raises(InvalidInputError, match=r"diff\(b=...\) takes a layerscope Profile"):
        diff(a, "p.json")  # type: ignore[arg-type]


def test_to_dict_is_plain_json() -> None:
    a, b = net_pair()
    d = diff(a, b)
    data = d.to_dict()
    assert json.loads(json.dumps(data, allow_nan=False)) == data
    assert data["schema"] == "layerscope-diff/1"
    assert data["added"] == ["enc.extra"] and data["removed"] == []
    assert [r["path"] for r in data["rows"]] == [r.path for r in d.rows]
    head = data["rows"][5]
    assert head["path"] == "head" and head["status"] == "same"
    assert head["metrics"]["flops"] == {"a": 80, "b": 160, "delta": 80, "ratio": 2.0}
    assert data["rows"][4]["metrics"]["params"] == {"a": None, "b": 3, "delta": 3, "ratio": None}
    batch = batch_pair().to_dict()
    assert json.loads(json.dumps(batch)) == batch
    assert batch["facts"] == {"inputs": {"a": "[2, 8]", "b": "[4, 8]"}}
    assert batch["a"]["model"]["name"] == "Sequential"


def test_repr() -> None:
    a, b = net_pair()
    assert repr(diff(a, b)) == (
        "<ProfileDiff Net -> Net: 7 modules, 1 added, 0 removed, 0 type changes, 0 facts differ>"
    )
    # one fact (the inputs' shape): the noun and verb agree with the count
    assert repr(batch_pair()) == (
        "<ProfileDiff Sequential -> Sequential: 4 modules, 0 added, 0 removed, 0 type changes, "
        "1 fact differs>"
    )


# ---- docs/diff.md ----------------------------------------------------------------------


def gpt_batch() -> ProfileDiff:
    ex = EXAMPLES["tiny_gpt"]
    model = ex.build()
    a = ls.profile(model, ex.example_input(2), memory=True)
    return diff(a, ls.profile(model, ex.example_input(8), memory=True))


def resnet_bf16() -> ProfileDiff:
    ex = EXAMPLES["tiny_resnet"]
    model = ex.build()
    a = ls.profile(model, ex.example_input())
    half = copy.deepcopy(model).to(torch.bfloat16).eval()
    return diff(a, ls.profile(half, ex.example_input().to(torch.bfloat16)))


DOC_DIFFS = {
    "mlp_batch": batch_pair,
    "edited": lambda: edited_pair(torch.float64),
    "gpt_batch": gpt_batch,
    "resnet_bf16": resnet_bf16,
}
DIFF_MARK = re.compile(r"<!-- diff: (\w+) (\{.*?\}) -->\n```text\n(.*?)```", re.DOTALL)


def test_documented_diffs_are_real() -> None:
    """Every ``<!-- diff: NAME {options} -->`` block in docs/diff.md is what it claims."""
    path = Path(__file__).parent.parent / "docs" / "diff.md"
    text = path.read_text(encoding="utf-8")
    made: dict[str, ProfileDiff] = {}

    def real(match: re.Match[str]) -> str:
        name, options = match.group(1), json.loads(match.group(2))
        if name not in made:
            made[name] = DOC_DIFFS[name]()
        out = made[name].render(**options)
        return f"<!-- diff: {name} {match.group(2)} -->\n```text\n{out}```"

    expected = DIFF_MARK.sub(real, text)
    if os.environ.get("LAYERSCOPE_UPDATE_GOLDEN"):
        path.write_text(expected, encoding="utf-8")
    assert DIFF_MARK.search(text), "docs/diff.md shows no rendered diff"
    assert text == expected
