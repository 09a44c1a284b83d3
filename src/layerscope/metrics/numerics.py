"""The numerics observer: where NaN/Inf first appear, and activation statistics per module.

``NumericsObserver`` checks every module's floating outputs after each forward call and,
when a backward runs, the gradients w.r.t. its outputs and inputs (tensor hooks, not
module backward hooks, so in-place ops after a module keep working). It names the first
non-finite module call and the *origin*: the first call that turned finite values into
non-finite ones. With ``stats=True`` it also keeps min/max/mean/std/abs-max, the fraction
of zeros and fp16/bf16 range flags of each module's outputs, over all its calls.

Every reduction runs on the tensor's device, hidden from the session's dispatch mode (so
it never shows up as the model's FLOPs) and outside autograd; each result row is written
into a device buffer and read back with one host transfer per device in ``finish``. Only
``nonfinite="raise"`` reads a finiteness flag per module call, to stop where it happens.
The report format is documented in ``docs/numerics.md``.
"""

from __future__ import annotations

import itertools
import math
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

import torch
from torch import Tensor, nn
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils.hooks import RemovableHandle

from layerscope.collect.observer import Observer
from layerscope.collect.signature import iter_tensors
from layerscope.errors import InvalidInputError, LayerscopeError
from layerscope.profile import Node, Profile

if TYPE_CHECKING:
    from layerscope.collect.scopes import ScopeTracker

NonFiniteMode = Literal["record", "warn", "raise"]
#: Where a non-finite value was seen: a forward output, or a gradient w.r.t. one.
Where = Literal["output", "grad_output", "grad_input"]

#: Largest finite float16 (a larger magnitude overflows to inf or saturates).
FP16_MAX = 65504.0
#: Largest finite bfloat16, (2 - 2**-7) * 2**127.
BF16_MAX = 3.3895313892515355e38
#: Smallest positive float16 (subnormal); a smaller nonzero magnitude is not representable.
FP16_TINY = 2.0**-24
#: Smallest positive bfloat16 (subnormal), 2**-126 * 2**-7.
BF16_TINY = 2.0**-133

#: Columns of a value row; gradient rows fill only the first two.
_NAN, _INF, _MEAN, _VAR, _MIN, _MAX, _ZEROS, _MIN_ABS = range(8)
_CHECKED_DTYPES = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})
_WELFORD_DTYPES = frozenset({torch.float32, torch.float64})
_PLAIN_DISPATCH = torch.Tensor.__torch_dispatch__
_PACKAGE_DIR = str(Path(__file__).resolve().parents[1])
_MODES: tuple[str, ...] = get_args(NonFiniteMode)


class NonFiniteError(LayerscopeError, FloatingPointError):
    """``nonfinite="raise"``: a module call produced (or first received) NaN/Inf values.

    Raised from the forward hook of the module (``where == "output"``) or from the
    gradient hook (``"grad_output"``/``"grad_input"``); ``origin`` is True when the module
    turned finite values into non-finite ones.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str,
        call: int,
        where: Where,
        shapes: list[list[int]],
        nan: int,
        inf: int,
        origin: bool,
    ) -> None:
        super().__init__(message)
        self.path = path
        self.call = call
        self.where = where
        self.shapes = shapes
        self.nan = nan
        self.inf = inf
        self.origin = origin


class NonFiniteWarning(UserWarning):
    """``nonfinite="warn"``: the session saw NaN/Inf values (emitted once, at its end)."""


def _to_host(t: Tensor) -> list[Any]:
    """Every device-to-host read of this module goes through here (tests count them)."""
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

    Statistics: mean and population variance (Welford in the tensor's dtype for
    float32/float64; for 16-bit types float32 sums, so no full-size float32 copy), min,
    max, zero count and the smallest nonzero magnitude.
    """
    parts = [torch.isnan(t).sum(), torch.isinf(t).sum()]
    if not stats:
        return parts
    lo, hi = torch.aminmax(t)
    if t.dtype in _WELFORD_DTYPES:
        var, mean = torch.var_mean(t, correction=0)
    else:
        n = t.numel()
        s1 = t.sum(dtype=torch.float32)
        s2 = torch.linalg.vector_norm(t, dtype=torch.float32).square()
        mean = s1 / n
        var = (s2 / n - mean * mean).clamp_min(0.0)
    zero = t == 0
    zeros = zero.sum()
    min_abs = t.abs().masked_fill_(zero, math.inf).amin()
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


@dataclass(eq=False, slots=True)
class _Call:
    """One forward call of a module: the rows of its inputs and outputs."""

    node: Node
    index: int
    in_rows: list[int] = field(default_factory=list)
    out_rows: list[int] = field(default_factory=list)
    shapes: list[list[int]] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    seq: int = -1
    skipped: bool = False


#: A module call that a gradient hook reports to, and in which role.
_Role = tuple[_Call, Where]


@dataclass(eq=False, slots=True)
class _GradEvent:
    """One firing of a gradient hook: the gradient's row and the calls it belongs to."""

    seq: int
    row: int
    shape: list[int]
    dtype: str
    roles: tuple[_Role, ...]


@dataclass(eq=False, slots=True)
class _Entry:
    """What is known about one tensor value (object and version) during a forward."""

    ref: weakref.ref[Tensor]
    version: int
    row: int | None = None  # None: empty tensor, nothing to read
    full: bool = False  # the row has statistics, not just NaN/Inf counts
    roles: list[_Role] | None = None  # set once a gradient hook is registered on it


@dataclass(slots=True)
class _Stats:
    """Exact running combination of per-tensor statistics (Chan et al.'s parallel update)."""

    n: int = 0
    mean: float = 0.0
    m2: float = 0.0
    lo: float = math.inf
    hi: float = -math.inf
    zeros: int = 0
    min_abs: float = math.inf

    def add(self, n: int, row: list[float]) -> None:
        total = self.n + n
        delta = row[_MEAN] - self.mean
        self.mean += delta * n / total
        self.m2 += row[_VAR] * n + delta * delta * self.n * n / total
        self.n = total
        self.lo = min(self.lo, row[_MIN])
        self.hi = max(self.hi, row[_MAX])
        self.zeros += int(row[_ZEROS])
        self.min_abs = min(self.min_abs, row[_MIN_ABS])

    def report(self) -> dict[str, Any]:
        if self.n == 0:
            return dict.fromkeys(
                ("min", "max", "mean", "std", "absmax", "min_abs_nonzero", "zero_fraction")
            ) | dict.fromkeys(
                ("fp16_overflow", "bf16_overflow", "fp16_underflow", "bf16_underflow"), False
            )
        absmax = max(abs(self.lo), abs(self.hi))
        min_abs = self.min_abs if math.isfinite(self.min_abs) else None
        return {
            "min": self.lo,
            "max": self.hi,
            "mean": self.mean,
            "std": math.sqrt(max(self.m2, 0.0) / self.n),
            "absmax": absmax,
            "min_abs_nonzero": min_abs,
            "zero_fraction": self.zeros / self.n,
            "fp16_overflow": absmax > FP16_MAX,
            "bf16_overflow": absmax > BF16_MAX,
            "fp16_underflow": min_abs is not None and min_abs < FP16_TINY,
            "bf16_underflow": min_abs is not None and min_abs < BF16_TINY,
        }


def _version(t: Tensor) -> int | None:
    try:
        return int(t._version)
    except RuntimeError:  # inference tensors keep no version counter
        return None


def _label(path: str, type_name: str) -> str:
    return f"'{path}' ({type_name})" if path else f"<root> ({type_name})"


_WHERE_TEXT: dict[str, str] = {
    "output": "output",
    "grad_output": "gradient w.r.t. its output",
    "grad_input": "gradient w.r.t. its input",
}


def describe(event: dict[str, Any], origin: bool) -> str:
    """One sentence about a first_nonfinite/origin event of ``profile.numerics``."""
    what = f"{event['nan']} NaN, {event['inf']} Inf"
    head = (
        f"module {_label(event['path'], event['type'])} call {event['call']}: "
        f"non-finite values ({what}) in its {_WHERE_TEXT[event['where']]}, "
        f"shapes {event['shapes']}"
    )
    if origin:
        before = "inputs" if event["where"] == "output" else "output gradients"
        return f"{head}; its {before} were finite, so this module produced them (origin)"
    return (
        f"{head}; they were already there when it ran: no module produced them from "
        "finite values (they came from the inputs, or from code outside any module)"
    )


class NumericsObserver(Observer):
    """NaN/Inf detection with the origin module, and activation statistics per module.

    ``nonfinite``: "record" only records; "warn" also emits one ``NonFiniteWarning`` at
    the end of the session; "raise" raises ``NonFiniteError`` at the first module call
    where non-finite values appear (which is the origin when they came from a module).
    ``stats``: keep output statistics per module. ``grads``: check gradients too.
    """

    def __init__(
        self,
        nonfinite: NonFiniteMode = "record",
        stats: bool = True,
        grads: bool = True,
    ) -> None:
        if not isinstance(nonfinite, str) or nonfinite not in _MODES:
            raise InvalidInputError(
                f"nonfinite must be one of {', '.join(map(repr, _MODES))}, got {nonfinite!r}"
            )
        for name, value in (("stats", stats), ("grads", grads)):
            if not isinstance(value, bool):
                raise InvalidInputError(f"{name} must be True or False, got {value!r}")
        self.mode: NonFiniteMode = nonfinite
        self.stats = stats
        self.grads = grads
        self._reset()

    def _reset(self) -> None:
        self._tracker: ScopeTracker | None = None
        self._active = False
        self._lock = threading.Lock()
        self._seq = itertools.count()
        self._stores: dict[torch.device, _RowStore] = {}
        self._row_loc: list[tuple[_RowStore, int, int]] = []  # store, slot, numel
        self._frames: list[_Call] = []
        self._calls: list[_Call] = []
        self._grad_events: list[_GradEvent] = []
        self._memo: dict[int, _Entry] = {}
        self._handles: list[RemovableHandle] = []
        self._pruned_at = 0
        self._skipped: dict[str, int] = {}

    # ---- session lifecycle ---------------------------------------------------------
    def install(self, tracker: ScopeTracker) -> None:
        self._reset()
        self._tracker = tracker
        self._active = True

    def uninstall(self) -> None:
        """Remove every gradient hook this session registered, and forget all tensors."""
        self._active = False
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._memo.clear()
        self._frames.clear()

    # ---- forward -------------------------------------------------------------------
    def on_enter(
        self, node: Node, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        call = _Call(node, node.calls - 1)
        self._frames.append(call)
        tensors = [t for t in (*iter_tensors(args), *iter_tensors(kwargs)) if _floating(t)]
        if not tensors:
            return
        with _invisible():
            for t in tensors:
                reason = _skip_reason(t)
                if reason is not None:
                    self._skip(reason)
                    continue
                entry = self._entry(t, full=False)
                if entry.row is not None and entry.row not in call.in_rows:
                    call.in_rows.append(entry.row)
                if self.grads and t.requires_grad and t.grad_fn is not None:
                    self._hook(t, entry, (call, "grad_input"))

    def on_exit(self, node: Node, module: nn.Module, output: Any, raised: bool) -> None:
        call = self._pop(node)
        try:
            if not raised:
                self._check_outputs(call, output)
        finally:
            if not self._frames:
                self._memo.clear()  # values of one outermost call; later ones read afresh

    def _check_outputs(self, call: _Call, output: Any) -> None:
        call.seq = next(self._seq)
        tensors = [t for t in iter_tensors(output) if _floating(t)]
        if tensors:
            seen: set[int] = set()
            with _invisible():
                for t in tensors:
                    if id(t) in seen:
                        continue
                    seen.add(id(t))
                    reason = _skip_reason(t)
                    if reason is not None:
                        self._skip(reason)
                        call.skipped = True
                        continue
                    entry = self._entry(t, full=self.stats)
                    if entry.row is not None and entry.row not in call.out_rows:
                        call.out_rows.append(entry.row)
                    call.shapes.append(list(t.shape))
                    call.dtypes.append(str(t.dtype).removeprefix("torch."))
                    if self.grads and t.requires_grad and t.grad_fn is not None:
                        self._hook(t, entry, (call, "grad_output"))
        if call.skipped:
            return
        self._calls.append(call)
        if self.mode == "raise" and call.out_rows:
            self._raise_forward(call)

    def _pop(self, node: Node) -> _Call:
        for i in range(len(self._frames) - 1, -1, -1):
            if self._frames[i].node is node:
                call = self._frames[i]
                del self._frames[i:]
                return call
        return _Call(node, node.calls - 1)  # entered before this observer was installed

    def _entry(self, t: Tensor, full: bool) -> _Entry:
        """The memo entry of this tensor value, computing its row if not known yet."""
        version = _version(t)
        entry = self._memo.get(id(t)) if version is not None else None
        if entry is None or entry.ref() is not t or entry.version != version:
            entry = _Entry(self._weakref(t), -1 if version is None else version)
            if version is not None:
                self._memo[id(t)] = entry
        if t.numel() and (entry.row is None or (full and not entry.full)):
            entry.row = self._add_row(t, _value_parts(t, full))
            entry.full = full
        return entry

    def _weakref(self, t: Tensor) -> weakref.ref[Tensor]:
        key = id(t)
        memo = self._memo

        def forget(ref: weakref.ref[Tensor]) -> None:
            entry = memo.get(key)
            if entry is not None and entry.ref is ref:
                del memo[key]

        return weakref.ref(t, forget)

    def _add_row(self, t: Tensor, parts: Sequence[Tensor]) -> int:
        with self._lock:
            store = self._stores.get(t.device)
            if store is None:
                store = self._stores[t.device] = _RowStore(t.device, 8 if self.stats else 2)
            self._row_loc.append((store, store.add(parts), t.numel()))
            return len(self._row_loc) - 1

    def _skip(self, reason: str) -> None:
        self._skipped[reason] = self._skipped.get(reason, 0) + 1

    # ---- backward ------------------------------------------------------------------
    def _hook(self, t: Tensor, entry: _Entry, role: _Role) -> None:
        """Register (once per tensor value) the gradient hook that reports to ``role``."""
        if entry.roles is None:
            roles: list[_Role] = []
            entry.roles = roles
            hook = self._grad_hook(roles)
            self._handles.append(t.register_hook(hook))  # type: ignore[no-untyped-call]
            if len(self._handles) >= 2 * self._pruned_at + 1024:
                self._prune_handles()
        entry.roles.append(role)

    def _grad_hook(self, roles: list[_Role]) -> Callable[[Tensor], None]:
        def hook(grad: Tensor) -> None:
            if self._active:
                self._on_grad(grad, roles)
            return None  # never changes the gradient

        return hook

    def _prune_handles(self) -> None:
        """Drop handles whose tensor autograd already freed (their hooks went with it)."""
        self._handles = [h for h in self._handles if h.hooks_dict_ref() is not None]
        self._pruned_at = len(self._handles)

    def _on_grad(self, grad: Tensor, roles: list[_Role]) -> None:
        if not _floating(grad):
            return
        reason = _skip_reason(grad)
        if reason is not None:
            self._skip(reason)
            return
        if not grad.numel():
            return
        with _invisible():
            row = self._add_row(grad, [torch.isnan(grad).sum(), torch.isinf(grad).sum()])
        event = _GradEvent(
            next(self._seq),
            row,
            list(grad.shape),
            str(grad.dtype).removeprefix("torch."),
            tuple(roles),
        )
        self._grad_events.append(event)
        if self.mode == "raise":
            self._raise_backward(event)

    # ---- raise mode: one finiteness read per call ----------------------------------
    def _read_counts(self, rows: Sequence[int]) -> list[tuple[int, int]]:
        """NaN/Inf counts of these rows, read to the host now (raise mode only)."""
        out: list[tuple[int, int]] = [(0, 0)] * len(rows)
        by_store: dict[int, tuple[_RowStore, list[int]]] = {}
        for i, r in enumerate(rows):
            store = self._row_loc[r][0]
            by_store.setdefault(id(store), (store, []))[1].append(i)
        with _invisible():
            for store, idx in by_store.values():
                got = _to_host(torch.stack([store.row(self._row_loc[rows[i]][1])[:2] for i in idx]))
                for i, (nan, inf) in zip(idx, got, strict=True):
                    out[i] = (int(nan), int(inf))
        return out

    def _raise_forward(self, call: _Call) -> None:
        counts = self._read_counts(call.out_rows + call.in_rows)
        outs, ins = counts[: len(call.out_rows)], counts[len(call.out_rows) :]
        nan, inf = sum(c[0] for c in outs), sum(c[1] for c in outs)
        if nan + inf == 0:
            return
        origin = all(a + b == 0 for a, b in ins)
        event = _event(call, "output", call.shapes, call.dtypes, nan, inf)
        err = NonFiniteError(
            "layerscope: " + describe(event, origin),
            path=call.node.path,
            call=call.index,
            where="output",
            shapes=call.shapes,
            nan=nan,
            inf=inf,
            origin=origin,
        )
        if self._tracker is not None:  # name this module, not its parent, in the error
            self._tracker.error_site.setdefault(id(err), (err, call.node))
        raise err

    def _raise_backward(self, event: _GradEvent) -> None:
        ((nan, inf),) = self._read_counts([event.row])
        if nan + inf == 0:
            return
        ordered = _ordered_roles(event.roles)
        bad_out = {id(c) for c, where in event.roles if where == "grad_output"}
        origin_role = next(
            (r for r in ordered if r[1] == "grad_input" and id(r[0]) not in bad_out), None
        )
        call, where = origin_role if origin_role is not None else ordered[0]
        info = _event(call, where, [event.shape], [event.dtype], nan, inf)
        raise NonFiniteError(
            "layerscope: " + describe(info, origin_role is not None),
            path=call.node.path,
            call=call.index,
            where=where,
            shapes=[event.shape],
            nan=nan,
            inf=inf,
            origin=origin_role is not None,
        )

    # ---- results -------------------------------------------------------------------
    def finish(self, profile: Profile) -> None:
        """Read every row back (one transfer per device) and write the report."""
        fetched = {id(s): s.fetch() for s in self._stores.values()}
        rows = [fetched[id(store)][local] for store, local, _ in self._row_loc]

        def counts(row_ids: Sequence[int]) -> tuple[int, int]:
            return (
                sum(int(rows[r][_NAN]) for r in row_ids),
                sum(int(rows[r][_INF]) for r in row_ids),
            )

        first: dict[str, Any] | None = None
        origin: dict[str, Any] | None = None
        bad_calls = 0
        bad_grads = 0
        per_node: dict[int, _NodeReport] = {}
        bad_grad_out: set[int] = set()
        timeline: list[_Call | _GradEvent] = sorted(
            [*self._calls, *self._grad_events], key=lambda e: e.seq
        )
        for item in timeline:
            if isinstance(item, _Call):
                report = per_node.setdefault(id(item.node), _NodeReport(item.node))
                report.checked_calls += 1
                nan, inf = counts(item.out_rows)
                for r in item.out_rows:
                    if self.stats and rows[r][_NAN] + rows[r][_INF] == 0:
                        report.stats.add(self._row_loc[r][2], rows[r])
                report.nan += nan
                report.inf += inf
                if nan + inf == 0:
                    continue
                bad_calls += 1
                report.nonfinite_calls.append(item.index)
                ev = _event(item, "output", item.shapes, item.dtypes, nan, inf)
                first = first or ev
                if origin is None and counts(item.in_rows) == (0, 0):
                    origin = ev
                continue
            nan, inf = int(rows[item.row][_NAN]), int(rows[item.row][_INF])
            if nan + inf == 0:
                continue
            bad_grads += 1
            ordered = _ordered_roles(item.roles)
            for call, where in ordered:
                if where == "grad_output":
                    bad_grad_out.add(id(call))
                report = per_node.setdefault(id(call.node), _NodeReport(call.node))
                report.nonfinite_grad_calls.add(call.index)
            call, where = ordered[0]
            first = first or _event(call, where, [item.shape], [item.dtype], nan, inf)
            if origin is None:
                for call, where in ordered:
                    if where == "grad_input" and id(call) not in bad_grad_out:
                        origin = _event(call, where, [item.shape], [item.dtype], nan, inf)
                        break

        for report in per_node.values():
            report.write(self.stats, self.grads)
        skipped = "; ".join(sorted(self._skipped)) or None
        profile.numerics = {
            "mode": self.mode,
            "stats": self.stats,
            "grads": self.grads,
            "checked_calls": len(self._calls),
            "checked_grads": len(self._grad_events),
            "nonfinite_calls": bad_calls,
            "nonfinite_grads": bad_grads,
            "first_nonfinite": first,
            "origin": origin,
            "skipped": skipped,
            "skipped_tensors": sum(self._skipped.values()),
        }
        if self.mode == "warn" and first is not None:
            self._warn(origin if origin is not None else first, origin is not None)

    def _warn(self, event: dict[str, Any], origin: bool) -> None:
        level, frame = 1, sys._getframe(0)
        while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
            frame, level = frame.f_back, level + 1  # type: ignore[assignment]
        warnings.warn(NonFiniteWarning("layerscope: " + describe(event, origin)), stacklevel=level)


def _floating(t: Tensor) -> bool:
    return t.is_floating_point()


def _ordered_roles(roles: Sequence[_Role]) -> list[_Role]:
    """The order in which one gradient reaches the calls it belongs to.

    It leaves the backward of the modules it is an input of first (innermost, i.e. last
    entered, first), then enters the modules it is an output of (outermost first).
    """
    ins = [r for r in reversed(roles) if r[1] == "grad_input"]
    outs = [r for r in reversed(roles) if r[1] == "grad_output"]
    return ins + outs


def _event(
    call: _Call,
    where: Where,
    shapes: list[list[int]],
    dtypes: list[str],
    nan: int,
    inf: int,
) -> dict[str, Any]:
    """A first_nonfinite/origin entry of ``profile.numerics`` (plain JSON values)."""
    node = call.node
    return {
        "path": node.path,
        "node_id": node.node_id,
        "type": node.type,
        "call": call.index,
        "where": where,
        "shapes": [list(s) for s in shapes],
        "dtypes": list(dtypes),
        "nan": nan,
        "inf": inf,
    }


@dataclass(eq=False)
class _NodeReport:
    """What ``finish`` gathers for one node before writing ``node.numerics``."""

    node: Node
    checked_calls: int = 0
    nan: int = 0
    inf: int = 0
    stats: _Stats = field(default_factory=_Stats)
    nonfinite_calls: list[int] = field(default_factory=list)
    nonfinite_grad_calls: set[int] = field(default_factory=set)

    def write(self, stats: bool, grads: bool) -> None:
        out: dict[str, Any] = {"checked_calls": self.checked_calls}
        if stats:
            out["elements"] = self.stats.n
            out |= self.stats.report()
        out["nan"] = self.nan
        out["inf"] = self.inf
        out["nonfinite_calls"] = sorted(set(self.nonfinite_calls))
        if grads:
            out["nonfinite_grad_calls"] = sorted(self.nonfinite_grad_calls)
        self.node.numerics = out
