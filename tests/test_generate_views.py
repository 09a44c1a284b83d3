"""The flat views over every stage of a generation (``gen.render(view="top"|"ops")``
without ``stage=``): a Stage column, each stage's rows those of its own view, the %
columns shares of each stage's total; small transformers models with random weights,
the figures derived by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import layerscope as ls
from helpers.models import tiny_gpt2 as gpt2
from helpers.models import tiny_llama as llama
from layerscope.cli import main
from layerscope.errors import InvalidInputError

transformers = pytest.importorskip("transformers")

#: the small Llama: hidden 64, 4 query heads and 2 KV heads of 16, MLP 128, 2 layers
D, HEADS, KV_HEADS, MLP, LAYERS, VOCAB = 64, 4, 2, 128, 2, 128
BATCH, PROMPT, NEW = 2, 16, 5
STAGES = ("prefill", "decode")


@pytest.fixture(scope="module")
def gen() -> Any:
    """Batch 2, a 16-token prompt, 5 new tokens: a prefill and 4 decode calls."""
    ids = torch.randint(0, VOCAB, (BATCH, PROMPT))
    return ls.profile_generate(
        llama(), ids, max_new_tokens=NEW, attention_mask=torch.ones_like(ids)
    )


def table_rows(text: str) -> list[list[str]]:
    """The table's rows, each as its cells split on blanks (blank lines left out)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("───")) + 1
    rows = []
    for line in lines[start:]:
        if line.startswith(("Hidden", "Showing", "Stages:", "Params:", "This profile")):
            break
        if line.strip():
            rows.append(line.split())
    return rows


def without_depth(row: list[str]) -> list[str]:
    """A top view's row less its depth (shown on a depth's first row only)."""
    return row[1:] if row[0].isdigit() else row


def test_top_by_macs_lists_each_stage_lm_head(gen: Any) -> None:
    """The LM head works on one position per row in the prefill (logits_to_keep=1) and
    on the one token fed per row in each of the 4 decode calls: hidden x vocab each."""
    text = gen.render(view="top", sort_by="macs", columns=["macs"], pct=False, raw=True, width=120)
    assert text.startswith("Top 5 modules by MACs at each depth of each stage\n")
    rows = [without_depth(r) for r in table_rows(text)]
    heads = {r[0]: int(r[-1]) for r in rows if r[1] == "lm_head"}
    assert heads == {"prefill": BATCH * D * VOCAB, "decode": (NEW - 1) * BATCH * D * VOCAB}
    assert heads == {"prefill": 16_384, "decode": 65_536}
    # the Stage column holds the stage names, in the order they ran at each depth
    assert {r[0] for r in rows} == set(STAGES) == set(gen.stages)
    depth_one = [r[:2] for r in rows[:4]]
    assert depth_one == [["prefill", "model"], ["prefill", "lm_head"],
                         ["decode", "model"], ["decode", "lm_head"]]  # fmt: skip


@pytest.mark.parametrize("view", ["top", "ops"])
def test_each_stage_rows_are_its_own_view_rows(gen: Any, view: str) -> None:
    """Less the Stage column, a stage's rows are those of ``render(stage=S)`` in the
    same view and options, in the same order (the top view per depth)."""
    options: dict[str, Any] = {"view": view, "sort_by": "macs", "top": 4, "width": 200}
    staged = table_rows(gen.render(**options))
    for stage in STAGES:
        own = table_rows(gen.render(stage=stage, **options))
        if view == "top":
            mine = [without_depth(r)[1:] for r in staged if stage in without_depth(r)[:1]]
            assert mine and mine == [without_depth(r) for r in own], stage
        else:
            assert own and [r[1:] for r in staged if r[0] == stage] == own, stage


def test_percent_columns_are_shares_of_each_stage(gen: Any) -> None:
    """% MACs is of the row's own stage: the decode LM head over the 4 decode calls'
    MACs; the ops view's self shares add up to 100 in each stage."""
    text = gen.render(view="top", columns=["macs", "macs_pct"], raw=True, width=120)
    assert "(% of the stage's total)" in text.splitlines()[0]
    rows = [without_depth(r) for r in table_rows(text)]
    decode_macs = sum(s.macs for s in gen.calls if s.stage == "decode")
    (head,) = [r for r in rows if r[:2] == ["decode", "lm_head"]]
    assert float(head[-1]) == pytest.approx(100 * 65_536 / decode_macs)
    ops = gen.render(view="ops", columns=["macs"], raw=True, width=120)
    assert "adds up to 100% in each stage" in ops
    for stage in STAGES:
        shares = [float(r[-1]) for r in table_rows(ops) if r[0] == stage]
        assert sum(shares) == pytest.approx(100.0), stage


def test_a_loaded_generation_renders_the_same(gen: Any, tmp_path: Path) -> None:
    path = tmp_path / "gen.json"
    gen.save(path)
    loaded = ls.load_generation(path)
    for options in ({"view": "top"}, {"view": "ops", "top": 6}, {"view": "top", "by_type": True}):
        assert loaded.render(width=80, **options) == gen.render(width=80, **options), options


def test_tree_views_need_a_stage(gen: Any) -> None:
    for view in ("table", "tree", "repr"):
        with pytest.raises(InvalidInputError) as e:
            gen.render(view=view)
        assert str(e.value) == (
            f"the {view!r} view shows one stage at a time: pass stage= ('prefill' or "
            "'decode'), or view='top' or 'ops' for every stage in one table"
        )
    # view=None keeps the summary; stage= any view of that stage
    assert gen.render(view=None, width=80) == gen.render(width=80)
    assert gen.render(stage="decode", view="tree") == gen.stages["decode"].render(view="tree")


@pytest.mark.parametrize(
    "options",
    [{"view": "top"}, {"view": "top", "sort_by": "macs"}, {"view": "ops", "top": 8},
     {"view": "top", "by_type": True}, {"view": "ops", "by_type": True}],
)  # fmt: skip
def test_fits_80_columns(gen: Any, options: dict[str, Any]) -> None:
    text = gen.render(width=80, **options)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "Hidden to fit 80 columns: " in text
    assert "Stages: prefill, 1 model call; decode, 4 model calls summed." in text
    header = text.splitlines()[2 if text.splitlines()[1].startswith("  ") else 1]
    assert "Stage" in header.split()


def test_the_ranking_column_stays_at_80(gen: Any) -> None:
    """The Stage column's room is paid by other columns than the one ranking the rows
    and its share."""
    text = gen.render(view="top", sort_by="macs", width=80)
    header = text.splitlines()[1].split()
    assert header[:4] == ["Depth", "Stage", "Module", "Params"]
    assert "MACs" in header and "%" in header
    assert "16.4 K" in text and "65.5 K" in text


def test_show_prints_the_render(gen: Any, capsys: pytest.CaptureFixture[str]) -> None:
    gen.show(view="ops", top=5, width=80)
    out = capsys.readouterr().out
    assert out == gen.render(view="ops", top=5, width=80)


def test_gpt2_ops_view_lm_head_per_stage() -> None:
    """GPT-2 (hidden 32, vocab 64), 1 prompt of 8 tokens, 3 new: the LM head's own MACs
    are 32 x 64 for the prefill's one position and for each of the 2 decode calls."""
    ids = torch.randint(0, 64, (1, 8))
    g = ls.profile_generate(gpt2(), ids, max_new_tokens=3)
    text = g.render(view="ops", sort_by="macs", columns=["macs"], pct=False, raw=True, width=120)
    heads = {r[0]: int(r[-1]) for r in table_rows(text) if r[1] == "lm_head"}
    assert heads == {"prefill": 32 * 64, "decode": 2 * 32 * 64}


def test_cli_view_and_stage(capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "generate", "transformers:LlamaForCausalLM", "--model-args",
        '{"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, '
        '"num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128}',
        "--device", "cpu", "--input-shape", "2,16", "--max-new-tokens", "5", "--width", "80",
    ]  # fmt: skip
    assert main([*args, "--view", "top", "--sort", "macs", "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Top 2 modules by MACs at each depth of each stage")
    rows = [without_depth(r) for r in table_rows(out)]
    assert [r[:2] for r in rows if r[1] == "lm_head"] == [["prefill", "lm_head"],
                                                          ["decode", "lm_head"]]  # fmt: skip
    assert max(len(line) for line in out.splitlines()) <= 80
    # a tree view without --stage, and views of an estimate, are refused before any run
    assert main([*args, "--view", "table"]) == 2
    assert "--view table shows one stage at a time: give --stage" in capsys.readouterr().err
    assert main(["generate", "transformers:LlamaForCausalLM", "--view", "top"]) == 2
    assert "give --device cpu" in capsys.readouterr().err


def test_cli_writes_text_json_and_html(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``layerscope generate`` on a real device with -o, --json and --html: the text file
    is what was printed, the JSON reads back to the same generation, the HTML holds its
    section; the paths are checked before anything runs."""
    args = [
        "generate", "transformers:LlamaForCausalLM", "--model-args",
        '{"num_hidden_layers": 1, "hidden_size": 32, "intermediate_size": 64, '
        '"num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 64}',
        "--device", "cpu", "--input-shape", "1,6", "--max-new-tokens", "3", "--width", "80",
    ]  # fmt: skip
    text, doc, page = tmp_path / "g.txt", tmp_path / "g.json", tmp_path / "g.html"
    assert main([*args, "-o", str(text), "--json", str(doc), "--html", str(page)]) == 0
    out = capsys.readouterr().out
    assert text.read_text() == out
    assert ls.load_generation(doc).render(width=80) + "\n" == out
    assert 'id="ls-gen-data"' in page.read_text()
    for flags, words in (
        (["--html", str(tmp_path / "g.txt")], "--html must be a path ending in .html"),
        (["-o", str(tmp_path / "g.md")], "-o must be a path ending in .txt"),
        (["--json", str(tmp_path / "no" / "g.json")], "cannot write"),
    ):
        assert main([*args, *flags]) == 2
        assert words in capsys.readouterr().err
    # on meta --html writes the estimate's report, its section first
    small = args[: args.index("--device")]
    est_page = tmp_path / "est.html"
    assert main([*small, "--input-shape", "1,6", "--html", str(est_page)]) == 0
    assert "Generation on h100" in capsys.readouterr().out
    assert '"measured":false' in est_page.read_text()
