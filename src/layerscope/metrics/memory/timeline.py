"""Live bytes at every module boundary of the analysis pass, in op order.

The clock is the number of aten ops the session dispatched before the event, not time:
the analysis pass is instrumented, so its wall clock means little, while op order is the
same on every run and on every device. Events:

- ``enter`` / ``exit``: a module call starts / returns (forward, and forwards a backward
  pass recomputes under activation checkpointing);
- ``backward``: the backward pass starts running the ops of another module (the module
  whose forward created the autograd node), so each run of backward work of one module
  is one event;
- ``peak``: the highest level between two of the events above, where it is higher than
  both (simulated allocator only: it is read after every op), at the op that reached it,
  with the module that ran it; so the timeline's highest point is the session's peak;
- ``end``: the level when the session ends (after the last op of the backward pass).

Stored in ``profile.memory["timeline"]`` as parallel lists (plain JSON, compact):
``{"clock": "op", "op": [...], "event": [...], "path": [...], "bytes": [...]}``, and
``"by_kind": {kind: [...]}``, the simulated live bytes of each kind of storage
(``storages.KINDS``: ``comm_buffer``, ``unsharded_params``) at each event, for the kinds
the session saw (absent when it saw none).
"""

from __future__ import annotations

from typing import Any

#: Events kept per session; later ones are counted in ``dropped`` (a long ``Profiler``
#: block around a generation loop would otherwise grow the profile without bound).
MAX_EVENTS = 200_000

ENTER = "enter"
EXIT = "exit"
BACKWARD = "backward"
PEAK = "peak"
END = "end"


class Timeline:
    """Appends events to parallel lists; ``to_dict`` gives the JSON form.

    ``high``: the highest level since the last event, which ``note_high`` raises; ``add``
    first writes it as a ``peak`` event when it is above both that event and the new one.
    """

    __slots__ = (
        "_high_kinds",
        "_high_op",
        "_high_path",
        "_kinds",
        "_last",
        "by_kind",
        "bytes",
        "dropped",
        "event",
        "high",
        "op",
        "path",
    )

    def __init__(self, kinds: dict[str, int] | None = None) -> None:
        #: live bytes by kind, read at each event (the allocator's ``by_kind``)
        self._kinds = kinds if kinds is not None else {}
        self.by_kind: dict[str, list[int]] = {k: [] for k in self._kinds}
        self._high_kinds: tuple[int, ...] = tuple(self._kinds.values())
        self.op: list[int] = []
        self.event: list[str] = []
        self.path: list[str] = []
        self.bytes: list[int] = []
        self.dropped = 0
        self.high = 0
        self._high_op = 0
        self._high_path = ""
        self._last = 0

    def __len__(self) -> int:
        return len(self.op)

    def note_high(self, op: int, path: str, live: int) -> None:
        """A level above ``high``, reached ``op`` ops in, by the module at ``path``."""
        self.high = live
        self._high_op = op
        self._high_path = path
        if self._kinds:
            self._high_kinds = tuple(self._kinds.values())

    def add(self, op: int, event: str, path: str, live: int) -> None:
        if self.high > live and self.high > self._last:
            self._append(self._high_op, PEAK, self._high_path, self.high, self._high_kinds)
        self._append(op, event, path, live, tuple(self._kinds.values()))
        self._last = self.high = live

    def _append(self, op: int, event: str, path: str, live: int, kinds: tuple[int, ...]) -> None:
        if len(self.op) >= MAX_EVENTS:
            self.dropped += 1
            return
        for values, n in zip(self.by_kind.values(), kinds, strict=True):
            values.append(n)
        self.op.append(op)
        self.event.append(event)
        self.path.append(path)
        self.bytes.append(live)

    def to_dict(self, allocator: str, base_bytes: int = 0) -> dict[str, Any]:
        out: dict[str, Any] = {
            "clock": "op",
            "allocator": allocator,
            "op": list(self.op),
            "event": list(self.event),
            "path": list(self.path),
            "bytes": list(self.bytes),
        }
        by_kind = {k: list(v) for k, v in self.by_kind.items() if any(v)}
        if by_kind:
            out["by_kind"] = by_kind
        if allocator == "cuda":
            out["base_bytes"] = base_bytes
        if self.dropped:
            out["dropped"] = self.dropped
        return out
