"""Serving plans saved by earlier layerscopes load (``ls.load_serving``, ``layerscope
show``) with what those versions meant, and are written back without losing a key:

- the first plans (before ``plan_serving`` predicted TPOT: no ``mode``, ``lower_bound``,
  rows of roofline bounds) have no mode (``None``: launches were left out); their TTFT and
  TPOT are their bounds (the view's legend says so), and their rows have no launch time
  or kernel count (0, not written back, "-" in the view);
- the next ones (``mode``, TPOT predicted, TTFT still its bound) have no ``ttft_bound``:
  it is their TTFT.

A plan with a mode has always written each row's ``tpot_bound``, ``launch_time`` and
``kernels``: one missing is a damaged document, refused."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

import layerscope as ls
from helpers.documents import made, saved, show
from layerscope.generation.serving_schema import SERVING_SCHEMA

#: ``layerscope serve --json`` before TPOT was predicted (the tiny Llama of the tests on
#: meta, h100, max context 256, prompts of 16 tokens, 4 new tokens, batches 1 and 2), as
#: that version wrote it (its notes shortened to two).
FIRST: dict[str, Any] = {
    "model": "LlamaForCausalLM", "target": "h100", "device_label": "NVIDIA H100 SXM5 80GB",
    "dtype": "float32", "weights": None, "kv_dtype": "float32", "block_size": 16,
    "max_context": 256, "prompt": 16, "new_tokens": 4, "lower_bound": True,
    "memory": {
        "usable_bytes": 85029158912, "memory_utilization": 0.9, "budget_bytes": 76526243020,
        "weight_bytes": 361792, "workspace_bytes": 2983936, "prefill_chunk": 256,
        "reserve_bytes": 2147483648, "kv_budget_bytes": 74375413644,
    },
    "kv": {
        "bytes_per_token": 512.0, "tokens": 145264479, "blocks": 9079029,
        "bytes_per_sequence": 131072,
        "layers": [{"bytes_per_token": 256.0, "cap": None},
                   {"bytes_per_token": 256.0, "cap": None}],
    },
    "max_concurrency": 567439,
    "rows": [
        {"batch": 1, "ttft": 3.215713432835821e-07, "tpot": 1.1330029850746269e-07,
         "tokens_per_s": 8826102.077163843, "tokens_per_s_per_seq": 8826102.077163843,
         "bound": "memory", "kv_bytes": 16384, "fits": True},
        {"batch": 2, "ttft": 5.467749253731342e-07, "tpot": 1.27755223880597e-07,
         "tokens_per_s": 15654937.146595636, "tokens_per_s_per_seq": 7827468.573297818,
         "bound": "memory", "kv_bytes": 32768, "fits": True},
    ],
    "notes": [
        "Latency rows: roofline lower bounds of ls.estimate_generate with a static cache of "
        "prompt + new tokens (read whole at every step, as a paged cache is at the last "
        "token), the KV cache at float32's width.",
        "Times are lower bounds: max(FLOPs / peak, bytes / bandwidth) per module, summed. "
        "They leave out kernel efficiency, launch overhead (decode at small batch is "
        "launch-bound in practice), sampling and the tokenizer.",
    ],
}  # fmt: skip
#: The same plan as the next version wrote it: a mode, TPOT predicted (eager: 112
#: kernels at 4 us each), its bound and launches beside it; TTFT still the bound.
NEXT_ROWS = [
    {"batch": 1, "ttft": 3.215713432835821e-07, "tpot": 0.000448,
     "tpot_bound": 1.1330029850746269e-07, "launch_time": 0.000448, "kernels": 112,
     "tokens_per_s": 2232.1428571428573, "tokens_per_s_per_seq": 2232.1428571428573,
     "bound": "launches", "kv_bytes": 16384, "fits": True},
    {"batch": 2, "ttft": 5.467749253731342e-07, "tpot": 0.000448,
     "tpot_bound": 1.27755223880597e-07, "launch_time": 0.000448, "kernels": 112,
     "tokens_per_s": 4464.285714285715, "tokens_per_s_per_seq": 2232.1428571428573,
     "bound": "launches", "kv_bytes": 32768, "fits": True},
]  # fmt: skip


def _next() -> dict[str, Any]:
    doc = {k: v for k, v in copy.deepcopy(FIRST).items() if k != "lower_bound"}
    items = list(doc.items())
    at = [k for k, _ in items].index("new_tokens") + 1
    doc = dict([*items[:at], ("mode", "eager"), *items[at:]])
    doc["rows"] = copy.deepcopy(NEXT_ROWS)
    return doc


def _write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def _wide(monkeypatch: pytest.MonkeyPatch, default_display_config: None) -> None:
    monkeypatch.setenv("COLUMNS", "120")


def test_a_plan_from_before_the_mode_loads_as_roofline_bounds(tmp_path: Path) -> None:
    plan = ls.load_serving(_write(tmp_path / "first.json", FIRST))
    assert plan.mode is None and plan.extra == {"lower_bound": True}
    assert [
        (r.ttft, r.ttft_bound, r.tpot, r.tpot_bound, r.launch_time, r.kernels, r.absent)
        for r in plan.rows
    ] == [
        (3.215713432835821e-07, 3.215713432835821e-07, 1.1330029850746269e-07,
         1.1330029850746269e-07, 0.0, 0, ("launch_time", "kernels")),
        (5.467749253731342e-07, 5.467749253731342e-07, 1.27755223880597e-07,
         1.27755223880597e-07, 0.0, 0, ("launch_time", "kernels")),
    ]  # fmt: skip
    # its derived figures, derived again, are the ones it wrote
    assert (plan.budget, plan.kv_budget, plan.kv_tokens, plan.max_concurrency) == (
        76526243020, 74375413644, 145264479, 567439,
    )  # fmt: skip
    # 74,375,413,644 B of KV budget / 512 B per token = 145,264,479 tokens; a sequence of
    # 256 tokens holds 2 layers x 256 B x 256 = 131,072 B: 567,439 of them
    assert plan.kv_bytes(256) == 131072 and 74375413644 // 131072 == 567439


def test_its_view_shows_no_launches(tmp_path: Path) -> None:
    code, out, err = show(str(_write(tmp_path / "first.json", FIRST)))
    assert (code, err) == (0, "")
    lines = out.splitlines()
    header = lines.index(next(line for line in lines if line.startswith("Batch")))
    assert lines[header].split() == [
        "Batch", "TTFT", "TPOT", "Bound", "TPOT", "Launch", "Tok/s", "Tok/s/seq", "Limit",
        "KV", "cache", "Fits",
    ]  # fmt: skip
    # TPOT is its bound (113 ns = 1.133e-7 s), no launch time: "-"
    assert lines[header + 2].split() == [
        "1", "322", "ns", "113", "ns", "113", "ns", "-", "8.83", "M", "8.83", "M", "memory",
        "16.00", "KiB", "yes",
    ]  # fmt: skip
    assert lines[header + 3].split()[:8] == ["2", "547", "ns", "128", "ns", "128", "ns", "-"]


def _legend(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("Rows: "))


def test_its_legend_says_its_times_are_bounds(tmp_path: Path) -> None:
    """A plan without a mode: TTFT and TPOT are roofline bounds, not predictions."""
    plan = ls.load_serving(_write(tmp_path / "first.json", FIRST))
    assert _legend(plan.render(width=400)) == (
        "Rows: prompts of 16 tokens, 4 new tokens each. TTFT: the prefill of every prompt at "
        "once, its roofline bound; TPOT: one decode step, its roofline bound (a plan saved "
        "before they were predicted: Bound TPOT is TPOT; Launch: not priced); Tok/s = Batch "
        "/ TPOT, Tok/s/seq = 1 / TPOT; KV cache: at the last token; Fits: within the KV "
        "cache's budget."
    )
    # a plan with a mode predicts them
    predicted = (
        "Rows: prompts of 16 tokens, 4 new tokens each. TTFT: the prefill of every prompt at "
        "once, predicted; TPOT: one decode step, predicted (Bound TPOT: its roofline; Launch: "
        "the host's launches); Tok/s = Batch / TPOT, Tok/s/seq = 1 / TPOT; KV cache: at the "
        "last token; Fits: within the KV cache's budget."
    )
    assert _legend(made("serving").render(width=400)) == predicted


def test_it_is_written_back_with_its_bounds_named(tmp_path: Path) -> None:
    """``show -o``: the schema first, no mode, each row's bounds after its TTFT and TPOT
    (what they were), no launch time or kernels, ``lower_bound`` kept at the end."""
    path = _write(tmp_path / "first.json", FIRST)
    out = tmp_path / "again.json"
    assert show(str(path), "-o", str(out)) == (0, "", "")
    written = json.loads(out.read_text(encoding="utf-8"))
    rows = [
        {"batch": r["batch"], "ttft": r["ttft"], "ttft_bound": r["ttft"], "tpot": r["tpot"],
         "tpot_bound": r["tpot"], **{k: r[k] for k in list(r)[3:]}}
        for r in FIRST["rows"]
    ]  # fmt: skip
    expected = {
        "schema": SERVING_SCHEMA,
        **{k: v for k, v in FIRST.items() if k != "lower_bound"},
        "rows": rows,
        "lower_bound": True,
    }
    assert written == expected and list(written) == list(expected)
    assert [list(r) for r in written["rows"]] == [list(r) for r in rows]
    # read again: the same plan, written the same
    assert ls.load_serving(out) == ls.load_serving(path)
    assert show(str(out), "-o", str(out)) == (0, "", "")
    assert json.loads(out.read_text(encoding="utf-8")) == expected


def test_a_plan_from_before_ttft_was_predicted_loads_with_its_bound(tmp_path: Path) -> None:
    path = _write(tmp_path / "next.json", _next())
    plan = ls.load_serving(path)
    assert plan.mode == "eager" and plan.extra == {}
    assert [(r.ttft_bound, r.tpot, r.launch_time, r.kernels, r.absent) for r in plan.rows] == [
        (3.215713432835821e-07, 0.000448, 0.000448, 112, ()),
        (5.467749253731342e-07, 0.000448, 0.000448, 112, ()),
    ]
    written = plan.to_dict()["rows"][0]
    assert list(written)[:4] == ["batch", "ttft", "ttft_bound", "tpot"]
    assert written["ttft_bound"] == written["ttft"] == 3.215713432835821e-07
    code, out, err = show(str(path))
    assert (code, err) == (0, "")
    row = next(line for line in out.splitlines() if line.split()[:1] == ["1"])
    assert row.split()[:8] == ["1", "322", "ns", "448", "µs", "113", "ns", "448"]


@pytest.mark.parametrize("key", ["tpot_bound", "launch_time", "kernels"])
def test_a_plan_with_a_mode_and_a_row_without_its_prices_is_refused(
    key: str, tmp_path: Path
) -> None:
    doc = json.loads(saved("serving", tmp_path).read_text(encoding="utf-8"))
    del doc["rows"][1][key]
    path = _write(tmp_path / "damaged.json", doc)
    message = f"{path}: $.rows[1]: missing key {key!r}"
    with pytest.raises(ls.SchemaError) as e:
        ls.load_serving(path)
    assert str(e.value) == message
    assert show(str(path)) == (2, "", f"layerscope: error: {message}\n")


def test_a_plan_without_its_mode_keeps_the_rows_it_has(tmp_path: Path) -> None:
    doc = json.loads(saved("serving", tmp_path).read_text(encoding="utf-8"))
    del doc["mode"]
    path = _write(tmp_path / "no-mode.json", doc)
    plan = ls.load_serving(path)
    assert plan.mode is None and all(r.absent == () for r in plan.rows)
    assert plan.rows == made("serving").rows
    assert plan.to_dict() == doc


def test_a_mode_is_written_only_when_there_is_one() -> None:
    plan = made("serving")
    assert plan.mode == "eager" and plan.to_dict()["mode"] == "eager"
