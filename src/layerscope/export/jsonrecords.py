"""The check of ``memory.storages`` (``metrics/memory/records.py``; ``docs/memory.md``):
the storages saved for backward or passed to modules, for what-if figures
(``analysis/whatif.py``). ``export.jsonspec`` puts it in the ``memory`` section."""

from __future__ import annotations

from typing import Any

from layerscope.export.jsoncheck import Arr, Bool, Int, Obj, Str, Where, fail
from layerscope.export.jsontable import Row

__all__ = ["STORAGES"]


class _Storages(Obj):
    """``memory.storages``: its rows' path indices must point into ``paths``."""

    def check(self, value: Any, where: Where) -> Any:
        out = super().check(value, where)
        paths = len(out["paths"])
        for i, row in enumerate(out["rows"]):
            for col in (1, 2, 3):
                for j, index in enumerate(row[col]):
                    if index >= paths:
                        at = ((((where, "rows"), i), col), j)
                        fail(at, f"an index into 'paths' (an integer below {paths})", index)
        rows = len(out["rows"])
        for i, indices in enumerate(out.get("op_rows", ())):
            for j, index in enumerate(indices):
                if index >= rows:
                    cell = (((where, "op_rows"), i), j)
                    fail(cell, f"an index into 'rows' (an integer below {rows})", index)
        for i, (index, _) in enumerate(out.get("compiled", ())):
            if index >= paths:
                fail(
                    (((where, "compiled"), i), 0),
                    f"an index into 'paths' (an integer below {paths})",
                    index,
                )
        return out


#: ``memory.storages`` (``metrics/memory/records.py``): the storages saved for backward
#: or passed to modules, for what-if figures (``analysis/whatif.py``).
STORAGES = _Storages(
    {
        "paths": Arr(Str(), "the module paths the rows' indices point to"),
        "rows": Arr(
            Row(
                (
                    Int(0, description="the storage's bytes"),
                    Arr(Int(0), "modules whose forward saved it, first the one it counts in"),
                    Arr(Int(0), "modules it was an argument of"),
                    Arr(Int(0), "modules it was an output of"),
                    Bool("a parameter's or buffer's storage (never an activation)"),
                ),
                "one storage: [bytes, saved by, input of, output of, param]",
            ),
            "one row per storage saved for backward or passed to a module",
        ),
        "dropped": Bool("the table was over its size limit and not kept (rows empty)"),
        "ops": Arr(
            Row(
                (
                    Int(0, description="the module the call ran in (an index into 'paths')"),
                    Str("the op (aten.mm.default, an SDPA kernel, aten.max.default)"),
                    Int(0, description="bytes of the storages its outputs made"),
                    Int(0, description="its FLOPs"),
                ),
                "one call: [module, op, bytes, flops]",
            ),
            "the calls of the ops a selective-checkpointing policy saves, in call order "
            "(recorded for checkpoint='op' plans only): torchtitan's ops, or those the "
            "given policy saves",
        ),
        "op_rows": Arr(
            Arr(Int(0), "the rows (indices into 'rows') of the call's outputs' storages"),
            "per call in 'ops', the rows of the storages its outputs made (none for a "
            "storage that got no row)",
        ),
        "policy": Str(
            "the selective-checkpointing policy whose saved calls 'ops' holds "
            "(absent: torchtitan's ops, all of them)"
        ),
        "compiled": Arr(
            Row(
                (
                    Int(0, description="the module it counts in (an index into 'paths')"),
                    Int(0, description="the storage's bytes"),
                ),
                "one storage: [module, bytes]",
            ),
            "the storages torch.compile's partitioner would save for the backward, by "
            "layerscope's rule (recorded for compile=True plans only; docs/memory.md)",
        ),
    },
    required=("paths", "rows", "dropped"),
    description="storages saved for backward and module inputs (docs/memory.md)",
)
