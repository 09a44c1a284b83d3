"""Exports of a Profile: JSON, CSV, DataFrame, Markdown, Chrome/Perfetto trace, HTML.

Exporters see only the Profile (fresh or loaded), never the model. ``export(prof, path)``
picks the format from the file's extension (the table of formats: ``export.formats``).
"""

from __future__ import annotations

from layerscope.export.formats import FORMATS, export, export_text, format_of

__all__ = ["FORMATS", "export", "export_text", "format_of"]
