"""Device-side values: the reductions of one tensor and the per-device row store they go
into, plus every device-to-host read (one per device at the end; raise mode reads early).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
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


class _invisible:
    """Run our reductions outside autograd and unseen by dispatch and function modes.

    Excluding the Python dispatch key hides every op from all dispatch modes (the
    session's, a user's FakeTensorMode) like ``_disable_current_modes()`` does, at a
    tenth of its cost; the tensors we reduce are plain (subclasses are skipped). A class
    rather than a generator context manager: it is entered for every module call.
    """

    __slots__ = ("_dispatch", "_function", "_grad")

    def __enter__(self) -> None:
        self._grad = torch.is_grad_enabled()
        torch._C._set_grad_enabled(False)
        self._dispatch = torch._C._DisableTorchDispatch()
        self._dispatch.__enter__()  # type: ignore[no-untyped-call]
        self._function = torch._C.DisableTorchFunction()
        self._function.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._function.__exit__(None, None, None)
        self._dispatch.__exit__(None, None, None)
        torch._C._set_grad_enabled(self._grad)


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


def _value_parts(t: Tensor, stats: bool, underflow: bool = False) -> list[Tensor] | list[float]:
    """Device scalars for one tensor: NaN and Inf counts, then (``stats``) mean, population
    variance, min, max and zero count, then (``underflow``) the smallest nonzero magnitude.

    Off the CPU every value stays on the device (no synchronisation); the CPU, where
    reading a scalar costs no synchronisation, takes the cheaper path of ``_cpu_parts``.
    """
    n = t.numel()
    if t.device.type == "cpu":
        return _cpu_parts(t, n, stats, underflow)
    parts = [torch.isnan(t).sum(), torch.isinf(t).sum()]
    if not stats:
        return parts
    lo, hi = torch.aminmax(t)
    mean, var = _shifted_moments(t, lo, n)
    parts += [mean, var, lo, hi, (t == 0).sum()]
    if underflow:
        parts.append(_min_abs_nonzero(t))
    return parts


def _cpu_parts(t: Tensor, n: int, stats: bool, underflow: bool) -> list[float]:
    """``_value_parts`` on the CPU, in as few passes over the values as possible.

    ``aminmax`` comes first: when min and max are finite every value is, so the NaN/Inf
    counts (boolean-mask reductions, slow on the CPU) are only taken when they are not;
    a tensor with NaN/Inf gets no statistics (they would be left out anyway). Mean and
    variance come from one sum and one dot product (``var_mean`` is about 15x slower),
    falling back to values shifted by their mean when the plain sums would cancel or
    overflow. Zeros are counted as ``dot(sign(x), sign(x))``, and not at all when the
    minimum and maximum have the same sign (``_count_nonzero``).
    """
    lo_v, hi_v = (v.item() for v in torch.aminmax(t))
    if not (math.isfinite(lo_v) and math.isfinite(hi_v)):
        return [torch.isnan(t).sum().item(), torch.isinf(t).sum().item()]
    if not stats:
        return [0.0, 0.0]
    wide = t.dtype in _SHIFTED_SUM_DTYPES
    flat = t.reshape(-1)
    if wide:
        s1, s2 = t.sum().item(), torch.dot(flat, flat).item()
    else:
        s1 = t.sum(dtype=torch.float32).item()
        s2 = torch.linalg.vector_norm(t, dtype=torch.float32).item() ** 2
    mean = s1 / n
    var = s2 / n - mean * mean
    # The sums are accumulated in float32 (or the tensor's float64): their relative error
    # is about 1e-7, so var loses accuracy when mean**2 dwarfs it. Then (and when a sum
    # overflowed) take the two-pass form on values shifted by the mean, in float64.
    if not math.isfinite(s1 + s2) or mean * mean > 100.0 * max(var, 0.0):
        wide_t = t.double()
        mean_t, var_t = _shifted_moments(wide_t, wide_t.new_tensor(mean), n)
        mean, var = mean_t.item(), var_t.item()
    zeros = n - _count_nonzero(flat) if lo_v <= 0 <= hi_v else 0.0
    parts = [0.0, 0.0, mean, max(var, 0.0), lo_v, hi_v, zeros]
    if underflow:
        parts.append(_min_abs_nonzero(t).item())
    return parts


#: Elements per chunk of ``_count_nonzero`` (4 MiB of float32 scratch).
_CHUNK = 2**20
_scratch = threading.local()


def _count_nonzero(flat: Tensor) -> float:
    """Nonzero elements of a 1-D CPU tensor, as ``dot(sign(x), sign(x))`` chunk by chunk.

    The signs go into a scratch buffer kept per thread and dtype: a fresh allocation per
    tensor costs more in page faults than the pass itself. Each chunk's dot product of
    +-1 and 0 is exact (fewer than 2**24 terms, summed in float32 or wider).
    """
    buffers: dict[torch.dtype, Tensor] = _scratch.__dict__.setdefault("buffers", {})
    n = flat.numel()
    buf = buffers.get(flat.dtype)
    if buf is None or buf.numel() < min(n, _CHUNK):
        buf = buffers[flat.dtype] = torch.empty(min(max(n, 4096), _CHUNK), dtype=flat.dtype)
    total = 0.0
    for start in range(0, n, _CHUNK):
        part = flat[start : start + _CHUNK]
        signs = torch.sign(part, out=buf[: part.numel()])
        if signs.dtype in _SHIFTED_SUM_DTYPES:
            total += torch.dot(signs, signs).item()
        else:
            total += signs.abs_().sum(dtype=torch.float32).item()
    return total


def _shifted_moments(t: Tensor, shift: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """Mean and population variance (float64 device scalars) from the sum and the sum of
    squares of ``t - shift``: for float32/float64 a single fast pass each; for 16-bit
    types float32-accumulated sums of the unshifted values (no full-size float32 copy).

    Shifted by a value inside the data's range, a near-constant tensor does not cancel,
    and x*x cannot overflow for large values with a small range.
    """
    if t.dtype in _SHIFTED_SUM_DTYPES:
        d = (t - shift).reshape(-1)
        mean_d = d.sum().double() / n
        var = (torch.dot(d, d).double() / n - mean_d * mean_d).clamp_min(0.0)
        return mean_d + shift.double(), var
    s1 = t.sum(dtype=torch.float32)
    s2 = torch.linalg.vector_norm(t, dtype=torch.float32).square()
    mean = s1 / n
    return mean.double(), (s2 / n - mean * mean).clamp_min(0.0).double()


def _min_abs_nonzero(t: Tensor) -> Tensor:
    """The smallest nonzero magnitude (inf if every value is 0): three more passes."""
    return t.abs().masked_fill_(t == 0, math.inf).amin()


class _RowStore:
    """Result rows of one accelerator device, written in place into fixed-size device
    chunks (nothing is read back until ``fetch``)."""

    CHUNK = 1024

    def __init__(self, device: torch.device, width: int) -> None:
        self.device = device
        self.width = width
        # MPS has no float64; counts there are exact up to 2**24.
        self.dtype = torch.float32 if device.type == "mps" else torch.float64
        self.chunks: list[Tensor] = []
        self.size = 0

    def add(self, parts: Sequence[Any]) -> int:
        chunk, slot = divmod(self.size, self.CHUNK)
        if chunk == len(self.chunks):
            self.chunks.append(
                torch.zeros(self.CHUNK, self.width, dtype=self.dtype, device=self.device)
            )
        torch.stack(list(parts), out=self.chunks[chunk][slot, : len(parts)])
        self.size += 1
        return self.size - 1

    def counts(self, slots: Sequence[int]) -> list[tuple[int, int]]:
        """NaN/Inf counts of these rows, read to the host now (raise mode only)."""
        rows = [self.chunks[s // self.CHUNK][s % self.CHUNK, :2] for s in slots]
        return [(int(nan), int(inf)) for nan, inf in _to_host(torch.stack(rows))]

    def fetch(self) -> list[list[float]]:
        """All rows on the host: the one device-to-host transfer of this device."""
        if self.size == 0:
            return []
        data = self.chunks[0] if len(self.chunks) == 1 else torch.cat(self.chunks)
        return _to_host(data[: self.size])


class _HostRows:
    """Result rows of CPU tensors: already host numbers (``_cpu_parts``), kept as lists."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.rows: list[list[float]] = []

    def add(self, parts: Sequence[Any]) -> int:
        self.rows.append([*parts, *[0.0] * (self.width - len(parts))])
        return len(self.rows) - 1

    def counts(self, slots: Sequence[int]) -> list[tuple[int, int]]:
        return [(int(self.rows[s][_NAN]), int(self.rows[s][_INF])) for s in slots]

    def fetch(self) -> list[list[float]]:
        return self.rows


Store = _RowStore | _HostRows


def _read_counts(
    row_loc: Sequence[tuple[Store, int, int]], rows: Sequence[int]
) -> list[tuple[int, int]]:
    """NaN/Inf counts of these rows, now (raise mode only): one read per device.

    ``row_loc`` maps a row id to its store, its slot there and its tensor's numel.
    """
    out: list[tuple[int, int]] = [(0, 0)] * len(rows)
    by_store: dict[int, tuple[Store, list[int]]] = {}
    for i, r in enumerate(rows):
        store = row_loc[r][0]
        by_store.setdefault(id(store), (store, []))[1].append(i)
    with _invisible():
        for store, idx in by_store.values():
            got = store.counts([row_loc[rows[i]][1] for i in idx])
            for i, count in zip(idx, got, strict=True):
                out[i] = count
    return out


def _floating(t: Tensor) -> bool:
    return t.is_floating_point()


def _version(t: Tensor) -> int | None:
    try:
        return int(t._version)
    except RuntimeError:  # inference tensors keep no version counter
        return None
