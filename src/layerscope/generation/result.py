"""``Generation``: what ``ls.profile_generate`` measured, one Profile per stage, the
model's calls one by one (``CallRow``), and the KV cache. Written as a ``layerscope/1``
document: the first stage is the document's profile, the ``generation`` section holds
the rest (``ls.load_generation`` reads it back, an older ``decode_steps`` key too;
``ls.load`` reads the first stage)."""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from typing import Any

from layerscope.errors import SchemaError
from layerscope.generation.callrow import CallRow, StageTotals
from layerscope.profile import Profile

#: The stages, in the order a generation runs them.
STAGES = ("prefill", "decode", "full")


#: Whether ``Generation.decode_steps`` has warned in this process.
_WARNED: list[bool] = []


@dataclass
class Generation:
    """One generation, measured (``docs/generate.md``)."""

    #: one Profile per stage that ran: "prefill" (the calls that fill an empty cache,
    #: an encoder-decoder's encoder included), "decode" (one new token per sequence on an
    #: existing cache), "full" (steps without a cache)
    stages: dict[str, Profile]
    #: one row per model call, the prefill's first (``CallRow``): stage, cache tokens
    #: before the call, tokens fed per row, MACs, FLOPs, bytes moved, peak above the
    #: call's entry level, KV-cache bytes after it (and its time, when timed)
    calls: list[CallRow]
    #: the KV cache: bytes after the prefill and at the end, per token and per row,
    #: per layer, self- and cross-attention apart
    kv_cache: dict[str, Any]
    #: how it ran: prompt tokens, new tokens, rows (batch x beams), the generate options
    options: dict[str, Any] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)
    #: keys of the ``generation`` section this version does not know (a newer
    #: layerscope's, an extension's), as read: written back after the known ones
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def decode_steps(self) -> list[CallRow]:
        """Deprecated: ``calls`` (it holds every call, the prefill's first)."""
        if not _WARNED:
            _WARNED.append(True)
            warnings.warn(
                "Generation.decode_steps is deprecated: use Generation.calls (every "
                "call, the prefill's first)",
                DeprecationWarning,
                stacklevel=2,
            )
        return self.calls

    def section(self) -> dict[str, Any]:
        """The ``generation`` section: everything but the first stage's profile, which
        is the document's own."""
        names = list(self.stages)
        section = {
            "first_stage": names[0] if names else None,
            "stages": {n: self.stages[n].to_dict() for n in names[1:]},
            "calls": [r.to_dict() for r in self.calls],
            "kv_cache": dict(self.kv_cache),
            "options": dict(self.options),
            "notices": list(self.notices),
        }
        section.update((k, v) for k, v in self.extra.items() if k not in section)
        return section

    def to_dict(self) -> dict[str, Any]:
        first = next(iter(self.stages.values()), None)
        doc = first.to_dict() if first is not None else {}
        doc["generation"] = self.section()
        return doc

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write as JSON; ``ls.load_generation`` reads it back."""
        from layerscope.export.files import write_text
        from layerscope.export.json import to_json

        first = next(iter(self.stages.values()), None)
        if first is None:
            raise SchemaError("a generation without stages has nothing to save")
        write_text(os.fspath(path), to_json(first, None, {"generation": self.section()}) + "\n")

    def to_html(self, path: str | os.PathLike[str], estimate: Any = None) -> None:
        """The HTML report of the decode stage's Profile (else the first stage's) with
        the generation's section first; ``estimate`` (an estimate or its ``to_dict()``)
        adds its batch sweep. ``ExportError`` for a generation without stages."""
        from layerscope.errors import ExportError
        from layerscope.generation.html import to_html

        stage = "decode" if "decode" in self.stages else next(iter(self.stages), None)
        if stage is None:
            raise ExportError(
                f"cannot write {os.fspath(path)}: a generation without stages has nothing to report"
            )
        table = estimate.to_dict() if hasattr(estimate, "to_dict") else estimate
        to_html(self.stages[stage], path, self.section_for_views(), table, stage=stage)

    def to_trace(self, path: str | os.PathLike[str]) -> None:
        """A Chrome/Perfetto trace of the calls, each as long as its measured time, the
        stages marked over them, the KV cache's bytes as a counter (needs ``timing=``)."""
        from layerscope.generation.trace import to_trace

        to_trace([r.to_dict() for r in self.calls], path)

    def export(self, path: str | os.PathLike[str], format: str | None = None) -> None:
        """Write the generation in the format its extension names: ``.html``
        (``to_html``), ``.trace.json`` (``to_trace``) or ``.json`` (``save``);
        ``format="html"``, ``"trace"`` or ``"json"`` for another name."""
        from layerscope.export.formats import export_document

        writers = {"html": self.to_html, "trace": self.to_trace, "json": self.save}
        export_document(path, format, writers, "a generation")

    @classmethod
    def from_dict(
        cls, data: dict[str, Any], *, consume: bool = False, source: str | None = None
    ) -> Generation:
        """A generation from ``to_dict``'s form; ``SchemaError`` naming what is wrong
        (after ``source``, the file, when given). ``consume``: ``data`` is the caller's no
        more, and each module's object is let go once read (a file's load: the parsed
        trees and the stages' are not both whole)."""
        from layerscope.export.json import profile_from_dict
        from layerscope.export.jsoncheck import checked_section
        from layerscope.export.jsonread import check_section_kind, naming, unknown_keys
        from layerscope.generation.schema import GENERATION

        missing = "not a generation (no 'generation' section); make one with ls.profile_generate"
        given = data.get("generation") if isinstance(data, dict) else None
        if isinstance(given, dict) and "decode_steps" in given and "calls" not in given:
            # a document written before the rows were named ``calls``
            given = {("calls" if k == "decode_steps" else k): v for k, v in given.items()}
            data = {**data, "generation": given}
        with naming(source):
            check_section_kind(data, "generation", "generation")
            section = checked_section(data, "generation", GENERATION, missing)
        stages: dict[str, Profile] = {}
        if section["first_stage"] is not None:
            # the document's profile without the section, which is the Generation's own
            # (kept once there, not also in the first stage's ``extra``)
            own = {k: v for k, v in data.items() if k != "generation"}
            stages[section["first_stage"]] = profile_from_dict(own, source, consume=consume)
        for name, doc in section["stages"].items():
            with naming(source):
                stages[name] = profile_from_dict(doc, consume=consume)
        return cls(
            stages,
            [CallRow.from_dict(r) for r in section["calls"]],
            dict(section["kv_cache"]),
            dict(section["options"]),
            list(section["notices"]),
            unknown_keys(section, GENERATION.props),
        )

    def render(self, stage: str | None = None, **options: Any) -> str:
        """A summary: stages, the KV cache, the model calls (``generation.view``); with
        ``stage=``, that stage's Profile in any view (``Profile.render``'s options); with
        a flat ``view=`` ("top", "ops") and no stage, one table over every stage with a
        Stage column (``render.stageviews``; a tree view needs ``stage=``)."""
        if stage is not None:
            return self._stage(stage).render(**options)
        if options.get("view") is not None:
            from layerscope.render.stageviews import render_stages

            return render_stages(self.stages, **options)
        from layerscope.generation.view import render_generation

        options.pop("view", None)
        return render_generation(self.section_for_views(), **options)

    def show(self, stage: str | None = None, **options: Any) -> None:
        """Print ``render(stage, **options)`` at the terminal's width."""
        if stage is not None:
            self._stage(stage).show(**options)
            return
        if options.get("view") is not None:
            from layerscope.render.stageviews import show_stages

            show_stages(self.stages, **options)
            return
        from layerscope.generation.view import show_generation

        options.pop("view", None)
        show_generation(self.section_for_views(), **options)

    def _stage(self, stage: str) -> Profile:
        if stage not in self.stages:
            from layerscope.validate import refuse

            refuse("stage", stage, " or ".join(repr(s) for s in self.stages) or "a stage")
        return self.stages[stage]

    def stage_totals(self) -> dict[str, StageTotals]:
        """Each stage's totals: its calls, work, peak and timed seconds."""
        return {
            name: StageTotals.of(prof, [r for r in self.calls if r.stage == name])
            for name, prof in self.stages.items()
        }

    def section_for_views(self) -> dict[str, Any]:
        """The figures the views show: each stage's totals, the steps, the cache."""
        totals = {name: t.to_dict() for name, t in self.stage_totals().items()}
        return {
            "stages": totals,
            "calls": [r.to_dict() for r in self.calls],
            "kv_cache": self.kv_cache,
            "options": self.options,
            "notices": self.notices,
        }

    def __str__(self) -> str:
        return self.render()


def load_generation(path: str | os.PathLike[str]) -> Generation:
    """Read a generation written by ``Generation.save`` (``ls.load_generation``)."""
    from layerscope.export.jsonread import read_document

    return Generation.from_dict(read_document(path), consume=True, source=os.fspath(path))


__all__ = ["STAGES", "CallRow", "Generation", "load_generation"]
