"""Forward timing of the ``hooks`` timer: light pre/post hooks that log (module, stamp),
and the replay of that log into per-module inclusive and self times.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from torch import nn
from torch.utils.hooks import RemovableHandle

from layerscope.collect.active import active
from layerscope.collect.common import install_hook_pairs, remove_hooks
from layerscope.collect.scopes import OUTSIDE
from layerscope.collect.timing.clock import Stamper
from layerscope.collect.timing.index import ModuleIndex
from layerscope.torchapi import current_autograd_node, get_sequence_nr

_get_ident = threading.get_ident


def _foreign_ok() -> bool:
    """Whether another thread's module call is logged: only when autograd runs it."""
    return current_autograd_node() is not None


#: A log entry: (module index, stamp, next autograd sequence number) on entry, and
#: (~module index, stamp, sequence number) on exit.
Entry: TypeAlias = tuple[int, Any, int]


class ForwardHooks:
    """Light pre/post forward hooks on every module, appending entries to ``log``.

    The pre hook runs after the user's pre hooks and the post hook before the user's post
    hooks, so the window is as tight around ``forward`` as hooks allow. The post hook is
    ``always_call`` so a raising module still logs its exit. Calls from a thread other
    than the one that installed the hooks are not logged, unless autograd runs them (a
    checkpointed module's forward recomputed on a device's backward thread).
    """

    def __init__(self, index: ModuleIndex, stamper: Stamper, record_seq: bool) -> None:
        self.index = index
        self.log: list[Entry] = []
        self._pre_stamp = stamper.pre_stamp()
        self._post_stamp = stamper.post_stamp()
        self._record_seq = record_seq
        self._handles: list[RemovableHandle] = []
        self._timers: list[Any] | None = None
        self._open_regions: list[RegionCall] = []
        self.regions: list[RegionCall] = []  # closed since the last take()
        self.taken_regions: list[RegionCall] = []
        self._thread = [0]  # the installing thread's ident, read by every hook
        self._hooks = [self._make(mid) for mid in range(len(index.modules))]

    def install(self) -> None:
        self._thread[0] = _get_ident()
        self._handles = install_hook_pairs(
            (m, pre, post) for m, (pre, post) in zip(self.index.modules, self._hooks, strict=True)
        )
        self._timers = active.timers  # user regions of this thread report here too
        self._timers.append(self)

    def uninstall(self) -> None:
        remove_hooks(self._handles)
        timers, self._timers = self._timers, None
        if timers is not None:
            for i in range(len(timers) - 1, -1, -1):
                if timers[i] is self:
                    del timers[i]
                    break
        self._open_regions.clear()

    # ---- user regions (``ls.region``) -------------------------------------------------
    def enter_region(self, name: str) -> RegionCall:
        """A user region starts: its call, with where the log stands and the region it
        is nested in, closed by ``exit_region``."""
        opened = self._open_regions
        call = RegionCall(name, opened[-1] if opened else None, len(self.log), self._pre_stamp())
        opened.append(call)
        return call

    def exit_region(self, call: RegionCall, *, count: bool = True) -> None:
        call.stop = self._post_stamp()
        call.end = len(self.log)
        opened = self._open_regions
        for i in range(len(opened) - 1, -1, -1):
            if opened[i] is call:
                del opened[i:]
                break
        if count:
            self.regions.append(call)

    def _make(self, mid: int) -> tuple[Callable[..., None], Callable[..., None]]:
        append = self.log.append
        pre_stamp, post_stamp = self._pre_stamp, self._post_stamp
        exit_code = ~mid
        owner = self._thread
        if self._record_seq:
            seq = get_sequence_nr

            def pre_seq(module: nn.Module, args: Any) -> None:
                if _get_ident() == owner[0] or _foreign_ok():
                    append((mid, pre_stamp(), seq()))

            def post_seq(module: nn.Module, args: Any, output: Any) -> None:
                if _get_ident() == owner[0] or _foreign_ok():
                    append((exit_code, post_stamp(), seq()))

            return pre_seq, post_seq

        def pre(module: nn.Module, args: Any) -> None:
            if _get_ident() == owner[0] or _foreign_ok():
                append((mid, pre_stamp(), 0))

        def post(module: nn.Module, args: Any, output: Any) -> None:
            if _get_ident() == owner[0] or _foreign_ok():
                append((exit_code, post_stamp(), 0))

        return pre, post

    def take(self) -> list[Entry]:
        """The log so far, emptied; the regions closed meanwhile move to ``taken_regions``
        (their log positions index the entries returned)."""
        entries = list(self.log)
        self.log.clear()
        self.taken_regions, self.regions = self.regions, []
        return entries


@dataclass(eq=False)
class RegionCall:
    """One call of a user region seen by the forward timers."""

    name: str
    parent: RegionCall | None
    start: int  # log length at entry
    begin: Any  # stamp
    end: int = 0  # log length at exit
    stop: Any = None  # stamp


def region_times(
    index: ModuleIndex,
    entries: Sequence[Entry],
    calls: Sequence[RegionCall],
    ns: Callable[[Any], float],
    outer: float = 0.0,
) -> dict[str, list[float]]:
    """Wall time (ns) of each region call, by region path, with the hook cost of the
    module calls inside it (``outer`` each) taken off. A region's path is that of the
    scope it was entered in (the innermost of the region around it and the modules
    running, whichever began last, else outside the model), then ``.[name]``, as the
    analysed run names it."""
    if not calls:
        return {}
    # the innermost module node running before each log position, and where it began
    innermost: list[tuple[int, int]] = []
    running: list[int] = []
    began: list[int] = []
    for k, (code, _, _) in enumerate(entries):
        innermost.append((running[-1], began[-1]) if running else (-1, -1))
        if code >= 0:
            running.append(index.resolve(code, running))
            began.append(k)
        elif running:
            running.pop()
            began.pop()
    innermost.append((running[-1], began[-1]) if running else (-1, -1))
    paths: dict[int, str] = {}

    def path_of(call: RegionCall) -> str:
        known = paths.get(id(call))
        if known is not None:
            return known
        at, since = innermost[min(call.start, len(innermost) - 1)]
        if call.parent is not None and (at < 0 or since < call.parent.start):
            scope = path_of(call.parent)  # no module began inside the region around it
        else:
            scope = OUTSIDE if at < 0 else index.paths[at]
        path = f"{scope}.[{call.name}]" if scope else f"[{call.name}]"
        paths[id(call)] = path
        return path

    out: dict[str, list[float]] = {}
    for call in calls:
        inside = sum(1 for code, _, _ in entries[call.start : call.end] if code >= 0)
        wall = ns(call.stop) - ns(call.begin) - outer * inside
        out.setdefault(path_of(call), []).append(max(wall, 0.0))
    return out


@dataclass
class ForwardRepeat:
    """One repeat's forward, replayed: per node calls, inclusive and self totals (ns)."""

    calls: list[int]
    inclusive: list[float]
    exclusive: list[float]
    root_window: float = 0.0


def replay_forward(
    index: ModuleIndex,
    codes: Sequence[int],
    stamps: Sequence[float],
    inner: float = 0.0,
    outer: float = 0.0,
) -> ForwardRepeat:
    """Inclusive and self totals per node from one repeat's enter/exit log.

    A call's window is exit stamp - entry stamp. ``inner`` (the part of one hook pair's
    cost that falls inside its own window) is taken off every call, and ``outer`` (the
    whole cost of one instrumented call as seen from outside) once per call nested in it.
    A corrected window is never below the sum of its direct children's, so self >= 0 and
    parent >= sum of children hold for every call. Nesting is dynamic: a module called
    from inside a non-parent is still taken out of the caller's self time.
    """
    n = len(index)
    out = ForwardRepeat([0] * n, [0.0] * n, [0.0] * n)
    # frame: [node, entry stamp, corrected sum of direct children, calls nested inside]
    stack: list[list[Any]] = []
    running: list[int] = []
    for code, t in zip(codes, stamps, strict=True):
        if code >= 0:
            node = index.resolve(code, running)
            stack.append([node, t, 0.0, 0])
            running.append(node)
            continue
        if not stack:
            continue
        node, t0, kids, nested = stack.pop()
        running.pop()
        raw = t - t0
        corrected = max(raw - inner - nested * outer, kids)
        out.calls[node] += 1
        out.inclusive[node] += corrected
        out.exclusive[node] += corrected - kids
        if stack:
            top = stack[-1]
            top[2] += corrected
            top[3] += nested + 1
        else:
            out.root_window += raw
    return out
