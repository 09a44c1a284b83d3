"""A saved ``GenerateEstimate``'s document (``GenerateEstimate.save``, ``layerscope
generate --json`` on meta): every field ``from_dict`` reads, checked (its times, rates,
FLOPs and bytes finite and >= 0), so an estimate that loads always renders. Its
``"schema"`` (``ESTIMATE_SCHEMA``) is checked before (``jsonread.check_schema``): a
document without one is older."""

from __future__ import annotations

from layerscope.export.jsonamount import AMOUNT
from layerscope.export.jsoncheck import Arr, Bool, Check, Int, Map, Obj, Opt, Str

_ROW: dict[str, Check] = {
    "batch": Int(1), "prefill_time": AMOUNT, "decode_time_per_token": AMOUNT,
    "tokens_per_s_per_sequence": AMOUNT, "tokens_per_s": AMOUNT, "bound": Str(),
    "weight_bytes": Int(0), "kv_bytes": Int(0), "fits": Opt(Bool()),
    "decode_flops": AMOUNT, "decode_bytes": AMOUNT, "prefill_flops": AMOUNT,
    "prefill_bytes": AMOUNT, "experts_per_layer": AMOUNT,
    "decode_time_all_experts": AMOUNT, "decode_bytes_all_experts": AMOUNT,
    "prefill_time_all_experts": AMOUNT, "prefill_time_predicted": AMOUNT,
    "decode_time_predicted": AMOUNT, "launch_time": AMOUNT, "kernels": Int(0),
}  # fmt: skip
#: The row's keys every saved estimate has written (through ``prefill_bytes``): one missing
#: is a damaged document, not a zero (the experts' and predicted keys came later).
_WRITTEN = list(_ROW).index("prefill_bytes") + 1
_POINT: dict[str, Check] = {q: AMOUNT for q in ("time", "flops", "macs", "bytes")}
_POINT["length"] = Int(0)
_FIT: dict[str, Check] = {
    "batch": Int(1), "first_length": Int(0), "last_length": Int(0),
    "points": Arr(Obj(_POINT, required=tuple(_POINT))), "tolerance": AMOUNT,
    "block_size": Int(1),
}  # fmt: skip
_DEVICE: dict[str, Check] = {
    "name": Str(), "label": Str(), "bandwidth": AMOUNT, "peak_flops": AMOUNT,
    "memory_bytes": Opt(Int(0)), "usable_bytes": Opt(Int(0)),
}  # fmt: skip
#: An estimate's ``"schema"``: its kind and format version (a profile's is
#: ``layerscope/1``).
ESTIMATE_SCHEMA = "layerscope-estimate/1"
_TOP: dict[str, Check] = {
    "schema": Str(), "model": Str(), "target": Str(), "device": Obj(_DEVICE), "dtype": Str(),
    "prompt": Int(1),
    "new_tokens": Int(1), "cache": Str(), "prefill_time": AMOUNT,
    "decode_time_per_token": AMOUNT, "tokens_per_s": AMOUNT,
    "tokens_per_s_per_seq": AMOUNT, "tokens_per_s_total": Opt(AMOUNT),
    "sweep": Arr(Obj(_ROW, required=tuple(_ROW)[:_WRITTEN])),
    "fit": Arr(Obj(_FIT, required=tuple(_FIT)[:5])), "notes": Arr(Str()),
    "kernels": Map(Map(Int(0))), "block_size": Int(1), "kv_dtype": Str(),
    "moe": Obj({"family": Str(), "experts": Int(1), "top_k": Int(1), "layers": Int(0),
                "implementation": Str()}),
    "mode": Str(), "tp": Int(2),
}  # fmt: skip
#: Keys an older document may lack (the per-sequence and total tokens/s named apart) or
#: that only a paged cache (``block_size``) or a KV width (``kv_dtype``) writes.
_LATER = (
    "schema", "kernels", "tokens_per_s_per_seq", "tokens_per_s_total", "block_size",
    "kv_dtype", "moe", "mode", "tp",
)  # fmt: skip
#: The estimate's document: the keys ``to_dict`` writes (the figures derived from the
#: rows, ``memory_bound``, ``crossover_batch``, ``fit_held``, ``tokens_per_s_total``, are
#: written, not read; ``tokens_per_s`` is the per-sequence figure, deprecated).
ESTIMATE = Obj(_TOP, required=tuple(k for k in _TOP if k not in _LATER),
               description="ls.estimate_generate's estimate")  # fmt: skip
#: The top-level keys ``to_dict`` writes (those read and those derived from the rows):
#: any other is the estimate's ``extra``.
ESTIMATE_KEYS = frozenset((*_TOP, "lower_bound", "memory_bound", "crossover_batch", "fit_held"))

__all__ = ["ESTIMATE", "ESTIMATE_KEYS", "ESTIMATE_SCHEMA"]
