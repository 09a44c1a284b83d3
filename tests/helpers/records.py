"""Reading what a session recorded: the shapes of its input and output specs, and a
dispatch mode that counts the bytes a process holds (the memory tests' ground truth)."""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from layerscope.profile import Spec, TensorSpec


def tensor_shape(spec: Spec) -> tuple[int, ...]:
    """The shape of a recorded input/output leaf, failing clearly if it is not a tensor."""
    assert isinstance(spec, TensorSpec), f"expected a tensor at {spec.path!r}, got {spec!r}"
    return spec.shape


class StorageTracker(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Bytes this process holds: the storages it is told of at the start, every storage
    a non-view op returns (until it dies) and every ``UntypedStorage.resize_``."""

    def __init__(self, start: list[torch.Tensor]) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.sizes: dict[int, int] = {}  # id(storage) -> bytes counted
        self.level = self.peak = 0
        for t in start:
            self._count(t.untyped_storage(), t.untyped_storage().nbytes())
        self._resize = torch.UntypedStorage.resize_

    def _count(self, s: torch.UntypedStorage, n: int) -> None:
        key = id(s)
        if key not in self.sizes:
            weakref.finalize(s, self._died, key)
        self.level += n - self.sizes.get(key, 0)
        self.sizes[key] = n
        self.peak = max(self.peak, self.level)

    def _died(self, key: int) -> None:
        self.level -= self.sizes.pop(key, 0)

    def __enter__(self) -> StorageTracker:
        tracker, resize = self, self._resize

        def resize_(s: torch.UntypedStorage, n: int) -> Any:
            out = resize(s, n)
            tracker._count(s, s.nbytes())
            return out

        torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign,assignment]
        return super().__enter__()  # type: ignore[no-untyped-call,no-any-return]

    def __exit__(self, *exc: object) -> None:
        torch.UntypedStorage.resize_ = self._resize  # type: ignore[method-assign]
        super().__exit__(*exc)  # type: ignore[no-untyped-call]

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if not any(r.alias_info is not None for r in func._schema.returns):
            for t in out if isinstance(out, tuple | list) else (out,):
                if isinstance(t, torch.Tensor) and id(t.untyped_storage()) not in self.sizes:
                    self._count(t.untyped_storage(), t.untyped_storage().nbytes())
        return out
