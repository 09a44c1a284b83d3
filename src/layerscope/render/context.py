"""What every view of a Profile needs, computed once: values of any column key, the
columns to show, the sort and % metrics, cells, labels from the display config, the rows a
tree view keeps, and the footer facts."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from rich.text import Text

import layerscope.metricspec as ms
from layerscope.analysis.catalog import Column, Values, column, pct_base, roofline_parts
from layerscope.analysis.fold import fold, renumber_as
from layerscope.analysis.roofline import Roof, device_note, profile_dtype, roof_of, target_spec
from layerscope.analysis.transforms import (
    filter_tree,
    ignore_modules,
    matches,
    post_order,
    sort_tree,
    top_k,
)
from layerscope.errors import InvalidInputError
from layerscope.profile import Node, Number, Profile, Signature
from layerscope.render import config as display_config
from layerscope.render import units
from layerscope.render.layout import Line, Table, TableColumn, TableRow, wrap_text
from layerscope.render.options import ViewOptions
from layerscope.render.summary import summary_lines

__all__ = [
    "Builder",
    "ViewContext",
    "default_keys",
    "markup_lines",
    "shapes_text",
    "template",
]

Builder = Callable[[int], list[Line]]

#: Derived columns shown by default when the profile has them, after the metrics.
_DEFAULT_DERIVED: tuple[str, ...] = ("flops_per_s", "absmax", "nan", "inf")


def default_keys() -> tuple[str, ...]:
    """Columns shown by default when the profile has them, in this order: the metrics the
    table marks ``default`` (each followed by its self column where marked), then
    derived ones."""
    keys: list[str] = []
    for spec in ms.METRICS.values():
        if spec.default:
            keys.append(spec.key)
            if spec.default_self:
                keys.append(f"self_{spec.key}")
    return (*keys, *_DEFAULT_DERIVED)


class ViewContext:
    """What every view needs: values, the resolved columns, sort and % metrics, config."""

    def __init__(self, profile: Profile, options: ViewOptions, roof: Roof | None = None) -> None:
        """``roof``: the roofline's device and dtype, instead of ``options.device``'s."""
        #: The profile as measured (the footer's facts); ``profile`` is what the view
        #: shows, the ``ignore``d modules' work taken out.
        self.measured = profile
        self.ignored = ignore_modules(profile, options.ignore)
        profile = self.ignored.profile
        self.profile = profile
        self.options = options
        device = options.device or target_spec(profile)
        if options.view == "roofline" and device is None and roof is None:
            raise InvalidInputError(
                "the roofline view needs a device spec: device='h100' (or 'cpu', 'a100', "
                "...), or a profile analysed on meta with target='h100'"
            )
        if roof is None and device:
            roof = roof_of(device, profile_dtype(profile))
        # a flat list of self values shows op rows apart from their module's self time
        self.values = Values(profile, ops_apart=options.view == "ops", roof=roof)
        self.config = display_config.current()
        self.ran = bool(profile.model.get("ran", True))
        partial = set(profile.partial_metrics)
        self.partial = partial
        #: A sort metric the profile lacks ranks nothing: the % metric ranks instead.
        self.sort_missing = options.sort_by is not None and self.lacks(options.sort_by)
        self.pct_base: str = self._pct_metric()
        sort_by = None if self.sort_missing else options.sort_by
        self.sort_key: str = sort_by or self.pct_base
        self.columns = self._columns()
        self._levels: dict[int, display_config.LevelStyle] = {}
        self._ran_inside: dict[Node, bool] = {}

    def level(self, depth: int) -> display_config.LevelStyle:
        style = self._levels.get(depth)
        if style is None:
            style = self._levels[depth] = self.config.level(depth)
        return style

    def lacks(self, key: str) -> bool:
        """Whether the profile has no whole-model value of ``key`` (an untimed profile
        has no ``forward_time``)."""
        return self.values.get(self.profile.root, key) is None

    def _pct_metric(self) -> str:
        """The metric of the % column and of min_pct: ``pct_of``; else the sort metric
        when it adds up and the profile has it; else the one metric the named columns
        hold, when they hold exactly one the profile has; else FLOPs, else params."""
        o = self.options
        if o.pct_of is not None and pct_base(o.pct_of) is not None:
            return str(pct_base(o.pct_of))
        if o.sort_by is not None and not self.sort_missing:
            base = pct_base(o.sort_by)
            if base is not None:
                return base
        if o.columns is not None:
            named = {b for b in map(pct_base, o.columns) if b is not None}
            if len(named) == 1:
                (only,) = named
                if not self.lacks(only):
                    return only
        return ms.FLOPS if self.profile.root.metrics.get(ms.FLOPS) else ms.PARAMS

    # ---- columns -----------------------------------------------------------------
    def _present(self, key: str) -> bool:
        root = self.profile.root
        if key in ("absmax", "nan", "inf"):
            return any(n.numerics.get(key) for n in root.walk())
        if key == "flops_per_s":
            return bool(root.metrics.get(ms.FLOPS)) and ms.FORWARD_TIME in root.metrics
        base = key.removeprefix("self_")
        value = root.metrics.get(base)
        spec = ms.METRICS.get(base)
        return value is not None and (value != 0 or (spec is not None and spec.show_zero))

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
        for key in default_keys():
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
        """Whether the user named this column, or the one a flat view shows as it (its
        self form, its time total: ``forward_time`` as ``self_forward_time_total``)."""
        named = self.options.columns
        if named is None:
            return False
        base = key.removeprefix("self_")
        return any(k in named for k in (key, base, base.removesuffix("_total")))

    def core(self, key: str) -> bool:
        """Whether a column is one a narrow table keeps longest: params, FLOPs, the %
        column and the metrics it and the order are of (inclusive or self)."""
        kept = (ms.PARAMS, ms.FLOPS, f"{self.pct_base}_pct", self.pct_base, self.sort_key)
        return key.removeprefix("self_") in kept

    # ---- values ------------------------------------------------------------------
    def value(self, node: Node, key: str) -> Number | None:
        return self.values.get(node, key)

    def cell(self, node: Node, key: str) -> str:
        if key == "input_shape":
            return shapes_text(node.inputs)
        if key == "output_shape":
            return shapes_text(node.outputs)
        if key == "grad_input_shape":
            return shapes_text(node.grad_inputs)
        if key == "grad_output_shape":
            return shapes_text(node.grad_outputs)
        if key == "calls" and self.ran and not node.calls:
            return "-"
        if key.endswith("bound"):
            return self.values.bound(node, key) or ""
        value = self.values.get(node, key)
        if value is None:
            return ""
        return self.format(key, value)

    def format(self, key: str, value: Number) -> str:
        if self.options.raw:
            return units.raw(value)
        if isinstance(value, float) and value != value:  # NaN statistics
            return "nan"
        return units.BY_KIND[column(key).kind](value)

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
            core=self.core(key),
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
    def folded(self) -> Profile:
        """The profile the view shows, folded as asked; with modules ignored, numbered as
        the whole profile's fold is (``renumber_as``)."""
        mode = self.options.fold
        if not mode:
            return self.profile
        shown = fold(self.profile, mode)
        if self.ignored.nodes:
            renumber_as(shown, fold(self.measured, mode))
        return shown

    def shown_tree(self) -> tuple[Profile, int]:
        """The (folded) tree after filters and sort, and how many rows it hides."""
        o = self.options
        shown = self.folded()
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
        ranked_by: str | None = None,
        summary: bool = True,
    ) -> list[Line]:
        """The lines below a view: hidden rows and columns, a sort or % metric the profile
        lacks, ignored modules, then with ``summary`` the roofline's device note and the
        profile's facts (a caller that writes its own leaves them out). ``ranked_by``: the
        header of what orders the rows (the view's own, such as ``Self FLOPs``; default:
        the sort metric's)."""
        lines: list[Line] = []
        o = self.options
        ranked_by = ranked_by or column(self.sort_key).header
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
                why.append(f"top {o.top} by {ranked_by}")
            if not o.show_not_called:
                why.append("modules that did not run")
            shown = total_rows - hidden_rows
            text = f"Showing {shown} of {total_rows} rows ({'; '.join(why) or 'filtered'})"
            if total_row:
                text += "; the Total row is the whole model"
                if self.ignored.nodes:
                    text += " less the ignored modules"
            lines += wrap_text(text + ".", "layerscope.hidden", width)
        if dropped:
            lines += wrap_text(
                f"Hidden to fit {width} columns: {', '.join(dropped)} "
                "(widen with --width / width=, or choose with --columns / columns=).",
                "layerscope.hidden",
                width,
            )
        lines += self._missing_lines(ranked_by, width)
        lines += self._ignored_lines(width)
        if not summary:
            return lines
        note = self.roof_note()
        if note is not None:
            lines += wrap_text(note, "layerscope.notice", width)
        for text, style in summary_lines(self.measured):
            lines += wrap_text(text, style, width)
        return lines

    def roof_note(self) -> str | None:
        """Which device the profile measured or followed, when the roofline columns
        shown are on another one."""
        roof = self.values.roof
        if roof is None:
            return None
        shown = self.options.view == "roofline" or any(
            roofline_parts(k) is not None and not k.endswith("intensity") for k in self.columns
        )
        return device_note(self.profile, roof.name) if shown else None

    def _missing_lines(self, ranked_by: str, width: int) -> list[Line]:
        """What a sort or % metric the profile lacks does: the sort falls back to the %
        metric (tree order when that is missing too)."""
        o = self.options
        notes = []
        if o.sort_by is not None and self.sort_missing:
            if self.lacks(self.sort_key):
                notes.append(f"This profile has no {o.sort_by}: rows are in tree order for it.")
            else:
                notes.append(f"This profile has no {o.sort_by}: rows are ordered by {ranked_by}.")
        if o.pct_of is not None and o.pct_of != o.sort_by and self.lacks(o.pct_of):
            notes.append(f"This profile has no {o.pct_of}: rows are in tree order for it.")
        return [line for text in notes for line in wrap_text(text, "layerscope.notice", width)]

    def _ignored_lines(self, width: int) -> list[Line]:
        """Which modules ``ignore`` took out, and what that does to the other rows."""
        ignored = self.ignored
        if not ignored.nodes:
            if not self.options.ignore:
                return []
            text = f"ignore {', '.join(self.options.ignore)} matched no module."
            return wrap_text(text, "layerscope.notice", width)
        names = ", ".join(f"{n.path} ({n.type})" for n in ignored.nodes)
        its = "its" if len(ignored.nodes) == 1 else "their"
        text = (
            f"Ignored {names}: {its} work is taken out of {its} ancestors' values and out "
            "of the Total."
        )
        dropped = [column(k).header for k in ignored.dropped if ms.METRICS[k].column]
        if dropped:
            text += (
                f" {', '.join(dropped)} {'is' if len(dropped) == 1 else 'are'} not additive:"
                f" left out for {its} ancestors."
            )
        return wrap_text(text, "layerscope.notice", width)

    def framed(self, lines: list[Line], width: int) -> list[Line]:
        """A table's lines under the configured title and above its caption."""
        t = self.config.table
        top = markup_lines(t.title, width) if t.title else []
        bottom = markup_lines(t.caption, width) if t.caption else []
        return top + lines + bottom

    # ---- labels ------------------------------------------------------------------
    def label(self, node: Node, repeat_mark: bool = True) -> Line:
        level = self.level(node.depth)
        pieces = template(level.label)
        subs = {
            "<node_id>": node.node_id,
            "<name>": node.name,
            "<type>": "" if node.type == node.name and node.depth else node.type,
            "<path>": node.path or "<root>",
            "<depth>": str(node.depth),
            "<repeat_time>": str(node.repeat),
        }
        out: Line = []
        for text, style in pieces:
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


def _excluded(node: Node, patterns: Sequence[str]) -> bool:
    up: Node | None = node
    while up is not None:
        if matches(up, patterns):
            return True
        up = up.parent
    return False


_TEMPLATES: dict[str, tuple[tuple[str, str], ...]] = {}


def markup_lines(markup: str, width: int) -> list[Line]:
    """A title or caption in rich markup, wrapped to the width."""
    pieces = template(markup)
    text = "".join(t for t, _ in pieces)
    style = pieces[0][1] if len(pieces) == 1 else ""
    return wrap_text(text, style, width, "")


def template(markup: str) -> tuple[tuple[str, str], ...]:
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


def shapes_text(sigs: list[Signature]) -> str:
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
