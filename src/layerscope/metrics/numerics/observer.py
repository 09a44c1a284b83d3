"""The observer itself: hooks every module's forward and the gradients of its tensors,
reduces their values into device rows, and at the end turns the rows into the report.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, get_args

import torch
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from layerscope.collect.observer import Observer
from layerscope.collect.signature import dtype_name, iter_tensors
from layerscope.errors import InvalidInputError
from layerscope.metrics.numerics.errors import NonFiniteError, NonFiniteMode, _warn
from layerscope.metrics.numerics.records import _Call, _Entry, _GradEvent, _Role
from layerscope.metrics.numerics.report import _raise_backward, _raise_forward, _scan
from layerscope.metrics.numerics.values import (
    Store,
    _floating,
    _HostRows,
    _invisible,
    _RowStore,
    _skip_reason,
    _value_parts,
    _version,
)
from layerscope.profile import Node, Profile

if TYPE_CHECKING:
    from layerscope.collect.scopes import ScopeTracker

_MODES: tuple[str, ...] = get_args(NonFiniteMode)


class NumericsObserver(Observer):
    """NaN/Inf detection with the origin module, and activation statistics per module.

    ``nonfinite``: "record" only records; "warn" also emits one ``NonFiniteWarning`` at
    the end of the session; "raise" raises ``NonFiniteError`` at the first module call
    where non-finite values appear (which is the origin when they came from a module).
    ``stats``: keep output statistics per module. ``grads``: check gradients too.
    ``underflow``: also find the smallest nonzero magnitude of each output, for the
    fp16/bf16 underflow flags (three more passes over every output's values).
    """

    def __init__(
        self,
        nonfinite: NonFiniteMode = "record",
        stats: bool = True,
        grads: bool = True,
        underflow: bool = False,
    ) -> None:
        if not isinstance(nonfinite, str) or nonfinite not in _MODES:
            raise InvalidInputError(
                f"nonfinite must be one of {', '.join(map(repr, _MODES))}, got {nonfinite!r}"
            )
        for name, value in (("stats", stats), ("grads", grads), ("underflow", underflow)):
            if not isinstance(value, bool):
                raise InvalidInputError(f"{name} must be True or False, got {value!r}")
        self.mode: NonFiniteMode = nonfinite
        self.stats = stats
        self.grads = grads
        self.underflow = underflow
        self._reset()

    def _reset(self) -> None:
        self._tracker: ScopeTracker | None = None
        self._active = False
        self._lock = threading.Lock()
        self._seq = itertools.count()
        self._stores: dict[torch.device, Store] = {}
        self._row_loc: list[tuple[Store, int, int]] = []  # store, slot, numel
        self._frames: list[_Call] = []
        self._calls: list[_Call] = []
        self._grad_events: list[_GradEvent] = []
        self._memo: dict[int, _Entry] = {}
        self._handles: list[RemovableHandle] = []
        self._pruned_at = 0
        self._skipped: dict[str, int] = {}
        #: a raise's origin, which the report cannot find when the raise ends its call
        self._raised_origin: dict[str, Any] | None = None

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
                    call.dtypes.append(dtype_name(t.dtype))
                    if self.grads and t.requires_grad and t.grad_fn is not None:
                        self._hook(t, entry, (call, "grad_output"))
        if call.skipped:
            return
        self._calls.append(call)
        if self.mode == "raise" and call.out_rows:
            try:
                _raise_forward(call, self._row_loc, self._tracker, self._frames)
            except NonFiniteError as e:  # the report names the origin the error named
                self._raised_origin = e.origin_event
                raise

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
            entry.row = self._add_row(t, _value_parts(t, full, full and self.underflow))
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

    def _add_row(self, t: Tensor, parts: Sequence[Tensor] | Sequence[float]) -> int:
        with self._lock:
            store = self._stores.get(t.device)
            if store is None:
                width = 8 if self.stats else 2
                store = self._stores[t.device] = (
                    _HostRows(width) if t.device.type == "cpu" else _RowStore(t.device, width)
                )
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
            row = self._add_row(grad, _value_parts(grad, stats=False))
        event = _GradEvent(
            next(self._seq),
            row,
            list(grad.shape),
            dtype_name(grad.dtype),
            tuple(roles),
        )
        self._grad_events.append(event)
        if self.mode == "raise":
            _raise_backward(event, self._row_loc)

    # ---- results -------------------------------------------------------------------
    def finish(self, profile: Profile) -> None:
        """Read every row back (one transfer per device) and write the report."""
        fetched = {id(s): s.fetch() for s in self._stores.values()}
        rows = [fetched[id(store)][local] for store, local, _ in self._row_loc]
        first, origin, bad_calls, bad_grads = _scan(
            self._calls,
            self._grad_events,
            rows,
            self._row_loc,
            self.stats,
            self.grads,
            self.underflow,
        )
        if origin is None:  # a raise ended the call whose own code made them
            origin = self._raised_origin
        skipped = "; ".join(sorted(self._skipped)) or None
        profile.numerics = {
            "mode": self.mode,
            "stats": self.stats,
            "grads": self.grads,
            "underflow": self.underflow,
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
            _warn(origin if origin is not None else first, origin is not None)
