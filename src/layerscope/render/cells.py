"""Text as a terminal lays it out: each character the columns it takes (a wide East
Asian character or an emoji two, a combining mark none)."""

from __future__ import annotations

from rich.cells import cell_len, get_character_cell_size

__all__ = ["slice_cells", "text_width"]


def text_width(text: str) -> int:
    """Columns ``text`` takes on a terminal: a wide (East Asian) character or an emoji
    two, a combining mark none (ASCII: one a character, fast)."""
    return len(text) if text.isascii() else cell_len(text)


def slice_cells(text: str, lo: int, hi: int) -> str:
    """The characters of ``text`` wholly in columns ``lo:hi`` (a wide character cut in
    two at either end is left out)."""
    out, pos = [], 0
    for ch in text:
        size = get_character_cell_size(ch)
        if pos >= lo and pos + size <= hi:
            out.append(ch)
        pos += size
        if pos >= hi:
            break
    return "".join(out)
