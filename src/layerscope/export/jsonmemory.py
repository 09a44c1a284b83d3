"""The ``layerscope/1`` format's memory tables (``export.jsonspec`` holds the rest):
``memory.timeline`` and ``memory.by_kind``."""

from __future__ import annotations

from layerscope.export.jsoncheck import Arr, Int, Map, Obj, Str
from layerscope.export.jsontable import Columns

BYTES = Int(None, description="bytes")

#: ``memory.timeline`` (``metrics/memory/timeline.py``): live bytes in op order.
TIMELINE = Columns(
    {
        "clock": Str(),
        "allocator": Str(),
        "op": Arr(Int(0)),
        "event": Arr(Str()),
        "path": Arr(Str()),
        "bytes": Arr(Int(None)),
        "base_bytes": BYTES,
        "dropped": Int(0),
        "by_kind": Map(
            Arr(Int(None)),
            "kind of storage ('comm_buffer', 'unsharded_params') -> its simulated live bytes"
            " at each event (as long as 'op')",
        ),
    },
    ("op", "event", "path", "bytes"),
    "live bytes at every module boundary, as parallel lists (all as long as 'op')",
)
#: ``memory.by_kind`` (``metrics/memory/fsdp.py``).
BY_KIND = Obj(
    {
        "comm_buffer_bytes": BYTES,
        "comm_buffer_peak_bytes": BYTES,
        "unsharded_params_peak_bytes": BYTES,
        "fsdp_units": Map(
            Obj({"unshards": Int(0), "unsharded_param_bytes": BYTES}),
            "FSDP2 unit path -> its unshards and unsharded parameters' bytes",
        ),
    },
    description="buffers of collectives and FSDP2's unsharded parameters (simulated)",
)
