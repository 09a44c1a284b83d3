"""The export formats, one table: for each, the extensions that select it, its writer, the
text it writes and the options it takes.

``export``/``Profile.export``, the CLI's ``--format`` and ``-o`` and docs/exports.md read
this table; adding a format is one row (and its module). Writers import their module when
first used, so loading the table costs nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from layerscope.errors import ExportError
from layerscope.export.files import write_text
from layerscope.profile import Profile

__all__ = [
    "FORMATS",
    "ExportFormat",
    "document_formats_error",
    "export",
    "export_document",
    "export_text",
    "format_of",
    "matching",
]

PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class ExportFormat:
    """One file format of a profile."""

    name: str
    #: The extensions that select it, the usual one first.
    extensions: tuple[str, ...]
    #: ``write(profile, path, **options)``: the file, written atomically.
    write: Callable[..., None]
    #: ``text(profile, **options)``: what ``write`` would put in the file.
    text: Callable[..., str]
    #: Keyword options it takes besides the view options (html: the roof's ``device``).
    options: frozenset[str] = frozenset()
    #: Whether the view options (as for ``prof.show``) apply: it draws the table view.
    view_options: bool = False


def _json_write(profile: Profile, path: PathLike) -> None:
    from layerscope.export.json import save

    save(profile, path)


def _json_text(profile: Profile) -> str:
    from layerscope.export.json import to_json

    return to_json(profile) + "\n"


def _csv_write(profile: Profile, path: PathLike) -> None:
    from layerscope.export.csv import to_csv

    to_csv(profile, path)


def _csv_text(profile: Profile) -> str:
    from layerscope.export.csv import to_csv

    text = to_csv(profile)
    assert text is not None
    return text


def _md_write(profile: Profile, path: PathLike, **options: Any) -> None:
    write_text(path, _md_text(profile, **options))


def _md_text(profile: Profile, **options: Any) -> str:
    from layerscope.export.markdown import to_markdown

    return to_markdown(profile, **options)


def _html_write(profile: Profile, path: PathLike, **options: Any) -> None:
    from layerscope.export.html import to_html

    to_html(profile, path, **options)


def _html_text(profile: Profile, **options: Any) -> str:
    from layerscope.export.html import to_html_text

    return to_html_text(profile, **options)


def _trace_write(profile: Profile, path: PathLike) -> None:
    from layerscope.export.trace import to_trace

    to_trace(profile, path)


def _trace_text(profile: Profile) -> str:
    import json

    from layerscope.export.trace import trace_events

    return json.dumps(trace_events(profile), separators=(",", ":"), allow_nan=False) + "\n"


#: Format name -> format, in the order extensions are tried (longest first where they
#: overlap: ``.trace.json`` before ``.json``).
FORMATS: dict[str, ExportFormat] = {
    f.name: f
    for f in (
        ExportFormat("trace", (".trace.json",), _trace_write, _trace_text),
        ExportFormat("json", (".json",), _json_write, _json_text),
        ExportFormat("csv", (".csv",), _csv_write, _csv_text),
        ExportFormat("md", (".md", ".markdown"), _md_write, _md_text, view_options=True),
        ExportFormat(
            "html", (".html", ".htm"), _html_write, _html_text, options=frozenset({"device"})
        ),
    )
}


def matching(path: PathLike) -> ExportFormat | None:
    """The format ``path``'s extension selects (case-insensitive), or None."""
    name = os.fspath(path).lower()
    return next((f for f in FORMATS.values() if name.endswith(f.extensions)), None)


def format_of(path: PathLike, format: str | None = None) -> str:
    """The format named, or the one the path's extension selects; ExportError otherwise."""
    known = ", ".join(f"{f.name} ({', '.join(f.extensions)})" for f in FORMATS.values())
    if format is not None:
        if format not in FORMATS:
            raise ExportError(f"unknown export format {format!r}; formats: {known}")
        return format
    found = matching(path)
    if found is None:
        raise ExportError(
            f"cannot tell the export format of {os.fspath(path)!r} from its extension; "
            f"formats: {known} (or pass format=)"
        )
    return found.name


def _checked(name: str, options: dict[str, Any]) -> ExportFormat:
    """The format called ``name``, once ``options`` are ones it takes (ExportError if not)."""
    fmt = FORMATS[name]
    if fmt.view_options or set(options) <= fmt.options:
        return fmt
    takes = f" (only {', '.join(sorted(fmt.options))})" if fmt.options else ""
    raise ExportError(f"{name} export takes no options{takes}, got {', '.join(options)}")


def export(profile: Profile, path: PathLike, format: str | None = None, **options: Any) -> None:
    """Write ``profile`` to ``path`` in ``format`` (default: from the extension). The
    Markdown table takes the view options (as for ``prof.show``); the HTML report
    ``device`` (the roofline chart's roof)."""
    _checked(format_of(path, format), options).write(profile, path, **options)


def export_text(profile: Profile, format: str, **options: Any) -> str:
    """The text ``export`` would write in ``format`` (for standard output)."""
    return _checked(format_of("", format), options).text(profile, **options)


#: What a plan or a generation writes, by format: the extensions that select it.
#: (``.trace.json`` before ``.json``: a document without a trace writer refuses it)
DOCUMENT_FORMATS: dict[str, tuple[str, ...]] = {
    "html": (".html", ".htm"), "trace": (".trace.json",), "json": (".json",),
    "txt": (".txt", ".text"),
}  # fmt: skip


def export_document(
    path: PathLike,
    format: str | None,
    writers: Mapping[str, Callable[[PathLike], None]],
    what: str,
) -> None:
    """Write ``what`` (a plan, a generation) with the writer of the format named, or of
    the one ``path``'s extension selects among ``DOCUMENT_FORMATS``; ExportError
    otherwise."""
    name = os.fspath(path).lower()
    chosen = format or next(
        (f for f, exts in DOCUMENT_FORMATS.items() if name.endswith(exts)), None
    )
    if chosen is None or chosen not in writers:
        raise ExportError(document_formats_error(path, format, writers, what))
    writers[chosen](path)


def document_formats_error(
    path: PathLike, format: str | None, writers: Iterable[str], what: str
) -> str:
    """The message of a format ``what`` does not write (``writers``: the formats it
    does): the file, the format asked for (None: its extension names none of them), and
    the formats there are."""
    named = [f"{f} ({', '.join(DOCUMENT_FORMATS[f])})" for f in writers]
    known = " or ".join([", ".join(named[:-1]), named[-1]] if len(named) > 1 else named)
    if format is None:
        return f"cannot tell the format of {os.fspath(path)!r}; {what} exports as {known}"
    return f"cannot write {os.fspath(path)}: {what} exports as {known}, not as {format}"
