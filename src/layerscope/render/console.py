"""Views to the terminal, to text, to a notebook: the entry points behind ``prof.show``,
``prof.render``, ``print(prof)``, ``rich.print(prof)`` and ``prof._repr_html_``.

Styles are theme names (``layerscope.*``) from the display configuration; a console
whose theme lacks them falls back to those, so any rich Console can print a profile.
"""

from __future__ import annotations

import html
from typing import IO, Any

from rich.theme import Theme

from layerscope.gcpause import gc_paused
from layerscope.profile import Profile
from layerscope.render import config as display_config
from layerscope.render.layout import (
    Line,
    LinesRenderable,
    plain_text,
    terminal_width,
)
from layerscope.render.options import ViewOptions, view_options
from layerscope.render.terminal import check_file, print_lines
from layerscope.render.views import build, table_parts

__all__ = ["html_table", "render", "render_text", "renderable", "show", "theme"]


def theme() -> Theme:
    """The current display configuration's theme, for a Console of your own."""
    return Theme(dict(display_config.current().theme))


def _theme_styles() -> dict[str, str]:
    return dict(display_config.current().theme)


def renderable(profile: Profile, options: ViewOptions | None = None) -> LinesRenderable:
    """A rich renderable of the view; it lays itself out for the console's width."""
    options = options or ViewOptions()
    with gc_paused():
        return LinesRenderable(build(profile, options), _theme_styles, options.width)


def render_text(
    profile: Profile, width: int | None = None, options: ViewOptions | None = None
) -> str:
    """Plain text of a view (``str(prof)`` is the default table)."""
    options = options or ViewOptions()
    width = width or options.width or terminal_width()
    with gc_paused():
        return plain_text(build(profile, options)(width))


def show(profile: Profile, file: IO[str] | None = None, **options: Any) -> None:
    """Print a view to the terminal (colours when it is one) or to ``file``."""
    opts = view_options(**options)
    check_file(file)
    with gc_paused():
        builder = build(profile, opts)
    print_lines(builder, opts.width, file)


def render(profile: Profile, **options: Any) -> str:
    """``prof.render(**options)``: a view as plain text, options checked."""
    opts = view_options(**options)
    return render_text(profile, opts.width, opts)


def html_table(profile: Profile, **options: Any) -> str:
    """The table view as an HTML table and its footer (a notebook's display)."""
    table, footer = table_parts(profile, view_options(**options))
    head = "".join(
        f'<th style="text-align: {c.justify}; padding: 0 0.6em">{html.escape(c.header)}</th>'
        for c in table.columns
    )
    body = []
    rows = [*table.rows, *([table.total] if table.total is not None else [])]
    for row in rows:
        cells = "".join(
            f'<td style="text-align: {c.justify}; white-space: pre; padding: 0 0.6em">'
            f"{_html_line(cell)}</td>"
            for c, cell in zip(table.columns, row.cells, strict=True)
        )
        css = _css(row.style)
        body.append(f'<tr style="{css}">{cells}</tr>' if css else f"<tr>{cells}</tr>")
    notes = "".join(f"<div>{_html_line(line)}</div>" for line in footer)
    return (
        '<div class="layerscope"><table style="font-family: monospace; border-collapse: '
        'collapse">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
        f'<div style="font-family: monospace; white-space: pre-wrap">{notes}</div></div>'
    )


_HTML_STYLES = {
    "layerscope.header": "font-weight: bold",
    "layerscope.total": "font-weight: bold",
    "layerscope.type": "color: #2a9d8f",
    "layerscope.name": "color: #2e7d32",
    "layerscope.id": "color: #777",
    "layerscope.guide": "color: #999",
    "layerscope.repeat": "color: #b8860b; font-weight: bold",
    "layerscope.uncalled": "color: #999; font-style: italic",
    "layerscope.op": "color: #888",
    "layerscope.notice": "color: #b8860b",
    "layerscope.error": "color: #c62828; font-weight: bold",
    "layerscope.hidden": "color: #888",
}


def _css(style: str) -> str:
    return "; ".join(_HTML_STYLES[s] for s in style.split("|") if s in _HTML_STYLES)


def _html_line(line: Line) -> str:
    out = []
    for text, style in line:
        css = _css(style)
        escaped = html.escape(text)
        out.append(f'<span style="{css}">{escaped}</span>' if css else escaped)
    return "".join(out)
