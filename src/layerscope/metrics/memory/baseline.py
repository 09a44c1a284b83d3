"""The memory a rank holds when a session starts, by kind (``profile.memory["baseline"]``).

Session figures (``session_peak_bytes``, the timeline) are measured from the level at the
session's start; the baseline is that level's known part, so that ``baseline_bytes +
session_peak_bytes`` is the rank's peak. Kinds, in this order, each storage counted once
(under the first kind that reaches it):

- ``parameters``: the model's parameters; a DTensor's local shard (``to_local()``);
- ``buffers``: the model's buffers, locally as parameters;
- ``gradients``: ``.grad`` of the parameters, locally;
- ``optimizer_states``: the tensors in ``optimizer.state`` for the model's parameters,
  of the optimizers layerscope knows (``OptimizerWatch``: given as ``optimizer=``, or
  seen stepping while the ``Profiler`` runs; one seen first inside the session is
  counted at its first ``step()``, before the step changes anything);
- ``other``: tensors the model's modules hold as plain attributes (``self.cache = t``),
  directly or in a list, tuple or dict attribute, that are not parameters or buffers;
  and ``DistributedDataParallel``'s gradient buckets (its reducer's, the size of the
  gradients, which exist whether or not ``.grad`` does).

A tensor counts its whole storage's ``nbytes``: what is allocated, the padding of an
FSDP2 shard and the rest of a flat buffer a view lives on included (a storage shared by
several tensors, tied weights, gradients as views of DDP's buckets, counts once). A
tensor without a storage (sparse) counts its values and indices.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from torch import Tensor, nn
from torch.nn.parameter import is_lazy
from torch.optim import Optimizer
from torch.utils.hooks import RemovableHandle

from layerscope.metrics.memory.storages import StorageTable, storage_of
from layerscope.metrics.params import local
from layerscope.metricspec import BASELINE_KINDS


def state_tensors(optimizer: Optimizer, params: set[int] | None) -> Iterator[Tensor]:
    """The tensors of ``optimizer.state`` (of the parameters whose ids are in ``params``;
    every parameter's if None)."""
    for p, state in list(optimizer.state.items()):
        if params is not None and id(p) not in params:
            continue
        if isinstance(state, dict):
            for value in state.values():
                if isinstance(value, Tensor):
                    yield value


#: The attributes every ``nn.Module`` has (its parameters, buffers, children and hooks):
#: not the user's, and the parameters and buffers are counted as such.
_MODULE_OWN = frozenset(vars(nn.Module()))


def _attribute_tensors(module: nn.Module) -> Iterator[Tensor]:
    """Tensors held as plain attributes of ``module``, directly or one container deep."""
    for name, value in vars(module).items():
        if name in _MODULE_OWN:
            continue
        if isinstance(value, Tensor):
            yield value
        elif isinstance(value, list | tuple):
            yield from (v for v in value if isinstance(v, Tensor))
        elif isinstance(value, dict):
            yield from (v for v in value.values() if isinstance(v, Tensor))


def ddp_bucket_bytes(ddp: nn.parallel.DistributedDataParallel) -> int:
    """The gradient buckets DDP's reducer holds from its construction on (tensors of its
    C++ side that no attribute shows): the bucket sizes DDP logs, in bytes; 0 where it
    logs none."""
    try:
        sizes = ddp._get_ddp_logging_data().get("bucket_sizes", "")  # type: ignore[no-untyped-call]
    except (AttributeError, RuntimeError):
        return 0
    return sum(int(n) for n in re.findall(r"\d+", str(sizes)))


class Baseline:
    """Counts the baseline's storages by kind, once each, and records them in the session's
    ``StorageTable`` (so their death lowers its level)."""

    def __init__(self, table: StorageTable) -> None:
        self.table = table
        self.bytes = dict.fromkeys(BASELINE_KINDS, 0)
        self._seen: dict[int, weakref.ref[Any]] = {}  # id(storage or tensor) -> it
        self._params: set[int] = set()
        self._optimizers: set[int] = set()

    def start(
        self,
        modules: Iterable[nn.Module],
        watch: OptimizerWatch | None,
        ddp: nn.parallel.DistributedDataParallel | None = None,
    ) -> None:
        """Count the model's tensors, the gradient buckets of its ``ddp`` wrapper and the
        states of the optimizers ``watch`` knows; until ``stop``, an optimizer it first
        sees stepping is counted at that step."""
        self.add_model(modules)
        if ddp is not None:
            self.bytes["other"] += ddp_bucket_bytes(ddp)
        if watch is not None:
            for optimizer in watch.optimizers():
                self.add_optimizer(optimizer)
            watch.listen(self.add_optimizer)

    def stop(self, watch: OptimizerWatch | None) -> None:
        if watch is not None:
            watch.unlisten(self.add_optimizer)

    def add_model(self, modules: Iterable[nn.Module]) -> None:
        """Parameters, buffers, gradients and other tensors of ``modules``."""
        modules = list(modules)
        params: list[Tensor] = []
        for m in modules:
            params.extend(p for p in m._parameters.values() if p is not None and not is_lazy(p))
        self._params = {id(p) for p in params}
        for p in params:
            self._add(p, "parameters", param=True)
        for m in modules:
            for b in m._buffers.values():
                if b is not None and not is_lazy(b):
                    self._add(b, "buffers", param=True)
        for p in params:
            if p.grad is not None:
                self._add(p.grad, "gradients", param=False)
        for m in modules:
            for t in _attribute_tensors(m):
                self._add(t, "other", param=False)

    def add_optimizer(self, optimizer: Optimizer) -> None:
        """The states of ``optimizer`` for the model's parameters, once per session."""
        if id(optimizer) in self._optimizers:
            return
        self._optimizers.add(id(optimizer))
        for t in state_tensors(optimizer, self._params):
            self._add(t, "optimizer_states", param=False)

    def _add(self, t: Tensor, kind: str, *, param: bool) -> None:
        t = local(t)
        s = storage_of(t)
        key = id(s) if s is not None else id(t)
        ref = self._seen.get(key)
        if ref is not None and ref() is (s if s is not None else t):
            return
        if s is None:
            self._seen[key] = weakref.ref(t)
            self.bytes[kind] += _sparse_nbytes(t)
            return
        self._seen[key] = weakref.ref(s)
        n = s.nbytes()
        self.bytes[kind] += n
        self.table.count_baseline(s, n, param=param)

    def to_dict(self) -> dict[str, int]:
        return dict(self.bytes)


def _sparse_nbytes(t: Tensor) -> int:
    if t.is_sparse:
        return _sparse_nbytes(t._values()) + _sparse_nbytes(t._indices())
    return t.numel() * t.element_size()


class OptimizerWatch:
    """The optimizers whose states a session's baseline counts: those given, and those
    seen stepping (torch's global optimizer step pre-hook) between ``start`` and ``stop``.

    Listeners (``listen``) are called with the optimizer at each ``step()`` while the
    watch runs, before the step changes anything. Weak references: an optimizer the user
    drops is forgotten.
    """

    def __init__(self, given: Sequence[Optimizer] = ()) -> None:
        self._refs: list[weakref.ref[Optimizer]] = [weakref.ref(o) for o in given]
        self._handle: RemovableHandle | None = None
        self._listeners: list[Callable[[Optimizer], None]] = []

    def optimizers(self) -> list[Optimizer]:
        """The known optimizers still alive, in the order they became known."""
        return [o for o in (r() for r in self._refs) if o is not None]

    def start(self) -> None:
        if self._handle is None:
            from torch.optim.optimizer import register_optimizer_step_pre_hook

            self._handle = register_optimizer_step_pre_hook(self._pre_step)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def listen(self, fn: Callable[[Optimizer], None]) -> None:
        self._listeners.append(fn)

    def unlisten(self, fn: Callable[[Optimizer], None]) -> None:
        self._listeners = [f for f in self._listeners if f != fn]

    def _pre_step(self, optimizer: Optimizer, args: Any, kwargs: Any) -> None:
        if not any(r() is optimizer for r in self._refs):
            self._refs.append(weakref.ref(optimizer))
        for fn in list(self._listeners):
            fn(optimizer)
