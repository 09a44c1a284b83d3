"""``Plan``: the answer of ``ls.plan`` for one GPU of a training run, with the analysis it
was computed from. Numbers only (bytes, seconds, FLOPs); views render it, ``to_dict``
writes it as the ``plan`` section of a ``layerscope/1`` document (the analysis is the
rest of the document), ``Plan.from_dict``/``ls.load_plan`` read it back.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from typing import Any

from layerscope.errors import InvalidInputError
from layerscope.profile import Profile

#: What the output says beside its figures (``Plan.notes`` adds the plan's own).
LOWER_BOUND = (
    "step_time_bound is a lower bound (roofline of each module, collectives at NCCL's "
    "rates, perfect overlap where the model allows it): tokens_per_s_bound is an upper "
    "bound"
)
PREDICTED = (
    "step_time, time and tokens_per_s are predictions: each kernel at the target's "
    "achievable rate for its class (matmul by shape, attention by kernel, head dim and "
    "length, memory-bound at the achievable bandwidth) plus a launch cost, eager; mfu "
    "counts 6 N per token plus attention (PaLM, Appendix B), mfu_counted the analysis's "
    "FLOPs."
)


#: Fields that are not keys of the section (``extra`` holds keys this version does not
#: know: written after the known ones).
_NOT_SAVED = {"analysis", "source", "extra"}
#: Keys of the section derived from the fields (written, checked on load, not read).
_DERIVED = ("fits", "headroom_bytes")


@dataclass
class Plan:
    """One GPU's memory and step time in a training run (``docs/plan.md``)."""

    #: the options the plan was made with (target, world_size, sharding, ...)
    options: dict[str, Any]
    #: the target's name, label, memory, interconnect and node size
    device: dict[str, Any]
    #: model states at rest on this GPU (``planning.states``): param_bytes, grad_bytes
    #: (after the backward), optimizer_state_bytes, master_weight_bytes
    states: dict[str, int]
    #: the timeline's maximum and its composition by part (``timeline.PARTS``)
    peak_bytes: int
    memory: dict[str, int]
    #: where the peak is: {"phase", "event", "path"}
    peak_phase: dict[str, str]
    budget: int | None
    reserve_bytes: int
    #: the modules checkpointed and what that gives
    checkpoint: list[str]
    kept_activation_bytes: int
    recompute_flops: int
    #: the timeline as columns: phase, event, path, total and one list per part
    timeline: dict[str, list[Any]]
    #: predicted step time by part (seconds): compute, recompute, exposed_comm,
    #: optimizer, and the whole collectives' time (comm) of which exposed_comm is not
    #: hidden; ``step_time`` their sum (``time_bound``, ``step_time_bound``: the roofline)
    time: dict[str, float]
    step_time: float
    #: forward + backward FLOPs per step (no recompute), grad_accum micro-batches
    model_flops: int
    mfu: float | None
    tokens: int | None
    tokens_per_s: float | None
    #: one row per FSDP unit or checkpointed module (``planning.view`` shows them)
    modules: list[dict[str, Any]]
    #: collectives per step on this GPU in ``profile.comm``'s form
    comm: dict[str, Any]
    notes: list[str]
    #: the roofline lower bound on the step time, by part as ``time``, and its throughput
    step_time_bound: float | None = None
    tokens_per_s_bound: float | None = None
    time_bound: dict[str, float] | None = None
    #: model FLOPs / (step_time x peak) with the analysis's own FLOP count
    mfu_counted: float | None = None
    #: FLOPs per step in the published convention (6 N per token plus attention)
    mfu_flops: int | None = None
    #: kernels launched per step (the analysis's), and the rates they were priced at
    kernels: int | None = None
    rates: str | None = None
    #: pipeline parallelism (``planning.pipeline``): the schedule, the microbatches, the
    #: stage this plan is of and one row per stage; None without a pipeline
    pipeline: dict[str, Any] | None = None
    analysis: Profile | None = field(default=None, repr=False, compare=False)
    #: the model and input the plan was analysed from (``planning.sweep.Source``), to
    #: analyse other micro-batches; None for a plan from a profile or a file
    source: Any = field(default=None, repr=False, compare=False)
    #: keys of the ``plan`` section this version does not know (a newer layerscope's, an
    #: extension's), as read: written back after the known ones
    extra: dict[str, Any] = field(default_factory=dict)

    # ---- answers -----------------------------------------------------------------
    @property
    def fits(self) -> bool | None:
        """Whether the peak plus the reserve fits the budget (None without a budget)."""
        return None if self.budget is None else self.headroom_bytes >= 0  # type: ignore[operator]

    @property
    def headroom_bytes(self) -> int | None:
        """Budget minus reserve minus peak (negative: it does not fit)."""
        return None if self.budget is None else self.budget - self.reserve_bytes - self.peak_bytes

    def max_micro_batch(self, limit: int = 1024, *, progress: Any = None) -> int:
        """The largest micro-batch (dim 0 of the input) up to ``limit`` whose plan fits the
        budget, found by new analyses at other batch sizes (``planning.sweep``); 0 if none
        fits. Needs the model: a plan from a profile or a file cannot answer.
        ``progress``: a status line on stderr past 2 s (``layerscope.busy``)."""
        if self.source is None:
            raise InvalidInputError(
                "max_micro_batch analyses other batch sizes: it needs the plan made from a "
                "model (ls.plan(model, ...)), not from a profile or a file"
            )
        return int(self.source.max_micro_batch(self, limit, progress))

    # ---- files ---------------------------------------------------------------------
    def section(self) -> dict[str, Any]:
        """The ``plan`` section of the JSON document."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _NOT_SAVED}
        out["fits"] = self.fits
        out["headroom_bytes"] = self.headroom_bytes
        out.update((k, v) for k, v in self.extra.items() if k not in out)
        return out

    def to_dict(self) -> dict[str, Any]:
        """The analysis's ``to_dict`` with the ``plan`` section added."""
        doc = self.analysis.to_dict() if self.analysis is not None else {}
        doc["plan"] = self.section()
        return doc

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the plan as JSON; ``ls.load_plan`` reads it back (``ls.load`` reads the
        analysis in it)."""
        from layerscope.export.files import write_text
        from layerscope.export.json import to_json

        if self.analysis is not None:
            text = to_json(self.analysis, None, {"plan": self.section()})
        else:
            text = json.dumps({"plan": self.section()}, allow_nan=False)
        write_text(os.fspath(path), text + "\n")

    @classmethod
    def from_dict(
        cls, data: dict[str, Any], *, consume: bool = False, source: str | None = None
    ) -> Plan:
        """A plan from ``to_dict``'s form; ``SchemaError`` when there is no plan section,
        a field is missing or malformed, or the figures contradict each other (after
        ``source``, the file, when given). ``consume``: ``data`` is the caller's no more,
        and each module's object is let go once read (a file's load)."""
        from layerscope.export.json import profile_from_dict
        from layerscope.export.jsoncheck import checked_section
        from layerscope.export.jsonread import check_section_kind, naming, unknown_keys
        from layerscope.planning.schema import PLAN, check_figures

        missing = "not a plan (no 'plan' section); make one with ls.plan"
        with naming(source):
            check_section_kind(data, "plan", "plan")
            section = checked_section(data, "plan", PLAN, missing)
            check_figures(section)
        known = [f.name for f in fields(cls) if f.name not in _NOT_SAVED]
        # the document's profile without the section, which is the Plan's own
        own = {k: v for k, v in data.items() if k != "plan"}
        analysis = profile_from_dict(own, source, consume=consume) if "root" in data else None
        # the figures added after the first documents are optional (None when absent)
        return cls(
            **{k: section[k] for k in known if k in section},
            analysis=analysis,
            extra=unknown_keys(section, (*known, *_DERIVED)),
        )

    # ---- views ---------------------------------------------------------------------
    def render(self, **options: Any) -> str:
        """The plan as plain text: a summary and the per-module table (``planning.view``;
        ``width``, ``max_rows``, ``fold``)."""
        from layerscope.planning.view import render_plan

        return render_plan(self.section(), **options)

    def show(self, **options: Any) -> None:
        """Print ``render(**options)`` (at the terminal's width by default)."""
        from layerscope.planning.view import show_plan

        show_plan(self.section(), **options)

    def __str__(self) -> str:
        return self.render()

    def to_html(self, path: str | os.PathLike[str], sweep: Any = None) -> None:
        """The analysis's HTML report with the plan section first (``sweep``: a ``Sweep``
        or its ``to_dict()``, shown as a table); ``ExportError`` without an analysis."""
        from layerscope.export.html import reported
        from layerscope.planning.html import to_html

        analysis = reported(
            self.analysis, path, "plan",
            "a plan from ls.plan, or a file that Plan.save wrote with it, has one",
        )  # fmt: skip
        table = sweep.to_dict() if hasattr(sweep, "to_dict") else sweep
        to_html(analysis, path, self.section(), table)

    def export(self, path: str | os.PathLike[str], format: str | None = None) -> None:
        """Write the plan in the format its extension names: ``.html`` (``to_html``) or
        ``.json`` (``save``); ``format="html"`` or ``"json"`` for another name."""
        from layerscope.export.formats import export_document

        export_document(path, format, {"html": self.to_html, "json": self.save}, "a plan")


def load_plan(path: str | os.PathLike[str]) -> Plan:
    """Read a plan written by ``Plan.save`` (``ls.load_plan``)."""
    from layerscope.export.jsonread import read_document

    return Plan.from_dict(read_document(path), consume=True, source=os.fspath(path))


__all__ = ["LOWER_BOUND", "PREDICTED", "Plan", "load_plan"]
