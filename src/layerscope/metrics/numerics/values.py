"""Device-side values: the reductions of one tensor and the per-device row store they go
into, plus every device-to-host read (one per device at the end; raise mode reads early).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensor

#: Columns of a value row; gradient rows fill only the first two.
_NAN, _INF, _MEAN, _VAR, _MIN, _MAX, _ZEROS, _MIN_ABS = range(8)
_CHECKED_DTYPES = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})
_SHIFTED_SUM_DTYPES = frozenset({torch.float32, torch.float64})
_PLAIN_DISPATCH = torch.Tensor.__torch_dispatch__


def _to_host(t: Tensor) -> list[Any]:
    """Every device-to-host read of this package goes through here (tests count them)."""
    return t.tolist()


@contextmanager
def _invisible() -> Iterator[None]:
    """Run our reductions outside autograd and unseen by dispatch and function modes.

    Excluding the Python dispatch key hides every op from all dispatch modes (the
    session's, a user's FakeTensorMode) like ``_disable_current_modes()`` does, at a
    tenth of its cost; the tensors we reduce are plain (subclasses are skipped).
    """
    with torch.no_grad(), torch._C._DisableTorchDispatch(), torch._C.DisableTorchFunction():
        yield


def _skip_reason(t: Tensor) -> str | None:
    """Why a floating tensor's values cannot (or should not) be read; None if they can."""
    if isinstance(t, FakeTensor):
        return "fake tensors have no values"
    if t.is_meta:
        return "meta tensors have no values"
    if type(t).__torch_dispatch__ is not _PLAIN_DISPATCH:
        return f"{type(t).__name__} tensors are not read"
    if torch._C._functorch.is_functorch_wrapped_tensor(t):
        return "tensors under a functorch transform are not read"
    if t.is_nested or t.layout != torch.strided:
        return "sparse and nested tensors are not checked"
    if t.dtype not in _CHECKED_DTYPES:
        return f"{str(t.dtype).removeprefix('torch.')} tensors are not checked"
    return None


def _value_parts(t: Tensor, stats: bool) -> list[Tensor]:
    """Device scalars for one tensor: NaN and Inf counts, then (``stats``) the statistics.

    Statistics: mean and population variance (for float32/float64 from the sum and sum of
    squares of the values shifted by their minimum; for 16-bit types float32 sums, so no
    full-size float32 copy), min, max, zero count and the smallest nonzero magnitude.

    On the CPU, where reading a scalar costs no device synchronisation, the NaN/Inf counts
    (two passes over boolean masks, which are slow there) are only taken when min/max show
    a non-finite value; zeros are counted as the sum of ``|sign(x)|`` for the same reason.
    """
    n = t.numel()
    if t.device.type == "cpu" and n > 0:
        lo, hi = torch.aminmax(t)
        if math.isfinite(lo.item()) and math.isfinite(hi.item()):
            parts = [t.new_zeros((), dtype=torch.int64)] * 2
        else:
            parts = [torch.isnan(t).sum(), torch.isinf(t).sum()]
        if not stats:
            return parts
        nonzero = t.sign().abs().sum(dtype=torch.float32 if n < 2**24 else torch.float64)
        zeros = n - nonzero
    else:
        parts = [torch.isnan(t).sum(), torch.isinf(t).sum()]
        if not stats:
            return parts
        lo, hi = torch.aminmax(t)
        zeros = (t == 0).sum()
    if t.dtype in _SHIFTED_SUM_DTYPES:
        # Shifted by the minimum: a near-constant tensor does not cancel, and x*x cannot
        # overflow for large values with a small range. Sum and dot are single fast
        # passes (var_mean is about 15x slower on CPU); the scalars combine in float64.
        d = (t - lo).reshape(-1)
        mean_d = d.sum().double() / n
        var = (torch.dot(d, d).double() / n - mean_d * mean_d).clamp_min(0.0)
        mean = mean_d + lo.double()
    else:
        s1 = t.sum(dtype=torch.float32)
        s2 = torch.linalg.vector_norm(t, dtype=torch.float32).square()
        mean = s1 / n
        var = (s2 / n - mean * mean).clamp_min(0.0)
    min_abs = t.abs().masked_fill_(t == 0, math.inf).amin()
    return [*parts, mean, var, lo, hi, zeros, min_abs]


class _RowStore:
    """Result rows of one device, written in place into fixed-size device chunks."""

    CHUNK = 1024

    def __init__(self, device: torch.device, width: int) -> None:
        self.device = device
        self.width = width
        # MPS has no float64; counts there are exact up to 2**24.
        self.dtype = torch.float32 if device.type == "mps" else torch.float64
        self.chunks: list[Tensor] = []
        self.size = 0

    def add(self, parts: Sequence[Tensor]) -> int:
        chunk, slot = divmod(self.size, self.CHUNK)
        if chunk == len(self.chunks):
            self.chunks.append(
                torch.zeros(self.CHUNK, self.width, dtype=self.dtype, device=self.device)
            )
        torch.stack(list(parts), out=self.chunks[chunk][slot, : len(parts)])
        self.size += 1
        return self.size - 1

    def row(self, local: int) -> Tensor:
        chunk, slot = divmod(local, self.CHUNK)
        return self.chunks[chunk][slot]

    def fetch(self) -> list[list[float]]:
        """All rows on the host: the one device-to-host transfer of this device."""
        if self.size == 0:
            return []
        data = self.chunks[0] if len(self.chunks) == 1 else torch.cat(self.chunks)
        return _to_host(data[: self.size])


def _read_counts(
    row_loc: Sequence[tuple[_RowStore, int, int]], rows: Sequence[int]
) -> list[tuple[int, int]]:
    """NaN/Inf counts of these rows, read to the host now (raise mode only).

    ``row_loc`` maps a row id to its store, its slot there and its tensor's numel.
    """
    out: list[tuple[int, int]] = [(0, 0)] * len(rows)
    by_store: dict[int, tuple[_RowStore, list[int]]] = {}
    for i, r in enumerate(rows):
        store = row_loc[r][0]
        by_store.setdefault(id(store), (store, []))[1].append(i)
    with _invisible():
        for store, idx in by_store.values():
            got = _to_host(torch.stack([store.row(row_loc[rows[i]][1])[:2] for i in idx]))
            for i, (nan, inf) in zip(idx, got, strict=True):
                out[i] = (int(nan), int(inf))
    return out


def _floating(t: Tensor) -> bool:
    return t.is_floating_point()


def _version(t: Tensor) -> int | None:
    try:
        return int(t._version)
    except RuntimeError:  # inference tensors keep no version counter
        return None
