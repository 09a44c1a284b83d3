"""The step time of a plan: a lower bound, by parts (``docs/plan.md``, "The time model").

- **compute**: the roofline time (``analysis.roofline``) of the whole model's forward
  and backward on the target, for the compute dtype;
- **recompute**: the roofline time of each checkpointed module's forward;
- **collectives**: ring wire bytes (``metrics.commkinds.wire_bytes``: (n - 1) / n of
  the buffer for all-gather and reduce-scatter, 2 (n - 1) / n for all-reduce) over the
  interconnect's per-direction bandwidth; when ``world_size`` exceeds the node size, the
  ring crosses nodes and runs at the inter-node bandwidth (its slowest link);
- **overlap**: the strategy's rule (``Strategy.comm_time``). FSDP2 gathers unit i + 1
  while unit i computes its forward, and in the backward prefetches the next unit's
  gather and reduce-scatters the previous unit's gradients while a unit computes; what
  does not fit under that compute is exposed, and so is the first gather and the last
  reduce-scatter (``strategies.fsdp.fsdp_exposed``). DDP's bucket all-reduces run under
  the backward: exposed is the larger of the last bucket's time and the all-reduces'
  time beyond the backward's (``strategies.replicated.ddp_exposed``);
- **optimizer**: the bytes the step reads and writes (parameters, gradients, states)
  over the memory bandwidth.

With ``grad_accum`` micro-batches, compute, recompute and collectives run per
micro-batch (FSDP2 and DDP reduce every micro-batch unless told not to) and the
optimizer once.
"""

from __future__ import annotations

from layerscope.metrics.commkinds import wire_bytes


def link_time(kind: str, payload: int, world: int, bandwidth: float) -> float:
    """Seconds one collective takes on a ring at ``bandwidth`` bytes/s per direction."""
    if world < 2 or not payload:
        return 0.0
    return wire_bytes(kind, payload, world) / bandwidth


__all__ = ["link_time"]
