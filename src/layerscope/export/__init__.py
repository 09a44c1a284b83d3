"""Exports of a Profile: JSON, CSV, DataFrame, Markdown, Chrome/Perfetto trace, HTML.

Exporters see only the Profile (fresh or loaded), never the model. ``export(prof, path)``
picks the format from the file's extension.
"""

from __future__ import annotations

import os
from typing import Any

from layerscope.errors import ExportError
from layerscope.export.files import write_text
from layerscope.profile import Profile

__all__ = ["FORMATS", "export", "export_text", "format_of"]

#: Format name -> the extensions that select it (longest first where they overlap).
FORMATS: dict[str, tuple[str, ...]] = {
    "trace": (".trace.json",),
    "json": (".json",),
    "csv": (".csv",),
    "md": (".md", ".markdown"),
    "html": (".html", ".htm"),
}


def format_of(path: str | os.PathLike[str], format: str | None = None) -> str:
    """The format named, or the one the path's extension selects; ExportError otherwise."""
    known = ", ".join(f"{name} ({', '.join(exts)})" for name, exts in FORMATS.items())
    if format is not None:
        if format not in FORMATS:
            raise ExportError(f"unknown export format {format!r}; formats: {known}")
        return format
    name = os.fspath(path).lower()
    for fmt, exts in FORMATS.items():
        if name.endswith(exts):
            return fmt
    raise ExportError(
        f"cannot tell the export format of {os.fspath(path)!r} from its extension; "
        f"formats: {known} (or pass format=)"
    )


def _check_options(fmt: str, options: dict[str, Any]) -> None:
    if fmt == "md" or not options:
        return
    if fmt == "html" and set(options) <= {"device"}:
        return
    takes = " (only device)" if fmt == "html" else ""
    raise ExportError(f"{fmt} export takes no options{takes}, got {', '.join(options)}")


def export(
    profile: Profile, path: str | os.PathLike[str], format: str | None = None, **options: Any
) -> None:
    """Write ``profile`` to ``path`` in ``format`` (default: from the extension). The
    Markdown table takes the view options (as for ``prof.show``); the HTML report
    ``device`` (the roofline chart's roof)."""
    fmt = format_of(path, format)
    _check_options(fmt, options)
    if fmt == "json":
        profile.save(path)
    elif fmt == "csv":
        profile.to_csv(path)
    elif fmt == "md":
        write_text(path, profile.to_markdown(**options))
    elif fmt == "html":
        profile.to_html(path, **options)
    else:
        profile.to_trace(path)


def export_text(profile: Profile, format: str, **options: Any) -> str:
    """The text ``export`` would write in ``format`` (for standard output)."""
    fmt = format_of("", format)
    _check_options(fmt, options)
    if fmt == "json":
        return profile.to_json() + "\n"
    if fmt == "csv":
        text = profile.to_csv()
        assert text is not None
        return text
    if fmt == "md":
        return profile.to_markdown(**options)
    if fmt == "html":
        from layerscope.export.html import to_html_text

        return to_html_text(profile, **options)
    import json

    from layerscope.export.trace import trace_events

    return json.dumps(trace_events(profile), separators=(",", ":"), allow_nan=False) + "\n"
