"""The collectives one GPU runs in a training step, by arithmetic (each strategy's own,
in its module under ``planning.strategies``; here under the names documented in
``docs/plan.md``): what FSDP2 gathers and
reduce-scatters per unit, and what DDP all-reduces per bucket, in ``profile.comm``'s
form and conventions (payload bytes the op is handed, and ring wire bytes:
``metrics.commkinds.wire_bytes``).

FSDP2 (``fsdp_collectives``): a unit all-gathers its parameters' padded shards (in the
parameter dtype: bf16 under mixed precision) before its forward and, when resharded
after it, again before its backward; its backward reduce-scatters the padded gradients
of all ranks (in the reduce dtype: float32 under mixed precision, else the parameters').
FSDP2 does not reshard the root after its forward by default. A unit without parameters
of its own runs none.

DDP (``ddp_collectives``): one all-reduce per gradient bucket. Buckets follow DDP's
assignment: gradients in reverse order of the parameters, by dtype, the first bucket
closed at 1 MiB and the others at ``bucket_cap_mb`` (25), a tensor larger than the cap
alone in its bucket.
"""

from __future__ import annotations

from typing import Any

from layerscope.planning.strategies.fsdp import fsdp_collectives
from layerscope.planning.strategies.replicated import (
    FIRST_BUCKET_BYTES,
    ddp_buckets,
    ddp_collectives,
)

Comm = dict[str, dict[str, dict[str, dict[str, Any]]]]

__all__ = ["FIRST_BUCKET_BYTES", "Comm", "ddp_buckets", "ddp_collectives", "fsdp_collectives"]
