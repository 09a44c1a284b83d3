"""Views on hand-built Profiles (tests/viewmodels.py): filters, sorting, top-k, %,
derived columns, flat views, widths and option checks, with the expected rows written out."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import layerscope as ls
from layerscope.profile import Node
from viewmodels import build, node, small

W = 80


FOOTER = ("Showing", "Hidden", "This profile", "Params:", "Run:", "Note:", "No NaN", "|x|")


def rows(text: str, sections: bool = False) -> list[str]:
    """The table's body rows: after the header rule, up to the blank line before Total
    (or the footer); with ``sections``, blank lines between sections are skipped."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if set(line) == {"─"}) + 1
    out = []
    for line in lines[start:]:
        if line.startswith(FOOTER) or (not line and not sections):
            break
        if line:
            out.append(line.rstrip())
    return out


def names(text: str) -> list[str]:
    """The module label of each body row, guides stripped."""
    return [re.sub(r"^[│├└─ ]+", "", r).split("   ")[0] for r in rows(text)]


def test_default_table_exact() -> None:
    text = small().render(width=W)
    # % FLOPs = flops / 1000 total: enc 900 -> 90%, attn 40%, mlp 50%, head 8%
    assert text == (
        "Module                       Params   FLOPs   % FLOPs   Calls\n"
        "─────────────────────────────────────────────────────────────\n"
        "Net                             100     1 K      100%       1\n"
        "├─ (1) enc Encoder               90     900     90.0%       1\n"
        "│  ├─ (1.1) attn Attention       40     400     40.0%       1\n"
        "│  └─ (1.2) mlp MLP              50     500     50.0%       1\n"
        "├─ (2) head Linear                8      80      8.0%       1\n"
        "└─ (3) drop Dropout               0       0        0%       -\n"
        "\n"
        "Total                           100     1 K      100%\n"
        "Params: 100 (trainable 0, frozen 100), 0 B; buffers: 0 (0 B)\n"
        "Run: eval mode, grad enabled, device cpu, float32.\n"
    )


def test_sort_siblings_descending_and_pct_follows_sort() -> None:
    text = small().render(width=W, sort_by="params", columns=["params", "flops"])
    # siblings by params: enc 90 > head 8 > drop 0; inside enc: mlp 50 > attn 40
    assert names(text) == [
        "Net",
        "(1) enc Encoder",
        "(1.2) mlp MLP",
        "(1.1) attn Attention",
        "(2) head Linear",
        "(3) drop Dropout",
    ]
    # pct_of defaults to the sort metric: a % Params column after Params
    assert rows(text)[2].split() == ["│", "├─", "(1.2)", "mlp", "MLP", "50", "50.0%", "500"]


def test_min_pct_keeps_ancestors_and_counts_hidden_rows() -> None:
    text = small().render(width=W, min_pct=45)
    # FLOPs >= 45% of 1000: enc (90%) and mlp (50%); attn 40%, head 8%, drop 0% hidden
    assert names(text) == ["Net", "(1) enc Encoder", "(1.2) mlp MLP"]
    assert "Showing 3 of 6 rows (min_pct 45% of FLOPs); the Total row is the whole" in text
    total = next(line for line in text.splitlines() if line.startswith("Total"))
    assert total.split() == ["Total", "100", "1", "K", "100%"]  # still the whole model


def test_min_pct_of_another_metric() -> None:
    text = small().render(width=W, min_pct=9, pct_of="params")
    # params >= 9% of 100: enc 90, attn 40, mlp 50 (head 8 is not)
    assert names(text) == ["Net", "(1) enc Encoder", "(1.1) attn Attention", "(1.2) mlp MLP"]


def test_include_by_path_and_type_keeps_ancestors() -> None:
    assert names(small().render(width=W, include="*attn*")) == [
        "Net",
        "(1) enc Encoder",
        "(1.1) attn Attention",
    ]
    assert names(small().render(width=W, include=["Linear", "MLP"])) == [
        "Net",
        "(1) enc Encoder",
        "(1.2) mlp MLP",
        "(2) head Linear",
    ]
    # case-sensitive: "linear" matches neither the path "head" nor the type "Linear"
    assert names(small().render(width=W, include="linear")) == ["Net"]


def test_exclude_drops_subtrees() -> None:
    assert names(small().render(width=W, exclude="enc")) == [
        "Net",
        "(2) head Linear",
        "(3) drop Dropout",
    ]
    assert names(small().render(width=W, exclude=["Dropout", "*.attn"])) == [
        "Net",
        "(1) enc Encoder",
        "(1.2) mlp MLP",
        "(2) head Linear",
    ]


def test_top_k_keeps_the_largest_and_their_ancestors() -> None:
    # by FLOPs among non-root rows: enc 900, mlp 500 (attn 400 is third)
    assert names(small().render(width=W, top=2)) == ["Net", "(1) enc Encoder", "(1.2) mlp MLP"]
    text = small().render(width=W, top=2, sort_by="params", max_depth=1)
    # depth <= 1 by params: enc 90, head 8
    assert names(text) == ["Net", "(1) enc Encoder", "(2) head Linear"]
    assert "Showing 3 of 6 rows (max_depth 1; top 2 by Params)" in text


def test_max_depth_and_not_called() -> None:
    assert names(small().render(width=W, max_depth=1)) == [
        "Net",
        "(1) enc Encoder",
        "(2) head Linear",
        "(3) drop Dropout",
    ]
    assert "(3) drop" not in small().render(width=W, show_not_called=False)


def test_columns_raw_and_no_pct() -> None:
    text = small().render(width=W, columns=["flops", "params"], raw=True, pct=False)
    assert rows(text)[0].split() == ["Net", "1000", "100"]
    assert text.splitlines()[0].split() == ["Module", "FLOPs", "Params"]
    text = small().render(width=W, columns=["flops_pct", "self_flops"])
    # the root's own 20 FLOPs; enc has no work of its own (no self value: an empty cell)
    assert [r.split()[-2:] for r in rows(text)[:3]] == [
        ["100%", "20"],
        ["Encoder", "90.0%"],
        ["40.0%", "400"],
    ]


def test_ops_view_self_values_sum_to_100() -> None:
    text = small().render(width=W, view="ops", columns=["flops"])
    body = [r.split() for r in rows(text)]
    # self FLOPs: mlp 500 (50%), attn 400 (40%), head 80 (8%), the root's own 20 (2%)
    assert body[:4] == [
        ["enc.mlp", "MLP", "500", "50.0%"],
        ["enc.attn", "Attention", "400", "40.0%"],
        ["head", "Linear", "80", "8.0%"],
        ["<root>", "Net", "20", "2.0%"],
    ]
    text = small().render(width=W, view="ops", columns=["flops"], top=2)
    assert [r.split()[0] for r in rows(text)] == ["enc.mlp", "enc.attn"]
    assert "Showing 2 of 6 rows (top 2 by Self FLOPs)." in text


def test_ops_by_type_and_top_by_depth() -> None:
    prof = build(
        node(
            "Net",
            "Net",
            node("a", "Linear", flops=300, params=3),
            node("b", "Linear", flops=200, params=2),
            node("c", "ReLU", flops=500),
        )
    )
    text = prof.render(width=W, view="ops", by_type=True, columns=["flops"])
    # Linear: a + b = 500 FLOPs in 2 modules (50%); ReLU 500 in 1 (50%); the root 0
    assert [r.split() for r in rows(text)][:2] == [
        ["Linear", "2", "500", "50.0%"],
        ["ReLU", "1", "500", "50.0%"],
    ]
    text = small().render(width=W, view="top", top=1, columns=["flops"])
    # depth 1: enc (900); depth 2: mlp (500)
    assert [r.split() for r in rows(text, sections=True)] == [
        ["1", "enc", "Encoder", "900", "90.0%"],
        ["2", "enc.mlp", "MLP", "500", "50.0%"],
    ]


def times() -> ls.Profile:
    """Three alike layers, each called twice, 1, 2 and 3 ms per call, 200 FLOPs each."""
    layers = [
        node(str(i), "Linear", calls=2, flops=200, params=5, forward_time=t)
        for i, t in enumerate((1e-3, 2e-3, 3e-3))
    ]
    prof = build(node("Net", "Sequential", *layers, forward_time=15e-3))
    for n in prof.root.children:  # per-call times are inclusive too
        n.metrics["forward_time"] = n.self_metrics["forward_time"]
    prof.root.metrics["forward_time"] = 15e-3
    prof.root.self_metrics["forward_time"] = 3e-3
    return prof


def test_time_totals_pct_and_flops_per_second_on_folded_rows() -> None:
    cols = ["forward_time", "forward_time_total", "forward_time_pct", "flops", "flops_per_s"]
    text = times().render(width=W, columns=cols, pct=False)
    (root, folded) = [r.split("  ") for r in rows(text)][:2]
    assert "(1) 0–2 Linear ×3" in rows(text)[1]
    # the fold keeps the largest per-call time (3 ms); its total is summed over members:
    # (1 + 2 + 3) ms × 2 calls = 12 ms, 12 / 15 = 80% of the root's 15 ms × 1 call;
    # FLOP/s = 600 / 0.012 s = 50 K
    cells = [c.strip() for c in folded if c.strip()]
    assert cells[1:] == ["3 ms", "12 ms", "80.0%", "600", "50 K"]
    cells = [c.strip() for c in root if c.strip()]
    # root: 600 FLOPs in 15 ms = 40 K FLOP/s
    assert cells[1:] == ["15 ms", "15 ms", "100%", "600", "40 K"]
    # unfolded, a layer's own share: layer 2 at 3 ms × 2 = 6 ms = 40%
    flat = times().render(width=W, columns=cols, fold=False, pct=False)
    assert rows(flat)[3].split()[-7:] == ["3", "ms", "6", "ms", "40.0%", "200", "33.3", "K"][1:]


def test_narrow_widths_never_cut_numbers() -> None:
    prof = small()
    text = prof.render(width=30)
    # "│  ├─ (1.1) attn Attention" is 26 wide: with Params (6 + 3) 35 > 30, so Calls goes,
    # then the ids (the label is 20 wide: 20 + 9 = 29), then FLOPs and % FLOPs (20 + 9
    # + 9 + 10 > 30)
    assert "Hidden to fit 30 columns: Node ids, Calls, % FLOPs, FLOPs" in text.replace("\n  ", " ")
    for line in rows(text):
        assert len(line) <= 30
    # at 20 columns every metric column gives way and the labels are shortened
    text = prof.render(width=20)
    assert max(len(line) for line in text.splitlines()) <= 20
    assert rows(text)[0] == "Net"
    # columns the user named are kept: a message instead of a broken table
    text = prof.render(width=24, columns=["params", "flops"])
    assert " ".join(text.split()).startswith("(too narrow: this view needs at least 25 columns;")
    # no table was drawn: nothing was hidden from it, no rows shown of it
    assert "Hidden to fit" not in text and "Showing" not in text
    text = prof.render(width=24, columns=["params", "flops"], top=2)
    assert "Showing" not in text
    # below 20 columns, one line says so
    for view in ("table", "tree", "repr", "top", "ops"):
        assert prof.render(width=10, view=view) == (
            "(10 columns is too narrow for layerscope's views: give a width of at least 20)\n"
        )
    # named columns are never dropped: the label gives way (in its middle)
    text = prof.render(width=35, columns=["params", "flops", "flops_pct"])
    assert rows(text)[2].endswith("40     400     40.0%")
    assert max(len(line) for line in rows(text)) == 35


def test_long_names_are_shortened_in_the_middle() -> None:
    long = build(
        node("Net", "Net", node("a_really_long_module_name", "SomeVeryLongModuleType", flops=1))
    )
    text = long.render(width=60, columns=["flops"], pct=False)
    # 3 + 4 + 25 + 1 + 22 = 55 for the label with its id, + 3 + 5 = 63 > 60: the ids go
    assert rows(text)[1] == "└─ a_really_long_module_name SomeVeryLongModuleType       1"
    assert "Hidden to fit 60 columns: Node ids (widen" in text
    text = long.render(width=44, columns=["flops"], pct=False)
    # 44 - 3 (gap) - 5 ("FLOPs") = 36 for the label, 51 without its id: the type gives
    # the 15 characters (22 -> 7), the name stays whole
    assert rows(text)[1] == "└─ a_really_long_module_name Som…ype       1"
    text = long.render(width=36, columns=["flops"], pct=False)
    # 28 for the label, 23 over: the type is cut to 6 characters (16), then the name in
    # its middle (7: 25 -> 18)
    assert rows(text)[1] == "└─ a_really…dule_name So…ype       1"


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        (
            {"view": "grid"},
            ["view must be one of 'table', 'tree', 'repr', 'top', 'ops', 'roofline', got 'grid'"],
        ),
        (
            {"sort_by": "flop"},
            [
                "sort_by must be a metric: calls, params, ",
                ", got 'flop' (did you mean 'flops' or 'flops_pct'?)",
            ],
        ),
        ({"columns": ["params", "nope"]}, ["columns must be a column: input_shape", "got 'nope'"]),
        ({"max_depth": -1}, ["max_depth must be an int >= 0, got -1"]),
        ({"max_depth": 1.5}, ["max_depth must be an int >= 0, got 1.5"]),
        ({"top": 0}, ["top must be an int >= 1, got 0"]),
        ({"min_pct": 101}, ["min_pct must be a number from 0 to 100, got 101"]),
        ({"min_pct": "1"}, ["min_pct must be a number from 0 to 100, got '1'"]),
        ({"pct_of": "absmax"}, ["pct_of must be a metric that adds up over modules", "'absmax'"]),
        ({"fold": "yes"}, ["fold must be True, False or 'all', got 'yes'"]),
        ({"raw": 1}, ["raw must be True or False, got 1"]),
        ({"by_type": True}, ["by_type applies to the 'top' and 'ops' views, not 'table'"]),
        (
            {"colour": True},
            ["unknown option 'colour' in the view options (did you mean 'columns'?); known: view"],
        ),
        ({"include": 3}, ["include must be a string or a list of strings, got 3"]),
    ],
)
def test_options_are_checked_at_the_boundary(kwargs: dict[str, object], words: list[str]) -> None:
    with pytest.raises(ls.InvalidInputError) as info:
        small().render(**kwargs)
    for word in words:
        assert word in str(info.value)


def test_numpy_integers_are_accepted() -> None:
    np = pytest.importorskip("numpy")
    assert names(small().render(width=W, max_depth=np.int64(0))) == ["Net"]


def test_node_parent_and_by_id() -> None:
    prof = small()
    attn = prof.by_id("1.1")
    assert attn.path == "enc.attn" and attn.parent is prof.node("enc")
    assert prof.root.parent is None
    assert ls.Profile.from_dict(prof.to_dict()).node("enc.mlp").parent.path == "enc"  # type: ignore[union-attr]
    assert "parent" not in prof.root.to_dict()


def test_repr_is_one_line_with_headline_totals() -> None:
    assert repr(small()) == "<Profile Net: 6 modules, params=100, FLOPs=1K>"
    text = repr(times())
    assert text == "<Profile Sequential: 4 modules, params=15, FLOPs=600, fwd=15ms>"


def test_footer_names_real_paths_of_numerics_flags() -> None:
    layers = [node(str(i), "Linear", flops=1) for i in range(4)]
    prof = build(node("Net", "Sequential", *layers))
    prof.node("2").numerics["fp16_overflow"] = True
    prof.numerics = {"checked_calls": 5}
    text = prof.render(width=W)
    assert "|x| > 65504 (overflows float16) in: 2" in text
    assert "(2) 2 Linear" in text  # the flagged layer is not hidden in a fold
    assert "(1) 0–1 Linear ×2" in text


def test_ops_view_counts_op_rows_once() -> None:
    """Op rows of a kineto/fx pass break their module's self time down: in the flat list
    the module keeps only the rest, and an op row stands for its nested ops too."""
    op = node("aten::mm", "aten::mm", forward_time=4e-6)  # self: minus a nested op
    a = node("a", "Linear", op, forward_time=10e-6)
    prof = build(node("Net", "Net", a, forward_time=10e-6))
    op.path, op.metrics["forward_time"] = "a/aten::mm", 6e-6  # inclusive op time
    a.metrics["forward_time"] = 10e-6
    prof.root.metrics["forward_time"] = 20e-6
    text = prof.render(
        view="ops", width=W, columns=["forward_time", "forward_time_pct"], sort_by="forward_time"
    )
    # root 10 µs of 20 (50%); a: 10 - 6 (its op row) = 4 µs (20%); the op row 6 µs (30%)
    assert [r.split() for r in rows(text)] == [
        ["<root>", "Net", "10", "µs", "50.0%"],
        ["a/aten::mm", "aten::mm", "6", "µs", "30.0%"],
        ["a", "Linear", "4", "µs", "20.0%"],
    ]


def test_sorting_by_an_absent_metric_sorts_by_the_pct_metric_and_says_so() -> None:
    text = small().render(width=W, sort_by="forward_time")
    # no times: siblings by FLOPs, the % metric: enc 900 > head 80 > drop 0; mlp 500 > attn 400
    assert names(text) == [
        "Net",
        "(1) enc Encoder",
        "(1.2) mlp MLP",
        "(1.1) attn Attention",
        "(2) head Linear",
        "(3) drop Dropout",
    ]
    assert "This profile has no forward_time: rows are ordered by FLOPs." in text
    assert "% FLOPs" in text.splitlines()[0]


def test_top_by_an_absent_metric_ranks_by_the_pct_metric() -> None:
    text = small().render(width=W, view="top", sort_by="forward_time", top=1, columns=["flops"])
    # ranked by FLOPs: depth 1 enc (900 of 1000), depth 2 mlp (500)
    assert text.splitlines()[0] == "Top 1 modules by FLOPs at each depth"
    assert [r.split() for r in rows(text, sections=True)] == [
        ["1", "enc", "Encoder", "900", "90.0%"],
        ["2", "enc.mlp", "MLP", "500", "50.0%"],
    ]
    assert "This profile has no forward_time: rows are ordered by FLOPs." in text
    # the table view's top: the footer names the metric that ranked
    text = small().render(width=W, sort_by="forward_time", top=1, columns=["params"])
    # % metric: the one named, params; largest row at depth >= 1: enc (90 of 100)
    assert names(text) == ["Net", "(1) enc Encoder"]
    assert "Showing 2 of 6 rows (top 1 by Params); the Total row is the whole model." in text
    assert "This profile has no forward_time: rows are ordered by Params." in text
    # the ops view ranks by self values and says so
    text = small().render(width=W, view="ops", sort_by="forward_time", top=2)
    assert text.splitlines()[0].startswith("Modules by Self FLOPs: the work done directly")
    assert [r.split()[0] for r in rows(text)] == ["enc.mlp", "enc.attn"]  # 500, 400 own
    assert "Showing 2 of 6 rows (top 2 by Self FLOPs)." in text
    assert "This profile has no forward_time: rows are ordered by Self FLOPs." in text


def test_absent_sort_and_pct_metric_keep_the_tree_order() -> None:
    text = small().render(width=W, sort_by="forward_time", pct_of="forward_time")
    assert names(text)[:3] == ["Net", "(1) enc Encoder", "(1.1) attn Attention"]  # tree order
    assert "This profile has no forward_time: rows are in tree order for it." in text


def test_one_named_metric_is_the_pct_metric() -> None:
    text = small().render(width=W, columns=["params"])
    # % of params (100 in all): enc 90 -> 90.0%, attn 40.0%, mlp 50.0%, head 8.0%
    assert text.splitlines()[0].split() == ["Module", "Params", "%", "Params"]
    assert rows(text)[1].split() == ["├─", "(1)", "enc", "Encoder", "90", "90.0%"]
    # min_pct takes the same metric: params >= 45% of 100 keeps enc (90) and mlp (50)
    text = small().render(width=W, columns=["params"], min_pct=45)
    assert names(text) == ["Net", "(1) enc Encoder", "(1.2) mlp MLP"]
    assert "Showing 3 of 6 rows (min_pct 45% of Params)" in text
    # a self column and a % column of the same metric are still one metric
    text = small().render(width=W, columns=["params", "self_params"])
    assert text.splitlines()[0].split() == ["Module", "Params", "%", "Params", "Self", "params"]
    # calls is no metric with a % of total: params is still the only one
    text = small().render(width=W, columns=["params", "calls"])
    assert "% Params" in text.splitlines()[0]
    # two metrics: the documented order stands (FLOPs, which is not shown: no % column)
    text = small().render(width=W, columns=["params", "macs"], min_pct=45)
    assert text.splitlines()[0].split() == ["Module", "Params", "MACs"]
    assert "(min_pct 45% of FLOPs)" in text
    # a sort metric given wins over the one named
    text = small().render(width=W, columns=["params"], sort_by="flops")
    assert text.splitlines()[0].split() == ["Module", "Params"]
    # a named metric the profile lacks is no % metric: FLOPs, then
    text = small().render(width=W, columns=["forward_time"], min_pct=45)
    assert "(min_pct 45% of FLOPs)" in text


# ---- any profile, any options: views never fail and never overflow a table's width ----

_TYPES = ("Linear", "ReLU", "Block", "aten::mm")


@st.composite
def profiles(draw: st.DrawFn) -> ls.Profile:
    def tree(depth: int) -> Node:
        kids = [] if depth >= 3 else [tree(depth + 1) for _ in range(draw(st.integers(0, 3)))]
        metrics = {
            key: draw(st.integers(0, 10**9))
            for key in draw(st.sets(st.sampled_from(["flops", "macs", "params"])))
        }
        if draw(st.booleans()):
            metrics["forward_time"] = draw(st.floats(1e-9, 10.0))  # type: ignore[assignment]
        name = draw(st.sampled_from(["0", "1", "layer", "a_long_module_name_" * 2]))
        return node(
            name, draw(st.sampled_from(_TYPES)), *kids, calls=draw(st.integers(0, 3)), **metrics
        )

    root = tree(0)
    seen: set[str] = set()
    for n in root.walk():  # unique names among siblings, as in a real model
        for i, child in enumerate(n.children):
            if child.name in seen:
                child.name = f"{child.name}{i}"
        seen = set()
    return build(root, ran=draw(st.booleans()))


@settings(max_examples=300, deadline=None)
@given(
    prof=profiles(),
    view=st.sampled_from(["table", "tree", "repr", "top", "ops"]),
    width=st.integers(20, 160),
    fold=st.sampled_from([True, False, "all"]),
    sort_by=st.sampled_from([None, "flops", "params", "forward_time", "forward_time_pct"]),
    min_pct=st.sampled_from([None, 0, 1, 50]),
    top=st.sampled_from([None, 1, 3]),
    raw=st.booleans(),
)
@pytest.mark.slow
def test_any_view_of_any_profile(
    prof: ls.Profile,
    view: str,
    width: int,
    fold: bool | str,
    sort_by: str | None,
    min_pct: float | None,
    top: int | None,
    raw: bool,
) -> None:
    text = prof.render(
        view=view, width=width, fold=fold, sort_by=sort_by, min_pct=min_pct, top=top, raw=raw
    )
    assert text.endswith("\n")
    if view != "repr":  # a repr keeps a long hyperparameter whole
        assert max(len(line) for line in text.splitlines()) <= width
