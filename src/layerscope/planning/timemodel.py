"""The step time of a plan: a lower bound, by parts (``docs/plan.md``, "The time model").

- **compute**: the roofline time (``analysis.roofline``) of the whole model's forward
  and backward on the target, for the compute dtype;
- **recompute**: the roofline time of each checkpointed module's forward;
- **collectives**: NCCL's alpha-beta cost of each collective on the plan's cluster
  (``planning.collectives``: ring and tree, within and across nodes, the cheapest
  algorithm and protocol per size; ``planning.cluster``: the cluster's links, NICs,
  efficiencies and latencies);
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

from layerscope.planning.collectives import Link, collective_time


def link_time(kind: str, payload: int, link: Link) -> float:
    """Seconds one collective of ``kind`` with ``payload`` bytes takes over ``link``
    (``collectives.collective_time``); 0 on one GPU or with nothing to move."""
    return collective_time(kind, payload, link)


__all__ = ["link_time"]
