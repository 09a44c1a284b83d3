"""Word wrapping for footers, titles and tree labels, in time linear in the text.

The rule is ``textwrap.wrap``'s (greedy, words split at runs of whitespace, blanks
dropped at line ends and at the start of continuation lines, a word longer than a line
cut to fill it), with two differences: a number and the unit after it (``0 B``,
``32 K``, ``109.50 KiB``, ``2.04 TB/s``, ``14.5 K inputs/s``) are one word, so they
never part, and so is a formula such as ``a + b·L``; and a long word is cut in pieces
in one pass (``textwrap`` copies the rest of the word for every piece, so a word of
millions of characters took seconds).
"""

from __future__ import annotations

import re

from layerscope.render.units import UNITS

__all__ = ["wrap_words"]

#: Stands for a space that must not break (between a number and its unit) while wrapping.
_KEEP = "\ue000"
_UNIT = "|".join(re.escape(u) for u in sorted(UNITS, key=len, reverse=True))
#: The space between a number and its unit (a rate's too: ``2.04 TB/s``, ``312
#: TFLOP/s``), inside an affine formula (``a + b·L``), and inside
#: ``14.5 K inputs/s``.
_UNIT_GAP = re.compile(
    rf" (?:(?<=\d )(?=(?:{_UNIT})(?:B|FLOP)?(?:/s)?(?![\w/]))|(?<=\d [KMGT] )(?=inputs/s)"
    r"|(?<=\b[a-z] )(?=\+ [a-z]·[A-Z]\b)|(?<= \+ )(?=[a-z]·[A-Z]\b))"
)
#: What textwrap turns into spaces (``replace_whitespace``), and its word separators.
_TO_SPACE = str.maketrans("\t\n\x0b\x0c\r", "     ")
_CHUNKS = re.compile(r" +|[^ ]+")


def wrap_words(text: str, width: int, indent: str = "") -> list[str]:
    """``text`` in lines of at most ``width`` characters, lines after the first starting
    with ``indent`` (see the module docstring); ``[]`` for blank text."""
    text = text.expandtabs().translate(_TO_SPACE)
    kept = _KEEP not in text
    if kept:
        text = _UNIT_GAP.sub(_KEEP, text)
    chunks = _CHUNKS.findall(text)
    lines: list[str] = []
    i, start, n = 0, 0, len(chunks)  # the next piece of text is chunks[i][start:]
    while i < n:
        prefix = indent if lines else ""
        room = width - len(prefix)
        if lines and chunks[i][0] == " ":  # no blank at the start of a continuation
            i, start = i + 1, 0
            if i == n:
                break
        line: list[str] = []
        used = 0
        while i < n and used + len(chunks[i]) - start <= room:
            line.append(chunks[i][start:] if start else chunks[i])
            used += len(chunks[i]) - start
            i, start = i + 1, 0
        if i < n and len(chunks[i]) - start > room:  # a word longer than a line: cut it
            take = 1 if room < 1 else room - used
            line.append(chunks[i][start : start + take])
            start += take
        while line and not line[-1].strip():
            line.pop()
        if line:
            lines.append(prefix + "".join(line))
    return [line.replace(_KEEP, " ") for line in lines] if kept else lines
