"""``ServingPlan``: what ``ls.plan_serving`` returns: the memory split, the KV cache's
capacity, the concurrency at the longest context, and latency and throughput per batch
size (``generation/serving.py``). ``to_dict()`` is its JSON data; ``render()``/``show()``
draw it."""

from __future__ import annotations

import numbers
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

from layerscope.generation.cachekinds import paged_tokens
from layerscope.generation.fields import SERVING_FIELDS
from layerscope.validate import is_bool, refuse

if TYPE_CHECKING:
    from layerscope.profile import Profile


@dataclass(frozen=True)
class KVLayer:
    """One layer of the KV cache: bytes per token, the most tokens it holds (None:
    every token; a sliding window: its window)."""

    bytes_per_token: float
    cap: int | None = None
    #: keys of a layer this version does not know, as read: written back after the known
    #: ones (not hashed: a layer is hashed by its figures)
    extra: dict[str, Any] = field(default_factory=dict, kw_only=True, hash=False)

    def to_dict(self) -> dict[str, Any]:
        data = {"bytes_per_token": self.bytes_per_token, "cap": self.cap}
        data.update((k, v) for k, v in self.extra.items() if k not in data)
        return data


@dataclass
class ServingRow:
    """One batch size: ``batch`` sequences served together (seconds, bytes)."""

    batch: int
    #: the prefill of every prompt at once, predicted as a decode step is
    ttft: float
    #: the prefill at the roofline: the lower bound
    ttft_bound: float
    #: one decode step, predicted: its kernels at the achievable rates, or the host's
    #: launches when they take longer
    tpot: float
    #: one decode step at the roofline: the lower bound
    tpot_bound: float
    #: the host's time to launch the step's kernels (eager: each; graphs: one graph)
    launch_time: float
    #: kernels one decode step runs
    kernels: int
    #: batch / tpot: output tokens per second, all sequences together
    tokens_per_s: float
    #: 1 / tpot: each sequence's output tokens per second
    tokens_per_s_per_seq: float
    #: what limits a decode step: "memory", "compute" or "launches"
    bound: str
    kv_bytes: int
    fits: bool
    #: keys of a row this version does not know (a newer layerscope's), as read: written
    #: back after the known ones
    extra: dict[str, Any] = field(default_factory=dict, kw_only=True)
    #: keys of the table its document did not write and nothing else gives (a plan saved
    #: before launches were priced: ``launch_time`` and ``kernels``, 0 here): left out of
    #: ``to_dict``, so the views show none and ``save`` writes what was read
    absent: tuple[str, ...] = field(default=(), kw_only=True)

    def to_dict(self) -> dict[str, Any]:
        data = {f.key: getattr(self, f.key) for f in SERVING_FIELDS if f.key not in self.absent}
        data.update((k, v) for k, v in self.extra.items() if k not in data)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ServingRow:
        """A row from ``to_dict``'s form (``serving_schema`` checked it): its known keys,
        and the others in ``extra``. An older plan's row: its TTFT and TPOT were their
        roofline bounds (``ttft_bound``, ``tpot_bound``), and the first plans priced no
        launches (``launch_time`` and ``kernels`` ``absent``)."""
        from layerscope.export.jsonread import unknown_keys

        keys = [f.key for f in SERVING_FIELDS]
        given = {k: data[k] for k in keys if k in data}
        given.setdefault("ttft_bound", data["ttft"])
        given.setdefault("tpot_bound", data["tpot"])
        absent = tuple(k for k in ("launch_time", "kernels") if k not in data)
        given.setdefault("launch_time", 0.0)
        given.setdefault("kernels", 0)
        return cls(**given, extra=unknown_keys(data, keys), absent=absent)


@dataclass
class ServingPlan:
    """How many sequences a model serves on one GPU, and how fast (module doc)."""

    model: str
    target: str
    device_label: str
    #: the target's usable memory (what an idle GPU reports)
    usable_bytes: int
    memory_utilization: float
    dtype: str
    #: the linears' storage ("int4", ...; None: the model's own)
    weights: str | None
    kv_dtype: str
    block_size: int
    max_context: int
    prompt: int
    new_tokens: int
    weight_bytes: int
    workspace_bytes: int
    prefill_chunk: int
    reserve_bytes: int
    #: "eager" (a launch per kernel) or "graphs" (one CUDA graph per decode step); None:
    #: a plan saved before the mode, whose rows are roofline bounds without launches
    mode: str | None
    layers: list[KVLayer]
    rows: list[ServingRow] = field(default_factory=list)
    #: the rules the numbers follow, then the latency estimate's notes
    notes: list[str] = field(default_factory=list)
    #: the first batch's prefill, analysed on meta for the target: the report under the
    #: plan in ``to_html`` (not in ``to_dict``: a plan loaded from JSON has none)
    analysis: Profile | None = field(default=None, repr=False, compare=False)
    #: GPUs each layer is split over by the model's tensor-parallel plan (every figure
    #: one GPU's)
    tp: int = 1
    #: top-level keys of a document this version does not know (a newer layerscope's,
    #: an extension's), as read: written back by ``save`` after the known ones
    extra: dict[str, Any] = field(default_factory=dict)
    #: the same, of its ``memory`` and ``kv`` sections
    memory_extra: dict[str, Any] = field(default_factory=dict)
    kv_extra: dict[str, Any] = field(default_factory=dict)

    @property
    def budget(self) -> int:
        """The memory the server may take: usable x memory_utilization."""
        return int(self.usable_bytes * self.memory_utilization)

    @property
    def kv_budget(self) -> int:
        """What is left for the KV cache (may be negative: the weights do not fit)."""
        return self.budget - self.weight_bytes - self.workspace_bytes - self.reserve_bytes

    @property
    def kv_bytes_per_token(self) -> float:
        """One token's keys and values in every layer."""
        return sum(layer.bytes_per_token for layer in self.layers)

    @property
    def kv_tokens(self) -> int:
        """Tokens the KV budget holds in every layer (a server's "KV cache size")."""
        return max(int(self.kv_budget // self.kv_bytes_per_token), 0)

    @property
    def kv_blocks(self) -> int:
        return self.kv_tokens // self.block_size

    def kv_bytes(self, length: int) -> int:
        """One sequence's KV cache at ``length`` tokens: each layer's tokens (at most its
        window) rounded up to whole blocks; ``InvalidInputError`` for a negative length."""
        length = _whole("length", length, 0, "a number of tokens >= 0 (an int)")
        total = 0.0
        for layer in self.layers:
            total += layer.bytes_per_token * paged_tokens(length, layer.cap, self.block_size)
        return int(total)

    @property
    def max_concurrency(self) -> int:
        """Sequences of ``max_context`` tokens whose caches fit together."""
        return max(self.kv_budget // self.kv_bytes(self.max_context), 0)

    def longest_context(self, batch: int) -> int:
        """The longest context (at most ``max_context``) each of ``batch`` sequences can
        hold at once; 0 when not even one token each fits. ``InvalidInputError`` for a
        batch below 1."""
        batch = _whole("batch", batch, 1, "a number of sequences >= 1 (an int)")
        lo, hi = 0, self.max_context
        while lo < hi:  # the most L with batch x kv_bytes(L) within the budget
            mid = (lo + hi + 1) // 2
            if batch * self.kv_bytes(mid) <= self.kv_budget:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def to_dict(self) -> dict[str, Any]:
        """The schema (``layerscope-serving/1``), the setting, the memory split, the KV
        cache, the concurrency, the rows and the notes, then ``extra``'s keys."""
        from layerscope.generation.serving_schema import SERVING_SCHEMA

        data = {
            "schema": SERVING_SCHEMA,
            "model": self.model,
            "target": self.target,
            "device_label": self.device_label,
            "dtype": self.dtype,
            "weights": self.weights,
            "kv_dtype": self.kv_dtype,
            "block_size": self.block_size,
            "max_context": self.max_context,
            "prompt": self.prompt,
            "new_tokens": self.new_tokens,
            **({"mode": self.mode} if self.mode is not None else {}),
            **({"tp": self.tp} if self.tp > 1 else {}),
            "memory": _with_extra(
                {
                    "usable_bytes": self.usable_bytes,
                    "memory_utilization": self.memory_utilization,
                    "budget_bytes": self.budget,
                    "weight_bytes": self.weight_bytes,
                    "workspace_bytes": self.workspace_bytes,
                    "prefill_chunk": self.prefill_chunk,
                    "reserve_bytes": self.reserve_bytes,
                    "kv_budget_bytes": self.kv_budget,
                },
                self.memory_extra,
            ),
            "kv": _with_extra(
                {
                    "bytes_per_token": self.kv_bytes_per_token,
                    "tokens": self.kv_tokens,
                    "blocks": self.kv_blocks,
                    "bytes_per_sequence": self.kv_bytes(self.max_context),
                    "layers": [layer.to_dict() for layer in self.layers],
                },
                self.kv_extra,
            ),
            "max_concurrency": self.max_concurrency,
            "rows": [r.to_dict() for r in self.rows],
            "notes": list(self.notes),
        }
        return _with_extra(data, self.extra)

    @classmethod
    def from_dict(cls, data: Any, source: str | None = None) -> ServingPlan:
        """A plan from ``to_dict``'s form, every field checked: ``SchemaError`` naming the
        JSON path (after ``source``, the file, when given). The derived figures (budget,
        capacity, concurrency) are computed again from what they derive from; where the
        document writes them they must agree (an edited or damaged one is refused)."""
        from layerscope.errors import SchemaError
        from layerscope.export.jsonread import check_schema, checked_document, unknown_keys
        from layerscope.generation import serving_schema as schema

        check_schema(data, schema.SERVING_SCHEMA, "serving plan", source)
        d = checked_document(data, schema.SERVING, source)
        schema.check_rows(d, source)
        if not d["kv"]["layers"]:
            where = f"{source}: " if source else ""
            raise SchemaError(f"{where}$.kv.layers: a serving plan has at least one layer")
        m, kv = d["memory"], d["kv"]
        layers = [
            KVLayer(x["bytes_per_token"], x["cap"], extra=unknown_keys(x, schema.LAYER_KEYS))
            for x in kv["layers"]
        ]
        # the first plans had no mode: their rows are roofline bounds, launches left out
        plan = cls(
            d["model"], d["target"], d["device_label"], m["usable_bytes"],
            m["memory_utilization"], d["dtype"], d["weights"], d["kv_dtype"],
            d["block_size"], d["max_context"], d["prompt"], d["new_tokens"],
            m["weight_bytes"], m["workspace_bytes"], m["prefill_chunk"], m["reserve_bytes"],
            d.get("mode"), layers, [ServingRow.from_dict(r) for r in d["rows"]],
            list(d["notes"]), tp=d.get("tp") or 1, extra=unknown_keys(d, schema.SERVING_KEYS),
            memory_extra=unknown_keys(m, schema.MEMORY_KEYS),
            kv_extra=unknown_keys(kv, schema.KV_KEYS),
        )  # fmt: skip
        _check_derived(d, plan.to_dict(), source)
        return plan

    def rules(self) -> list[str]:
        """The plan's own notes: the rules its memory follows."""
        windows = sorted({layer.cap for layer in self.layers if layer.cap is not None})
        said = [
            f"Memory as a server sizes it: {self.usable_bytes:,} B usable x "
            f"{self.memory_utilization:g}, less the weights, the peak of a "
            f"{self.prefill_chunk:,}-token prefill chunk and a {self.reserve_bytes:,} B "
            "reserve (stated, not measured); the rest holds the KV cache.",
            f"KV cache paged in blocks of {self.block_size} tokens: each sequence's "
            "tokens in each layer are rounded up to whole blocks.",
        ]
        if windows:
            said.append(
                f"Sliding-window layers hold at most {', '.join(map(str, windows))} tokens "
                "of a sequence."
            )
        launching = {
            "eager": "each kernel launched by the host (eager)",
            "graphs": "the step replayed as one CUDA graph (one launch)",
        }.get(self.mode or "", f"launched as {self.mode!r}" if self.mode else "no launches")
        said.append(
            f"Rows: ls.estimate_generate's paged cache (read once at the current length "
            f"rounded up to blocks of {self.block_size}), the weights and the KV cache as "
            "deployed, a mixture of experts' expected experts per step. TTFT "
            "and TPOT are predicted: the prefill's and a decode step's kernels at the "
            f"target's achievable rates, {launching}, the larger of running and launching "
            "and never below their bounds, the rooflines (each module's own work at the "
            "large-matmul share of the peak and the achievable bandwidth)."
        )
        return said

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write ``to_dict()`` as JSON (``ls.load_serving`` reads it back)."""
        from layerscope.export.files import write_text
        from layerscope.export.jsonread import document_json

        write_text(os.fspath(path), document_json(self.to_dict()))

    def to_html(self, path: str | os.PathLike[str]) -> None:
        """The HTML report: the plan's section (capacity, the memory split, latency
        against throughput, the rows, the notes) above the first batch's prefill analysis;
        ``ExportError`` for a plan without its analysis (one loaded from JSON)."""
        from layerscope.export.html import reported
        from layerscope.generation.serving_html import to_html

        analysis = reported(
            self.analysis, path, "serving plan",
            "a plan from ls.plan_serving has one; its JSON does not keep it",
        )  # fmt: skip
        to_html(analysis, path, self.to_dict())

    def export(self, path: str | os.PathLike[str], format: str | None = None) -> None:
        """Write the plan as ``.json`` (``save``), its text (``.txt``) or its HTML report
        (``.html``, ``to_html``)."""
        from layerscope.export.files import write_text
        from layerscope.export.formats import export_document

        def text(out: str | os.PathLike[str]) -> None:
            write_text(os.fspath(out), self.render(width=100) + "\n")

        writers = {"json": self.save, "txt": text, "html": self.to_html}
        export_document(path, format, writers, "a serving plan")

    def render(self, *, width: int | None = None) -> str:
        """The plan as plain text, ``width`` characters wide (default: the terminal's)."""
        from layerscope.generation.serving_view import render_serving

        return render_serving(self.to_dict(), width=width)

    def show(self, *, width: int | None = None, file: IO[str] | None = None) -> None:
        """Print the plan to the terminal (colours when it is one) or to ``file``."""
        from layerscope.generation.serving_view import show_serving

        show_serving(self.to_dict(), width=width, file=file)

    def __str__(self) -> str:
        return self.render()


def _whole(label: str, value: object, low: int, allowed: str) -> int:
    """``value`` as an int of at least ``low`` (numpy's integers too, bools not), else
    refused in one line naming what ``allowed`` is."""
    if isinstance(value, numbers.Integral) and not is_bool(value) and int(value) >= low:
        return int(value)
    refuse(label, value, allowed)


def _with_extra(known: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``known`` with ``extra``'s keys after its own (a known key is written, not
    ``extra``'s of the same name)."""
    known.update((k, v) for k, v in extra.items() if k not in known)
    return known


#: The figures a serving plan derives from the others, by JSON path.
_DERIVED = (
    ("memory", "budget_bytes"), ("memory", "kv_budget_bytes"), ("kv", "bytes_per_token"),
    ("kv", "tokens"), ("kv", "blocks"), ("kv", "bytes_per_sequence"), ("max_concurrency",),
)  # fmt: skip


def _check_derived(doc: Mapping[str, Any], again: Mapping[str, Any], source: str | None) -> None:
    """``SchemaError`` where a derived figure ``doc`` writes is not what its plan gives."""
    from layerscope.errors import SchemaError

    for keys in _DERIVED:
        written: Any = doc
        derived: Any = again
        for k in keys:
            if not isinstance(written, Mapping) or k not in written:
                break  # not written: nothing to check (the plan derives it)
            written, derived = written[k], derived[k]
        else:
            if written == derived:
                continue
            where = f"{source}: " if source else ""
            raise SchemaError(
                f"{where}$.{'.'.join(keys)} is {written!r}, but the plan's memory and KV "
                f"figures give {derived!r}: the document was edited or damaged"
            )


def load_serving(path: str | os.PathLike[str]) -> ServingPlan:
    """Read a plan written by ``ServingPlan.save`` or ``layerscope serve --json``
    (``ls.load_serving``)."""
    from layerscope.export.jsonread import read_document

    return ServingPlan.from_dict(read_document(path), os.fspath(path))


def is_serving(data: object) -> bool:
    """Whether a JSON document is a serving plan (``ServingPlan.to_dict``): its schema
    says so (any version: ``from_dict`` says which it reads), or, without one (an older
    file), it has ``max_concurrency``, ``kv`` and rows."""
    from layerscope.export.jsonread import schema_name
    from layerscope.generation.serving_schema import SERVING_SCHEMA

    if not isinstance(data, dict):
        return False
    if "schema" in data:
        return schema_name(data) == SERVING_SCHEMA.split("/", 1)[0]
    return {"max_concurrency", "kv", "rows"} <= set(data)


__all__ = ["KVLayer", "ServingPlan", "ServingRow", "is_serving", "load_serving"]
