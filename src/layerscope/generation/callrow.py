"""``CallRow``: one model call of a generation, as ``ls.profile_generate`` replays it and
``ls.Profiler(stages=...)`` sees it in a loop. Both build it with ``CallRow.measured``,
the one place a call's Profile becomes a row; ``to_dict()`` is its JSON object in the
document's ``generation.calls``, its keys in the order of the field table
(``generation.fields.CALL_FIELDS``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from dataclasses import fields as dataclass_fields
from typing import Any

import layerscope.metricspec as ms
from layerscope.generation.fields import CALL_FIELDS, STAGE_FIELDS
from layerscope.profile import Profile

__all__ = ["CallRow", "StageTotals"]


@dataclass(frozen=True)
class CallRow:
    """One model call: its stage, the cache it found, what it was fed and what it cost."""

    #: "prefill", "decode", "full", or a stage rule's own name
    stage: str
    #: tokens in the KV cache before the call (0 without a cache)
    cache_tokens: int
    #: tokens fed per row
    tokens: int
    macs: int
    flops: int
    bytes_accessed: int
    #: the highest live bytes above the call's entry level (None: a document without it)
    peak_bytes: int | None = 0
    #: the KV cache's bytes after the call (None: a document without it)
    kv_bytes: int | None = 0
    #: the median seconds of the call's timed repeats (None: not timed)
    time: float | None = None
    #: keys of a document's row this version does not know, kept as read
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __getitem__(self, key: str) -> Any:
        """``row["macs"]``: the row read as its document's mapping (``to_dict``), as the
        call rows were before they were typed."""
        return self.to_dict()[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.to_dict().get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self.to_dict()

    @classmethod
    def measured(
        cls, stage: str, cache_tokens: int, tokens: int, profile: Profile, kv_bytes: int
    ) -> CallRow:
        """The row of a call analysed into ``profile`` (one analysis session, memory on)."""
        m = profile.root.metrics
        return cls(
            stage=stage,
            cache_tokens=cache_tokens,
            tokens=tokens,
            macs=int(m.get(ms.MACS, 0)),
            flops=int(m.get(ms.FLOPS, 0)),
            bytes_accessed=int(m.get(ms.BYTES_ACCESSED, 0)),
            peak_bytes=int(profile.memory.get("session_peak_bytes", 0)),
            kv_bytes=kv_bytes,
        )

    def timed(self, seconds: float) -> CallRow:
        """The row with its measured time."""
        return replace(self, time=seconds)

    def value(self, key: str) -> Any:
        """The figure ``key`` (a field of ``CALL_FIELDS``, or a document's newer key);
        None when absent."""
        return getattr(self, key) if key in _ATTRIBUTES else self.extra.get(key)

    def to_dict(self) -> dict[str, Any]:
        """The row's JSON object, in the field table's order; an optional figure that is
        None is left out, and ``extra``'s keys follow."""
        out: dict[str, Any] = {}
        for f in CALL_FIELDS:
            value = self.value(f.key)
            if value is not None or f.required:
                out[f.key] = value
        out.update((k, v) for k, v in self.extra.items() if k not in out)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CallRow:
        """A row from ``to_dict``'s form (checked by ``Generation.from_dict``); an
        optional figure the row lacks is None."""
        known: dict[str, Any] = {k: data.get(k) for k in _ATTRIBUTES if k in data or k in _OPTIONAL}
        return cls(**known, extra={k: v for k, v in data.items() if k not in _ATTRIBUTES})


@dataclass(frozen=True)
class StageTotals:
    """One stage's totals (``Generation.stage_totals``): its model calls, the work and
    peak of its merged Profile, the summed time of its timed calls."""

    calls: int
    #: the Profile's root figures, as it holds them (None: the Profile has none)
    macs: float | None
    flops: float | None
    bytes_accessed: float | None
    peak_bytes: float | None
    #: None: no call of the stage was timed
    time: float | None

    @classmethod
    def of(cls, profile: Profile, rows: list[CallRow]) -> StageTotals:
        """The totals of a stage: its Profile and its calls' rows."""
        m = profile.root.metrics
        times = [r.time for r in rows if r.time is not None]
        # the model's calls of the stage (an encoder's call is one of the prefill's),
        # else the root's calls in its profile
        work: dict[str, Any] = {
            f.key: m.get(f.key) for f in STAGE_FIELDS if f.key not in ("calls", "time")
        }
        return cls(len(rows) or profile.root.calls, **work, time=sum(times) if times else None)

    def to_dict(self) -> dict[str, Any]:
        """The totals as the views read them, in the field table's order."""
        return {f.key: getattr(self, f.key) for f in STAGE_FIELDS}


#: The figures a ``CallRow`` holds as attributes.
_ATTRIBUTES = frozenset(f.name for f in dataclass_fields(CallRow)) - {"extra"}
#: The attributes a document's row may lack.
_OPTIONAL = frozenset(f.key for f in CALL_FIELDS if not f.required)
