"""A saved ``GenerateEstimate``'s document (``GenerateEstimate.save``, ``layerscope
generate --json`` on meta): every field ``from_dict`` reads, checked (its times, rates,
FLOPs and bytes finite and >= 0), so an estimate that loads always renders; a fit's
derived figures must be what its points give (``check_fits``). Its ``"schema"``
(``ESTIMATE_SCHEMA``) is checked before (``jsonread.check_schema``): a document without
one is older."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from layerscope.errors import SchemaError
from layerscope.export.jsonamount import AMOUNT
from layerscope.export.jsoncheck import Arr, Bool, Check, Finite, Int, Map, Obj, Opt, Str
from layerscope.generation.decodefit import DERIVED, QUANTITIES, AffineFit

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
    # derived from the above: written, and checked against what the points give
    "mean_length": AMOUNT,
    "lines": Obj({q: Obj({"a": Finite(), "b": Finite()}) for q in QUANTITIES}),
    "errors": Obj(dict.fromkeys(QUANTITIES, AMOUNT)), "held": Opt(Bool()),
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


def check_fits(
    written: Sequence[Mapping[str, Any]], fits: Sequence[AffineFit], source: str | None = None
) -> None:
    """``SchemaError`` where a fit's derived figures (``decodefit.DERIVED``: the mean
    cache length, the lines, the errors, the check) that the document writes are not what
    its points and tolerance give, as an edited or damaged document's are (one not
    written is derived: nothing to check)."""
    for n, (doc, fit) in enumerate(zip(written, fits, strict=True)):
        derived = fit.to_dict()
        for path in _derived_paths():
            value: Any = doc
            again: Any = derived
            for key in path:
                if not isinstance(value, Mapping) or key not in value:
                    break  # not written: nothing to check
                value = value[key]
                again = again.get(key, _NONE) if isinstance(again, Mapping) else _NONE
            else:
                if again is not _NONE and value == again:
                    continue
                where = f"{source}: " if source else ""
                gives = "no error (no middle point to check)" if again is _NONE else repr(again)
                raise SchemaError(
                    f"{where}$.fit[{n}].{'.'.join(path)} is {value!r}, but the fit's points "
                    f"give {gives}: the document was edited or damaged"
                )


#: A derived figure the fit does not have (an error without a middle point).
_NONE = object()


def _derived_paths() -> list[tuple[str, ...]]:
    """Every derived figure of a fit's object, by its keys in it."""
    paths: list[tuple[str, ...]] = []
    for key in DERIVED:
        if key == "lines":
            paths += [(key, q, c) for q in QUANTITIES for c in ("a", "b")]
        elif key == "errors":
            paths += [(key, q) for q in QUANTITIES]
        else:
            paths.append((key,))
    return paths


__all__ = ["ESTIMATE", "ESTIMATE_KEYS", "ESTIMATE_SCHEMA", "check_fits"]
