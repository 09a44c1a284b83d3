"""Lines of styled text, a table laid out for a width, and the renderable that prints them.

Views build ``Line``s: lists of ``(text, style)`` pieces, where a style is a theme name
(``layerscope.name``), a rich style definition, several of them joined by ``|``, or "".
The same lines give plain text (``prof.render``) and rich segments (``Console.print``),
so both always agree. Styles are resolved against the console's theme and fall back to
layerscope's own when the console lacks them.

The table measures every column once and writes pre-padded lines: a numeric cell is
never cut. When the table is wider than the console, droppable columns go first (lowest
priority first, the core ones last), the node ids before the core columns, and only then
is the module column shortened in the middle (``fit_table``).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from rich import box as rich_box
from rich.console import Console, ConsoleOptions, RenderResult
from rich.errors import MissingStyle, StyleSyntaxError
from rich.segment import Segment
from rich.style import Style

from layerscope.gcpause import gc_paused
from layerscope.render.cells import slice_cells, text_width
from layerscope.render.wrap import wrap_words

Piece = tuple[str, str]
Line = list[Piece]
Justify = Literal["left", "center", "right"]

ELLIPSIS = "…"


#: Control characters as one visible character each: C0 controls and DEL as their
#: Unicode control pictures (ESC as "␛", BEL as "␇", DEL as "␡"), C1 controls as "�".
#: One for one, so a hostile module name cannot drive the terminal and tables stay aligned.
_CONTROLS = {
    **{c: 0x2400 + c for c in range(0x20)},
    0x7F: 0x2421,
    **dict.fromkeys(range(0x80, 0xA0), 0xFFFD),
}


def printable(text: str) -> str:
    """``text`` with every control character shown as a visible one (``_CONTROLS``);
    printable text, Unicode included, as it is."""
    return text if text.isprintable() else text.translate(_CONTROLS)


def text_of(line: Line) -> str:
    return "".join(t for t, _ in line)


def width_of(line: Line) -> int:
    if len(line) == 1:
        return text_width(line[0][0])
    return sum(text_width(t) for t, _ in line)


def slice_line(line: Line, start: int, end: int) -> Line:
    """The columns ``start:end`` of a line, styles kept."""
    out: Line = []
    pos = 0
    for text, style in line:
        n = text_width(text)
        lo, hi = max(start - pos, 0), min(end - pos, n)
        if lo < hi:
            part = text[lo:hi] if n == len(text) else slice_cells(text, lo, hi)
            out.append((part, style))
        pos += n
        if pos >= end:
            break
    return out


def cut_middle(line: Line, width: int) -> Line:
    """Shorten to ``width`` by replacing the middle with "…" (``encoder.….attention``)."""
    n = width_of(line)
    if n <= width:
        return line
    if width <= 1:
        return [(ELLIPSIS[:width], "")]
    left = (width - 1) // 2
    right = width - 1 - left
    return [*slice_line(line, 0, left), (ELLIPSIS, ""), *slice_line(line, n - right, n)]


def cut_end(line: Line, width: int, mark: str = ELLIPSIS) -> Line:
    """Shorten to ``width``, ending in ``mark`` ("" to crop)."""
    if width_of(line) <= width:
        return line
    keep = max(width - len(mark), 0)
    return (
        [*slice_line(line, 0, keep), (mark[: width - keep], "")]
        if mark
        else slice_line(line, 0, width)
    )


def wrap_line(line: Line, width: int) -> list[Line]:
    """Split a line into chunks of at most ``width`` characters (overflow "fold")."""
    n = width_of(line)
    if n <= width or width < 1:
        return [line]
    return [slice_line(line, i, i + width) for i in range(0, n, width)]


def pad(line: Line, width: int, justify: Justify) -> Line:
    gap = width - width_of(line)
    if gap <= 0:
        return line
    if justify == "right":
        return [(" " * gap, ""), *line]
    if justify == "center":
        return [(" " * (gap // 2), ""), *line, (" " * (gap - gap // 2), "")]
    return [*line, (" " * gap, "")]


def wrap_text(text: str, style: str, width: int, indent: str = "  ") -> list[Line]:
    """Word-wrap a sentence (footer lines); words longer than the width are split, not
    cut; a number and its unit stay on one line (``render.wrap``)."""
    lines = wrap_words(text, max(width, len(indent) + 1), indent)
    return [[(line, style)] for line in lines] or [[("", style)]]


def wrap_texts(texts: Sequence[tuple[str, str]], width: int) -> list[Line]:
    """Sentences, each ``(text, style)``, word-wrapped one after another (``wrap_text``)."""
    return [line for text, style in texts for line in wrap_text(text, style, width)]


# ---- tables ------------------------------------------------------------------------


@dataclass
class TableColumn:
    key: str
    header: str
    justify: Justify = "right"
    #: Lower goes first when the table must lose columns; None: never dropped.
    priority: int | None = 50
    style: str = ""
    #: For text cells only ("ellipsis", "crop", "fold"); numbers are never cut.
    overflow: str = "ellipsis"
    #: The tree (module) column: shortened in the middle, after its guide prefix.
    label: bool = False
    #: How the label column's cells are shortened to a width (default: ``cut_middle``).
    shorten: Callable[[Line, int], Line] | None = None
    #: Cells that are text rather than numbers (may be shortened).
    text: bool = False
    #: A column kept longest (params, FLOPs, the % column): dropped only after the other
    #: droppable columns and the node ids, when the names would be cut otherwise.
    core: bool = False


@dataclass
class TableRow:
    cells: list[Line]
    style: str = ""
    #: For the label column: the guide prefix kept whole when the label is shortened.
    prefix: int = 0
    #: The label cell without its node id, shown when the table hides the ids to fit.
    no_ids: Line | None = None


@dataclass
class Table:
    columns: list[TableColumn]
    rows: list[TableRow]
    total: TableRow | None = None
    #: Rows after which a section rule is drawn (indexes into rows).
    sections: set[int] = field(default_factory=set)
    box: str = "SIMPLE_HEAD"
    show_edge: bool = False
    show_header: bool = True
    header_style: str = "layerscope.header"
    border_style: str = ""
    row_styles: Sequence[str] = ()
    #: When the module names cannot be whole even with every droppable column gone, the
    #: label keeps at least this share of the width while other columns are dropped.
    label_share: float = 0.45


@dataclass
class Fitted:
    lines: list[Line]
    #: Headers of the columns dropped to fit the width ("Node ids" first when the label
    #: column's node ids were hidden).
    dropped: list[str]
    #: False: too narrow for the columns named, a message instead of the table
    drawn: bool = True

    def rows_hidden(self, hidden: int) -> int:
        """The hidden rows a footer reports: none of a table not drawn."""
        return hidden if self.drawn else 0


#: The footer's word for the node ids a table hid to fit.
NODE_IDS = "Node ids"


class _Fit:
    """Which columns a table shows at a width: ``fit_table``'s bookkeeping."""

    def __init__(self, table: Table, width: int) -> None:
        cols = self.cols = table.columns
        body = [*table.rows, *([table.total] if table.total is not None else [])]
        self.natural = [
            max([len(c.header) if table.show_header else 0, *(width_of(r.cells[i]) for r in body)])
            for i, c in enumerate(cols)
        ]
        self.label = next((i for i, c in enumerate(cols) if c.label), None)
        self.no_ids: int | None = None  # the label's natural width without node ids
        if self.label is not None and any(r.no_ids is not None for r in body):
            k = self.label
            heads = [len(cols[k].header) if table.show_header else 0]
            self.no_ids = max(
                heads + [width_of(r.cells[k] if r.no_ids is None else r.no_ids) for r in body]
            )
        self.edge = 4 if table.show_edge else 0
        self.width = width
        self.shown = list(range(len(cols)))
        self.dropped: list[int] = []
        self.ids_hidden = False
        #: While dropping columns: the label counts as at most this wide (None: whole).
        self.cap: int | None = None

    def label_natural(self) -> int:
        if self.label is None:
            return 0
        if self.ids_hidden and self.no_ids is not None:
            return self.no_ids
        return self.natural[self.label]

    def whole_fits(self) -> bool:
        """Whether the names fit whole (without ids) beside the columns that must stay."""
        label = self.natural[self.label] if self.label is not None else 0
        if self.no_ids is not None:
            label = self.no_ids
        stay = [i for i in self.shown if self.cols[i].priority is None]
        total = sum(label if i == self.label else self.natural[i] for i in stay)
        return total + 3 * (len(stay) - 1) + self.edge <= self.width

    def needed(self) -> int:
        label = self.label_natural()
        if self.cap is not None:
            label = min(label, self.cap)
        total = sum(label if i == self.label else self.natural[i] for i in self.shown)
        return total + 3 * (len(self.shown) - 1) + self.edge

    def drop(self, core: bool) -> None:
        """Drop droppable columns (the core ones too with ``core``), lowest priority first
        and among equals the rightmost, until the table fits."""
        cols = self.cols
        while self.needed() > self.width:
            pool = [
                i for i in self.shown if cols[i].priority is not None and (core or not cols[i].core)
            ]
            if not pool:
                return
            victim = min(pool, key=lambda i: (cols[i].priority, -i))
            self.shown.remove(victim)
            self.dropped.append(victim)

    def refill(self, candidates: list[int]) -> None:
        """Show again each of ``candidates`` (in this order) that fits now."""
        for i in candidates:
            self.shown = sorted([*self.shown, i])
            if self.needed() > self.width:
                self.shown.remove(i)
            else:
                self.dropped.remove(i)


def fit_table(table: Table, width: int) -> Fitted:
    """Lay the table out in ``width`` characters; numbers are never cut.

    Where the names fit whole beside the columns that must stay, they stay whole: the
    droppable columns other than the core ones go first (lowest priority first), then
    the label column's node ids, from every row (the columns dropped before come back
    where the room freed holds them, the most important first), then the core columns
    (params, FLOPs, the % column). Where they cannot, names are cut anyway: the ids go,
    the label keeps ``label_share`` of the width while columns are dropped, then the
    text columns that stay (the user's) and the label give way."""
    fit = _Fit(table, width)
    cols = fit.cols
    if not fit.whole_fits():
        fit.ids_hidden = fit.no_ids is not None
        if fit.label_natural() > width // 2:
            fit.cap = max(16, int(width * table.label_share))
        fit.drop(core=False)
        fit.drop(core=True)
        fit.cap = None
    else:
        fit.drop(core=False)
        if fit.needed() > width and fit.no_ids is not None:
            fit.ids_hidden = True
            earlier = list(fit.dropped)
            fit.drop(core=True)
            if fit.dropped == earlier:
                fit.refill(earlier[::-1])
        fit.drop(core=True)
    dropped = [cols[i].header for i in fit.dropped]
    if fit.ids_hidden:
        dropped.insert(0, NODE_IDS)
    label_index, label_natural = fit.label, fit.label_natural()
    widths = {i: label_natural if i == label_index else fit.natural[i] for i in fit.shown}
    over = fit.needed() - width
    for i in fit.shown:  # text columns that must stay (named by the user) give way first
        if over > 0 and cols[i].text and not cols[i].label:
            give = min(over, fit.natural[i] - max(len(cols[i].header), 8))
            if give > 0:
                widths[i] -= give
                over -= give
    if label_index is not None and over > 0:
        widths[label_index] = label_natural - over
    total = sum(widths.values()) + 3 * (len(fit.shown) - 1) + fit.edge
    label_width = widths[label_index] if label_index is not None else label_natural
    if total > width or label_width < min(8, label_natural):
        message = (
            f"(too narrow: this view needs at least {total - label_width + 8} "
            "columns; widen it or show fewer columns)"
        )
        # no table drawn: nothing was hidden to fit it
        return Fitted(wrap_text(message, "layerscope.notice", width, ""), [], drawn=False)
    if fit.ids_hidden and label_index is not None:
        table = replace(table, rows=[_without_ids(r, label_index) for r in table.rows])
    return Fitted(_draw(table, fit.shown, widths), dropped)


def _without_ids(row: TableRow, label: int) -> TableRow:
    if row.no_ids is None:
        return row
    cells = [*row.cells[:label], row.no_ids, *row.cells[label + 1 :]]
    return TableRow(cells, row.style, row.prefix)


def _draw(table: Table, shown: list[int], widths: dict[int, int]) -> list[Line]:
    b = getattr(rich_box, table.box)
    d = _Drawer(table, shown, widths)
    lines: list[Line] = []
    if table.show_edge:
        lines.append(d.rule(b.top_left, b.top, b.top_divider, b.top_right))
    if table.show_header:
        headers = [[(c.header, table.header_style)] for c in table.columns]
        lines += d.row(headers, "", b.head_left, b.head_vertical, b.head_right, 0)
        lines.append(
            d.rule(b.head_row_left, b.head_row_horizontal, b.head_row_cross, b.head_row_right)
        )
    for n, r in enumerate(table.rows):
        style = r.style
        if table.row_styles and not style:
            style = table.row_styles[n % len(table.row_styles)]
        lines += d.row(r.cells, style, b.mid_left, b.mid_vertical, b.mid_right, r.prefix)
        if n in table.sections and n < len(table.rows) - 1:
            lines.append(d.rule(b.row_left, b.row_horizontal, b.row_cross, b.row_right))
    if table.total is not None:
        lines.append(
            d.rule(b.foot_row_left, b.foot_row_horizontal, b.foot_row_cross, b.foot_row_right)
        )
        lines += d.row(
            table.total.cells, table.total.style, b.foot_left, b.foot_vertical, b.foot_right, 0
        )
    if table.show_edge:
        lines.append(d.rule(b.bottom_left, b.bottom, b.bottom_divider, b.bottom_right))
    return lines


class _Drawer:
    """Draws a table's rules and rows at fitted widths (``_draw``'s parts)."""

    __slots__ = ("border", "cols", "shown", "table", "widths")

    def __init__(self, table: Table, shown: list[int], widths: dict[int, int]) -> None:
        self.table = table
        self.cols = table.columns
        self.shown = shown
        self.widths = widths
        self.border = table.border_style

    def rule(self, left: str, fill: str, cross: str, right: str) -> Line:
        shown, widths = self.shown, self.widths
        if self.table.show_edge:
            return [(left + cross.join(fill * (widths[i] + 2) for i in shown) + right, self.border)]
        last = len(shown) - 1
        parts = [fill * (widths[i] + (k > 0) + (k < last)) for k, i in enumerate(shown)]
        return [(cross.join(parts), self.border)]

    def row(
        self, cells: list[Line], style: str, left: str, mid: str, right: str, prefix: int
    ) -> list[Line]:
        """One row's lines: its cells cut or wrapped to their widths, padded, joined."""
        rendered: list[list[Line]] = []
        cols, widths = self.cols, self.widths
        for i in self.shown:
            cell = cells[i]
            if len(cell) == 1 and text_width(cell[0][0]) <= widths[i]:
                rendered.append([cell])
            else:
                rendered.append(self._fit(cell, cols[i], widths[i], prefix))
        if all(len(r) == 1 for r in rendered) and not self.table.show_edge:  # the common case
            return [self._single(rendered, style, mid)]
        return self._multi(rendered, style, left, mid, right)

    @staticmethod
    def _fit(cell: Line, col: TableColumn, w: int, prefix: int) -> list[Line]:
        """A cell wider than its column: wrapped (fold), or cut (a label in the middle)."""
        if width_of(cell) > w and (col.label or col.text):
            if col.overflow == "fold":
                return wrap_line(cell, w)
            if col.label and col.overflow == "ellipsis":
                head = cell[:1] if prefix else []
                body = cell[1:] if prefix else cell
                keep = w - width_of(head)
                shorten = col.shorten or cut_middle
                cell = [*head, *shorten(body, keep)] if keep >= 3 else cut_middle(cell, w)
            else:
                cell = cut_end(cell, w, ELLIPSIS if col.overflow == "ellipsis" else "")
        return [cell]

    def _single(self, rendered: list[list[Line]], style: str, mid: str) -> Line:
        """A row of one line, no edge: plain cells padded inline."""
        cols, widths = self.cols, self.widths
        line: Line = []
        last = len(self.shown) - 1
        sep = (f" {mid} ", self.border)
        for k, i in enumerate(self.shown):
            col = cols[i]
            cell = rendered[k][0]
            if len(cell) == 1 and not col.style:
                text, s = cell[0]
                gap = widths[i] - text_width(text)
                if col.justify == "right":
                    text = " " * gap + text
                elif col.justify == "left":
                    text += " " * gap
                else:
                    text = " " * (gap // 2) + text + " " * (gap - gap // 2)
                line.append((text, s))
            else:
                padded = pad(cell, widths[i], col.justify)
                if col.style:
                    padded = [(t, f"{col.style}|{x}" if x else col.style) for t, x in padded]
                line.extend(padded)
            if k < last:
                line.append(sep)
        if style:
            line = [(t, f"{style}|{x}" if x else style) for t, x in line]
        return line

    def _multi(
        self, rendered: list[list[Line]], style: str, left: str, mid: str, right: str
    ) -> list[Line]:
        """A row of several lines (wrapped cells) or with an edge."""
        out: list[Line] = []
        edge = self.table.show_edge
        for h in range(max(len(r) for r in rendered)):
            line: Line = []
            if edge:
                line.append((left + " ", self.border))
            for k, i in enumerate(self.shown):
                part = rendered[k][h] if h < len(rendered[k]) else []
                col = self.cols[i]
                padded = pad(part, self.widths[i], col.justify)
                if col.style:
                    padded = [(t, f"{col.style}|{s}" if s else col.style) for t, s in padded]
                line.extend(padded)
                if k < len(self.shown) - 1:
                    line.append((f" {mid} ", self.border))
            if edge:
                line.append((" " + right, self.border))
            if style:
                line = [(t, f"{style}|{s}" if s else style) for t, s in line]
            out.append(line)
        return out


# ---- output ------------------------------------------------------------------------


#: Width used when there is no terminal to ask (pipes, files, CI): rich's default too.
DEFAULT_WIDTH = 80


def terminal_width() -> int:
    """``COLUMNS`` or the terminal's width; 80 when output is not a terminal."""
    return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns


#: Below this width a view is one line saying so (a table of 10 columns helps nobody).
MIN_WIDTH = 20


def too_narrow(width: int) -> list[Line] | None:
    """The one line a view prints below ``MIN_WIDTH`` columns, else None."""
    if width >= MIN_WIDTH:
        return None
    text = (
        f"({width} columns is too narrow for layerscope's views: give a width of at least "
        f"{MIN_WIDTH})"
    )
    return [[(text, "layerscope.notice")]]


def plain_text(lines: Sequence[Line]) -> str:
    """The lines as text, control characters made visible (``printable``)."""
    return "".join(printable(text_of(line)).rstrip() + "\n" for line in lines)


class StyleResolver:
    """Style names to rich Styles for one console: its theme first, then ``fallback``
    (layerscope's theme), then a plain style definition, else no style."""

    def __init__(self, console: Console, fallback: dict[str, str]) -> None:
        self.console = console
        self.fallback = fallback
        self.cache: dict[str, Style] = {}

    def __call__(self, name: str) -> Style:
        style = self.cache.get(name)
        if style is None:
            style = Style.null()
            for part in name.split("|"):
                style = style + self._one(part.strip())
            self.cache[name] = style
        return style

    def _one(self, name: str) -> Style:
        if not name:
            return Style.null()
        try:
            return self.console.get_style(name)
        except (MissingStyle, StyleSyntaxError):
            pass
        definition = self.fallback.get(name)
        if definition is not None:
            try:
                return Style.parse(definition)
            except StyleSyntaxError:
                return Style.null()
        return Style.null()


class LinesRenderable:
    """A rich renderable made by ``build(width)``; width is the console's unless fixed."""

    def __init__(
        self,
        build: Callable[[int], list[Line]],
        theme: Callable[[], dict[str, str]],
        width: int | None = None,
    ) -> None:
        self.build = build
        self.theme = theme
        self.width = width

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = self.width or options.max_width
        resolve = StyleResolver(console, self.theme())
        with gc_paused():  # many small objects, no cycles: see gc_paused
            made = list(segments(self.build(width), resolve))
        yield from made


def segments(lines: Sequence[Line], resolve: Callable[[str], Style]) -> Iterator[Segment]:
    """Rich segments of the lines: trailing blanks dropped (as in the plain text),
    neighbouring pieces of one style joined into one segment, control characters made
    visible (``printable``)."""
    newline = Segment.line()
    for line in lines:
        last = len(line)
        while last and not line[last - 1][0].strip():
            last -= 1
        run: list[str] = []
        run_style = ""
        for k, (text, style) in enumerate(line[:last]):
            if k == last - 1:
                text = text.rstrip()
            if style != run_style and run:
                yield Segment(printable("".join(run)), resolve(run_style) if run_style else None)
                run = []
            run.append(text)
            run_style = style
        if run:
            yield Segment(printable("".join(run)), resolve(run_style) if run_style else None)
        yield newline
