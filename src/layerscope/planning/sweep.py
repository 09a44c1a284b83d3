"""What-ifs over plans: ``ls.plan_sweep`` (a table, one row per combination) and
``Plan.max_micro_batch`` (the largest micro-batch that fits).

A micro-batch other than the analysed one is analysed again (dim 0 of every input
tensor, or of ``input_shape``): activation bytes, FLOPs and peaks need not scale
linearly with the batch (attention, padding, workspace), so nothing is extrapolated.
Every other option (world size, sharding, checkpointing, precision's reduce dtype,
optimizer) is arithmetic over the analysis of its micro-batch; precisions that compute
in another dtype get their own analysis.
"""

from __future__ import annotations

import itertools
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_map_only

from layerscope.busy import Busy, ProgressSetting, busy, check_progress
from layerscope.errors import InvalidInputError
from layerscope.planning.checkpointing import per_op
from layerscope.planning.fields import CHECKPOINTED, keys
from layerscope.planning.mesh import Mesh, check_mesh
from layerscope.planning.options import DEFAULTS, Options, check_options
from layerscope.planning.pipelineplan import analysed, build_plan
from layerscope.planning.result import Plan
from layerscope.planning.sweepbest import best_row
from layerscope.profile import Profile
from layerscope.validate import check_int

#: The sweepable options and the row fields each plan gives (the field table's).
AXES = keys("axis")
ROW_FIELDS = tuple(k for k in keys("row") if k != CHECKPOINTED)


@dataclass
class Source:
    """What a plan was analysed from, to analyse again at another micro-batch."""

    model: nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any] | None
    input_shape: Any
    profile_options: dict[str, Any] = field(default_factory=dict)
    #: the options the plan was made with (every one: ``max_micro_batch`` plans with them)
    options: Options | None = None

    def max_micro_batch(self, plan: Plan, limit: int, progress: ProgressSetting = None) -> int:
        """``Plan.max_micro_batch``, for a plan made from this source."""
        return max_micro_batch(plan, limit, progress=progress)

    def describe(self, batch: str | None = None) -> str:
        """The input as a sentence's words: each tensor argument's shape and dtype
        (``(2, 64) int64``), or ``input_shape``'s with ``input_dtype`` when given;
        ``batch``: the word in place of dim 0 (a swept micro-batch: ``(micro_batch,
        64)``)."""

        def shown(shape: Sequence[int]) -> str:
            dims = [str(d) for d in shape]
            if batch is not None and dims:
                dims[0] = batch
            return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"

        if self.input_shape is not None:
            dtype = self.profile_options.get("input_dtype")
            named = f" {str(dtype).removeprefix('torch.')}" if dtype is not None else ""
            return f"{shown(_shape(self.input_shape))}{named}"
        shapes = [
            f"{shown(t.shape)} {str(t.dtype).removeprefix('torch.')}"
            for t in _tensors(self.args, self.kwargs)
        ]
        return ", ".join(shapes) or "no tensor"

    def batch(self) -> int:
        if self.input_shape is not None:
            return int(_shape(self.input_shape)[0])
        for t in _tensors(self.args, self.kwargs):
            if t.dim():
                return int(t.shape[0])
        raise InvalidInputError("micro_batch: the input has no tensor with a batch dimension")

    def at(self, batch: int) -> Source:
        """The same input with dim 0 set to ``batch``."""
        if self.input_shape is not None:
            shape = _shape(self.input_shape)
            return Source(
                self.model, (), None, (batch, *shape[1:]), self.profile_options, self.options
            )

        def resized(t: torch.Tensor) -> torch.Tensor:
            if not t.dim():
                return t
            return torch.empty((batch, *t.shape[1:]), dtype=t.dtype, device="meta")

        args = tree_map_only(torch.Tensor, resized, self.args)
        kwargs = tree_map_only(torch.Tensor, resized, self.kwargs) if self.kwargs else None
        return Source(self.model, args, kwargs, None, self.profile_options, self.options)


def _shape(input_shape: Any) -> tuple[int, ...]:
    if isinstance(input_shape, Sequence) and input_shape and isinstance(input_shape[0], int):
        return tuple(input_shape)
    raise InvalidInputError(
        f"micro_batch with input_shape needs one shape (a tuple of ints), got {input_shape!r}"
    )


def _tensors(args: Any, kwargs: Any) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    tree_map_only(torch.Tensor, found.append, (args, kwargs or {}))
    return found


@dataclass(frozen=True)
class SweepRow(Mapping[str, Any]):
    """One plan of a sweep: its options (the field table's ``axis`` group), then its
    figures (``row``). Reads as a mapping too (``row["step_time"]``), with the keys and
    order of ``to_dict``'s known keys (``extra``'s are not the row's fields)."""

    micro_batch: int
    world_size: int
    sharding: str
    checkpoint: str | list[str] | None
    precision: str
    optimizer: str
    grad_accum: int
    #: the mesh's tensor-parallel size (None: not tensor-parallel, nor swept over it)
    tp: int | None = field(default=None, kw_only=True)
    #: the mesh's pipeline stages (None: no pipeline, nor swept over it)
    pp: int | None = field(default=None, kw_only=True)
    fits: bool | None
    peak_bytes: int
    headroom_bytes: int | None
    step_time: float
    tokens_per_s: float | None
    mfu: float | None
    checkpointed: int
    #: added after the first documents: optional on reading
    step_time_bound: float | None = None
    tokens_per_s_bound: float | None = None
    mfu_counted: float | None = None

    @property
    def extra(self) -> dict[str, Any]:
        """Keys of the row this version does not know (a newer layerscope's, an
        extension's), as read: written back after the known ones. Not a field (the row's
        fields are the field table's columns; ``dataclasses.replace`` leaves it out) nor
        hashed, but compared."""
        held: dict[str, Any] = self.__dict__.setdefault("_extra", {})
        return held

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SweepRow) or other.__class__ is not self.__class__:
            return NotImplemented
        return self.to_dict() == other.to_dict()

    def __getitem__(self, key: str) -> Any:
        if key not in _ROW_KEYS:
            raise KeyError(key)
        return getattr(self, key)

    def _keys(self) -> tuple[str, ...]:
        """The row's keys: an optional figure without a value is left out."""
        return tuple(k for k in _ROW_KEYS if k not in _OPTIONAL or getattr(self, k) is not None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def to_dict(self) -> dict[str, Any]:
        """The row as its document writes it: its fields, then ``extra``'s keys (a
        field's name is written from the field, not ``extra``)."""
        data = {k: getattr(self, k) for k in self._keys()}
        data.update((k, v) for k, v in self.extra.items() if k not in _ROW_KEYS)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepRow:
        """A row from ``to_dict``'s form (the figures added later may be missing): its
        fields, and the keys it does not know, in order, in ``extra``."""
        missing = [k for k in _ROW_KEYS if k not in data and k not in _OPTIONAL]
        if missing:
            raise InvalidInputError(f"a sweep row needs {', '.join(missing)}")
        row = cls(**{k: data[k] for k in _ROW_KEYS if k in data})
        row.extra.update((k, v) for k, v in data.items() if k not in _ROW_KEYS)
        return row


#: A row's fields: the keys and order of the document's row.
_ROW_KEYS = tuple(f.name for f in fields(SweepRow))
_OPTIONAL = frozenset(f.name for f in fields(SweepRow) if f.default is not MISSING)


@dataclass
class Sweep:
    """One row per combination: the options swept and the plan's figures."""

    axes: list[str]
    rows: list[SweepRow]
    #: what every plan shares beyond the options: the target (name and label), the
    #: budget in bytes (None: the target has no memory size) and the input, as shapes
    setting: dict[str, Any] = field(default_factory=dict)
    #: top-level keys of a document this version does not know (a newer layerscope's,
    #: an extension's), as read: written back by ``save`` after the known ones
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rows = [r if isinstance(r, SweepRow) else SweepRow.from_dict(r) for r in self.rows]

    def best(self) -> SweepRow:
        """The row a report leads with: of the rows that fit (or whose fit is not known),
        the most tokens per second (the shortest step where tokens are not known); when
        none fits, the smallest peak (``planning.sweepbest``)."""
        return self.rows[best_row([r.to_dict() for r in self.rows])]

    # ---- files ---------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Any, source: str | None = None) -> Sweep:
        """A sweep from ``to_dict``'s form, every value checked: ``SchemaError`` naming
        the JSON path (after ``source``, the file, when given)."""
        from layerscope.errors import SchemaError
        from layerscope.export.jsonread import check_schema, checked_document, unknown_keys
        from layerscope.planning.schema import SWEEP, SWEEP_SCHEMA

        check_schema(data, SWEEP_SCHEMA, "sweep", source)
        checked = checked_document(data, SWEEP, source)
        if not checked["rows"]:
            where = f"{source}: " if source else ""
            raise SchemaError(f"{where}$.rows: a sweep has at least one row")
        return cls(
            list(checked["axes"]), list(checked["rows"]), dict(checked.get("setting", {})),
            unknown_keys(checked, SWEEP.props),
        )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        """The schema (``layerscope-sweep/1``), the axes swept, what every plan shares
        (``setting``), one object per row, then ``extra``'s keys."""
        from layerscope.planning.schema import SWEEP_SCHEMA

        data: dict[str, Any] = {"schema": SWEEP_SCHEMA, "axes": list(self.axes)}
        if self.setting:
            data["setting"] = dict(self.setting)
        data["rows"] = [r.to_dict() for r in self.rows]
        data.update((k, v) for k, v in self.extra.items() if k not in data)
        return data

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write ``to_dict()`` as JSON (``ls.load_sweep`` reads it back)."""
        from layerscope.export.files import write_text
        from layerscope.export.jsonread import document_json

        write_text(os.fspath(path), document_json(self.to_dict()))

    def to_html(self, path: str | os.PathLike[str], plan: Plan | None = None) -> None:
        """The HTML report of ``plan`` (a plan of the model, e.g. with the options outside
        the sweep) with the sweep as a table: ``plan.to_html(path, sweep=self)``;
        ``ExportError`` without a plan (the report draws on its analysis)."""
        if plan is None:
            from layerscope.errors import ExportError

            raise ExportError(
                f"cannot write {os.fspath(path)}: a sweep's table is drawn in a plan's report; "
                "give the plan (sweep.to_html(path, plan=ls.plan(model, ...)))"
            )
        plan.to_html(path, sweep=self)

    def export(self, path: str | os.PathLike[str], format: str | None = None) -> None:
        """Write the sweep in the format its extension names: ``.json`` (``save``), or
        ``.html`` (``to_html``, which needs a plan); ``format=`` for another name."""
        from layerscope.export.formats import export_document

        export_document(path, format, {"html": self.to_html, "json": self.save}, "a sweep")

    # ---- views ---------------------------------------------------------------------
    def render(self, **options: Any) -> str:
        """The sweep as a table (``planning.view``; ``width``, ``max_rows``)."""
        from layerscope.planning.view import render_sweep

        return render_sweep(self.to_dict(), **options)

    def show(self, **options: Any) -> None:
        """Print ``render(**options)`` (at the terminal's width by default; ``file``)."""
        from layerscope.planning.view import show_sweep

        show_sweep(self.to_dict(), **options)

    def __str__(self) -> str:
        return self.render()


#: the largest micro-batch a sweep plans: far past what any device's memory holds
MAX_BATCH = 10**9


def _values(name: str, value: Any) -> list[Any]:
    if name == "checkpoint" and (value is None or isinstance(value, str)):
        return [value]
    if isinstance(value, list | tuple):
        if not value:
            raise InvalidInputError(f"{name}: an empty list sweeps nothing")
        paths = all(isinstance(v, str) and v not in ("blocks", "auto") for v in value)
        if name == "checkpoint" and paths:
            return [list(value)]  # one list of module paths
        values = list(value)
    else:
        values = [value]
    if name == "micro_batch":  # a batch dimension: a positive int a tensor can have
        return [v if v is None else check_int("micro_batch", v, 1, MAX_BATCH) for v in values]
    return values


def plan_sweep(
    model: nn.Module,
    *args: Any,
    kwargs: dict[str, Any] | None = None,
    input_shape: Any = None,
    input_dtype: Any = None,
    loss_fn: Any = None,
    progress: ProgressSetting = None,
    **options: Any,
) -> Sweep:
    """Plans over every combination of the options given as lists (``micro_batch``,
    ``world_size``, ``sharding``, ``checkpoint``, ``precision``, ``optimizer``,
    ``grad_accum``, ``tp`` and ``pp``: the mesh's tensor-parallel size and pipeline
    stages, the data-parallel axis giving way on the same GPUs); the rest as
    ``ls.plan``. One analysis per micro-batch and compute
    dtype; the rest is arithmetic. ``progress``: as ``ls.plan``'s."""
    progress = check_progress(progress)
    if not isinstance(model, nn.Module):
        raise InvalidInputError("plan_sweep needs the model (it analyses each micro-batch)")
    fixed = {k: v for k, v in options.items() if k not in AXES}
    profile_options = {k: v for k, v in (("input_dtype", input_dtype), ("loss_fn", loss_fn))
                       if v is not None}  # fmt: skip
    source = Source(model, args, kwargs, input_shape, profile_options)
    defaults = dict.fromkeys(_MESH_AXES, None) | {
        a: DEFAULTS[a] for a in AXES if a not in _MESH_AXES
    }
    if fixed.get("mesh") is not None:  # the mesh gives them, unless swept
        defaults |= {"world_size": None, "sharding": None}
    grid = {a: _values(a, options.get(a, defaults[a])) for a in AXES}
    swept = [a for a in AXES if a in options and len(grid[a]) > 1]
    analyses: dict[tuple[Any, ...], list[Profile]] = {}
    rows: list[SweepRow] = []
    combos = list(itertools.product(*grid.values()))
    with busy("layerscope: planning the sweep", progress) as status:
        for k, combo in enumerate(combos):
            status.update(f"layerscope: planning the sweep: plan {k + 1} of {len(combos)}")
            row, opts = _row(dict(zip(AXES, combo, strict=True)), fixed, source, analyses)
            rows.append(row)
    setting = {  # the same in every row's options (the last one checked)
        "target": opts.target.name, "device": opts.target.label, "budget": opts.budget,
        "input": source.describe("micro_batch" if "micro_batch" in swept else None),
        **({"loss": opts.loss} if opts.loss != "plain" else {}),
        **({"compile": True} if opts.compile else {}),
        **({"float8": True} if opts.float8 else {}),
        # FSDP2's: asked for every row, in effect where a row shards with FSDP2
        **({"float8_all_gather": True} if fixed.get("float8_all_gather") else {}),
    }  # fmt: skip
    return Sweep(swept or ["world_size"], rows, setting)


def _row(
    chosen: dict[str, Any],
    fixed: dict[str, Any],
    source: Source,
    analyses: dict[tuple[Any, ...], list[Profile]],
) -> tuple[SweepRow, Options]:
    """One combination's row (and its options): its micro-batch analysed once per
    compute dtype, kept in ``analyses`` for the other rows."""
    given = {a: v for a, v in chosen.items() if a not in _MESH_AXES and v is not None}
    merged = fixed | given
    if chosen["tp"] is not None or chosen["pp"] is not None:
        merged = _mesh_split(merged, chosen["tp"], chosen["pp"])
    if merged.get("float8_all_gather"):  # FSDP2's: the rows without an FSDP2 shard run without it
        shard = check_options({**merged, "float8_all_gather": False})
        if shard.sharding != "fsdp" or shard.shard_size < 2:
            merged = {**merged, "float8_all_gather": False}
    opts = check_options(merged)  # an axis left None: its default, or the mesh's
    batch = chosen["micro_batch"]
    here = source.at(batch) if batch is not None else source
    # "op" or a policy: its op records; compile: its op graph; tensor parallelism: the
    # model split by its plan
    ops = opts.checkpoint if per_op(opts.checkpoint) else None
    # the analysis differs by compute dtype and by autocast (DDP's bf16-mixed runs the
    # float32 model under autocast; FSDP2's casts the model to bfloat16)
    key = (batch, str(opts.compute_dtype), opts.autocast, ops, opts.compile, opts.tp,
           opts.sequence_parallel, opts.pp, opts.pp_split)  # fmt: skip
    if key not in analyses:
        analyses[key] = analysed(source.model, here.args, here.kwargs, here.input_shape,
                                       opts, source.profile_options)  # fmt: skip
    result = build_plan(analyses[key], opts)
    row = {a: chosen[a] for a in AXES}
    row["world_size"], row["sharding"] = opts.world_size, opts.sharding
    row["tp"] = opts.tp if opts.tp > 1 or chosen["tp"] is not None else None
    row["pp"] = opts.pp if opts.pp > 1 or chosen["pp"] is not None else None
    row["micro_batch"] = batch if batch is not None else source.batch()
    row.update({f: getattr(result, f) for f in ROW_FIELDS})
    row[CHECKPOINTED] = len(result.checkpoint)
    return SweepRow.from_dict(row), opts


def row_options(row: SweepRow, options: Mapping[str, Any]) -> dict[str, Any]:
    """``ls.plan``'s options of a sweep's row: ``options`` (the sweep's fixed ones) with
    the row's axes (``micro_batch`` aside: it is the input's)."""
    chosen = {a: row[a] for a in AXES if a not in _MESH_AXES}
    out = dict(options) | chosen
    return _mesh_split(out, row.tp, row.pp) if row.tp is not None or row.pp is not None else out


#: The axes that are not ``ls.plan`` options of their own: the input's batch, and the
#: mesh's tensor-parallel size and pipeline stages.
_MESH_AXES = ("micro_batch", "tp", "pp")
#: A pipeline's own options, dropped from a row without one.
_PIPELINE = ("microbatches", "schedule", "pp_split", "stage", "return_outputs", "virtual_stages")


def _mesh_split(options: dict[str, Any], tp: int | None, pp: int | None) -> dict[str, Any]:
    """A row's options at tensor parallel ``tp`` and ``pp`` pipeline stages (None: the
    mesh's): the same GPUs, the mesh's (or the options') data-parallel axis giving way
    (at 1, without the tensor-parallel plan or the pipeline's options); refused where
    they do not divide it."""
    mesh = dict(check_mesh(options["mesh"]).to_dict()) if options.get("mesh") else {}
    tp = mesh.get("tp", 1) if tp is None else check_int("tp", tp, 1)
    pp = mesh.get("pp", 1) if pp is None else check_int("pp", pp, 1)
    world = Mesh(**mesh).world_size if mesh else int(options.get("world_size") or 8)
    sharding = options.get("sharding") or DEFAULTS["sharding"]
    dp = world // (pp * mesh.get("cp", 1) * tp)
    replicate = mesh.get("dp_replicate", 1) if mesh else (dp if sharding == "ddp" else 1)
    if dp * tp * pp * mesh.get("cp", 1) != world or dp % replicate:
        raise InvalidInputError(
            f"tp={tp} x pp={pp} does not divide the {world} GPUs' data-parallel ranks: pick "
            "tensor-parallel sizes and pipeline stages that divide them"
        )
    mesh |= {"tp": tp, "pp": pp, "dp_replicate": replicate, "dp_shard": dp // replicate}
    dropped = ("world_size", "sharding", "hsdp") + (
        ("tp_plan", "sequence_parallel") if tp == 1 else ()  # no tensor parallelism
    ) + (_PIPELINE if pp == 1 else ())  # fmt: skip
    return {k: v for k, v in options.items() if k not in dropped} | {"mesh": mesh}


def max_micro_batch(plan: Plan, limit: int = 1024, *, progress: ProgressSetting = None) -> int:
    """The largest micro-batch up to ``limit`` whose plan fits the budget: doubling from
    the analysed one, then bisection, an analysis at each size tried. 0, with a warning,
    when not even a micro-batch of 1 fits. ``progress``: as ``ls.plan``'s."""
    limit = check_int("limit", limit, 1)
    progress = check_progress(progress)
    source: Source | None = plan.source
    if source is None:
        raise InvalidInputError("max_micro_batch needs the plan made from a model")
    if plan.budget is None:
        raise InvalidInputError("max_micro_batch needs a budget (the target has no memory size)")
    opts = source.options
    if opts is None:
        raise InvalidInputError("max_micro_batch needs the options the plan was made with")

    with busy("layerscope: the largest micro-batch that fits", progress) as status:
        low = _largest_fitting(plan, source, opts, limit, status)
    if not low:
        warnings.warn(
            "max_micro_batch: not even a micro-batch of 1 fits the budget (0 returned); "
            "see the plan of micro-batch 1 for what takes the memory",
            stacklevel=4,  # the caller of Plan.max_micro_batch
        )
    return low


def _largest_fitting(plan: Plan, source: Source, opts: Options, limit: int, status: Busy) -> int:
    """Doubling from the analysed micro-batch, then bisection (``max_micro_batch``)."""

    def fits(batch: int) -> bool:
        status.update(f"layerscope: the largest micro-batch that fits: trying {batch}")
        here = source.at(batch)
        profs = analysed(source.model, here.args, here.kwargs, here.input_shape, opts,
                               source.profile_options)  # fmt: skip
        return bool(build_plan(profs, opts).fits)

    start = source.batch()
    low, high = 0, None
    batch = start
    if start > limit:  # the analysed micro-batch is past the limit: bisect below it
        if fits(limit):
            return limit
        high = limit
    elif plan.fits:
        low = start
        while high is None and batch < limit:
            batch = min(limit, batch * 2)
            if fits(batch):
                low = batch
            else:
                high = batch
        if high is None:
            return low
    else:
        high = start
    while high - low > 1:
        mid = (low + high) // 2
        if fits(mid):
            low = mid
        else:
            high = mid
    return low


def load_sweep(path: str | os.PathLike[str]) -> Sweep:
    """Read a sweep written by ``Sweep.save`` (``ls.load_sweep``)."""
    from layerscope.export.jsonread import read_document

    return Sweep.from_dict(read_document(path), os.fspath(path))


__all__ = [
    "Source",
    "Sweep",
    "SweepRow",
    "load_sweep",
    "max_micro_batch",
    "plan_sweep",
    "row_options",
]
