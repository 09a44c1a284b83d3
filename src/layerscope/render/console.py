"""The console view: the (folded) module tree beside a table of the metrics present.

One rich Table whose first column draws the tree, so every tree row lines up with its
numbers; a summary below gives totals, the per-dtype breakdown and notices. Styles are
theme names (``layerscope.*``), never hard-coded colours.
"""

from __future__ import annotations

import io
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text
from rich.theme import Theme

from layerscope.metrics.numerics import describe
from layerscope.profile import ADDITIVE_METRICS, Node, Profile, Signature
from layerscope.render import units

THEME = Theme(
    {
        "layerscope.guide": "dim",
        "layerscope.id": "bold bright_black",
        "layerscope.name": "green",
        "layerscope.type": "cyan",
        "layerscope.repeat": "bold yellow",
        "layerscope.uncalled": "dim italic",
        "layerscope.total": "bold",
        "layerscope.notice": "yellow",
        "layerscope.error": "bold red",
        "layerscope.op": "dim",
        "layerscope.header": "bold",
    }
)


@dataclass(frozen=True)
class Column:
    key: str
    header: str
    fmt: Callable[[float], str]
    #: Where the value lives: ``node.metrics`` (inclusive), ``node.self_metrics`` or
    #: ``node.numerics``.
    source: Literal["metrics", "self_metrics", "numerics"] = "metrics"

    def value(self, node: Node) -> Any:
        return getattr(node, self.source).get(self.key)


#: Metric columns in display order; a column shows when its metric is in the profile.
METRIC_COLUMNS: tuple[Column, ...] = (
    Column("params", "Params", units.count),
    Column("param_bytes", "Param size", units.nbytes),
    Column("buffer_bytes", "Buffers", units.nbytes),
    Column("macs", "MACs", units.si),
    Column("flops", "FLOPs", units.si),
    Column("backward_flops", "Bwd FLOPs", units.si),
    Column("activation_bytes", "Saved", units.nbytes),
    Column("output_bytes", "Out", units.nbytes),
    Column("peak_bytes", "Peak", units.nbytes),
    Column("grad_bytes", "Grads", units.nbytes),
    Column("forward_time", "Fwd time", units.seconds),
    Column("forward_time", "Self fwd", units.seconds, "self_metrics"),
    Column("backward_time", "Bwd time", units.seconds),
    Column("backward_time", "Self bwd", units.seconds, "self_metrics"),
    Column("device_time", "Device", units.seconds),
    Column("absmax", "Abs max", units.magnitude, "numerics"),
    Column("nan", "NaN", units.count, "numerics"),
    Column("inf", "Inf", units.count, "numerics"),
)


@dataclass(frozen=True)
class ViewOptions:
    fold: bool = True
    max_depth: int | None = None
    shapes: bool = True


def build_renderable(profile: Profile, options: ViewOptions | None = None) -> RenderableType:
    """The tree+table and the summary, ready for ``Console.print``."""
    from layerscope.analysis.fold import fold

    options = options or ViewOptions()
    shown = fold(profile) if options.fold else profile
    if not shown.model.get("ran", True):  # structure only: no shapes or calls to show
        options = ViewOptions(fold=options.fold, max_depth=options.max_depth, shapes=False)
    return Group(_TreeTable(shown, options), _summary(shown))


class _TreeTable:
    """The tree+table; lays its columns out for the console width it is given.

    Numbers are never cut. On a narrow console the shape columns give way first, then the
    tree column; their cells end in "…".
    """

    def __init__(self, profile: Profile, options: ViewOptions) -> None:
        self.profile = profile
        self.options = options

    def __rich_console__(self, console: Console, opts: ConsoleOptions) -> RenderResult:
        shown, options = self.profile, self.options
        ran = bool(shown.model.get("ran", True))
        columns = [c for c in METRIC_COLUMNS if _present(shown, c)]
        rows = _tree_rows(shown.root, options.max_depth)
        labels = [_label(n, prefix) for n, prefix in rows]
        numbers = [[_metric(n, c) for c in columns] for n, _ in rows]
        total_row = [
            _metric(shown.root, c) if c.source == "metrics" and c.key in ADDITIVE else ""
            for c in columns
        ]
        inputs = [_shapes(n.inputs) for n, _ in rows]
        outputs = [_shapes(n.outputs) for n, _ in rows]

        partial = set(shown.partial_metrics)
        fixed = [
            max(len(c.header) + (c.key in partial), *(len(r[i]) for r in [*numbers, total_row]))
            for i, c in enumerate(columns)
        ]
        if ran:
            fixed.append(5)
        flexible = [max(len("Module"), *(len(t) for t in labels))]
        if options.shapes:
            flexible.append(max(len("Input shape"), *(len(t) for t in inputs)))
            flexible.append(max(len("Output shape"), *(len(t) for t in outputs)))
        gaps = 3 * (len(fixed) + len(flexible) - 1)  # padding 1+1 and a blank rule
        available = opts.max_width - sum(fixed) - gaps
        if options.shapes and available < 16 + 2 * 12:  # too narrow: drop the shapes
            options = ViewOptions(options.fold, options.max_depth, shapes=False)
            flexible = flexible[:1]
            available += 2 * 3
        widths = _fit(flexible, available)

        table = Table(
            box=box.SIMPLE_HEAD,
            header_style="layerscope.header",
            pad_edge=False,
            show_edge=False,
            collapse_padding=False,
        )
        table.add_column("Module", width=widths[0], no_wrap=True, overflow="ellipsis")
        if options.shapes:
            table.add_column("Input shape", width=widths[1], no_wrap=True, overflow="ellipsis")
            table.add_column("Output shape", width=widths[2], no_wrap=True, overflow="ellipsis")
        for c, w in zip(columns, fixed, strict=False):
            header = c.header + ("*" if c.key in partial else "")
            table.add_column(header, justify="right", no_wrap=True, width=w)
        if ran:
            table.add_column("Calls", justify="right", no_wrap=True, width=5)

        for i, (node, _) in enumerate(rows):
            dim = "" if not ran or any(n.called for n in node.walk()) else "layerscope.uncalled"
            if "::" in node.type:  # an op row of a timing pass (aten::mm, fx::add)
                dim = "layerscope.op"
            cells: list[RenderableType] = [labels[i]]
            if options.shapes:
                cells += [inputs[i], outputs[i]]
            cells += numbers[i]
            if ran:
                cells.append(str(node.calls) if node.called else "-")
            table.add_row(*cells, style=dim)

        total: list[RenderableType] = [Text("Total", style="layerscope.total")]
        if options.shapes:
            total += ["", ""]
        total += total_row
        if ran:
            total.append("")
        table.add_section()
        table.add_row(*total, style="layerscope.total")
        yield table


def _fit(wanted: list[int], available: int) -> list[int]:
    """Shrink the flexible columns to ``available``: shape columns first (to 12), then the
    tree column (to 16), never below those minimums."""
    widths = list(wanted)
    floors = [16] + [12] * (len(widths) - 1)
    for i in [*range(1, len(widths)), 0]:
        excess = sum(widths) - available
        if excess <= 0:
            break
        widths[i] = max(min(floors[i], widths[i]), widths[i] - excess)
    return widths


def render_text(
    profile: Profile, width: int | None = None, options: ViewOptions | None = None
) -> str:
    """Plain text of the console view (what ``print(prof)`` shows)."""
    width = width or shutil.get_terminal_size((120, 40)).columns
    buf = io.StringIO()
    console = Console(
        file=buf, width=width, theme=THEME, color_system=None, force_terminal=False, record=False
    )
    console.print(build_renderable(profile, options))
    return buf.getvalue()


ADDITIVE = frozenset(ADDITIVE_METRICS)


def _present(profile: Profile, column: Column) -> bool:
    """Show a column when measured and not all zero (params always)."""
    if column.source == "numerics":
        return any(column.value(n) for n in profile.root.walk())
    value = profile.root.metrics.get(column.key)
    if column.key.endswith("_time"):  # per-call times: present when measured
        return value is not None
    return value is not None and (value != 0 or column.key == "params")


def _metric(node: Node, column: Column) -> str:
    value = column.value(node)
    if value is None:
        return ""
    return column.fmt(value)


def _shapes(sigs: list[Signature]) -> str:
    if not sigs:
        return ""
    text = units.signature(sigs[0])
    if len(sigs) > 1:
        text += f" (+{len(sigs) - 1} more)"
    return text


def _label(node: Node, prefix: str) -> Text:
    text = Text(prefix, style="layerscope.guide")
    if node.depth == 0:
        text.append(node.type, style="layerscope.type")
        return text
    text.append(f"({node.node_id}) ", style="layerscope.id")
    text.append(node.name, style="layerscope.name")
    if node.type != node.name:  # op rows of a timing pass are named by their op
        text.append(" ")
        text.append(node.type, style="layerscope.type")
    if node.repeat > 1:
        text.append(f" ×{node.repeat}", style="layerscope.repeat")
    return text


def _tree_rows(root: Node, max_depth: int | None) -> list[tuple[Node, str]]:
    """(node, guide prefix) pairs in pre-order, drawing ├─ └─ │ guides."""
    rows: list[tuple[Node, str]] = [(root, "")]

    def visit(node: Node, indent: str) -> None:
        if max_depth is not None and node.depth >= max_depth:
            return
        for i, child in enumerate(node.children):
            last = i == len(node.children) - 1
            rows.append((child, indent + ("└─ " if last else "├─ ")))
            visit(child, indent + ("   " if last else "│  "))

    visit(root, "")
    return rows


def _summary(profile: Profile) -> RenderableType:
    root = profile.root
    m = root.metrics
    lines: list[Text] = []
    if "params" in m:
        frozen = m["params"] - m.get("trainable_params", 0)
        lines.append(
            Text(
                f"Params: {units.count(m['params'])} "
                f"(trainable {units.count(m.get('trainable_params', 0))}, "
                f"frozen {units.count(frozen)}), "
                f"{units.nbytes(m.get('param_bytes', 0))}; "
                f"buffers: {units.count(m.get('buffers', 0))} "
                f"({units.nbytes(m.get('buffer_bytes', 0))})"
            )
        )
    if root.by_dtype:
        parts = []
        for dtype, row in root.by_dtype.items():
            what = [
                f"{units.count(row[k])} {label}"
                for k, label in (("params", "params"), ("buffers", "buffer values"))
                if row[k]
            ]
            size = units.nbytes(row["param_bytes"] + row["buffer_bytes"])
            parts.append(f"{dtype} {' + '.join(what)} ({size})")
        lines.append(Text("By dtype: " + "; ".join(parts)))
    if profile.unsupported_ops:
        ops = sorted(profile.unsupported_ops.items(), key=lambda kv: -int(kv[1]["count"]))
        listed = ", ".join(
            f"{name} ×{e['count']} (in {', '.join(sorted(e['modules']))})" for name, e in ops
        )
        lines.append(
            Text(
                f"Partial {', '.join(profile.partial_metrics)} (marked *): "
                f"no FLOP formula for {listed}. Register one with ls.register_flop_formula.",
                style="layerscope.notice",
            )
        )
    lines.extend(_memory_lines(profile))
    lines.extend(_timing_lines(profile))
    lines.extend(_numerics_lines(profile))
    shared = sorted({s for n in root.walk() for s in n.shared})
    if shared:
        lines.append(Text("Shared tensors, counted once: " + ", ".join(shared)))
    if not profile.model.get("ran", True):
        lines.append(Text("Not run: structure and parameters only (give an input for shapes)."))
    for notice in profile.notices:
        lines.append(Text(f"Note: {notice}", style="layerscope.notice"))
    return Group(*lines)


def _numerics_lines(profile: Profile) -> list[Text]:
    """The NaN/Inf verdict and the range warnings of a numerics check."""
    report = profile.numerics
    if not report:
        return []
    lines: list[Text] = []
    if report.get("skipped"):
        lines.append(Text(f"Numerics not checked: {report['skipped']}.", style="layerscope.notice"))
    event = report.get("origin") or report.get("first_nonfinite")
    if event:
        text = describe(event, origin=report.get("origin") is not None)
        lines.append(Text(text, style="layerscope.error"))
    elif not report.get("skipped"):
        lines.append(Text(f"No NaN/Inf in {report.get('checked_calls', 0)} checked module calls."))
    for flag, what in (
        ("fp16_overflow", "|x| > 65504 (overflows float16)"),
        ("bf16_overflow", "|x| beyond bfloat16's range"),
    ):
        paths = [n.path or "<root>" for n in profile.root.walk() if n.numerics.get(flag)]
        if paths:
            lines.append(Text(f"{what} in: {', '.join(paths)}", style="layerscope.notice"))
    return lines


def _timing_lines(profile: Profile) -> list[Text]:
    """Whole-model latency and throughput of a timing pass, and how it was measured."""
    t = profile.timing
    latency = t.get("latency")
    if not latency:
        return []
    what = "forward + backward" if t.get("backward") else "forward"
    text = (
        f"Latency ({what}): median {units.seconds(latency['median'])}, "
        f"p90 {units.seconds(latency['p90'])}, IQR {units.seconds(latency['iqr'])}"
    )
    if t.get("throughput"):
        text += (
            f"; throughput {t['throughput']:,.1f} inputs/s "
            f"(batch {t['batch_size']}, {t['batch_source']})"
        )
    text += f". Timer {t['timer']}, {t['repeats']} repeats after {t['warmup']} warmup runs."
    return [Text(text)]


def _memory_lines(profile: Profile) -> list[Text]:
    """Whole-model peaks and, when recorded, the training footprint."""
    mem = profile.memory
    if "forward_peak_bytes" not in mem:
        return []
    text = f"Memory ({mem.get('allocator', 'simulated')}): forward peak " + units.nbytes(
        mem["forward_peak_bytes"]
    )
    if "activation_bytes" in mem:
        text += f", saved for backward {units.nbytes(mem['activation_bytes'])}"
    if "backward_peak_bytes" in mem:
        text += f", backward peak {units.nbytes(mem['backward_peak_bytes'])}"
    lines = [Text(text)]
    training = mem.get("training")
    if training:
        parts = ", ".join(
            f"{label} {units.nbytes(training[key])}"
            for key, label in (
                ("param_bytes", "params"),
                ("grad_bytes", "grads"),
                ("optimizer_state_bytes", "optimizer"),
                ("activation_bytes", "activations"),
            )
            if training.get(key)
        )
        lines.append(
            Text(
                f"Training step ({training.get('optimizer', '?')}): {parts}; "
                f"total {units.nbytes(training['total_bytes'])}"
            )
        )
    return lines
