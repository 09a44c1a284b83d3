"""``GenerateEstimate``: what ``ls.estimate_generate`` returns, a row per batch size, the
decode step's affine fit per batch, and the notes that say what the numbers leave out.
``to_dict()`` is its JSON data; ``render()``/``show()`` draw it
(``generation/estimate_view.py``); ``to_html()`` writes it above the first batch's prefill
analysis (``generation/html.py``)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import IO, TYPE_CHECKING, Any

from layerscope.generation.decodefit import AffineFit

if TYPE_CHECKING:
    from layerscope.profile import Profile


#: A row's predicted fields (an older estimate has none).
PREDICTED_KEYS = ("prefill_time_predicted", "decode_time_predicted", "launch_time", "kernels")
#: A row's mixture-of-experts fields, written only for a model with experts.
MOE_KEYS = (
    "experts_per_layer",
    "decode_time_all_experts",
    "decode_bytes_all_experts",
    "prefill_time_all_experts",
)


@dataclass
class SweepRow:
    """One batch size: ``batch`` sequences generated together (seconds, bytes)."""

    batch: int
    #: the roofline time of the prefill: every prompt token of every sequence, at once
    prefill_time: float
    #: the roofline time of one decode step (one new token for every sequence), the mean
    #: over the decode steps
    decode_time_per_token: float
    #: 1 / decode_time_per_token: each sequence's new tokens per second
    tokens_per_s_per_sequence: float
    #: batch / decode_time_per_token: new tokens per second, all sequences together
    tokens_per_s: float
    #: what limits a decode step, from its totals: "memory" or "compute"
    bound: str
    #: parameters and buffers, once each
    weight_bytes: int
    #: the KV cache at prompt + new_tokens tokens, every sequence
    kv_bytes: int
    #: weight_bytes + kv_bytes within the target's memory (None: the spec has none)
    fits: bool | None
    #: one decode step at the mean cache length
    decode_flops: float = 0.0
    decode_bytes: float = 0.0
    prefill_flops: float = 0.0
    prefill_bytes: float = 0.0
    #: a mixture of experts (None: dense): the distinct experts a decode step reads per
    #: layer, expected under uniform routing; the decode step and the prefill with every
    #: expert read, the bound's other side
    experts_per_layer: float | None = None
    decode_time_all_experts: float | None = None
    decode_bytes_all_experts: float | None = None
    prefill_time_all_experts: float | None = None
    #: predicted (``generation.predicted``; None: an older estimate): the prefill and a
    #: decode step at the mean cache length, each the larger of its kernels' running and
    #: the host's launching, never below its bound; the decode step's launch time and
    #: kernels
    prefill_time_predicted: float | None = None
    decode_time_predicted: float | None = None
    launch_time: float | None = None
    kernels: int | None = None

    @property
    def extra(self) -> dict[str, Any]:
        """Keys of the row this version does not know (a newer layerscope's, an
        extension's), as read: written back after the known ones. Not a field (the row's
        fields are the sweep's columns, ``generation.fields``; ``dataclasses.replace``
        leaves it out), but compared."""
        held: dict[str, Any] = self.__dict__.setdefault("_extra", {})
        return held

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SweepRow) or other.__class__ is not self.__class__:
            return NotImplemented
        return self.to_dict() == other.to_dict()

    @property
    def tokens_per_s_per_seq(self) -> float:
        """Each sequence's new tokens per second (``tokens_per_s_per_sequence``), named as
        ``ls.plan_serving``'s rows name it; ``tokens_per_s`` is all sequences together."""
        return self.tokens_per_s_per_sequence

    def to_dict(self) -> dict[str, Any]:
        """Every field; a dense model's row leaves out the experts' (``MOE_KEYS``), an
        older estimate's the predicted ones (``PREDICTED_KEYS``); then ``extra``'s keys
        (a field's name is written from the field, not ``extra``)."""
        data = {
            k: v
            for k in ROW_KEYS
            if (v := getattr(self, k)) is not None or k not in (*MOE_KEYS, *PREDICTED_KEYS)
        }
        data.update((k, v) for k, v in self.extra.items() if k not in ROW_KEYS)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepRow:
        """A row from ``to_dict``'s form (``estimate_schema`` checked it: the step's work
        is always there): its fields, and the keys it does not know, in order, in
        ``extra``."""
        row = cls(**{k: data[k] for k in ROW_KEYS if k in data})
        row.extra.update((k, v) for k, v in data.items() if k not in ROW_KEYS)
        return row


#: A row's fields: the keys and order of the document's row.
ROW_KEYS = tuple(f.name for f in fields(SweepRow))


@dataclass
class GenerateEstimate:
    """Prefill and decode time of a decoder model on a target GPU, per batch size: roofline
    lower bounds from analyses on ``meta`` steered to the target's kernels
    (``docs/generate.md``). The top-level figures are those of the first batch."""

    model: str
    target: str
    #: the target's spec: name, label, peak FLOP/s (for ``dtype``), bandwidth, memory
    device: dict[str, Any]
    dtype: str
    prompt: int
    new_tokens: int
    cache: str
    prefill_time: float
    decode_time_per_token: float
    #: each sequence's new tokens per second at the first batch (``tokens_per_s_total``:
    #: all its sequences together; ``tokens_per_s``: this, deprecated)
    tokens_per_s_per_seq: float
    sweep: list[SweepRow] = field(default_factory=list)
    #: the decode step's affine fit in the cache length, one per batch
    fit: list[AffineFit] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: kernels the target chose, as the profiles log them ({op: {kernel: calls}}), the
    #: first batch's prefill and decode step
    kernels: dict[str, Any] = field(default_factory=dict)
    #: the first batch's prefill, analysed on meta for the target: the report under the
    #: estimate in ``to_html`` (not in ``to_dict``: an estimate loaded from JSON has none)
    analysis: Profile | None = field(default=None, repr=False, compare=False)
    #: the KV cache's width when given (None: the model's dtype)
    kv_dtype: str | None = None
    #: a paged cache's block in tokens (None: another cache)
    block_size: int | None = None
    #: a mixture of experts' routing (``moe.Routing.to_dict``; None: dense)
    moe: dict[str, Any] | None = None
    #: how the host issues the predicted calls' kernels: "eager" or "graphs" (None: an
    #: older estimate, without predictions)
    mode: str | None = None
    #: GPUs each layer is split over by the model's tensor-parallel plan (every figure
    #: one GPU's; 1: one GPU)
    tp: int = 1
    #: top-level keys of a document this version does not know (a newer layerscope's,
    #: an extension's), as read: written back by ``save`` after the known ones
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens_per_s(self) -> float:
        """Deprecated: each sequence's new tokens per second at the first batch, as before
        (a row's ``tokens_per_s`` is all sequences together); read ``tokens_per_s_per_seq``
        or ``tokens_per_s_total``. Warns once."""
        _deprecated(
            "GenerateEstimate.tokens_per_s is per sequence, unlike a row's tokens_per_s "
            "(the whole batch), and is deprecated: read tokens_per_s_per_seq (per sequence) "
            "or tokens_per_s_total (all sequences of the first batch)"
        )
        return self.tokens_per_s_per_seq

    @property
    def tokens_per_s_total(self) -> float | None:
        """New tokens per second of the first batch, all its sequences together (its row's
        ``tokens_per_s``; None without rows)."""
        return self.sweep[0].tokens_per_s if self.sweep else None

    @property
    def memory_bound(self) -> bool:
        """Whether a decode step is memory-bound at every batch of the sweep."""
        return all(r.bound == "memory" for r in self.sweep)

    @property
    def crossover(self) -> int | None:
        """The first batch of the sweep where a decode step is compute-bound (None: none)."""
        return next((r.batch for r in self.sweep if r.bound == "compute"), None)

    @property
    def fit_held(self) -> bool | None:
        """Whether the affine check held at every batch (None: nothing to check)."""
        held = [f.held for f in self.fit if f.held is not None]
        return all(held) if held else None

    def row(self, batch: int) -> SweepRow:
        for r in self.sweep:
            if r.batch == batch:
                return r
        raise KeyError(batch)

    def to_dict(self) -> dict[str, Any]:
        """The schema (``layerscope-estimate/1``), the run, the first batch's figures, the
        rows, the fits, the kernels and the notes, then ``extra``'s keys."""
        from layerscope.generation.estimate_schema import ESTIMATE_SCHEMA

        data = {
            "schema": ESTIMATE_SCHEMA,
            "model": self.model,
            "target": self.target,
            "device": dict(self.device),
            "dtype": self.dtype,
            "prompt": self.prompt,
            "new_tokens": self.new_tokens,
            "cache": self.cache,
            **({"block_size": self.block_size} if self.block_size is not None else {}),
            **({"kv_dtype": self.kv_dtype} if self.kv_dtype is not None else {}),
            **({"moe": dict(self.moe)} if self.moe is not None else {}),
            **({"mode": self.mode} if self.mode is not None else {}),
            **({"tp": self.tp} if self.tp > 1 else {}),
            "lower_bound": True,
            "prefill_time": self.prefill_time,
            "decode_time_per_token": self.decode_time_per_token,
            # per sequence, as it always was (deprecated); the two below name it apart
            "tokens_per_s": self.tokens_per_s_per_seq,
            "tokens_per_s_per_seq": self.tokens_per_s_per_seq,
            "tokens_per_s_total": self.tokens_per_s_total,
            "memory_bound": self.memory_bound,
            "crossover_batch": self.crossover,
            "fit_held": self.fit_held,
            "sweep": [r.to_dict() for r in self.sweep],
            "fit": [f.to_dict() for f in self.fit],
            "kernels": dict(self.kernels),
            "notes": list(self.notes),
        }
        data.update((k, v) for k, v in self.extra.items() if k not in data)
        return data

    @classmethod
    def from_dict(cls, data: Any, source: str | None = None) -> GenerateEstimate:
        """An estimate from ``to_dict``'s form, every field checked: ``SchemaError`` naming
        the JSON path (after ``source``, the file, when given)."""
        from layerscope.export.jsonread import check_schema, checked_document, unknown_keys
        from layerscope.generation import estimate_schema as schema

        check_schema(data, schema.ESTIMATE_SCHEMA, "generation estimate", source)
        d = checked_document(data, schema.ESTIMATE, source)
        fits = [AffineFit.from_dict(f) for f in d.get("fit", [])]
        schema.check_fits(d.get("fit", []), fits, source)
        return cls(
            d["model"], d["target"], dict(d["device"]), d["dtype"], d["prompt"],
            d["new_tokens"], d["cache"], d["prefill_time"], d["decode_time_per_token"],
            d.get("tokens_per_s_per_seq", d["tokens_per_s"]),
            [SweepRow.from_dict(r) for r in d["sweep"]], fits, list(d["notes"]),
            dict(d.get("kernels", {})), None, d.get("kv_dtype"), d.get("block_size"),
            d.get("moe"), d.get("mode"), d.get("tp", 1),
            unknown_keys(d, schema.ESTIMATE_KEYS),
        )  # fmt: skip

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write ``to_dict()`` as JSON (``ls.load_estimate`` reads it back)."""
        from layerscope.export.files import write_text
        from layerscope.export.jsonread import document_json

        write_text(os.fspath(path), document_json(self.to_dict()))

    def to_html(self, path: str | os.PathLike[str]) -> None:
        """The HTML report: the estimate's section (cards, the batch sweep as a chart and a
        table, the notes) above the first batch's prefill analysis; ``ExportError`` for an
        estimate without its analysis (one loaded from JSON)."""
        from layerscope.export.html import reported
        from layerscope.generation.html import to_html

        analysis = reported(
            self.analysis, path, "estimate",
            "an estimate from ls.estimate_generate has one; its JSON does not keep it",
        )  # fmt: skip
        to_html(analysis, path, {}, self.to_dict())

    def export(self, path: str | os.PathLike[str], format: str | None = None) -> None:
        """Write the estimate as ``.json`` (``save``), its text (``.txt``) or its HTML
        report (``.html``, ``to_html``)."""
        from layerscope.export.files import write_text
        from layerscope.export.formats import export_document

        def text(out: str | os.PathLike[str]) -> None:
            write_text(os.fspath(out), self.render(width=100) + "\n")

        writers = {"json": self.save, "txt": text, "html": self.to_html}
        export_document(path, format, writers, "an estimate")

    def render(self, *, width: int | None = None) -> str:
        """The estimate as plain text, ``width`` characters wide (default: the terminal's):
        the run, the first batch's figures, the sweep's table and the notes."""
        from layerscope.generation.estimate_view import render_generate_estimate

        return render_generate_estimate(self.to_dict(), width=width)

    def show(self, *, width: int | None = None, file: IO[str] | None = None) -> None:
        """Print the estimate to the terminal (colours when it is one) or to ``file``."""
        from layerscope.generation.estimate_view import show_generate_estimate

        show_generate_estimate(self.to_dict(), width=width, file=file)

    def __str__(self) -> str:
        return self.render()


#: The deprecation messages already given in this process (each is given once).
_WARNED: set[str] = set()


def _deprecated(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, DeprecationWarning, stacklevel=3)


def load_estimate(path: str | os.PathLike[str]) -> GenerateEstimate:
    """Read an estimate written by ``GenerateEstimate.save`` or ``layerscope generate
    --json`` on meta (``ls.load_estimate``)."""
    from layerscope.export.jsonread import read_document

    return GenerateEstimate.from_dict(read_document(path), os.fspath(path))


def is_estimate(data: object) -> bool:
    """Whether a JSON document is a generation estimate (``GenerateEstimate.to_dict``):
    its schema says so (any version: ``from_dict`` says which it reads), or, without one
    (an older file), it has a sweep and ``lower_bound``."""
    from layerscope.export.jsonread import schema_name
    from layerscope.generation.estimate_schema import ESTIMATE_SCHEMA

    if not isinstance(data, dict):
        return False
    if "schema" in data:
        return schema_name(data) == ESTIMATE_SCHEMA.split("/", 1)[0]
    return {"sweep", "lower_bound"} <= set(data)


__all__ = ["GenerateEstimate", "SweepRow", "is_estimate", "load_estimate"]
