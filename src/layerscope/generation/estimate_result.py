"""``GenerateEstimate``: what ``ls.estimate_generate`` returns, a row per batch size, the
decode step's affine fit per batch, and the notes that say what the numbers leave out.
``to_dict()`` is its JSON data; ``render()``/``show()`` draw it
(``generation/estimate_view.py``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import IO, Any

from layerscope.generation.decodefit import AffineFit


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepRow:
        """A row from ``to_dict``'s form (an older row without the step's work reads 0)."""
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


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
    #: each sequence's new tokens per second at the first batch
    tokens_per_s: float
    sweep: list[SweepRow] = field(default_factory=list)
    #: the decode step's affine fit in the cache length, one per batch
    fit: list[AffineFit] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: kernels the target chose, as the profiles log them ({op: {kernel: calls}}), the
    #: first batch's prefill and decode step
    kernels: dict[str, Any] = field(default_factory=dict)

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
        return {
            "model": self.model,
            "target": self.target,
            "device": dict(self.device),
            "dtype": self.dtype,
            "prompt": self.prompt,
            "new_tokens": self.new_tokens,
            "cache": self.cache,
            "lower_bound": True,
            "prefill_time": self.prefill_time,
            "decode_time_per_token": self.decode_time_per_token,
            "tokens_per_s": self.tokens_per_s,
            "memory_bound": self.memory_bound,
            "crossover_batch": self.crossover,
            "fit_held": self.fit_held,
            "sweep": [r.to_dict() for r in self.sweep],
            "fit": [f.to_dict() for f in self.fit],
            "kernels": dict(self.kernels),
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GenerateEstimate:
        """An estimate from ``to_dict``'s form (``layerscope generate --json``'s file);
        ``SchemaError`` naming what is missing or wrong."""
        from layerscope.errors import SchemaError

        if not isinstance(data, Mapping):
            raise SchemaError("not a generation estimate (not a JSON object)")
        missing = [k for k in _KEYS if k not in data]
        if missing:
            raise SchemaError(f"not a generation estimate (no {', '.join(map(repr, missing))})")
        try:
            return cls(
                **{k: data[k] for k in _KEYS if k not in ("sweep", "fit", "notes", "kernels")},
                sweep=[SweepRow.from_dict(r) for r in data["sweep"]],
                fit=[AffineFit.from_dict(f) for f in data["fit"]],
                notes=list(data["notes"]),
                kernels=dict(data["kernels"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise SchemaError(f"not a generation estimate: {type(e).__name__}: {e}") from e

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write ``to_dict()`` as JSON (``load_generate_estimate`` reads it back)."""
        import json

        from layerscope.export.files import write_text

        write_text(os.fspath(path), json.dumps(self.to_dict(), indent=1, allow_nan=False) + "\n")

    def export(self, path: str | os.PathLike[str], format: str | None = None) -> None:
        """Write the estimate in the format its extension names: ``.json`` (``save``);
        ``format="json"`` for another name."""
        from layerscope.export.formats import export_document

        export_document(path, format, {"json": self.save}, "an estimate")

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


#: The keys ``from_dict`` needs: the attributes, besides those derived from the sweep.
_KEYS = ("model", "target", "device", "dtype", "prompt", "new_tokens", "cache",
         "prefill_time", "decode_time_per_token", "tokens_per_s", "sweep", "fit", "notes",
         "kernels")  # fmt: skip


def is_estimate(data: object) -> bool:
    """Whether a JSON document is a generation estimate (``GenerateEstimate.to_dict``)."""
    return (
        isinstance(data, dict)
        and "schema" not in data
        and {"sweep", "fit", "lower_bound"} <= set(data)
    )


def load_generate_estimate(path: str | os.PathLike[str]) -> GenerateEstimate:
    """Read an estimate written by ``GenerateEstimate.save`` (or ``layerscope generate
    --json`` on meta)."""
    from layerscope.export.jsonread import read_document

    return GenerateEstimate.from_dict(read_document(path))


__all__ = ["GenerateEstimate", "SweepRow", "is_estimate", "load_generate_estimate"]
