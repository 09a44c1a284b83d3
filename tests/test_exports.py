"""CSV, DataFrame, Markdown and the one export entry point, on hand-built profiles
(tests/viewmodels.py: totals flops 1000, params 100) and a real example."""

from __future__ import annotations

import argparse
import csv
import io
import os
import re
import stat
import sys
from pathlib import Path

import pytest

import layerscope as ls
from layerscope.cli.common import add_view_arguments
from layerscope.examples import EXAMPLES
from layerscope.export import format_of
from layerscope.export.formats import FORMATS
from layerscope.export.markdown import escape
from viewmodels import build, node, small

NBSP = "\u00a0"


def test_csv_rows_in_base_units_preorder() -> None:
    assert small().to_csv() == (
        "path,node_id,depth,name,type,calls,repeat,params,flops,self_params,self_flops\n"
        ",0,0,Net,Net,1,1,100,1000,2,20\n"  # 2 + 40 + 50 + 8 params; 20 + 400 + 500 + 80
        "enc,1,1,enc,Encoder,1,1,90,900,,\n"  # nothing of its own: empty self cells
        "enc.attn,1.1,2,attn,Attention,1,1,40,400,40,400\n"
        "enc.mlp,1.2,2,mlp,MLP,1,1,50,500,50,500\n"
        "head,2,1,head,Linear,1,1,8,80,8,80\n"
        "drop,3,1,drop,Dropout,0,1,0,0,0,0\n"
    )


def test_csv_of_a_real_model_file_and_text_agree(tmp_path: Path) -> None:
    ex = EXAMPLES["tiny_resnet"]
    prof = ls.profile(ex.build(), ex.example_input(), memory=True)
    assert prof.to_csv(tmp_path / "p.csv") is None
    text = (tmp_path / "p.csv").read_text(encoding="utf-8")
    assert text == prof.to_csv()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == len(prof.nodes())  # every node, unfolded
    conv1 = next(r for r in rows if r["path"] == "conv1")
    # conv1: 3->16 channels, 3x3, no bias: 16*3*3*3 = 432 params; 2x16x32x32 outputs
    # each 27 MACs: 2*16*32*32*27 = 884,736 MACs
    assert conv1["params"] == "432" and conv1["macs"] == "884736"
    assert conv1["input_shape"] == "[2, 3, 32, 32]"
    assert "peak_bytes" in rows[0] and "activation_bytes" in rows[0]


def test_dataframe_has_the_csv_columns() -> None:
    pd = pytest.importorskip("pandas")
    df = small().to_dataframe()
    assert isinstance(df, pd.DataFrame)
    assert list(df.columns) == [
        "path", "node_id", "depth", "name", "type", "calls", "repeat",
        "params", "flops", "self_params", "self_flops",
    ]  # fmt: skip
    assert df["flops"].tolist() == [1000, 900, 400, 500, 80, 0]
    assert df.loc[df["path"] == "head", "self_params"].item() == 8


def test_dataframe_without_pandas_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas raises ImportError
    with pytest.raises(ls.MissingDependencyError, match=r"pip install 'layerscope\[pandas\]'"):
        small().to_dataframe()


def test_markdown_table_exact() -> None:
    assert small().to_markdown(columns=["flops", "params"], pct=False) == (
        "| Module | FLOPs | Params |\n"
        "|:---|---:|---:|\n"
        "| Net | 1 K | 100 |\n"
        "| ├─ (1) enc Encoder | 900 | 90 |\n"
        f"| │{NBSP * 2}├─ (1.1) attn Attention | 400 | 40 |\n"
        f"| │{NBSP * 2}└─ (1.2) mlp MLP | 500 | 50 |\n"
        "| ├─ (2) head Linear | 80 | 8 |\n"
        "| └─ (3) drop Dropout | 0 | 0 |\n"
        "| **Total** | **1 K** | **100** |\n"
        "\n"
        "Params: 100 (trainable 0, frozen 100), 0 B; buffers: 0 (0 B)  \n"
        "Run: eval mode, grad enabled, device cpu, float32.\n"
    )


def test_markdown_takes_view_options_and_escapes_names() -> None:
    prof = build(node("Net", "Net", node("a|b", "My*Type", flops=1), node("c", "Linear", flops=3)))
    text = prof.to_markdown(sort_by="flops", columns=["flops"], pct=False)
    lines = text.splitlines()
    assert lines[3] == "| ├─ (2) c Linear | 3 |"  # sorted: c (3) before a|b (1)
    assert lines[4] == r"| └─ (1) a\|b My\*Type | 1 |"
    assert escape("</td><script>") == r"\</td\>\<script\>"
    with pytest.raises(ls.InvalidInputError, match="to_markdown shows the table view"):
        prof.to_markdown(view="tree")


def test_csv_neutralises_formulas_and_control_characters_in_text_cells() -> None:
    prof = build(
        node(
            "Net",
            "Net",
            node("=HYPERLINK(1)", "+Type", flops=-1),  # a negative number stays a number
            node("\x1b]0;PWNED\x07x", "@SUM", flops=2),
            node("-a", "Linear", flops=3),
        )
    )
    lines = prof.to_csv().splitlines()  # type: ignore[union-attr]
    assert lines[0] == "path,node_id,depth,name,type,calls,repeat,flops,self_flops"
    assert lines[2:] == [
        "'=HYPERLINK(1),1,1,'=HYPERLINK(1),'+Type,1,1,-1,-1",
        "␛]0;PWNED␇x,2,1,␛]0;PWNED␇x,'@SUM,1,1,2,2",
        "'-a,3,1,'-a,Linear,1,1,3,3",
    ]


def test_markdown_shows_control_characters() -> None:
    prof = build(node("Net", "Net", node("\x1b[2Jx\x9b", "Linear", flops=1)))
    lines = prof.to_markdown(columns=["flops"], pct=False).splitlines()
    assert lines[3] == "| └─ (1) ␛\\[2Jx� Linear | 1 |"
    assert escape("a\tb\x7f") == "a␉b␡"


def test_export_picks_the_format_from_the_extension(tmp_path: Path) -> None:
    prof = small()
    prof.export(tmp_path / "p.csv")
    assert (tmp_path / "p.csv").read_text(encoding="utf-8") == prof.to_csv()
    prof.export(tmp_path / "p.md", columns=["flops"])
    assert (tmp_path / "p.md").read_text(encoding="utf-8") == prof.to_markdown(columns=["flops"])
    prof.export(tmp_path / "p.json")
    assert ls.load(tmp_path / "p.json") == prof
    assert format_of("x.trace.json") == "trace" and format_of("x.JSON") == "json"
    assert format_of("x.out", "csv") == "csv"
    with pytest.raises(ls.ExportError, match=r"cannot tell the export format of 'p\.xlsx'"):
        prof.export("p.xlsx")
    with pytest.raises(ls.ExportError, match="unknown export format 'xls'; formats: trace"):
        prof.export(tmp_path / "p", format="xls")
    with pytest.raises(ls.ExportError, match="csv export takes no options, got columns"):
        prof.export(tmp_path / "q.csv", columns=["flops"])


def test_the_docs_and_the_cli_list_the_formats_of_the_format_table() -> None:
    """docs/exports.md and ``-o``'s help name each format's usual extension, and
    ``--format`` takes every format of ``export.formats.FORMATS``."""
    usual = {f.extensions[0] for f in FORMATS.values()}
    docs = (Path(__file__).parent.parent / "docs" / "exports.md").read_text(encoding="utf-8")
    listed = re.search(r"# the format from the extension: (.*)", docs)
    assert listed is not None and set(listed.group(1).split()) == usual
    parser = argparse.ArgumentParser()
    add_view_arguments(parser)
    output = next(a for a in parser._actions if a.dest == "output").help or ""
    listed = re.search(r"instead of printing: (.*), or \.txt", output)
    assert listed is not None and set(listed.group(1).split(", ")) == usual
    for name in FORMATS:
        assert parser.parse_args(["--format", name]).format == name


def test_exports_never_damage_an_existing_file(tmp_path: Path) -> None:
    target = tmp_path / "p.csv"
    target.write_text("old\n", encoding="utf-8")
    os.chmod(target, 0o600)
    small().export(target)
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600  # permissions kept
    assert target.read_text(encoding="utf-8").startswith("path,node_id")
    with pytest.raises(ls.ExportError, match="it is a directory"):
        small().to_csv(tmp_path)
    with pytest.raises(ls.ExportError, match="does not exist"):
        small().to_csv(tmp_path / "missing" / "p.csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.csv"]  # no temporary left


def test_every_format_on_a_transformers_model_fresh_and_loaded(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    import torch

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=32)
    model = transformers.GPT2LMHeadModel(config).eval()
    prof = ls.profile(model, input_shape=(1, 8), memory=True, timing={"warmup": 0, "repeats": 1})
    prof.export(tmp_path / "fresh.json")
    loaded = ls.load(tmp_path / "fresh.json")
    assert loaded == prof
    for name in ("p.csv", "p.md", "p.html", "p.trace.json"):
        prof.export(tmp_path / f"fresh-{name}")
        loaded.export(tmp_path / f"loaded-{name}")
        fresh = (tmp_path / f"fresh-{name}").read_bytes()
        assert fresh == (tmp_path / f"loaded-{name}").read_bytes(), name
        assert len(fresh) > 100
    # the GPT-2 block's attention projection shows in the text formats (escaped in Markdown)
    assert "transformer.h.0.attn.c_attn" in (tmp_path / "fresh-p.csv").read_text("utf-8")
    assert r"(1.4.1.2.1) c\_attn Conv1D" in (tmp_path / "fresh-p.md").read_text("utf-8")
