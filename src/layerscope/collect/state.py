"""Capture and restore what running a model may change, so profiling leaves no trace.

Covers the global RNG streams (torch's CPU and initialised CUDA generators, Python's
``random`` and numpy's global ``np.random``); every module's class and
``__dict__`` one level deep (attributes added or rebound by forward, train/eval flags, the
parameter/buffer/submodule/hook tables); every buffer's values (BatchNorm running stats,
counters); ``requires_grad``, ``.grad`` and gradient values of every parameter; and lazy
parameters, which a first forward materialises in place (their class, data, ``.grad``,
``requires_grad`` and version counter are put back). Buffers and gradients are cloned up
front but written back only where their values changed. The weights of embeddings with a
``max_norm`` (whose forward renormalises rows in place) are cloned too.

Writing values back would bump the tensors' version counters, and a graph the user built
before (``out = m(x)``, then a profile, then ``out.backward()``) that saved a BatchNorm's
running statistics would then refuse to run: every tensor whose values are put back gets
the version counter it had at capture, so nothing the user's pending graph saved looks
modified. Its values are those it had at capture, so that graph reads what it saved.

Small buffers and gradients (a BatchNorm's statistics and counter) are copied in batches,
one op per batch at capture and two at restore instead of one per tensor at each: those of
one dtype and rank (0 or 1) are concatenated into one tensor at capture and again at
restore, where one ``torch.equal`` tells whether any of them changed; only then are they
compared one by one.
"""

from __future__ import annotations

import ctypes
import operator
import random
import sys
from dataclasses import dataclass, field
from itertools import compress
from typing import Any, NamedTuple, TypeVar

import torch
from torch import Tensor, nn
from torch._C._functorch import is_functorch_wrapped_tensor
from torch._subclasses.fake_tensor import is_fake
from torch.nn.parameter import is_lazy
from torch.utils._python_dispatch import _disable_current_modes

from layerscope.errors import LayerscopeError
from layerscope.torchapi import set_version_counters

_CONTAINERS = (dict, set, list)

#: The most elements a tensor may have to be copied in a batch: the batch is copied again at
#: restore, which costs little beside the per-tensor calls it saves only for small tensors.
_BATCH_NUMEL = 1 << 14
#: The most elements of a batch: torch runs CPU kernels on several threads from 32768
#: elements (``at::internal::GRAIN_SIZE``) on; below, a batch's copy and comparison stay on
#: the calling thread (waking the others can cost milliseconds when a core is busy).
_BATCH_TOTAL = (1 << 15) - 1
_get_dtype = operator.attrgetter("dtype")
_get_grad = operator.attrgetter("grad")
_get_requires_grad = operator.attrgetter("requires_grad")
_get_version = operator.attrgetter("_version")
_T = TypeVar("_T")
#: What ``is_lazy`` checks for.
_LAZY: type = torch.nn.parameter.UninitializedTensorMixin  # type: ignore[attr-defined]


class _NumpyRng(NamedTuple):
    """numpy's global RNG (behind ``np.random.rand`` and co.) as found at capture."""

    module: Any  # numpy.random
    state: dict[str, Any]  # its get_state(legacy=False): bit generator state and gauss cache
    #: An MT19937's key and position as raw bytes, which tell cheaply whether anything was
    #: drawn since (None for other bit generators: restored unconditionally).
    raw: bytes | None
    address: int


#: Bytes of numpy's MT19937 state struct: ``uint32 key[624]; int pos``.
_MT19937_BYTES = 624 * 4 + 4
#: The last state read in full (numpy reads its 624 words one by one, ~25 us), with the
#: address and raw bytes of the generator it was read from. Kept only without a cached
#: gaussian: the same raw bytes then mean the same state, as a cached gaussian appears
#: only by drawing, which changes them (or by ``set_state`` to a state that has one at the
#: very same key and position, which this cannot tell).
_numpy_read: tuple[int, bytes, dict[str, Any]] | None = None


def _capture_numpy_rng() -> _NumpyRng | None:
    """numpy's global RNG state, if numpy is imported (if it is not, nothing drew from it
    yet, and a first import seeds it afresh anyway)."""
    global _numpy_read
    np = sys.modules.get("numpy")
    if np is None:
        return None
    try:
        rng = np.random
        bit_generator = rng.get_bit_generator()
        if type(bit_generator).__name__ != "MT19937":
            return _NumpyRng(rng, rng.get_state(legacy=False), None, 0)
        address = bit_generator.ctypes.state_address
        raw = ctypes.string_at(address, _MT19937_BYTES)
        read = _numpy_read
        if read is not None and read[0] == address and read[1] == raw:
            return _NumpyRng(rng, read[2], raw, address)
        state = rng.get_state(legacy=False)
        # Another thread may draw meanwhile: the raw bytes must be those of that state.
        if ctypes.string_at(address, _MT19937_BYTES) != raw:
            return _NumpyRng(rng, state, None, 0)
        if not state["has_gauss"]:
            _numpy_read = (address, raw, state)
        return _NumpyRng(rng, state, raw, address)
    except Exception:  # an old or unusual numpy: fall back to what it lets us do
        try:
            return _NumpyRng(np.random, np.random.get_state(legacy=False), None, 0)
        except Exception:
            return None


def _restore_numpy_rng(saved: _NumpyRng) -> None:
    """Put numpy's global RNG back, skipping the (slow) write when nothing was drawn: same
    key and position, and no cached gaussian at capture that a draw could have used up."""
    rng, state, raw, address = saved
    if raw is not None and not state["has_gauss"]:
        bit_generator = rng.get_bit_generator()
        if (
            type(bit_generator).__name__ == "MT19937"
            and bit_generator.ctypes.state_address == address
            and ctypes.string_at(address, _MT19937_BYTES) == raw
        ):
            return
    rng.set_state(state)


class _Batch(NamedTuple):
    """Tensors of one dtype and rank (0 or 1), copied together into ``saved``."""

    tensors: list[Tensor]
    numels: list[int]
    stacked: bool  # 0-dim tensors, stacked; else 1-dim ones, concatenated
    saved: Tensor


@dataclass
class ModelState:
    cpu_rng: Tensor
    cuda_rng: list[Tensor] | None
    python_rng: Any = None  # random.getstate()
    numpy_rng: _NumpyRng | None = None
    #: Every module once, with its class and a shallow copy of its ``__dict__``.
    modules: list[tuple[nn.Module, type[nn.Module], dict[str, Any]]] = field(default_factory=list)
    #: The non-empty containers (dicts, sets, lists) held in the modules' ``__dict__``,
    #: each with a shallow copy of its contents.
    contents: list[tuple[Any, Any]] = field(default_factory=list)
    #: The empty containers (most hook tables), which only need to stay empty.
    empty: list[Any] = field(default_factory=list)
    #: (module path, name in its table, tensor, requires_grad, grad, version) of every
    #: parameter, and of input leaves (path "", name "<input>").
    params: list[tuple[str, str, Tensor, bool, Tensor | None, int]] = field(default_factory=list)
    #: (tensor, copy) of each gradient and buffer not copied in a batch.
    grads: list[tuple[Tensor, Tensor]] = field(default_factory=list)
    buffers: list[tuple[Tensor, Tensor]] = field(default_factory=list)
    #: The small buffers and gradients, copied in batches.
    batches: list[_Batch] = field(default_factory=list)
    #: (tensor, class, data, grad, requires_grad, version) of each lazy parameter or buffer.
    lazy: list[tuple[Tensor, type[Tensor], Tensor, Tensor | None, bool, int]] = field(
        default_factory=list
    )
    #: (parameter, copy) of the weights a forward may renormalise in place.
    renormed: list[tuple[Tensor, Tensor]] = field(default_factory=list)
    #: (tensor, version) of every buffer, gradient and renormalised weight copied above.
    versions: list[tuple[Tensor, int]] = field(default_factory=list)
    restored: bool = False

    @classmethod
    def capture(cls, model: nn.Module) -> ModelState:
        # Outside any active dispatch mode (a user's FakeTensorMode would fake the copies).
        with _disable_current_modes():
            return cls._capture(model)

    @classmethod
    def _capture(cls, model: nn.Module) -> ModelState:
        cuda_rng = None
        if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
            cuda_rng = torch.cuda.get_rng_state_all()
        state = cls(
            cpu_rng=torch.get_rng_state(),
            cuda_rng=cuda_rng,
            python_rng=random.getstate(),
            numpy_rng=_capture_numpy_rng(),
        )
        modules, contents, empty = state.modules, state.contents, state.empty
        named = list(model.named_modules())
        for _, m in named:
            attrs = m.__dict__.copy()
            modules.append((m, type(m), attrs))
            for v in attrs.values():
                if isinstance(v, _CONTAINERS):
                    if v:
                        contents.append((v, v.copy()))
                    else:
                        empty.append(v)
        # Each distinct parameter and buffer once, in the order of named_parameters() and
        # buffers().
        with torch.no_grad():
            entries = [
                (prefix, key, p)
                for prefix, m in named
                for key, p in m._parameters.items()
                if p is not None
            ]
            entries = _distinct(entries, [p for _, _, p in entries], state.lazy)
            if entries:
                prefixes, keys, params = zip(*entries, strict=True)
                grads = list(map(_get_grad, params))
                state.params = list(
                    zip(
                        prefixes,
                        keys,
                        params,
                        map(_get_requires_grad, params),
                        grads,
                        map(_get_version, params),
                        strict=True,
                    )
                )
                # A backward pass accumulates into a gradient in place.
                present = [g for g in grads if g is not None]
                state.grads = _copy(present, state.batches)
                state.versions.extend(zip(present, map(_get_version, present), strict=True))
            buffers = [b for _, m in named for b in m._buffers.values() if b is not None]
            buffers = _distinct(buffers, buffers, state.lazy)
            state.buffers = _copy(buffers, state.batches)
            state.versions.extend(zip(buffers, map(_get_version, buffers), strict=True))
            for _, m in named:
                weight = getattr(m, "weight", None) if _renorms(m) else None
                if isinstance(weight, Tensor) and not is_lazy(weight):
                    state.renormed.append((weight, weight.clone()))
                    state.versions.append((weight, weight._version))
        return state

    def add_inputs(self, tensors: list[Tensor]) -> None:
        """Also put back the ``.grad`` of these input tensors (leaves that require grad),
        which a backward pass sets or accumulates into."""
        with _disable_current_modes():
            for t in tensors:
                if t.is_leaf and t.requires_grad:
                    self.params.append(("", "<input>", t, True, t.grad, t._version))
                    if t.grad is not None:
                        self.grads.append((t.grad, t.grad.detach().clone()))

    def restore(self) -> list[str]:
        """Put everything back; return notices for changes that could not be undone.

        Once only: the copies are dropped afterwards, so a caller that keeps the state
        until it returns (with a profile's many new objects) keeps none of them alive
        for the garbage collector to traverse.
        """
        if self.restored:
            raise LayerscopeError("a ModelState is restored once")
        with _disable_current_modes():
            notices = self._restore()
        self.restored = True
        self.python_rng = self.numpy_rng = None
        for copies in (
            self.modules,
            self.contents,
            self.empty,
            self.params,
            self.grads,
            self.buffers,
            self.batches,
            self.lazy,
            self.renormed,
            self.versions,
        ):
            copies.clear()
        return notices

    def _restore(self) -> list[str]:
        """Every step, even after one fails (then ``LayerscopeError`` naming it)."""
        failed: list[str] = []
        notices: list[str] = []
        for step in (self._restore_rng, self._restore_lazy, self._restore_modules,
                     self._restore_values, self._restore_params):  # fmt: skip
            try:
                notices.extend(step() or ())
            except Exception as e:  # the other steps still run
                failed.append(f"{step.__name__.strip('_').replace('_', ' ')}: {e!r}"[:300])
        if failed:
            raise LayerscopeError("could not put the model back as it was: " + "; ".join(failed))
        return notices

    def _restore_rng(self) -> None:
        torch.set_rng_state(self.cpu_rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)
        if self.python_rng is not None:
            random.setstate(self.python_rng)
        if self.numpy_rng is not None:
            _restore_numpy_rng(self.numpy_rng)

    def _restore_lazy(self) -> None:
        for t, lazy_cls, data, grad, requires_grad, _ in self.lazy:
            if t.grad is not grad:  # a backward pass after a materialising forward
                t.grad = grad
            if type(t) is not lazy_cls:  # materialised by a lazy module's first forward
                t.data = data
                t.__class__ = lazy_cls
            if t.requires_grad != requires_grad:
                t.requires_grad_(requires_grad)

    def _restore_modules(self) -> None:
        for m, cls, attrs in self.modules:
            _restore_module(m, cls, attrs)
        if any(self.empty):
            for value in self.empty:
                if value:
                    value.clear()
        for value, saved in self.contents:
            if not _same_contents(value, saved):
                value.clear()
                if isinstance(value, list):
                    value.extend(saved)
                else:
                    value.update(saved)

    def _restore_values(self) -> None:
        """Buffers, gradients and renormalised weights, then their version counters."""
        with torch.no_grad():
            # Kernels such as batch_norm update running stats without bumping the version
            # counter, so compare values; write back only what differs.
            for batch in self.batches:
                _restore_batch(batch)
            for b, saved in [*self.buffers, *self.grads, *self.renormed]:
                # sparse: no torch.equal, so copied back whole
                sparse = b.layout is not torch.strided
                if sparse or (_has_values(b) and not torch.equal(b, saved)):
                    b.copy_(saved)
        _reset_versions([*self.versions, *((t, version) for t, *_, version in self.lazy)])

    def _restore_params(self) -> list[str]:
        """``requires_grad`` and ``.grad``; a notice per parameter changed in place."""
        notices: list[str] = []
        for prefix, key, p, requires_grad, grad, version in self.params:
            if p.requires_grad != requires_grad:
                p.requires_grad_(requires_grad)
            if p.grad is not grad:
                p.grad = grad
            if p._version != version:
                name = f"{prefix}.{key}" if prefix else key
                notices.append(
                    f"the model changed parameter {name} in place during forward; "
                    "layerscope cannot undo that"
                )
        return notices


def _distinct(items: list[_T], tensors: list[Tensor], lazy: list[Any]) -> list[_T]:
    """The items whose tensor is neither lazy nor held by an earlier item; the lazy tensors
    go to ``lazy``, with what restore needs."""
    if len(set(map(id, tensors))) == len(tensors) and not any(
        issubclass(k, _LAZY) for k in set(map(type, tensors))
    ):
        return items
    kept: list[_T] = []
    seen: set[int] = set()
    for item, t in zip(items, tensors, strict=True):
        if id(t) in seen:
            continue
        seen.add(id(t))
        if is_lazy(t):
            lazy.append((t, type(t), t.data, t.grad, t.requires_grad, t._version))
        else:
            kept.append(item)
    return kept


def _renorms(m: nn.Module) -> bool:
    """Whether this module's forward may rewrite rows of its weight in place (an embedding
    with a ``max_norm``: ``embedding_renorm_``)."""
    return isinstance(m, nn.Embedding | nn.EmbeddingBag) and m.max_norm is not None


def _reset_versions(versions: list[tuple[Tensor, int]]) -> None:
    """Give the tensors whose values were put back the version counters they had at
    capture (see the module's docstring)."""
    moved = [(t, v) for t, v in versions if t._version != v]
    if moved:
        tensors, counters = zip(*moved, strict=True)
        set_version_counters(tensors, counters)


def _copy(tensors: list[Tensor], batches: list[_Batch]) -> list[tuple[Tensor, Tensor]]:
    """Copy these tensors' values: the small plain ones of rank 0 or 1 in batches (added to
    ``batches``), each other one alone (returned with its copy)."""
    alone: list[tuple[Tensor, Tensor]] = []
    # By (dtype, rank): the batch being filled and its number of elements; the full ones.
    groups: dict[tuple[torch.dtype, int], tuple[list[Tensor], list[int]]] = {}
    totals: dict[tuple[torch.dtype, int], int] = {}
    full: list[tuple[tuple[torch.dtype, int], tuple[list[Tensor], list[int]]]] = []
    for t, kind, dtype, dim, numel in zip(
        tensors,
        map(type, tensors),
        map(_get_dtype, tensors),
        map(Tensor.dim, tensors),
        map(Tensor.numel, tensors),
        strict=True,
    ):
        if kind is Tensor and dim < 2 and numel <= _BATCH_NUMEL:
            key = (dtype, dim)
            group = groups.get(key)
            total = totals.get(key, 0) + numel
            if group is None or total > _BATCH_TOTAL:
                if group is not None:
                    full.append((key, group))
                group = groups[key] = ([], [])
                total = numel
            totals[key] = total
            group[0].append(t)
            group[1].append(numel)
        else:
            alone.append((t, t.clone()))
    for (_, dim), (members, numels) in [*full, *groups.items()]:
        saved = None
        if len(members) > 1:
            try:
                saved = torch.cat(members) if dim else torch.stack(members)
            except RuntimeError:  # on several devices
                saved = None
        # Only a plain tensor with values (not meta, not wrapped) for a plain comparison.
        if saved is None or not _is_plain(saved):
            alone.extend((t, t.clone()) for t in members)
        else:
            batches.append(_Batch(members, numels, not dim, saved))
    return alone


def _restore_batch(batch: _Batch) -> None:
    """Write back the values of a batch's tensors that changed."""
    tensors, numels, stacked, saved = batch
    current: Tensor | None
    try:
        current = torch.stack(tensors) if stacked else torch.cat(tensors)
    except RuntimeError:  # a tensor changed device or rank
        current = None
    if current is not None and not _is_plain(current):
        current = None
    if current is not None and torch.equal(current, saved):
        return
    copies = saved.unbind() if stacked else saved.split_with_sizes(numels)
    if current is not None and (
        current.shape == saved.shape if stacked else list(map(Tensor.numel, tensors)) == numels
    ):
        # Each tensor has its rank and size still: compare and copy at C speed.
        if stacked:
            changed = torch.ne(current, saved).tolist()
        else:
            changed = list(map(operator.not_, map(torch.equal, tensors, copies)))
        if any(changed):
            torch._foreach_copy_(list(compress(tensors, changed)), list(compress(copies, changed)))
        return
    for t, copy in zip(tensors, copies, strict=True):
        if _has_values(t) and not torch.equal(t, copy):
            t.copy_(copy)


def _is_plain(t: Tensor) -> bool:
    """A plain dense tensor with values that wraps no other (the usual buffer or gradient)."""
    return (
        type(t) is Tensor
        and t.layout is torch.strided
        and not t.is_meta
        and not t.is_quantized
        and not torch._is_functional_tensor(t)
        and not is_functorch_wrapped_tensor(t)
    )


def _has_values(t: Tensor) -> bool:
    """False for meta and fake tensors, which carry shapes only."""
    if (
        type(t) is Tensor
        and not torch._is_functional_tensor(t)
        and not is_functorch_wrapped_tensor(t)
    ):
        # A plain tensor that wraps no other (the usual buffer or gradient) cannot be fake;
        # is_fake reaches the same answer at several times the cost of these checks.
        return not t.is_meta
    return t.device.type != "meta" and not is_fake(t)


def _restore_module(m: nn.Module, cls: type[nn.Module], attrs: dict[str, Any]) -> None:
    if type(m) is not cls:
        m.__class__ = cls
    current = m.__dict__
    if current.keys() != attrs.keys() or not all(
        map(operator.is_, current.values(), attrs.values())
    ):  # (same keys, so the same order unless deleted and re-added: then a full restore)
        for key in [k for k in current if k not in attrs]:
            del current[key]
        current.update(attrs)


def _same_contents(a: Any, b: Any) -> bool:
    """Identity-wise equality of two containers (tensors must not be compared by value)."""
    if len(a) != len(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(map(operator.is_, a.values(), b.values()))
    if isinstance(a, list):
        return all(map(operator.is_, a, b))
    return bool(a == b)
