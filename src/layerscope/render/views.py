"""The five views of a Profile: table, tree, repr, top and ops.

``build(profile, options)`` does the width-independent work once (fold, filter, sort,
values, cells) and returns a function of the width that lays the view out as lines
(``render.layout``). Views see only the Profile, fresh or loaded from JSON.
"""

from __future__ import annotations

import itertools
import textwrap
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from rich import box as rich_box
from rich.text import Text

from layerscope.analysis.catalog import Column, Values, column, pct_base
from layerscope.analysis.fold import fold
from layerscope.analysis.transforms import (
    by_type,
    filter_tree,
    matches,
    post_order,
    sort_tree,
    top_k,
)
from layerscope.profile import Node, Number, Profile, Signature
from layerscope.render import config as display_config
from layerscope.render import units
from layerscope.render.layout import (
    Line,
    Table,
    TableColumn,
    TableRow,
    cut_middle,
    fit_table,
    width_of,
    wrap_text,
)
from layerscope.render.options import ViewOptions
from layerscope.render.summary import summary_lines

__all__ = ["build", "table_parts"]

Builder = Callable[[int], list[Line]]

#: Columns shown by default when the profile has them, in this order.
DEFAULT_KEYS: tuple[str, ...] = (
    "params",
    "param_bytes",
    "buffer_bytes",
    "macs",
    "flops",
    "backward_flops",
    "activation_bytes",
    "output_bytes",
    "peak_bytes",
    "grad_bytes",
    "forward_time",
    "self_forward_time",
    "backward_time",
    "self_backward_time",
    "device_time",
    "flops_per_s",
    "absmax",
    "nan",
    "inf",
)

#: What the tree view writes on each label by default (of the columns the profile has).
TREE_KEYS = frozenset(
    {
        "input_shape",
        "output_shape",
        "params",
        "flops",
        "forward_time",
        "backward_time",
        "nan",
        "inf",
    }
)
#: What the repr view writes in each module by default (DeepSpeed's choice, and more).
REPR_KEYS = frozenset(
    {
        "params",
        "macs",
        "flops",
        "backward_flops",
        "activation_bytes",
        "forward_time",
        "backward_time",
        "flops_per_s",
        "nan",
        "inf",
    }
)

_TIMES = ("forward_time", "backward_time", "device_time")

_FORMAT: dict[str, Callable[[float], str]] = {
    "count": units.count,
    "si": units.si,
    "bytes": units.nbytes,
    "seconds": units.seconds,
    "rate": units.rate,
    "pct": units.pct,
    "number": units.magnitude,
}


#: Below this width a view is one line saying so (a table of 10 columns helps nobody).
MIN_WIDTH = 20
#: The tree view draws a folded entry in a box only where this much width is left.
BOX_MIN_WIDTH = 40


def build(profile: Profile, options: ViewOptions) -> Builder:
    """The view ``options.view`` of ``profile``, as a function of the width."""
    ctx = _Context(profile, options)
    view = {
        "table": _table_view,
        "tree": _tree_view,
        "repr": _repr_view,
        "top": _top_view,
        "ops": _ops_view,
    }[options.view](ctx)

    def lay_out(width: int) -> list[Line]:
        if width < MIN_WIDTH:
            text = (
                f"({width} columns is too narrow for layerscope's views: give a width of at "
                f"least {MIN_WIDTH})"
            )
            return [[(text, "layerscope.notice")]]
        return view(width)

    return lay_out


class _Context:
    """What every view needs: values, the resolved columns, sort and % metrics, config."""

    def __init__(self, profile: Profile, options: ViewOptions) -> None:
        self.profile = profile
        self.options = options
        # a flat list of self values shows op rows apart from their module's self time
        self.values = Values(profile, ops_apart=options.view == "ops")
        self.config = display_config.current()
        self.ran = bool(profile.model.get("ran", True))
        root = profile.root
        partial = set(profile.partial_metrics)
        self.partial = partial
        # % of what: pct_of, else the sort metric, else FLOPs, else params
        base = None
        for candidate in (options.pct_of, options.sort_by):
            if candidate is not None and pct_base(candidate) is not None:
                base = pct_base(candidate)
                break
        if base is None:
            base = "flops" if root.metrics.get("flops") else "params"
        self.pct_base: str = base
        self.sort_key: str = options.sort_by or base
        self.columns = self._columns()
        self._levels: dict[int, display_config.LevelStyle] = {}
        self._ran_inside: dict[Node, bool] = {}

    def level(self, depth: int) -> display_config.LevelStyle:
        style = self._levels.get(depth)
        if style is None:
            style = self._levels[depth] = self.config.level(depth)
        return style

    # ---- columns -----------------------------------------------------------------
    def _present(self, key: str) -> bool:
        root = self.profile.root
        if key in ("absmax", "nan", "inf"):
            return any(n.numerics.get(key) for n in root.walk())
        if key == "flops_per_s":
            return bool(root.metrics.get("flops")) and "forward_time" in root.metrics
        base = key.removeprefix("self_")
        value = root.metrics.get(base)
        if base in _TIMES:
            return value is not None
        return value is not None and (value != 0 or base == "params")

    def _columns(self) -> list[str]:
        o = self.options
        pct_col = f"{self.pct_base}_pct"
        if o.columns is not None:
            cols = list(o.columns)
            if o.pct and self.pct_base in cols and pct_col not in cols:
                cols.insert(cols.index(self.pct_base) + 1, pct_col)
            return cols
        cols = []
        if o.shapes and self.ran and any(n.inputs or n.outputs for n in self.profile.root.walk()):
            cols += ["input_shape", "output_shape"]
        for key in DEFAULT_KEYS:
            if self._present(key):
                cols.append(key)
                if key == self.pct_base and o.pct:
                    cols.append(pct_col)
        if o.pct and pct_col not in cols and self._present(self.pct_base):
            cols.append(pct_col)
        if self.ran:
            cols.append("calls")
        return cols

    def label_columns(self, defaults: frozenset[str]) -> list[str]:
        """Columns for the label-based views: the user's, else the defaults the profile
        has, the % metric always included."""
        if self.options.columns is not None:
            return self.columns
        base = self.pct_base
        return [
            k
            for k in self.columns
            if k in defaults or k == base or k == f"{base}_pct" or k == "calls"
        ]

    def user_named(self, key: str) -> bool:
        return self.options.columns is not None and key in self.options.columns

    # ---- values ------------------------------------------------------------------
    def value(self, node: Node, key: str) -> Number | None:
        return self.values.get(node, key)

    def cell(self, node: Node, key: str) -> str:
        if key == "input_shape":
            return _shapes(node.inputs)
        if key == "output_shape":
            return _shapes(node.outputs)
        if key == "calls" and self.ran and not node.calls:
            return "-"
        value = self.values.get(node, key)
        if value is None:
            return ""
        return self.format(key, value)

    def format(self, key: str, value: Number) -> str:
        if self.options.raw:
            return units.raw(value)
        if isinstance(value, float) and value != value:  # NaN statistics
            return "nan"
        return _FORMAT[column(key).kind](value)

    def header(self, key: str) -> str:
        style = self.config.column(key)
        header = style.header or column(key).header
        base = key.removeprefix("self_").removesuffix("_pct")
        if base in self.partial and not key.endswith("_pct"):
            header += "*"
        return header

    def table_column(self, key: str, **kw: Any) -> TableColumn:
        col: Column = column(key)
        style = self.config.column(key)
        text = col.kind == "text"
        return TableColumn(
            key=key,
            header=kw.pop("header", None) or self.header(key),
            justify=style.justify or ("left" if text else "right"),
            priority=None if self.user_named(key) else col.priority,
            style=style.style or ("layerscope.pct" if col.kind == "pct" else ""),
            overflow=style.overflow,
            text=text,
            **kw,
        )

    def text_column(self, key: str, header: str, **kw: Any) -> TableColumn:
        style = self.config.column(key)
        return TableColumn(
            key=key,
            header=style.header or header,
            justify=style.justify or kw.pop("justify", "left"),
            priority=kw.pop("priority", None),
            style=style.style,
            overflow=style.overflow,
            text=True,
            **kw,
        )

    def table_style(self, columns: list[TableColumn], rows: list[TableRow]) -> Table:
        t = self.config.table
        return Table(
            columns=columns,
            rows=rows,
            box=t.box,
            show_edge=t.show_edge,
            show_header=t.show_header,
            header_style=t.header_style,
            border_style=t.border_style,
            row_styles=t.row_styles,
        )

    # ---- rows shared by the tree views ---------------------------------------------
    def shown_tree(self) -> tuple[Profile, int]:
        """The (folded) tree after filters and sort, and how many rows it hides."""
        o = self.options
        shown = fold(self.profile, o.fold) if o.fold else self.profile
        before = sum(1 for _ in shown.root.walk())
        select = self.selector(shown.root.walk())
        shown = filter_tree(
            shown,
            max_depth=o.max_depth,
            exclude=o.exclude,
            hide_not_called=not o.show_not_called and self.ran,
            select=select,
        )
        if o.sort_by is not None:
            key = self.sort_key
            shown = sort_tree(shown, lambda n: self.values.get(n, key))
        return shown, before - sum(1 for _ in shown.root.walk())

    def selector(self, nodes: Iterable[Node]) -> Callable[[Node], bool] | None:
        """What include, min_pct and top keep in a tree view (None: everything)."""
        o = self.options
        if not (o.include or o.min_pct is not None or o.top is not None):
            return None
        pct_key = f"{self.pct_base}_pct"

        def passes(node: Node) -> bool:
            if o.include and not matches(node, o.include):
                return False
            if o.min_pct is not None:
                share = self.values.get(node, pct_key)
                if share is None or share < o.min_pct:
                    return False
            return True

        if o.top is None:
            return passes
        sort_key = self.sort_key
        candidates = [
            n
            for n in nodes
            if n.depth > 0
            and (o.max_depth is None or n.depth <= o.max_depth)
            and not (o.exclude and _excluded(n, o.exclude))
            and passes(n)
        ]
        chosen = set(top_k(candidates, lambda n: self.values.get(n, sort_key), o.top))
        return chosen.__contains__

    def footer(
        self,
        hidden_rows: int,
        total_rows: int,
        dropped: Sequence[str],
        width: int,
        total_row: bool = False,
    ) -> list[Line]:
        lines: list[Line] = []
        o = self.options
        if hidden_rows:
            why = []
            if o.max_depth is not None:
                why.append(f"max_depth {o.max_depth}")
            if o.min_pct is not None:
                why.append(f"min_pct {o.min_pct:g}% of {column(self.pct_base).header}")
            if o.include:
                why.append("include " + ", ".join(o.include))
            if o.exclude:
                why.append("exclude " + ", ".join(o.exclude))
            if o.top is not None:
                why.append(f"top {o.top} by {column(self.sort_key).header}")
            if not o.show_not_called:
                why.append("modules that did not run")
            shown = total_rows - hidden_rows
            text = f"Showing {shown} of {total_rows} rows ({'; '.join(why) or 'filtered'})"
            if total_row:
                text += "; the Total row is the whole model"
            lines += wrap_text(text + ".", "layerscope.hidden", width)
        if dropped:
            lines += wrap_text(
                f"Hidden to fit {width} columns: {', '.join(dropped)} "
                "(widen with --width / width=, or choose with --columns / columns=).",
                "layerscope.hidden",
                width,
            )
        for key in dict.fromkeys(k for k in (o.sort_by, o.pct_of) if k is not None):
            if self.values.get(self.profile.root, key) is None:
                lines += wrap_text(
                    f"This profile has no {key}: rows are in tree order for it.",
                    "layerscope.notice",
                    width,
                )
        for text, style in summary_lines(self.profile):
            lines += wrap_text(text, style, width)
        return lines

    def framed(self, lines: list[Line], width: int) -> list[Line]:
        """A table's lines under the configured title and above its caption."""
        t = self.config.table
        top = _markup_lines(t.title, width) if t.title else []
        bottom = _markup_lines(t.caption, width) if t.caption else []
        return top + lines + bottom

    # ---- labels ------------------------------------------------------------------
    def label(self, node: Node, repeat_mark: bool = True) -> Line:
        level = self.level(node.depth)
        template = _template(level.label)
        subs = {
            "<node_id>": node.node_id,
            "<name>": node.name,
            "<type>": "" if node.type == node.name and node.depth else node.type,
            "<path>": node.path or "<root>",
            "<depth>": str(node.depth),
            "<repeat_time>": str(node.repeat),
        }
        out: Line = []
        for text, style in template:
            if "<" in text:
                for key, value in subs.items():
                    text = text.replace(key, value)
            style = f"{level.style}|{style}" if level.style and style else (level.style or style)
            out.append((text, style))
        while out and not out[-1][0].strip():  # an empty <type> leaves a trailing space
            out.pop()
        if out:
            out[-1] = (out[-1][0].rstrip(), out[-1][1])
        if repeat_mark and node.repeat > 1 and "<repeat_time>" not in level.label:
            out.append((f" ×{node.repeat}", "layerscope.repeat"))
        return out

    def row_style(self, node: Node) -> str:
        if "::" in node.type:  # an op row of a timing pass (aten::mm, fx::add)
            return "layerscope.op"
        if self.ran and not self.ran_inside(node):
            return "layerscope.uncalled"
        return ""

    def ran_inside(self, node: Node) -> bool:
        """Whether the node or anything inside it was called (one pass per tree)."""
        known = self._ran_inside.get(node)
        if known is None:
            root = node
            while root.parent is not None:
                root = root.parent
            for n in post_order(root):
                self._ran_inside[n] = n.calls > 0 or any(self._ran_inside[c] for c in n.children)
            known = self._ran_inside[node]
        return known

    def metric_parts(self, node: Node, keys: Sequence[str], zeros: bool = True) -> list[str]:
        """``Header value (pct)`` for each metric key, for the tree and repr views."""
        parts = []
        pct_keys = {k for k in keys if k.endswith("_pct")}
        for key in keys:
            if key.endswith("_pct") and key.removesuffix("_pct") in keys:
                continue
            text = self.cell(node, key)
            if not text or text == "-" or (not zeros and not self.value(node, key)):
                continue
            if key == "calls":
                if node.calls == 1:
                    continue
                parts.append(f"{node.calls} calls")
                continue
            part = f"{self.header(key)} {text}"
            pct = f"{key}_pct"
            if pct in pct_keys:
                share = self.cell(node, pct)
                if share:
                    part += f" ({share})"
            parts.append(part)
        return parts


# ---- table ---------------------------------------------------------------------------


def _table_view(ctx: _Context) -> Builder:
    table, hidden, total_rows = _table(ctx)

    def lay_out(width: int) -> list[Line]:
        fitted = fit_table(table, width)
        return ctx.framed(fitted.lines, width) + ctx.footer(
            hidden, total_rows, fitted.dropped, width, total_row=True
        )

    return lay_out


def table_parts(profile: Profile, options: ViewOptions) -> tuple[Table, list[Line]]:
    """The table view's cells (no width applied) and its footer, for other formats."""
    ctx = _Context(profile, options)
    table, hidden, total_rows = _table(ctx)
    return table, ctx.footer(hidden, total_rows, [], 10**6, total_row=True)


def _table(ctx: _Context) -> tuple[Table, int, int]:
    shown, hidden = ctx.shown_tree()
    total_rows = hidden + sum(1 for _ in shown.root.walk())
    keys = ctx.columns
    rows_nodes = _tree_rows(ctx, shown.root)
    columns = [
        TableColumn(
            "module",
            ctx.config.column("module").header or "Module",
            justify="left",
            priority=None,
            label=True,
            shorten=shorten_label,
            overflow=ctx.config.column("module").overflow,
            text=True,
        )
    ]
    columns += [ctx.table_column(k) for k in keys]
    rows = []
    for node, prefix, guide_style in rows_nodes:
        label = ctx.label(node)
        cells: list[Line] = [[(prefix, guide_style), *label] if prefix else label]
        cells += [[(ctx.cell(node, k), "")] for k in keys]
        rows.append(TableRow(cells, ctx.row_style(node), prefix=1 if prefix else 0))
    total_cells: list[Line] = [[("Total", "layerscope.total")]]
    for k in keys:
        additive = column(k).additive or k.endswith("_pct") or k.endswith("_total")
        value = ctx.cell(ctx.profile.root, k) if additive and not k.startswith("self_") else ""
        total_cells.append([(value, "")])
    table = ctx.table_style(columns, rows)
    table.total = TableRow(total_cells, "layerscope.total")
    return table, hidden, total_rows


def _tree_rows(ctx: _Context, root: Node) -> list[tuple[Node, str, str]]:
    """(node, guide prefix, guide style) in pre-order, honouring the levels' hide and
    expanded settings; iterative, so any depth works."""
    levels = ctx.level
    out: list[tuple[Node, str, str]] = []

    def shown_children(node: Node) -> list[Node]:
        if not levels(node.depth).expanded:
            return []
        kids: list[Node] = []
        stack = list(reversed(node.children))
        while stack:
            child = stack.pop()
            if levels(child.depth).hide:
                stack.extend(reversed(child.children))
            else:
                kids.append(child)
        return kids

    tops = [root] if not levels(0).hide else shown_children(root)
    stack: list[tuple[Node, str, str]] = [(n, "", "") for n in reversed(tops)]
    while stack:
        node, prefix, indent = stack.pop()
        out.append((node, prefix, levels(node.depth).guide_style))
        kids = shown_children(node)
        for i in range(len(kids) - 1, -1, -1):
            last = i == len(kids) - 1
            child_prefix = indent + ("└─ " if last else "├─ ")
            child_indent = indent + ("   " if last else "│  ")
            stack.append((kids[i], child_prefix, child_indent))
    return out


def shorten_label(line: Line, width: int) -> Line:
    """Shorten a ``(id) name Type`` label, each part cut in the middle: the node id first
    (the guides show the structure), then the type, then the name; then anything."""
    over = width_of(line) - width
    for tag, least in (("layerscope.id", 4), ("layerscope.type", 6), ("layerscope.name", 6)):
        if over <= 0:
            return line
        out: Line = []
        for text, style in line:
            if over > 0 and tag in style.split("|") and len(text) > least:
                keep = max(len(text) - over, least)
                over -= len(text) - keep
                out += cut_middle([(text, style)], keep)
            else:
                out.append((text, style))
        line = out
    return line if over <= 0 else cut_middle(line, width)


# ---- tree ----------------------------------------------------------------------------


def _tree_view(ctx: _Context) -> Builder:
    shown, hidden = ctx.shown_tree()
    total_rows = hidden + sum(1 for _ in shown.root.walk())
    keys = ctx.label_columns(TREE_KEYS)
    shapes = [k for k in keys if k in ("input_shape", "output_shape")]
    metric_keys = [k for k in keys if k not in shapes]
    block = ctx.config.repeat_block
    levels = ctx.level
    # width-independent parts: label and metric text per node
    labels: dict[Node, Line] = {}
    parts: dict[Node, list[str]] = {}
    for node in shown.root.walk():
        labels[node] = ctx.label(node, repeat_mark=False)
        p = []
        if shapes and (node.inputs or node.outputs):
            p.append(f"{_shapes(node.inputs)} → {_shapes(node.outputs)}")
        p += ctx.metric_parts(node, metric_keys, zeros=False)
        parts[node] = p

    def node_lines(node: Node, width: int) -> list[Line]:
        """The node's label (wrapped with its metrics) and its subtree, no guide."""
        # a folded entry is drawn in a box, unless the box would leave too little room
        boxed = block.show and node.repeat > 1 and node.depth > 0 and width >= BOX_MIN_WIDTH
        if boxed:
            width -= 2 + 2 * block.padding[1]
        style = ctx.row_style(node)
        kids = node.children if levels(node.depth).expanded else []
        guide = levels(node.depth + 1).guide_style
        # metrics follow the label; continuation lines sit on the children's guide
        more: Line = [("│   " if kids else "    ", guide)]
        label = labels[node]
        if node.repeat > 1 and not boxed and "<repeat_time>" not in levels(node.depth).label:
            label = [*label, (f" ×{node.repeat}", "layerscope.repeat")]
        if width_of(label) > width:  # a label is shortened in its middle, as in the table
            label = shorten_label(label, max(width, 4))
        own: list[Line] = [list(label)]
        for part in parts[node]:
            if width_of(own[-1]) + 2 + len(part) <= width:
                own[-1].append(("  " + part, style))
                continue
            room = max(width - 4, 4)
            for chunk in textwrap.wrap(part, room, break_on_hyphens=False):  # never cut
                own.append([*more, (chunk, style)])
        kid_lines: list[Line] = []
        for i, child in enumerate(kids):
            last = i == len(kids) - 1
            sub = node_lines(child, width - 3)
            first, rest = ("└─ ", "   ") if last else ("├─ ", "│  ")
            kid_lines.append([(first, guide), *sub[0]])
            kid_lines += [[(rest, guide), *line] for line in sub[1:]]
        if style:
            own = [
                [(t, f"{style}|{s}" if s and s != style else style) for t, s in line]
                for line in own
            ]
        lines = own + kid_lines
        return _boxed(ctx, node, lines) if boxed else lines

    def lay_out(width: int) -> list[Line]:
        lines = node_lines(shown.root, width)
        return lines + ctx.footer(hidden, total_rows, [], width)

    return lay_out


def _boxed(ctx: _Context, node: Node, lines: list[Line]) -> list[Line]:
    """A folded entry's lines inside the repeat block's box, its title on the top edge."""
    block = ctx.config.repeat_block
    b = getattr(rich_box, block.box)
    vpad, hpad = block.padding
    inner = max([width_of(line) for line in lines] + [0])
    title = _template(block.title)
    subs = {
        "<repeat_time>": str(node.repeat),
        "<name>": node.name,
        "<type>": node.type,
        "<path>": node.path,
        "<node_id>": node.node_id,
        "<depth>": str(node.depth),
    }
    title_line: Line = []
    for text, style in title:
        for key, value in subs.items():
            text = text.replace(key, value)
        title_line.append((text, style))
    span = inner + 2 * hpad
    tw = width_of(title_line)
    border = block.border_style
    if tw + 4 <= span:
        top: Line = [
            (b.top_left + b.top + " ", border),
            *title_line,
            (" " + b.top * (span - tw - 3) + b.top_right, border),
        ]
    else:
        top = [(b.top_left + b.top * span + b.top_right, border)]
    out = [top]
    blank: Line = [(b.mid_left + " " * span + b.mid_right, border)]
    out += [blank] * vpad
    for line in lines:
        gap = inner - width_of(line)
        out.append(
            [(b.mid_left + " " * hpad, border), *line, (" " * (gap + hpad) + b.mid_right, border)]
        )
    out += [blank] * vpad
    out.append([(b.bottom_left + b.bottom * span + b.bottom_right, border)])
    return out


# ---- repr ----------------------------------------------------------------------------


def _repr_view(ctx: _Context) -> Builder:
    shown, hidden = ctx.shown_tree()
    total_rows = hidden + sum(1 for _ in shown.root.walk())
    metric_keys = ctx.label_columns(REPR_KEYS)

    def lay_out(width: int) -> list[Line]:
        lines: list[Line] = []
        stack: list[tuple[Node, int, bool]] = [(shown.root, 0, False)]
        while stack:
            node, indent, closing = stack.pop()
            pad = "  " * indent
            if closing:
                lines.append([(pad + ")", "")])
                continue
            name = "" if node.depth == 0 else f"({node.name}): "
            if node.repeat > 1:
                name += f"{node.repeat} x "
            extra = _split_args(_extra_repr(node))
            parts = ctx.metric_parts(node, metric_keys)
            style = ctx.row_style(node)
            head: Line = [(pad, ""), (name, "layerscope.name"), (node.type, "layerscope.type")]
            if node.children:
                lines.append([*head, ("(", "")])
                lines += _wrapped_parts([*parts, *extra], pad + "  ", width, style)
                stack.append((node, indent, True))
                for child in reversed(node.children):
                    stack.append((child, indent + 1, False))
            else:
                lines += _inline_parts(head, [*parts, *extra], pad + "    ", width, style)
        return lines + ctx.footer(hidden, total_rows, [], width)

    return lay_out


def _extra_repr(node: Node) -> str:
    """The hyperparameters of ``Type(hyperparameters)`` in the node's one-line repr."""
    text = node.repr
    if text.startswith(node.type + "(") and text.endswith(")"):
        return text[len(node.type) + 1 : -1]
    return ""


def _split_args(text: str) -> list[str]:
    """``a=1, b=(2, 3)`` -> ``["a=1", "b=(2, 3)"]``: split at top-level commas."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    if tail:
        parts.append(tail)
    return [p for p in parts if p]


def _wrapped_parts(parts: list[str], indent: str, width: int, style: str) -> list[Line]:
    """Comma-separated parts on lines of at most ``width`` (a part is never cut)."""
    lines: list[Line] = []
    current = ""
    for i, part in enumerate(parts):
        piece = part + ("," if i < len(parts) - 1 else "")
        if current and len(indent) + len(current) + 1 + len(piece) > width:
            lines.append([(indent + current, style)])
            current = piece
        else:
            current = f"{current} {piece}" if current else piece
    if current:
        lines.append([(indent + current, style)])
    return lines


def _inline_parts(head: Line, parts: list[str], indent: str, width: int, style: str) -> list[Line]:
    """``head(part, part, ...)`` on one line if it fits, else continued below ``indent``."""
    one = ", ".join(parts)
    if width_of(head) + len(one) + 2 <= width:
        return [[*head, ("(" + one + ")", style)]]
    lines: list[Line] = [[*head, ("(", "")]]
    wrapped = _wrapped_parts(parts, indent, width - 1, style)
    if wrapped:
        last = wrapped[-1]
        wrapped[-1] = [*last, (")", "")]
        lines += wrapped
    else:
        lines[0].append((")", ""))
    return lines


# ---- top and ops: flat lists -------------------------------------------------------------


def _flat_nodes(ctx: _Context) -> list[Node]:
    """Every module of the unfolded profile a flat view may list (root included),
    after max_depth, exclude and, when asked, hiding modules that did not run."""
    o = ctx.options
    shown = filter_tree(
        ctx.profile,
        max_depth=o.max_depth,
        exclude=o.exclude,
        hide_not_called=not o.show_not_called and ctx.ran,
    )
    return list(shown.root.walk())


def _flat_columns(ctx: _Context, keys: Sequence[str], own: bool) -> list[str]:
    """The columns of a flat view: no shapes; with ``own``, self values (a key and its
    self form become one column)."""
    out = []
    for key in keys:
        if key in ("input_shape", "output_shape"):
            continue
        key = _own(key) if own else key
        if key not in out:
            out.append(key)
    return out


def _top_view(ctx: _Context) -> Builder:
    o = ctx.options
    k = o.top or 5
    sort_key = ctx.sort_key
    nodes = [n for n in _flat_nodes(ctx) if n.depth > 0]
    if o.include:
        nodes = [n for n in nodes if matches(n, o.include)]
    keys = _flat_columns(ctx, ctx.columns, own=False)
    if o.by_type:  # summed rows: times as totals
        keys = list(dict.fromkeys(_total_time(c) for c in keys))
        sort_key = _total_time(sort_key)
    depths = sorted({n.depth for n in nodes})
    rows: list[TableRow] = []
    sections: set[int] = set()
    pct_key = f"{ctx.pct_base}_pct"
    for depth in depths:
        at_depth = [n for n in nodes if n.depth == depth]
        if o.by_type:
            at_depth = by_type(at_depth)
        if o.min_pct is not None:
            at_depth = [n for n in at_depth if (ctx.value(n, pct_key) or 0) >= o.min_pct]
        for rank, node in enumerate(top_k(at_depth, lambda n: ctx.value(n, sort_key), k)):
            cells: list[Line] = [[(str(depth) if rank == 0 else "", "")]]
            if o.by_type:
                cells += [[(node.type, "layerscope.type")], [(str(node.repeat), "")]]
            else:
                cells += [[(node.path, "layerscope.name")], [(node.type, "layerscope.type")]]
            cells += [[(ctx.cell(node, c), "")] for c in keys]
            rows.append(TableRow(cells, ctx.row_style(node) if not o.by_type else ""))
        if rows:
            sections.add(len(rows) - 1)
    columns = [ctx.text_column("depth", "Depth", justify="right")]
    if o.by_type:
        columns += [
            ctx.text_column("type", "Type", label=True),
            TableColumn("modules", "Modules", priority=85),
        ]
    else:
        columns += [
            ctx.text_column("module", "Module", label=True),
            ctx.text_column("type", "Type", priority=50),
        ]
    columns += [ctx.table_column(c) for c in keys]
    columns[0].justify = "right"
    table = ctx.table_style(columns, rows)
    table.sections = sections
    what = "module types" if o.by_type else "modules"
    title = f"Top {k} {what} by {ctx.header(sort_key)} at each depth"

    def lay_out(width: int) -> list[Line]:
        fitted = fit_table(table, width)
        return (
            wrap_text(title, "layerscope.header", width)
            + ctx.framed(fitted.lines, width)
            + ctx.footer(0, 0, fitted.dropped, width)
        )

    return lay_out


def _ops_view(ctx: _Context) -> Builder:
    o = ctx.options
    nodes = _flat_nodes(ctx)
    total_rows = len(nodes)
    keys = _flat_columns(ctx, ctx.columns, own=True)
    sort_key = _own(ctx.sort_key)
    if o.by_type:
        nodes = by_type(nodes)
        total_rows = len(nodes)
    if o.include:
        nodes = [n for n in nodes if matches(n, o.include)]
    if o.min_pct is not None:
        pct_key = f"self_{ctx.pct_base}_pct"
        nodes = [n for n in nodes if (ctx.value(n, pct_key) or 0) >= o.min_pct]
    nodes = top_k(nodes, lambda n: ctx.value(n, sort_key), o.top)
    rows: list[TableRow] = []
    for node in nodes:
        if o.by_type:
            cells: list[Line] = [[(node.type, "layerscope.type")], [(str(node.repeat), "")]]
        else:
            cells = [[(node.path or "<root>", "layerscope.name")], [(node.type, "layerscope.type")]]
        cells += [[(ctx.cell(node, c), "")] for c in keys]
        rows.append(TableRow(cells, "" if o.by_type else ctx.row_style(node)))
    if o.by_type:
        columns = [
            ctx.text_column("type", "Type", label=True),
            TableColumn("modules", "Modules", priority=85),
        ]
    else:
        columns = [
            ctx.text_column("module", "Module", label=True),
            ctx.text_column("type", "Type", priority=50),
        ]
    columns += [ctx.table_column(c) for c in keys]
    table = ctx.table_style(columns, rows)
    what = "Module types" if o.by_type else "Modules"
    title = (
        f"{what} by {ctx.header(sort_key)}: the work done directly in each module, "
        "so the % column adds up to 100%"
    )

    def lay_out(width: int) -> list[Line]:
        fitted = fit_table(table, width)
        hidden = total_rows - len(rows)
        return (
            wrap_text(title, "layerscope.header", width)
            + ctx.framed(fitted.lines, width)
            + ctx.footer(hidden, total_rows, fitted.dropped, width)
        )

    return lay_out


# ---- helpers -------------------------------------------------------------------------


def _own(key: str) -> str:
    """The self form of a column key, for flat views (times as per-call × calls)."""
    if key.startswith("self_") or key == "calls":
        return _total_time(key)
    base = key.removesuffix("_pct")
    if key.endswith("_pct"):
        return f"self_{base}_pct" if _exists(f"self_{base}_pct") else key
    if base in _TIMES:
        return f"self_{base}_total"
    return f"self_{key}" if column(key).additive else key


def _total_time(key: str) -> str:
    """Per-call time keys as totals (aggregated rows have no per-call time)."""
    base = key.removeprefix("self_")
    if base in _TIMES:
        return f"{key}_total"
    return key


def _exists(key: str) -> bool:
    try:
        column(key)
    except KeyError:
        return False
    return True


def _excluded(node: Node, patterns: Sequence[str]) -> bool:
    up: Node | None = node
    while up is not None:
        if matches(up, patterns):
            return True
        up = up.parent
    return False


_TEMPLATES: dict[str, tuple[tuple[str, str], ...]] = {}


def _markup_lines(markup: str, width: int) -> list[Line]:
    """A title or caption in rich markup, wrapped to the width."""
    pieces = _template(markup)
    text = "".join(t for t, _ in pieces)
    style = pieces[0][1] if len(pieces) == 1 else ""
    return wrap_text(text, style, width, "")


def _template(markup: str) -> tuple[tuple[str, str], ...]:
    """A label template's rich markup parsed once into (text, style) pieces."""
    cached = _TEMPLATES.get(markup)
    if cached is None:
        text = Text.from_markup(markup)
        plain = text.plain
        cuts = sorted({0, len(plain), *(s.start for s in text.spans), *(s.end for s in text.spans)})
        pieces = []
        for lo, hi in itertools.pairwise(cuts):
            names = [str(s.style) for s in text.spans if s.start <= lo and s.end >= hi]
            pieces.append((plain[lo:hi], "|".join(names)))
        cached = tuple(p for p in pieces if p[0])
        _TEMPLATES[markup] = cached
    return cached


_SHAPES: dict[tuple[Signature, int], str] = {}


def _shapes(sigs: list[Signature]) -> str:
    """The first call's tensor shapes, and how many other signatures there were."""
    if not sigs:
        return ""
    key = (sigs[0], len(sigs))
    text = _SHAPES.get(key)
    if text is None:
        text = units.signature(sigs[0])
        if len(sigs) > 1:
            text += f" (+{len(sigs) - 1} more)"
        if len(_SHAPES) > 4096:
            _SHAPES.clear()
        _SHAPES[key] = text
    return text
