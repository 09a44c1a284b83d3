"""The tree views: ``table`` (tree column beside metric columns and a Total row),
``tree`` (metrics on each label, folded entries in boxes) and ``repr`` (the model's repr
annotated, DeepSpeed style)."""

from __future__ import annotations

from rich import box as rich_box

import layerscope.metricspec as ms
from layerscope.analysis.catalog import column
from layerscope.profile import Node, Profile
from layerscope.render.context import Builder, ViewContext, shapes_text, template
from layerscope.render.layout import (
    NODE_IDS,
    Line,
    Table,
    TableColumn,
    TableRow,
    cut_middle,
    fit_table,
    width_of,
)
from layerscope.render.options import ViewOptions
from layerscope.render.wrap import wrap_words

__all__ = [
    "drawn_children",
    "repr_view",
    "shorten_label",
    "table_parts",
    "table_view",
    "tree_table",
    "tree_view",
    "without_ids",
]

#: What the tree view writes on each label by default (of the columns the profile has).
TREE_KEYS = frozenset(
    {
        "input_shape",
        "output_shape",
        ms.PARAMS,
        ms.FLOPS,
        ms.FORWARD_TIME,
        ms.BACKWARD_TIME,
        "nan",
        "inf",
    }
)
#: What the repr view writes in each module by default (DeepSpeed's choice, and more).
REPR_KEYS = frozenset(
    {
        ms.PARAMS,
        ms.MACS,
        ms.FLOPS,
        ms.BACKWARD_FLOPS,
        ms.ACTIVATION_BYTES,
        ms.FORWARD_TIME,
        ms.BACKWARD_TIME,
        "flops_per_s",
        "nan",
        "inf",
    }
)

#: The tree view draws a folded entry in a box only where this much width is left.
BOX_MIN_WIDTH = 40

# ---- table ---------------------------------------------------------------------------


def table_view(ctx: ViewContext) -> Builder:
    table, hidden, total_rows = tree_table(ctx)

    def lay_out(width: int) -> list[Line]:
        fitted = fit_table(table, width)
        return ctx.framed(fitted.lines, width) + ctx.footer(
            fitted.rows_hidden(hidden), total_rows, fitted.dropped, width, total_row=True
        )

    return lay_out


def table_parts(profile: Profile, options: ViewOptions) -> tuple[Table, list[Line]]:
    """The table view's cells (no width applied) and its footer, for other formats."""
    ctx = ViewContext(profile, options)
    table, hidden, total_rows = tree_table(ctx)
    return table, ctx.footer(hidden, total_rows, [], 10**6, total_row=True)


def tree_table(ctx: ViewContext) -> tuple[Table, int, int]:
    """The table view's table (a Total row below), rows hidden, rows before hiding."""
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
        bare = without_ids(label)
        cells: list[Line] = [[(prefix, guide_style), *label] if prefix else label]
        cells += [[(ctx.cell(node, k), "")] for k in keys]
        no_ids = None if bare is None else [(prefix, guide_style), *bare] if prefix else bare
        rows.append(TableRow(cells, ctx.row_style(node), prefix=1 if prefix else 0, no_ids=no_ids))
    total_cells: list[Line] = [[("Total", "layerscope.total")]]
    for k in keys:
        additive = column(k).additive or k.endswith("_pct") or k.endswith("_total")
        value = ctx.cell(ctx.profile.root, k) if additive and not k.startswith("self_") else ""
        total_cells.append([(value, "")])
    table = ctx.table_style(columns, rows)
    table.total = TableRow(total_cells, "layerscope.total")
    return table, hidden, total_rows


def _tree_rows(ctx: ViewContext, root: Node) -> list[tuple[Node, str, str]]:
    """(node, guide prefix, guide style) in pre-order, honouring the levels' hide and
    expanded settings; iterative, so any depth works."""
    levels = ctx.level
    out: list[tuple[Node, str, str]] = []

    def shown_children(node: Node) -> list[Node]:
        return drawn_children(ctx, node)

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


def without_ids(label: Line) -> Line | None:
    """A label without its node id (the ``layerscope.id`` pieces and the blank after
    them); None when it has none."""
    out: Line = []
    found = strip = False
    for text, style in label:
        if "layerscope.id" in style.split("|"):
            found = strip = True
            continue
        if strip:
            text = text.lstrip()
            if not text:
                continue
            strip = False
        out.append((text, style))
    return out if found else None


def drawn_children(ctx: ViewContext, node: Node) -> list[Node]:
    """The children a tree draws under ``node``: none where its level is not expanded; a
    child on a hidden level (``levels.N.hide``) gives way to its own drawn children."""
    levels = ctx.level
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


def tree_view(ctx: ViewContext) -> Builder:
    shown, hidden = ctx.shown_tree()
    total_rows = hidden + sum(1 for _ in shown.root.walk())
    keys = ctx.label_columns(TREE_KEYS)
    shapes = [k for k in keys if k in ("input_shape", "output_shape")]
    metric_keys = [k for k in keys if k not in shapes]
    block = ctx.config.repeat_block
    levels = ctx.level
    # width-independent parts: label and metric text per node
    labels: dict[Node, Line] = {}
    bare: dict[Node, Line] = {}  # the labels without node ids, where they have one
    parts: dict[Node, list[str]] = {}
    for node in shown.root.walk():
        labels[node] = ctx.label(node, repeat_mark=False)
        no_ids = without_ids(labels[node])
        if no_ids is not None:
            bare[node] = no_ids
        p = []
        if shapes and (node.inputs or node.outputs):
            p.append(f"{shapes_text(node.inputs)} → {shapes_text(node.outputs)}")
        p += ctx.metric_parts(node, metric_keys, zeros=False)
        parts[node] = p

    def node_lines(node: Node, width: int, names: dict[Node, Line], cut: list[Node]) -> list[Line]:
        """The node's label (wrapped with its metrics) and its subtree, no guide; the
        nodes whose label had to be shortened are added to ``cut``."""
        # a folded entry is drawn in a box, unless the box would leave too little room
        boxed = block.show and node.repeat > 1 and node.depth > 0 and width >= BOX_MIN_WIDTH
        if boxed:
            width -= 2 + 2 * block.padding[1]
        style = ctx.row_style(node)
        kids = drawn_children(ctx, node)
        guide = levels(node.depth + 1).guide_style
        # metrics follow the label; continuation lines sit on the children's guide
        more: Line = [("│   " if kids else "    ", guide)]
        label = names.get(node, labels[node])
        if node.repeat > 1 and not boxed and "<repeat_time>" not in levels(node.depth).label:
            label = [*label, (f" ×{node.repeat}", "layerscope.repeat")]
        if width_of(label) > width:  # a label is shortened in its middle, as in the table
            cut.append(node)
            label = shorten_label(label, max(width, 4))
        own: list[Line] = [list(label)]
        for part in parts[node]:
            if width_of(own[-1]) + 2 + len(part) <= width:
                own[-1].append(("  " + part, style))
                continue
            room = max(width - 4, 4)
            for chunk in wrap_words(part, room):  # a number and its unit stay together
                own.append([*more, (chunk, style)])
        kid_lines: list[Line] = []
        for i, child in enumerate(kids):
            last = i == len(kids) - 1
            sub = node_lines(child, width - 3, names, cut)
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

    # a hidden root level draws its children as the tops of the tree
    tops = drawn_children(ctx, shown.root) if levels(0).hide else [shown.root]

    def lay_out(width: int) -> list[Line]:
        cut: list[Node] = []
        lines = [line for top in tops for line in node_lines(top, width, {}, cut)]
        dropped = []
        if any(node in bare for node in cut):  # the node ids go, for every label, first
            lines = [line for top in tops for line in node_lines(top, width, bare, [])]
            dropped.append(NODE_IDS)
        return lines + ctx.footer(hidden, total_rows, dropped, width)

    return lay_out


def _boxed(ctx: ViewContext, node: Node, lines: list[Line]) -> list[Line]:
    """A folded entry's lines inside the repeat block's box, its title on the top edge."""
    block = ctx.config.repeat_block
    b = getattr(rich_box, block.box)
    vpad, hpad = block.padding
    inner = max([width_of(line) for line in lines] + [0])
    title = template(block.title)
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


def repr_view(ctx: ViewContext) -> Builder:
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
        # a deep name that does not fit beside its indentation is cut, type first
        lines = [shorten_label(line, width) if width_of(line) > width else line for line in lines]
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
