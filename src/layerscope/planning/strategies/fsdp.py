"""FSDP2 (``"fsdp"``), and HSDP as FSDP2 on a 2-D mesh (``hsdp=(replicate, shard)``):
each unit's parameters sharded over ``shard`` GPUs (``states.fsdp_shard``; frozen ones
too, as ``FSDPParam`` in torch/distributed/fsdp/_fully_shard/_fsdp_param.py shards every
parameter it is given, while ``FSDPParamGroup.post_backward`` reduce-scatters only
those with a gradient), gathered before its forward and backward and its gradients
reduce-scattered after its backward (``comm.fsdp_collectives``); under HSDP each
gradient shard is then all-reduced over the ``replicate`` groups. The overlap rule:
``timemodel.fsdp_exposed``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from layerscope.metrics.commkinds import wire_bytes
from layerscope.planning.collectives import Link
from layerscope.planning.facts import fsdp_units, owner_lookup
from layerscope.planning.kernels import float8_linears
from layerscope.planning.states import REDUCE_DTYPES, ModelStates, fsdp_shard
from layerscope.planning.strategy import Prepared, Step, Strategy, Times, link, optimizer_bytes
from layerscope.planning.strategy import weight_size as _weight_size
from layerscope.planning.timeline import Events, Replay, enclosing
from layerscope.planning.timemodel import link_time

if TYPE_CHECKING:
    from layerscope.planning.options import Options


class FSDP2(Strategy):
    """Parameters at rest are the padded shards; gradients and optimizer states those of
    the unpadded local shard (``to_local()``); under mixed precision
    (``MixedPrecisionPolicy``) the float32 shards are the master weights, and gradients
    are reduced and kept in float32."""

    name = "fsdp"
    shards_grads = True

    def grad_size(self, opts: Options) -> int:
        return 4 if opts.mixed else opts.compute_dtype.itemsize

    def states(
        self,
        shapes: Sequence[Sequence[int]],
        *,
        world_size: int,
        precision: str,
        optimizer: str,
        rank: int,
        frozen: Sequence[Sequence[int]] = (),
    ) -> ModelStates:
        states, step = optimizer_bytes(shapes, optimizer)
        local = padded = 0
        for shape in shapes:
            mine, pad = fsdp_shard(shape, world_size, rank)
            local, padded = local + mine, padded + pad
        # frozen parameters are sharded like the others (FSDPParam shards every parameter
        # of a group; requires_grad only decides which are reduce-scattered)
        padded += sum(fsdp_shard(shape, world_size, rank)[1] for shape in frozen)
        size = 4 if precision.endswith("-mixed") else _weight_size(precision)
        return ModelStates(padded * size, local * size, states * local * size + step, 0)

    def prepare(self, step: Step) -> Prepared:
        """The units (paths, table rows) and collectives, set up for the replay."""
        opts, setup, grad_size = step.opts, step.setup, step.grad_size
        n, low = opts.shard_size, opts.compute_dtype.itemsize
        units = fsdp_units(step.prof, opts)
        owned: dict[str, list[tuple[int, ...]]] = {u: [] for u in units}
        still: dict[str, list[tuple[int, ...]]] = {u: [] for u in units}  # frozen ones
        eight: dict[str, list[tuple[int, ...]]] = {u: [] for u in units}  # float8 gathers
        linears = float8_linears(step.prof) if opts.float8_all_gather else frozenset()
        owner = owner_lookup(units)
        for p in step.params:
            owned[owner(p.module)].append(p.shape)
        for p in step.frozen:
            still[owner(p.module)].append(p.shape)
        for p in (*step.params, *step.frozen):
            if p.module in linears and p.name.endswith(".weight"):
                eight[owner(p.module)].append(p.shape)

        def padded(shapes: Sequence[Sequence[int]]) -> int:
            return sum(fsdp_shard(s, n, 0)[1] for s in shapes)

        # expert parallelism: an experts unit holds 1 / ep of the experts, sharded over
        # the dp / ep ranks left (per rank as many elements as over dp)
        experts = set(step.prof.model.get("experts", ())) if opts.ep > 1 else set()
        worlds = {u: n // opts.ep if u in experts else n for u in units}
        shards = [
            Unit(u, padded(owned[u]) + padded(still[u]), padded(owned[u]), worlds[u],
                 padded(eight[u]))
            for u in units
        ]  # fmt: skip
        # gradients are reduced in the reduce dtype, then kept in the gradients' own
        reduce = REDUCE_DTYPES[opts.reduce_dtype] if opts.reduce_dtype else grad_size
        setup.events.append(FSDPEvents(
            n, shards, param_size=low, reduce_size=reduce, cast_gather=opts.mixed,
            reshard_after_forward=opts.reshard_after_forward, grad_size=grad_size,
        ))  # fmt: skip
        setup.final_grads = sum(u.trained for u in shards) * grad_size
        comm: dict[str, Any] = dict(fsdp_collectives(
            owned, world_size=n, param_bytes=low, reduce_bytes=reduce,
            reshard_after_forward=opts.reshard_after_forward, frozen=still, worlds=worlds,
            float8=eight,
        ))  # fmt: skip
        if opts.replicas > 1:  # HSDP: each gradient shard all-reduced over the replicas
            for u in shards:
                if u.trained and u.path in comm:
                    payload = u.trained * reduce
                    wire = wire_bytes("all_reduce", payload, opts.replicas)
                    row = {"calls": 1, "bytes": payload, "wire_bytes": wire}
                    comm[u.path]["backward"]["all_reduce"] = row
        rows = {
            u.path: {"unit": True, "shard_elements": u.padded,
                     "unsharded_bytes": (u.world or n) * u.shard_bytes(low)}
            for u in shards
        }  # fmt: skip
        return Prepared(comm, units, rows)

    def comm_time(self, step: Step, times: Times) -> tuple[float, float]:
        opts, prof = step.opts, step.prof
        if opts.dp_size < 2:
            return 0.0, 0.0
        replay = next(e for e in step.setup.events if isinstance(e, FSDPEvents))
        fwd, bwd = times.forward, times.backward
        n = opts.shard_size
        works = []
        owner = owner_lookup(u.path for u in replay.all_units)
        # a unit's own time: its module's, less the units directly inside it, plus the
        # forwards recomputed in its backward (checkpointed modules it is the innermost of)
        inner: dict[str, list[str]] = {u.path: [] for u in replay.all_units}
        recomputed: dict[str, list[str]] = {u.path: [] for u in replay.all_units}
        for unit in replay.all_units:
            if unit.path:
                inner[owner(unit.path.rpartition(".")[0])].append(unit.path)
        for p in times.checkpointed:
            recomputed[owner(p)].append(p)
        for unit in replay.all_units:
            node = prof.node(unit.path)
            nested = [prof.node(p) for p in inner[unit.path]]
            own_f = fwd[id(node)] - sum(fwd[id(m)] for m in nested)
            own_b = bwd[id(node)] - sum(bwd[id(m)] for m in nested)
            own_b += sum(fwd[id(prof.node(p))] for p in recomputed[unit.path])
            works.append(UnitWork(unit.path, own_f, own_b, unit.shard_bytes(replay.param_size),
                                  (unit.world or n) * unit.trained * replay.reduce_size,
                                  opts.reshard_after_forward and unit.path != "",
                                  unit.trained * replay.reduce_size))  # fmt: skip
        replicas = link(opts, opts.replicas, stride=n) if opts.replicas > 1 else None
        return fsdp_exposed(works, link(opts, n), replicas)


# ---- the collectives ------------------------------------------------------------------
def _ring(kind: str, payload: int, world: int, calls: int = 1) -> dict[str, Any]:
    return {"calls": calls, "bytes": payload, "wire_bytes": wire_bytes(kind, payload, world)}


def fsdp_collectives(
    units: Mapping[str, Sequence[Sequence[int]]],
    *,
    world_size: int,
    param_bytes: int = 4,
    reduce_bytes: int = 4,
    reshard_after_forward: bool = True,
    root: str = "",
    frozen: Mapping[str, Sequence[Sequence[int]]] | None = None,
    worlds: Mapping[str, int] | None = None,
    float8: Mapping[str, Sequence[Sequence[int]]] | None = None,
) -> dict[str, Any]:
    """Per unit path (its own trainable parameters' shapes, and in ``frozen`` its frozen
    ones'), by phase and kind; module doc. ``param_bytes``/``reduce_bytes``: bytes per
    element gathered and reduced. Frozen parameters are gathered with the others but
    not reduce-scattered (FSDP2's ``foreach_reduce`` takes the group's parameters with
    a gradient only). A unit of frozen parameters only is gathered for the backward
    too: the backward prefetch of the unit after it gathers it even when no gradient
    reaches it. ``worlds``: a unit's own GPUs where they are not ``world_size``'s (each
    rank's shard counted over ``world_size`` all the same: ``planning.expertparallel``).
    ``float8``: of a unit's parameters, those gathered in float8, 1 byte an element
    (``float8_all_gather``)."""
    out: dict[str, Any] = {}
    for path in {**units, **(frozen or {})}:
        trained = sum(fsdp_shard(shape, world_size, 0)[1] for shape in units.get(path, ()))
        still = sum(fsdp_shard(shape, world_size, 0)[1] for shape in (frozen or {}).get(path, ()))
        padded = trained + still
        if not padded:
            continue
        group = (worlds or {}).get(path, world_size)
        eight = sum(fsdp_shard(shape, world_size, 0)[1] for shape in (float8 or {}).get(path, ()))
        gather = _ring("all_gather", (padded - eight) * param_bytes + eight, group)
        scatter = _ring("reduce_scatter", group * trained * reduce_bytes, group)
        backward: dict[str, dict[str, Any]] = {"reduce_scatter": scatter} if trained else {}
        if reshard_after_forward and path != root:
            backward = {"all_gather": dict(gather), **backward}
        out[path] = {"forward": {"all_gather": gather}, "backward": backward}
    return out


# ---- the overlap rule ----------------------------------------------------------------
@dataclass(frozen=True)
class UnitWork:
    """An FSDP2 unit in forward order: its own compute (seconds, nested units excluded)
    and its collectives' payloads (bytes)."""

    path: str
    forward: float
    backward: float
    gather: int  # the all-gather's payload: one padded shard
    scatter: int  # the reduce-scatter's payload: world_size padded shards
    regather: bool  # gathered again before its backward
    reduce: int = 0  # HSDP: the all-reduce of its gradient shard over the replicas


def fsdp_exposed(
    units: Sequence[UnitWork], shard: Link, replicas: Link | None = None
) -> tuple[float, float]:
    """(all collectives' time, the part not hidden under compute) of one micro-batch;
    the GPUs of ``shard`` shard each unit, and under HSDP the GPUs of ``replicas``
    all-reduce its gradient shard after the reduce-scatter."""
    if not units:
        return 0.0, 0.0
    gathers = [link_time("all_gather", u.gather, shard) for u in units]
    scatters = [
        link_time("reduce_scatter", u.scatter, shard)
        + (link_time("all_reduce", u.reduce, replicas) if replicas is not None else 0.0)
        for u in units
    ]
    total = sum(gathers) + sum(scatters)
    total += sum(g for g, u in zip(gathers, units, strict=True) if u.regather)
    # forward: the first gather is exposed; unit i + 1's gather runs under unit i
    exposed = gathers[0]
    for i in range(len(units) - 1):
        exposed += max(0.0, gathers[i + 1] - units[i].forward)
    # backward, in reverse: a unit's compute hides the next unit's gather (prefetch)
    # and the previous unit's reduce-scatter
    order = list(reversed(range(len(units))))
    first = order[0]
    exposed += gathers[first] if units[first].regather else 0.0
    for j, i in enumerate(order):
        hidden = 0.0
        if j + 1 < len(order) and units[order[j + 1]].regather:
            hidden += gathers[order[j + 1]]
        if j > 0:
            hidden += scatters[order[j - 1]]
        exposed += max(0.0, hidden - units[i].backward)
    exposed += scatters[order[-1]]
    return total, exposed


# ---- the replay's moments ------------------------------------------------------------
@dataclass(frozen=True)
class Unit:
    """An FSDP2 unit: its path, its parameters' padded shard (elements per rank), of
    that the trainable parameters' (the gradient shard; all of it when None), the GPUs
    it is sharded over (0: the plan's; an experts unit under expert parallelism:
    ``planning.expertparallel``) and the elements gathered in float8."""

    path: str
    padded: int
    grad_padded: int | None = None
    world: int = 0
    #: of ``padded``, the elements gathered in float8 (``float8_all_gather``)
    float8: int = 0

    @property
    def trained(self) -> int:
        """Elements per rank of the trainable parameters' padded shard."""
        return self.padded if self.grad_padded is None else self.grad_padded

    def shard_bytes(self, param_size: int) -> int:
        """Bytes of the shard as gathered: ``param_size`` an element, float8's 1."""
        return (self.padded - self.float8) * param_size + self.float8


class FSDPEvents(Events):
    """FSDP2 per unit in the replay: before its forward, the all-gather's output
    (``world_size`` padded shards in the parameter dtype, float8 linears' weights in
    float8 under ``float8_all_gather``; under mixed precision also an input buffer of one
    shard, and of the float8 weights' shards alone without it, freed after the
    all-gather) and the unsharded parameters
    (as large: FSDP2 keeps them padded); the output is freed when the next unit's
    all-gather is done (the last at the end of the forward). After the forward the
    unsharded parameters are freed (resharded), except the root's or with
    ``reshard_after_forward=False``. Before the backward they are gathered again, and the
    next unit's all-gather is issued at once (prefetch). After a unit's backward: its
    unsharded parameters are freed, the previous unit's reduce-scatter input is freed,
    its own is allocated (``world_size`` padded shards in the reduce dtype), its
    unsharded gradients are freed and its sharded gradient (one padded shard, reduce
    dtype) stays. Frozen parameters are gathered with the unit's others; its
    reduce-scatter and sharded gradient cover the trainable ones only (none in a unit of
    frozen parameters only)."""

    reduces_grads = True

    def __init__(
        self,
        world_size: int,
        units: Sequence[Unit],
        param_size: int = 4,
        reduce_size: int = 4,
        cast_gather: bool = False,
        reshard_after_forward: bool = True,
        grad_size: int | None = None,
    ) -> None:
        self.world_size, self.all_units = world_size, list(units)
        #: bytes per element: unsharded parameters, the reduce-scatter (the reduce dtype)
        self.param_size, self.reduce_size = param_size, reduce_size
        #: bytes per element of the sharded gradients (the reduce dtype unless cast back)
        self.grad_size = reduce_size if grad_size is None else grad_size
        #: mixed precision: the all-gather input is a cast copy of the shard
        self.cast_gather = cast_gather
        self.reshard_after_forward = reshard_after_forward

    def start(self, replay: Replay) -> None:
        self.units = [u for u in self.all_units if u.padded]
        self.by_path = {u.path: u for u in self.units}
        self.unit_grads = {u.path: 0 for u in self.units}
        owner = owner_lookup(self.by_path)
        for module, g in replay.s.grads.items():
            unit = self.by_path.get(owner(module))
            if unit is not None:
                self.unit_grads[unit.path] += g
        #: the units in the order their forwards ended (FSDP2's post-forward order, whose
        #: reverse is its backward prefetch order: the root, ending last, prefetches the
        #: last block's gather at the start of the backward)
        self.ended: list[Unit] = []
        self.last_gather: Unit | None = None
        self.open_units: list[Unit] = []  # in the backward, outermost first
        self.done: set[str] = set()
        self.last_scatter: Unit | None = None

    def enter(self, replay: Replay, path: str) -> None:
        unit = self.by_path.get(path)
        if unit is not None:
            self.pre_forward(replay, unit, self.last_gather)
            self.last_gather = unit

    def exited(self, replay: Replay, path: str) -> None:
        unit = self.by_path.get(path)
        if unit is not None and unit not in self.ended:
            self.ended.append(unit)
        if path in self.by_path and path != "" and self.reshard_after_forward:
            replay.free(f"unsharded:{path}")
        if path == "" and self.last_gather is not None:
            replay.free(f"gather:{self.last_gather.path}")
            self.last_gather = None

    def backward(self, replay: Replay, k: int, event: str, path: str) -> None:
        """The post-backward of the units the backward has left, and pre-backward of
        those it enters."""
        if event == "end":
            return
        inner = (  # the units holding the point, outermost first
            [self.by_path[p] for p in reversed(enclosing(path)) if p in self.by_path]
            if path != "<outside>"
            else []
        )
        for unit in reversed(list(self.open_units)):
            if unit not in inner:
                self.post_backward(replay, unit)
        for unit in inner:
            if unit not in self.open_units and unit.path not in self.done:
                self.open_units.append(unit)
                after = self.next_to_gather(unit)
                self.pre_backward(replay, unit, after)

    def end(self, replay: Replay, path: str) -> None:
        for unit in reversed(list(self.open_units)):
            self.post_backward(replay, unit)
        self.open_units = []
        if self.last_scatter is not None:
            replay.free(f"scatter:{self.last_scatter.path}")

    def next_to_gather(self, unit: Unit) -> Unit | None:
        """FSDP2's backward prefetch: the unit whose forward ended just before ``unit``'s
        (``FSDPParamGroup._backward_prefetch`` follows the reversed post-forward order)
        that is neither done nor open."""
        ended = self.ended
        for k in range(ended.index(unit) - 1 if unit in ended else -1, -1, -1):
            other = ended[k]
            if other.path not in self.done and other not in self.open_units:
                return other
        return None

    # ---- one unit --------------------------------------------------------------------
    def gather(self, r: Replay, unit: Unit, event: str) -> None:
        shard = unit.shard_bytes(self.param_size)
        out = (unit.world or self.world_size) * shard
        if self.cast_gather or unit.float8:  # the gather's input: the shard's cast copies
            r.alloc("gather_in", "comm_buffer_bytes", shard if self.cast_gather else unit.float8)
        r.alloc(f"gather:{unit.path}", "comm_buffer_bytes", out)
        if self.cast_gather or unit.float8:
            r.emit(event, unit.path)
            r.free("gather_in")

    def unshard(self, r: Replay, unit: Unit) -> None:
        nbytes = (unit.world or self.world_size) * unit.shard_bytes(self.param_size)
        r.alloc(f"unsharded:{unit.path}", "unsharded_param_bytes", nbytes)

    def pre_forward(self, r: Replay, unit: Unit, previous: Unit | None) -> None:
        if f"unsharded:{unit.path}" in r.buffers:
            return
        self.gather(r, unit, "gather")
        self.unshard(r, unit)
        r.emit("gather", unit.path)
        if previous is not None:
            r.free(f"gather:{previous.path}")

    def pre_backward(self, r: Replay, unit: Unit, after: Unit | None) -> None:
        if f"unsharded:{unit.path}" not in r.buffers:
            if f"gather:{unit.path}" not in r.buffers:
                self.gather(r, unit, "gather")
            self.unshard(r, unit)
            r.emit("gather", unit.path)
            r.free(f"gather:{unit.path}")
        if after is not None and f"unsharded:{after.path}" not in r.buffers:
            self.gather(r, after, "prefetch")
            r.emit("prefetch", after.path)

    def post_backward(self, r: Replay, unit: Unit) -> None:
        r.free(f"unsharded:{unit.path}")
        self.open_units.remove(unit)
        self.done.add(unit.path)
        if not unit.trained:  # frozen parameters only: nothing to reduce
            return
        if self.last_scatter is not None:
            r.free(f"scatter:{self.last_scatter.path}")
        scatter = (unit.world or self.world_size) * unit.trained * self.reduce_size
        r.alloc(f"scatter:{unit.path}", "comm_buffer_bytes", scatter)
        r.emit("reduce_scatter", unit.path)
        r.grads_reduced += self.unit_grads[unit.path]
        r.alloc(f"grad:{unit.path}", "grad_bytes", unit.trained * self.grad_size)
        r.emit("reduce_scatter", unit.path)
        if r.accumulating:  # the new shard is added into the accumulated one, then freed
            r.free(f"grad:{unit.path}")
        self.last_scatter = unit


__all__ = ["FSDP2", "FSDPEvents", "Unit", "UnitWork", "fsdp_collectives", "fsdp_exposed"]
