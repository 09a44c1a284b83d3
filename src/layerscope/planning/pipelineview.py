"""A pipeline's stages in the text view (``planning.view``): the heading's words and a
table with a row per rank (``planning.pipeline``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from layerscope.planning.fields import field
from layerscope.planning.viewtables import fitted, row, table
from layerscope.render import units
from layerscope.render.layout import Line, TableColumn, wrap_texts


def pipeline_words(pipe: Mapping[str, Any]) -> str:
    """The pipeline in the heading: `` x pipeline 4 (1f1b, 8 microbatches; stage 0, the
    highest peak)``."""
    virtual = int(pipe.get("virtual_stages", 1))
    chunks = f", {virtual} stages a rank" if virtual > 1 else ""
    who = "pipeline rank" if virtual > 1 else "stage"
    return (
        f" x pipeline {pipe['stages']} ({pipe['schedule']}{chunks}, "
        f"{pipe['microbatches']} microbatches; {who} {pipe['stage']}, {pipe['chosen']})"
    )


def stage_lines(section: Mapping[str, Any], width: int) -> list[Line]:
    """A pipeline's stages, one row each (none without a pipeline)."""
    pipe = section.get("pipeline")
    if not isinstance(pipe, Mapping):
        return []

    def head(key: str) -> str:
        return field("stage", key).header

    columns = [
        TableColumn("stage", head("stage"), "left", None, label=True, text=True),
        TableColumn("modules", head("modules"), "left", None, text=True),
        TableColumn("states", head("state_bytes"), priority=20),
        TableColumn("held", head("held_bytes"), priority=50),
        TableColumn("flight", head("in_flight"), priority=45),
        TableColumn("peak", head("peak_bytes"), priority=None),
        TableColumn("time", head("time"), priority=60),
    ]
    rows = [
        row(
            f"{r['stage']}{' *' if r['stage'] == pipe['stage'] else ''}",
            r["modules"],
            units.nbytes(r["state_bytes"]),
            units.nbytes(r["held_bytes"]),
            units.count(r["in_flight"]),
            units.nbytes(r["peak_bytes"]),
            units.seconds(r["time"]),
        )
        for r in pipe["rows"]
    ]
    lines = fitted(table(columns, rows, None), width)[0]
    who = "pipeline rank" if int(pipe.get("virtual_stages", 1)) > 1 else "stage"
    said = (
        f"* this plan's {who}. Held/mb: what one microbatch's forward leaves for its "
        f"backward; the bubble is {pipe['bubble']:.0%} of the step."
    )
    return lines + wrap_texts([(said, "")], width)


__all__ = ["pipeline_words", "stage_lines"]
