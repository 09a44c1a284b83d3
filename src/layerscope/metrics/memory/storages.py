"""Storage identity and a simulated allocator: which storages exist, who made them, how big.

Memory belongs to storages, not tensors: a view, a transposed weight or an in-place result
shares its base's storage, and a storage lives as long as any tensor on it does. So every
memory figure is keyed by the ``UntypedStorage`` object.

Identity. ``t.untyped_storage()`` returns the *same* Python object for every tensor on a
storage for as long as the storage lives (torch preserves a storage's Python object), and
a weak reference to it is called back exactly when the storage is freed. Both hold for
real and meta tensors (checked by ``tests/test_memory.py``), whereas ``data_ptr()`` is 0
for every meta storage and cannot tell them apart. The table maps ``id(storage)`` to a weak
reference whose callback removes the entry when the storage dies, so an id reused by a
later storage never finds a stale record, and the table never keeps a storage alive.

The simulated allocator: a storage first seen as an op's output ("born" in the session)
adds its ``nbytes`` to ``live``; its death subtracts them. Storages that existed before
(parameters, buffers, the caller's inputs) are not counted in ``live``; those of the
model's baseline (``baseline.py``: parameters, gradients, optimizer states, ...) are
recorded with ``count_baseline``, so that their death in the session (a
``zero_grad(set_to_none=True)``) lowers ``live`` below its start. Views and
in-place ops return an existing storage and so allocate nothing; an existing storage that
grew (``resize_`` by an ``out=`` op) adds the growth. A storage resized outside the
dispatcher (FSDP2 gives its unsharded parameters memory and takes it back with
``storage.resize_``, ``fsdp.py``) is told with ``resized``: its bytes now count, whatever
they were.

Kinds. Some born storages are given a kind (``KINDS``), whose live bytes ``by_kind``
keeps beside ``live``: ``comm_buffer``, the buffers of collectives (what an all-gather
writes, what a reduce-scatter reads); ``unsharded_params``, FSDP2's unsharded parameters.
"""

from __future__ import annotations

import weakref

import torch
from torch import Tensor

COMM_BUFFER = "comm_buffer"
UNSHARDED_PARAMS = "unsharded_params"
#: The kinds a storage can be given, in the order files list them.
KINDS = (COMM_BUFFER, UNSHARDED_PARAMS)


def storage_of(t: Tensor) -> torch.UntypedStorage | None:
    """The tensor's storage, or None for tensors without one (sparse, some subclasses)."""
    try:
        return t.untyped_storage()
    except (RuntimeError, NotImplementedError, TypeError):
        return None


class StorageRef(weakref.ref[torch.UntypedStorage]):
    """A weak reference to one storage plus what the session knows about it."""

    __slots__ = ("born", "key", "kind", "nbytes", "param", "saved")

    key: int
    #: Bytes ``live`` loses when this storage dies: its size if born in the session or
    #: counted in the baseline (``count_baseline``), else 0.
    nbytes: int
    #: Allocated during the session (counted by the simulated allocator).
    born: bool
    #: A parameter's or buffer's storage: never an activation.
    param: bool
    #: Already counted as an activation (saved for backward) by some module.
    saved: bool
    #: Its kind (``KINDS``), or "" for none.
    kind: str


class StorageTable:
    """Every storage the session has seen, with the simulated allocator's running total."""

    def __init__(self) -> None:
        self._refs: dict[int, StorageRef] = {}
        #: Bytes of the storages born in the session that are still alive.
        self.live = 0
        #: Highest ``live`` since the last ``reset_peak`` (the allocator's peak counter).
        self.high = 0
        #: Live bytes of the storages of each kind, and the highest each reached.
        self.by_kind = dict.fromkeys(KINDS, 0)
        self.kind_high = dict.fromkeys(KINDS, 0)
        #: Bytes of every storage given the kind ``COMM_BUFFER``, each once.
        self.comm_buffer_total = 0

    def __len__(self) -> int:
        return len(self._refs)

    def get(self, s: torch.UntypedStorage) -> StorageRef | None:
        """The record of this storage if it is known (and alive)."""
        ref = self._refs.get(id(s))
        if ref is not None and ref() is s:
            return ref
        return None

    def add(self, s: torch.UntypedStorage, *, born: bool, param: bool = False) -> StorageRef:
        """Record a storage; a born one adds its bytes to ``live``."""
        ref = StorageRef(s, self._died)
        ref.key = id(s)
        ref.nbytes = s.nbytes() if born else 0
        ref.born = born
        ref.param = param
        ref.saved = False
        ref.kind = ""
        self._refs[ref.key] = ref
        if born:
            self.live += ref.nbytes
            if self.live > self.high:
                self.high = self.live
        return ref

    def add_baseline(self, t: Tensor, *, param: bool) -> None:
        """Record a tensor that existed before the session (not counted in ``live``)."""
        s = storage_of(t)
        if s is None:
            return
        ref = self.get(s)
        if ref is None:
            self.add(s, born=False, param=param)
        elif param:
            ref.param = True

    def count_baseline(self, s: torch.UntypedStorage, nbytes: int, *, param: bool) -> None:
        """Record a storage of the session's baseline (existed before, counted there): its
        death subtracts ``nbytes`` from ``live``."""
        ref = self.get(s)
        if ref is None:
            ref = self.add(s, born=False, param=param)
        elif param:
            ref.param = True
        if not ref.born:
            ref.nbytes = nbytes

    def grew(self, ref: StorageRef, s: torch.UntypedStorage) -> int:
        """Count a born storage's growth since it was recorded (``resize_``); the bytes added."""
        n = s.nbytes()
        delta = n - ref.nbytes
        if delta > 0:
            ref.nbytes = n
            self._moved(ref, delta)
            return delta
        return 0

    def resized(self, s: torch.UntypedStorage, *, param: bool) -> StorageRef:
        """A storage resized outside the dispatcher: from now on its bytes count (a storage
        not seen yet is recorded as born with the bytes it has now)."""
        ref = self.get(s)
        if ref is None:
            return self.add(s, born=True, param=param)
        if param:
            ref.param = True
        n = s.nbytes()
        delta = n - ref.nbytes
        ref.born = True
        ref.nbytes = n
        self._moved(ref, delta)
        return ref

    def give_kind(self, ref: StorageRef, kind: str) -> None:
        """Count a born storage's bytes under ``kind`` from now on."""
        if ref.kind == kind or not ref.born:
            return
        if ref.kind:
            self.by_kind[ref.kind] -= ref.nbytes
        ref.kind = kind
        if kind == COMM_BUFFER:
            self.comm_buffer_total += ref.nbytes
        self._kind(kind, ref.nbytes)

    def _moved(self, ref: StorageRef, delta: int) -> None:
        self.live += delta
        if self.live > self.high:
            self.high = self.live
        if ref.kind:
            self._kind(ref.kind, delta)

    def _kind(self, kind: str, delta: int) -> None:
        n = self.by_kind[kind] = self.by_kind[kind] + delta
        if n > self.kind_high[kind]:
            self.kind_high[kind] = n

    def _died(self, ref: weakref.ref[torch.UntypedStorage]) -> None:
        assert isinstance(ref, StorageRef)
        if self._refs.get(ref.key) is ref:
            del self._refs[ref.key]
        self.live -= ref.nbytes
        if ref.kind:
            self.by_kind[ref.kind] -= ref.nbytes

    # ---- the allocator-statistics interface of ``peaks.PeakSource`` -----------------
    def read(self) -> tuple[int, int]:
        return self.live, self.high

    def reset_peak(self) -> None:
        self.high = self.live

    def clear(self) -> None:
        """Forget every storage; their weak references die, so no callback fires later."""
        self._refs.clear()
