"""A flat view over every stage of a generation at once (``gen.render(view="top")``
without ``stage=``): one table, a Stage column before the modules, each stage's rows
those of its own view (``gen.render(stage=S, view=...)``) and its % columns shares of
that stage's total. The top view lists, at each depth, each stage's top k in turn; the
ops view each stage's rows in turn, a section each. The other views (the tree views,
roofline) show one stage at a time: they need ``stage=``. From the stages' Profiles
alone, so a loaded generation shows the same."""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

from layerscope.errors import InvalidInputError
from layerscope.gcpause import gc_paused
from layerscope.profile import Profile
from layerscope.render import units
from layerscope.render.context import Builder, ViewContext
from layerscope.render.flatviews import Footer, ops_builder, top_builder
from layerscope.render.layout import (
    Line,
    plain_text,
    terminal_width,
    too_narrow,
    wrap_text,
)
from layerscope.render.options import ViewOptions, view_options
from layerscope.render.summary import summary_lines
from layerscope.render.terminal import check_file, print_lines

__all__ = ["STAGED_VIEWS", "render_stages", "show_stages", "stages_builder"]

#: The views that show every stage in one table.
STAGED_VIEWS = ("top", "ops")


def stages_builder(stages: Mapping[str, Profile], options: ViewOptions) -> Builder:
    """The flat view ``options.view`` over every stage, as a function of the width;
    ``InvalidInputError`` for a view that shows one tree (it needs ``stage=``)."""
    if options.view not in STAGED_VIEWS:
        names = " or ".join(repr(s) for s in stages) or "a stage"
        raise InvalidInputError(
            f"the {options.view!r} view shows one stage at a time: pass stage= "
            f"({names}), or view='top' or 'ops' for every stage in one table"
        )
    if not stages:
        raise InvalidInputError("a generation without stages has no rows to show")
    sources = [(name, ViewContext(prof, options)) for name, prof in stages.items()]
    footer = _footer([c for _, c in sources], stages)
    view = (top_builder if options.view == "top" else ops_builder)(sources, footer)

    def lay_out(width: int) -> list[Line]:
        return too_narrow(width) or view(width)

    return lay_out


def _footer(ctxs: list[ViewContext], stages: Mapping[str, Profile]) -> Footer:
    """Below the table: hidden rows and columns and each stage's notices (once each),
    the stages' calls, then the facts every stage shares (the parameters, the run)."""

    def footer(
        hidden: int, total: int, dropped: list[str], width: int, ranked_by: str
    ) -> list[Line]:
        ranked = f"{ranked_by} in each stage"
        lines = ctxs[0].footer(hidden, total, dropped, width, ranked_by=ranked, summary=False)
        for ctx in ctxs[1:]:
            lines += ctx.footer(0, 0, [], width, ranked_by=ranked, summary=False)
        notes = [n for n in (ctx.roof_note() for ctx in ctxs) if n is not None]
        calls = "; ".join(
            f"{name}, {units.plural(prof.root.calls, 'model call')}"
            + (" summed" if prof.root.calls > 1 else "")
            for name, prof in stages.items()
        )
        facts = [summary_lines(ctx.measured) for ctx in ctxs]
        shared = [f for f in facts[0] if all(f in other for other in facts[1:])]
        for text, style in [*[(n, "layerscope.notice") for n in notes],
                            (f"Stages: {calls}.", ""), *shared]:  # fmt: skip
            lines += wrap_text(text, style, width)
        return _once(lines)

    return footer


def _once(lines: list[Line]) -> list[Line]:
    """The lines without repeats of an earlier one (each stage's same notice)."""
    seen: set[tuple[tuple[str, str], ...]] = set()
    out = []
    for line in lines:
        key = tuple(line)
        if key not in seen:
            seen.add(key)
            out.append(line)
    return out


def render_stages(stages: Mapping[str, Profile], **options: Any) -> str:
    """Plain text of the flat view over every stage, at ``width`` (default: the
    terminal's), options checked as ``Profile.render``'s."""
    opts = view_options(**options)
    width = opts.width or terminal_width()
    with gc_paused():
        return plain_text(stages_builder(stages, opts)(width))


def show_stages(stages: Mapping[str, Profile], file: IO[str] | None = None, **options: Any) -> None:
    """Print the flat view over every stage to the terminal (colours when it is one) or
    to ``file``."""
    opts = view_options(**options)
    check_file(file)
    print_lines(stages_builder(stages, opts), opts.width, file)
