"""Markdown: the table view as a GitHub table, to paste into a pull request.

The same options as the views (``columns``, ``sort_by``, ``max_depth``, ``min_pct``,
``include``, ...), so a Markdown table shows what ``prof.render`` shows, with every column
(Markdown has no width to fit). Cells are escaped: ``|`` and Markdown's own characters
in module names show as text; tree guides keep their indent with non-breaking spaces.
"""

from __future__ import annotations

import re
from typing import Any

from layerscope.profile import Profile
from layerscope.render.layout import Line, printable, text_of
from layerscope.render.options import view_options
from layerscope.render.views import table_parts

__all__ = ["escape", "to_markdown"]

_SPECIAL = re.compile(r"([\\`*_{}\[\]<>|#~])")
_ALIGN = {"left": ":---", "right": "---:", "center": ":---:"}
_NBSP = "\u00a0"


def escape(text: str) -> str:
    """Text safe in a Markdown table cell: special characters backslash-escaped, no
    newline, other control characters made visible (``layout.printable``), leading and
    doubled spaces kept as non-breaking ones."""
    text = _SPECIAL.sub(r"\\\1", printable(text.replace("\r", " ").replace("\n", " ")))
    text = re.sub(r"^ +", lambda m: _NBSP * len(m.group()), text)
    return text.replace("  ", _NBSP * 2)


def to_markdown(profile: Profile, **options: Any) -> str:
    """The table view (``view`` must be "table") as GitHub Markdown, with its footer."""
    opts = view_options(**options)
    if opts.view != "table":
        from layerscope.errors import InvalidInputError

        raise InvalidInputError(f"to_markdown shows the table view, not {opts.view!r}")
    table, footer = table_parts(profile, opts)
    header = "| " + " | ".join(escape(c.header) for c in table.columns) + " |"
    align = "|" + "|".join(_ALIGN[c.justify] for c in table.columns) + "|"
    body = [_row(r.cells) for r in table.rows]
    if table.total is not None:
        body.append(_row(table.total.cells, bold=True))
    notes = [escape(text_of(line).strip()) for line in footer if text_of(line).strip()]
    text = "\n".join([header, align, *body])
    if notes:
        text += "\n\n" + "\n".join(f"{n}  " for n in notes[:-1]) + ("\n" if notes[:-1] else "")
        text += notes[-1]
    return text + "\n"


def _row(cells: list[Line], bold: bool = False) -> str:
    out = []
    for cell in cells:
        text = escape(text_of(cell))
        out.append(f"**{text}**" if bold and text.strip() else text)
    return "| " + " | ".join(out) + " |"
