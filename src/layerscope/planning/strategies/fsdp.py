"""FSDP2 (``"fsdp"``), and HSDP as FSDP2 on a 2-D mesh (``hsdp=(replicate, shard)``):
each unit's parameters sharded over ``shard`` GPUs (``states.fsdp_shard``), gathered
before its forward and backward and its gradients reduce-scattered after its backward
(``comm.fsdp_collectives``); under HSDP each gradient shard is then all-reduced over
the ``replicate`` groups. The overlap rule: ``timemodel.fsdp_exposed``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from layerscope.metrics.commkinds import wire_bytes
from layerscope.planning import timeline as tl
from layerscope.planning.comm import fsdp_collectives
from layerscope.planning.facts import fsdp_units, owner
from layerscope.planning.states import ModelStates, fsdp_shard
from layerscope.planning.strategy import Prepared, Step, Strategy, Times, link, optimizer_bytes
from layerscope.planning.strategy import weight_size as _weight_size
from layerscope.planning.timemodel import UnitWork, fsdp_exposed

if TYPE_CHECKING:
    from layerscope.planning.options import Options


class FSDP2(Strategy):
    """Parameters at rest are the padded shards; gradients and optimizer states those of
    the unpadded local shard (``to_local()``); under mixed precision
    (``MixedPrecisionPolicy``) the float32 shards are the master weights, and gradients
    are reduced and kept in float32."""

    name = "fsdp"

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
    ) -> ModelStates:
        states, step = optimizer_bytes(shapes, optimizer)
        local = padded = 0
        for shape in shapes:
            mine, pad = fsdp_shard(shape, world_size, rank)
            local, padded = local + mine, padded + pad
        size = 4 if precision.endswith("-mixed") else _weight_size(precision)
        return ModelStates(padded * size, local * size, states * local * size + step, 0)

    def prepare(self, step: Step) -> Prepared:
        """The units (paths, table rows) and collectives, set up for the replay."""
        opts, setup, grad_size = step.opts, step.setup, step.grad_size
        n, low = opts.shard_size, opts.compute_dtype.itemsize
        units = fsdp_units(step.prof, opts)
        owned: dict[str, list[tuple[int, ...]]] = {u: [] for u in units}
        for p in step.params:
            owned[owner(p.module, units)].append(p.shape)
        setup.units = [tl.Unit(u, sum(fsdp_shard(s, n, 0)[1] for s in owned[u])) for u in units]
        setup.param_size, setup.reduce_size = low, grad_size
        setup.cast_gather = opts.mixed
        setup.reshard_after_forward = opts.reshard_after_forward
        setup.final_grads = sum(u.padded for u in setup.units) * grad_size
        comm: dict[str, Any] = dict(fsdp_collectives(
            owned, world_size=n, param_bytes=low, reduce_bytes=grad_size,
            reshard_after_forward=opts.reshard_after_forward,
        ))  # fmt: skip
        if opts.replicas > 1:  # HSDP: each gradient shard all-reduced over the replicas
            for u in setup.units:
                if u.path in comm:
                    payload = u.padded * grad_size
                    wire = wire_bytes("all_reduce", payload, opts.replicas)
                    row = {"calls": 1, "bytes": payload, "wire_bytes": wire}
                    comm[u.path]["backward"]["all_reduce"] = row
        rows = {
            u.path: {"unit": True, "shard_elements": u.padded,
                     "unsharded_bytes": n * u.padded * low}
            for u in setup.units
        }  # fmt: skip
        return Prepared(comm, units, rows)

    def comm_time(self, step: Step, times: Times) -> tuple[float, float]:
        opts, setup, prof = step.opts, step.setup, step.prof
        if opts.world_size < 2:
            return 0.0, 0.0
        fwd, bwd = times.forward, times.backward
        n = opts.shard_size
        works = []
        paths = [u.path for u in setup.units]
        for unit in setup.units:
            node = prof.node(unit.path)
            nested = [
                prof.node(p) for p in paths if p != unit.path and owner(p, [unit.path]) == unit.path
            ]
            own_f = fwd[id(node)] - sum(fwd[id(m)] for m in nested)
            own_b = bwd[id(node)] - sum(bwd[id(m)] for m in nested)
            own_b += sum(
                fwd[id(prof.node(p))] for p in times.checkpointed if owner(p, paths) == unit.path
            )
            works.append(UnitWork(unit.path, own_f, own_b, unit.padded * setup.param_size,
                                  n * unit.padded * setup.reduce_size,
                                  opts.reshard_after_forward and unit.path != "",
                                  unit.padded * setup.reduce_size))  # fmt: skip
        replicas = (opts.replicas, link(opts, opts.world_size))
        return fsdp_exposed(works, n, link(opts, n), replicas)


__all__ = ["FSDP2"]
