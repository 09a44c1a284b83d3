"""The memory observer: saved activations, outputs, peaks and gradients, per module.

What it measures (all bytes; see ``docs/memory.md`` for the full contract):

- ``activation_bytes`` (self): storages autograd *saves for backward* while the module's
  forward runs, seen through ``torch.autograd.graph.saved_tensors_hooks``. Each storage
  counts once, at the first module that saved it, with its whole ``nbytes`` (a saved view
  keeps its entire storage alive); parameter and buffer storages are never activations.
- ``output_bytes`` (self): ``numel * element_size`` of every tensor leaf of the module's
  output, summed over calls. Inclusive values therefore add the children's outputs too.
- ``input_bytes`` (not additive; the same value in ``metrics`` and ``self_metrics``):
  ``numel * element_size`` of the tensors among one call's arguments (positional and
  keyword, inside tuples, lists, dicts and dataclasses as shapes are recorded), each
  distinct tensor once: the same tensor passed twice, or two views with the same storage,
  offset, sizes and strides, count once; other views of one storage count each their own
  elements (overlapping views may so count shared bytes twice, and the part of a storage
  no argument views is not counted). The largest over the module's calls, never summed
  into a parent: a module's inputs are not the sum of its children's.
- ``peak_bytes`` (not additive; the same value in ``metrics`` and ``self_metrics``):
  highest live bytes above the level at module entry during its forward, max over calls;
  absent on a module never entered (a container whose children its parent calls).
  A simulated allocator (``storages.StorageTable``) fed by every aten op gives it on CPU
  and meta; on CUDA the caching allocator's own statistics give it, and the simulation is
  kept beside it (``simulated_peak_bytes``) as a cross-check.
- ``grad_bytes`` (self): bytes of ``p.grad`` at the end of the session, each parameter
  counted once at the lowest common ancestor of the modules holding it.

Whole-model facts go to ``profile.memory`` (``forward_peak_bytes``, ``backward_peak_bytes``,
``grads``, the bytes live at the session's start by kind: ``baseline``, ``baseline_bytes``
(``baseline.py``)), and ``timeline``: live bytes at every module entry and exit (and where
the backward pass moves on to another module's work), in op order (``timeline``), and
the storage records for what-if figures (``storages``, ``records.py``).
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn
from torch._ops import OpOverload
from torch.nn.parameter import is_lazy

import layerscope.metricspec as ms
from layerscope.collect.observer import Observer
from layerscope.collect.signature import iter_tensors
from layerscope.collect.tree import ModelTree
from layerscope.errors import InvalidInputError
from layerscope.metrics.memory.baseline import Baseline, OptimizerWatch
from layerscope.metrics.memory.fsdp import CommBuffers, UnshardedParams
from layerscope.metrics.memory.grads import fill_gradients, owned_parameters, record_parameters
from layerscope.metrics.memory.peaks import CudaAllocator, NestedPeaks, Scope
from layerscope.metrics.memory.records import PLAIN_TENSORS, StorageRecords, held_part
from layerscope.metrics.memory.saved import (
    Outer,
    Saved,
    checkpoint_node,
    held_inputs,
    remove_saved_hooks,
    saving_node,
    unpack_saved,
)
from layerscope.metrics.memory.storages import StorageTable, storage_of
from layerscope.metrics.memory.timeline import BACKWARD, END, ENTER, EXIT, Timeline
from layerscope.profile import Node, Profile
from layerscope.torchapi import (
    DisableTorchDispatch,
    checkpoint_of_pack_hook,
    checkpoint_saving_inputs,
    current_autograd_node,
    top_saved_tensors_hooks,
)

if TYPE_CHECKING:
    from layerscope.collect.scopes import ScopeTracker

#: Metric keys this observer writes (``grad_bytes`` only once a backward ran or gradients
#: exist; ``simulated_peak_bytes`` only on CUDA): the columns a memory view shows.
METRIC_KEYS = (
    ms.ACTIVATION_BYTES,
    ms.OUTPUT_BYTES,
    ms.INPUT_BYTES,
    ms.PEAK_BYTES,
    ms.GRAD_BYTES,
)


@dataclass(slots=True)
class _Frame:
    node: Node
    sim: Scope
    cuda: Scope | None


def _input_bytes(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """Bytes of the distinct tensors among a call's arguments (module docstring)."""
    seen: set[tuple[Any, ...]] = set()
    total = 0
    for t in (*iter_tensors(args), *iter_tensors(kwargs)):
        try:
            nbytes = t.numel() * t.element_size()
        except (RuntimeError, NotImplementedError, TypeError):
            continue
        try:
            where = id(t.untyped_storage()), t.storage_offset()
            key: tuple[Any, ...] = (*where, t.shape, t.stride(), t.dtype)
        except (RuntimeError, NotImplementedError, TypeError):  # nested, sparse, ...
            key = (id(t),)
        if key not in seen:
            seen.add(key)
            total += nbytes
    return total


def _output_bytes(output: Any) -> int:
    if isinstance(output, Tensor):
        return output.numel() * output.element_size()
    return sum(t.numel() * t.element_size() for t in iter_tensors(output))


_ALIASES = 1
_MUTATES = 2


def _op_kind(func: OpOverload) -> int:
    """``_ALIASES`` if an output may share an input's storage, ``_MUTATES`` if it writes one."""
    schema = func._schema
    kind = _ALIASES if any(r.alias_info is not None for r in schema.returns) else 0
    return kind | (_MUTATES if schema.is_mutable else 0)


def _aliases_input(s: torch.UntypedStorage, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether some tensor among the op's arguments (lists included) lives on ``s``."""
    for a in (*args, *kwargs.values()):
        if isinstance(a, Tensor):
            if storage_of(a) is s:
                return True
        elif isinstance(a, tuple | list):
            for b in a:
                if isinstance(b, Tensor) and storage_of(b) is s:
                    return True
    return False


class MemoryObserver(Observer):
    """Measures activation, output, peak and gradient bytes per module (see module doc).

    ``cuda``: read CUDA's allocator statistics for ``peak_bytes`` (default: when the
    model has tensors on a CUDA device). They reset the device's peak counters
    (``torch.cuda.reset_peak_memory_stats``) at every module entry; the peak the process
    had reached before the session is kept in ``profile.memory["cuda"]``.

    ``optimizers``: the optimizers whose states the baseline counts (``baseline.py``);
    ``ddp``: the model's ``DistributedDataParallel`` wrapper, whose buckets it counts.
    """

    def __init__(
        self,
        *,
        cuda: bool | None = None,
        optimizers: OptimizerWatch | None = None,
        ddp: nn.parallel.DistributedDataParallel | None = None,
    ) -> None:
        if cuda and not torch.cuda.is_available():
            raise InvalidInputError("MemoryObserver(cuda=True), but CUDA is not available")
        self.cuda = cuda
        self.optimizers = optimizers
        self.ddp = ddp
        self._reset()

    def _reset(self) -> None:
        self._tracker: ScopeTracker | None = None
        self._tree: ModelTree | None = None  # kept after uninstall, for finish()
        self._table = StorageTable()
        self._baseline = Baseline(self._table)
        self._records = StorageRecords(self._table)  # profile.memory["storages"]
        self._sim = NestedPeaks(self._table)
        self._cuda: NestedPeaks | None = None
        self._cuda_device: torch.device | None = None
        self._cuda_peak_before = 0
        self._frames: list[_Frame] = []
        self._hooks: torch.autograd.graph.saved_tensors_hooks | None = None
        self._own_pack: Callable[[Tensor], Any] | None = None  # the pack hook pushed
        # each checkpoint frame (non-reentrant checkpointing) seen -> the node its held
        # inputs are charged to
        self._checkpoints: weakref.WeakKeyDictionary[Any, Node] = weakref.WeakKeyDictionary()
        self._outer_pack: Callable[[Tensor], Any] | None = None
        self._outer_unpack: Callable[[Any], Tensor] | None = None
        self._kinds: dict[OpOverload, int] = {}
        self._session_sim: Scope | None = None
        self._session_cuda: Scope | None = None
        self._bw_sim: Scope | None = None
        self._bw_cuda: Scope | None = None
        # id(node) -> (node, simulated peak, CUDA peak or -1); max over calls
        self._peaks: dict[int, tuple[Node, int, int]] = {}
        self._activations: dict[int, tuple[Node, int]] = {}
        self._outputs: dict[int, tuple[Node, int]] = {}
        self._inputs: dict[int, tuple[Node, int]] = {}  # the largest call's input bytes
        self.saw_backward = False
        self.backward_peak = 0
        self.backward_peak_cuda = 0
        self.session_peak = 0
        self.session_peak_cuda = 0
        self.forward_end = 0
        self.forward_end_cuda = 0
        self.notices: list[str] = []
        self._timeline = Timeline(self._table.by_kind)
        self._fsdp = UnshardedParams(self._table, self._unsharded)
        self._comm = CommBuffers(self._table)
        self._ops = 0  # aten ops seen so far: the timeline's clock
        self._cuda_base = 0  # CUDA bytes allocated when the session started
        self._bw_owner: Node | None = None  # module whose backward ops run now
        # the interval of the backward pass that is ``_bw_owner``'s work: its scopes
        self._bw_interval: tuple[Scope, Scope | None] | None = None
        # id(node) -> (node, simulated backward peak, CUDA one or -1); max over intervals
        self._bw_peaks: dict[int, tuple[Node, int, int]] = {}

    # ---- session lifetime ----------------------------------------------------------
    def install(self, tracker: ScopeTracker) -> None:
        self._reset()
        self._tracker = tracker
        self._tree = tracker.tree
        # Parameters and buffers: baseline storages, and never activations (a saved
        # ``W.t()`` is a view of a parameter's storage).
        device: torch.device | None = None
        add = self._table.add_baseline
        for module in tracker.tree.modules():
            for table in (module._parameters, module._buffers):
                for t in table.values():
                    if t is None or is_lazy(t):
                        continue
                    add(t, param=True)
                    if t.grad is not None:
                        add(t.grad, param=False)
                    if device is None and t.is_cuda:
                        device = t.device
        self._baseline.start(tracker.tree.modules(), self.optimizers, self.ddp)
        self._fsdp.install(tracker)
        if self.cuda is False:
            device = None
        elif self.cuda and device is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if device is not None:
            self._cuda_device = device
            source = CudaAllocator(device)
            self._cuda_peak_before = source.read()[1]
            self._cuda = NestedPeaks(source)
            self._session_cuda = self._cuda.open()
            self._cuda_base = self._session_cuda.entry
        self._session_sim = self._sim.open()
        top = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
        outer = top(False) if top is not None else None
        if outer is not None:  # hooks of the caller's, around the session: keep them working
            self._outer_pack, self._outer_unpack = outer
        self._own_pack = self._pack  # one bound method: the object on the hooks' stack
        hooks = torch.autograd.graph.saved_tensors_hooks(self._own_pack, unpack_saved)
        try:
            hooks.__enter__()
        except RuntimeError as e:  # e.g. inside torch.autograd.graph.disable_saved_tensors_hooks
            self.notices.append(f"activation_bytes not measured: saved-tensor hooks refused ({e})")
        else:
            self._hooks = hooks

    def uninstall(self) -> None:
        self._baseline.stop(self.optimizers)
        self._fsdp.uninstall()
        try:
            if self._hooks is not None:
                # ours, wherever they are: another session may have pushed its own since
                # and not ended yet (sessions may end in any order)
                remove_saved_hooks(self._pack)
                self._hooks = self._own_pack = None
        finally:
            if self._timeline.op or self._timeline.dropped:
                self._timeline.add(self._ops, END, "", self._level())
            self._end_backward()
            if self._session_sim is not None:
                self.session_peak = self._sim.close(self._session_sim)
            if self._cuda is not None and self._session_cuda is not None:
                self.session_peak_cuda = self._cuda.close(self._session_cuda)
            self._session_sim = self._session_cuda = None
            # Frames left open (a module that never returned) are closed as they stand.
            while self._frames:
                self._close(self._frames.pop())
            self._table.clear()
            self._tracker = None

    # ---- saved tensors -------------------------------------------------------------
    def _pack(self, t: Tensor) -> Any:
        tracker = self._tracker
        if tracker is not None and current_autograd_node() is None:
            frame = sys._getframe(1)
            checkpoint = checkpoint_saving_inputs(frame)
            if checkpoint is not None:  # a positional input a checkpoint keeps
                self._saved(t, self._checkpoint(checkpoint, tracker))
            else:  # at the running module, or the one a reentrant checkpoint runs
                self._saved(t, saving_node(frame, tracker))
        if self._outer_pack is not None:
            assert self._outer_unpack is not None
            return Outer(self._outer_pack(t), self._outer_unpack)
        if type(t) in PLAIN_TENSORS:
            # A plain tensor's detach needs no Python dispatch: skipping the session's
            # dispatch mode here saves a Python round trip per saved tensor.
            with DisableTorchDispatch():
                return Saved(t.detach(), t._version)
        return Saved(t.detach(), t._version)  # subclasses (FakeTensor, ...) keep theirs

    def _checkpoint(self, checkpoint: Any, tracker: ScopeTracker) -> Node:
        """The node a checkpoint's held inputs count at: the module it checkpoints (the
        running module if it runs a function of no module). The first time, the keyword
        arguments it keeps for the recomputation count there as saved (its positional
        ones pass through the pack hook)."""
        node = self._checkpoints.get(checkpoint)
        if node is not None:
            return node
        module, held = held_inputs(checkpoint)
        node = self._checkpoints[checkpoint] = checkpoint_node(module, tracker)
        for t in held:
            self._saved(t, node)
        return node

    def _checkpoint_begun(self) -> None:
        """Before a forward op: if the innermost saved-tensor hooks are a checkpoint's
        not seen yet (its inputs were all keyword ones, or another checkpoint's hooks
        packed them), its held inputs count now."""
        hooks = top_saved_tensors_hooks(False)
        if hooks is None or hooks[0] is self._own_pack or self._tracker is None:
            return
        checkpoint = checkpoint_of_pack_hook(hooks[0])
        if checkpoint is not None and checkpoint not in self._checkpoints:
            self._checkpoint(checkpoint, self._tracker)

    def _saved(self, t: Tensor, node: Node) -> None:
        t = held_part(t)  # a DTensor: its shard
        self._records.saved(t, node)
        if (s := storage_of(t)) is None:  # no storage to share: count the tensor itself
            n = t.numel() * t.element_size()
        else:
            ref = self._table.get(s)
            if ref is None:  # existed before the session (an input) and not yet seen
                ref = self._table.add(s, born=False)
            if ref.param or ref.saved:
                return
            ref.saved = True
            n = s.nbytes()
        entry = self._activations.get(id(node))
        self._activations[id(node)] = (node, n + (entry[1] if entry else 0))

    # ---- module scopes -------------------------------------------------------------
    def on_enter(
        self, node: Node, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        peaks = self._cuda
        cuda = peaks.open() if peaks is not None else None
        self._frames.append(_Frame(node, self._sim.open(), cuda))
        live = peaks.last - self._cuda_base if peaks is not None else self._table.live
        self._timeline.add(self._ops, ENTER, node.path, live)
        self._records.inputs(node, args, kwargs)
        n = _input_bytes(args, kwargs)
        entry = self._inputs.get(id(node))
        if entry is None or n > entry[1]:
            self._inputs[id(node)] = (node, n)

    def on_exit(self, node: Node, module: nn.Module, output: Any, raised: bool) -> None:
        frames = self._frames
        if frames and frames[-1].node is node:
            frame = frames.pop()
            self._close(frame)
        else:
            # Pop to this node's frame (frames above it belong to modules whose exit was
            # never reported); without a frame for it, leave the stack alone.
            if not any(f.node is node for f in frames):
                return
            while frames:
                frame = frames.pop()
                self._close(frame)
                if frame.node is node:
                    break
        cuda = self._cuda
        live = cuda.last - self._cuda_base if cuda is not None else self._table.live
        self._timeline.add(self._ops, EXIT, node.path, live)
        if not frames and not raised and node is self._root():
            self.forward_end = self._sim.level(frame.sim)
            if self._cuda is not None and frame.cuda is not None:
                self.forward_end_cuda = self._cuda.level(frame.cuda)
        if not raised and output is not None:
            self._records.outputs(node, output)
            n = _output_bytes(output)
            entry = self._outputs.get(id(node))
            self._outputs[id(node)] = (node, n + (entry[1] if entry else 0))

    def _close(self, frame: _Frame) -> None:
        sim = self._sim.close(frame.sim)
        cuda = -1
        if self._cuda is not None and frame.cuda is not None:
            cuda = self._cuda.close(frame.cuda)
        old = self._peaks.get(id(frame.node))
        if old is not None:
            sim, cuda = max(sim, old[1]), max(cuda, old[2])
        self._peaks[id(frame.node)] = (frame.node, sim, cuda)

    def _root(self) -> Node | None:
        return self._tracker.tree.root if self._tracker is not None else None

    # ---- ops: the simulated allocator ----------------------------------------------
    def on_op(
        self,
        func: OpOverload,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        out: Any,
        node: Node,
        backward: bool,
    ) -> None:
        if backward:
            if self._bw_sim is None:
                self._start_backward()
            if node is not self._bw_owner:
                # Before this op's outputs are counted: the level where the work of the
                # module starts (CUDA's allocator has allocated them already).
                self._close_interval()
                self._bw_owner = node
                cuda = self._cuda.open() if self._cuda is not None else None
                self._bw_interval = (self._sim.open(), cuda)
                self._timeline.add(self._ops, BACKWARD, node.path, self._level())
        else:
            if self._bw_sim is not None:
                self._end_backward()
            if self._hooks is not None:
                self._checkpoint_begun()
        self._ops += 1
        live = self._table.live
        if isinstance(out, Tensor):
            self._output(func, out, args, kwargs)
        elif isinstance(out, tuple | list):
            for o in out:
                if isinstance(o, Tensor):
                    self._output(func, o, args, kwargs)
        self._records.op(func, node, args, kwargs, out, self._table.live - live, backward)
        self._comm.on_op(func, args, out)
        if self._cuda is None and self._table.live > self._timeline.high:
            # a new high since the last timeline event: kept if no event shows it
            self._timeline.note_high(self._ops, node.path, self._table.live)

    def _output(
        self, func: OpOverload, t: Tensor, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        try:
            s = t.untyped_storage()
        except (RuntimeError, NotImplementedError, TypeError):  # no storage: nothing to count
            return
        table = self._table
        ref = table.get(s)
        kind = self._kinds.get(func)
        if kind is None:
            kind = self._kinds[func] = _op_kind(func)
        if ref is not None:
            # A known storage comes back only from a view, in-place or out= op; only a
            # mutating one (``resize_``, ``out=``) can have grown it.
            if ref.born and kind & _MUTATES:
                table.grew(ref, s)
            return
        # A view or in-place result on a storage not seen yet belongs to a pre-existing
        # tensor (the caller's input); anything else is new memory.
        born = not (kind & _ALIASES and _aliases_input(s, args, kwargs))
        table.add(s, born=born)

    def _unsharded(self, unit: Node) -> None:
        """FSDP2 resized the storages of ``unit``'s unsharded parameters (``fsdp.py``)."""
        if self._cuda is None and self._table.live > self._timeline.high:
            self._timeline.note_high(self._ops, unit.path, self._table.live)

    def _start_backward(self) -> None:
        self.saw_backward = True
        self._bw_sim = self._sim.open()
        if self._cuda is not None:
            self._bw_cuda = self._cuda.open()

    def _level(self) -> int:
        """Live bytes now, above the level at the session's start."""
        if self._cuda is not None:
            return self._cuda.source.read()[0] - self._cuda_base
        return self._table.live

    def _close_interval(self) -> None:
        """End the backward interval of ``_bw_owner``: its peak above the level where it
        began, kept as the module's if the highest of its intervals so far."""
        interval, node = self._bw_interval, self._bw_owner
        if interval is None or node is None:
            return
        self._bw_interval = None
        sim = self._sim.close(interval[0])
        cuda = -1
        if self._cuda is not None and interval[1] is not None:
            cuda = self._cuda.close(interval[1])
        old = self._bw_peaks.get(id(node))
        if old is not None:
            sim, cuda = max(sim, old[1]), max(cuda, old[2])
        self._bw_peaks[id(node)] = (node, sim, cuda)

    def _end_backward(self) -> None:
        self._close_interval()
        self._bw_owner = None
        if self._bw_sim is not None:
            self.backward_peak = max(self.backward_peak, self._sim.close(self._bw_sim))
            self._bw_sim = None
        if self._cuda is not None and self._bw_cuda is not None:
            self.backward_peak_cuda = max(self.backward_peak_cuda, self._cuda.close(self._bw_cuda))
            self._bw_cuda = None

    # ---- results -------------------------------------------------------------------
    def finish(self, profile: Profile) -> None:
        """Write self metrics (0 bytes where nothing was saved or returned; no peak for a
        module never entered) and ``profile.memory``."""
        root = profile.root
        on_cuda = self._cuda_device is not None
        for node in root.walk():
            m = node.self_metrics
            m[ms.ACTIVATION_BYTES] = 0
            m[ms.OUTPUT_BYTES] = 0
        for node, n in self._activations.values():
            node.self_metrics[ms.ACTIVATION_BYTES] = n
        for node, n in self._outputs.values():
            node.self_metrics[ms.OUTPUT_BYTES] = n
        for node, n in self._inputs.values():
            node.metrics[ms.INPUT_BYTES] = node.self_metrics[ms.INPUT_BYTES] = n
        for node, sim, cuda in self._peaks.values():
            peak = cuda if on_cuda and cuda >= 0 else sim
            node.metrics[ms.PEAK_BYTES] = node.self_metrics[ms.PEAK_BYTES] = peak
            if on_cuda:
                node.metrics[ms.SIMULATED_PEAK_BYTES] = sim
                node.self_metrics[ms.SIMULATED_PEAK_BYTES] = sim
        mem = profile.memory
        mem["allocator"] = "cuda" if on_cuda else "simulated"
        mem["forward_peak_bytes"] = root.metrics.get(ms.PEAK_BYTES, 0)
        mem["forward_end_bytes"] = self.forward_end_cuda if on_cuda else self.forward_end
        mem["session_peak_bytes"] = self.session_peak_cuda if on_cuda else self.session_peak
        mem["baseline"] = self._baseline.to_dict()
        mem["baseline_bytes"] = sum(mem["baseline"].values())
        mem[ms.ACTIVATION_BYTES] = sum(n for _, n in self._activations.values())
        if any(self._table.kind_high.values()) or self._fsdp.units():
            mem["by_kind"] = self._fsdp.report()
        if self.saw_backward:
            mem[ms.BACKWARD_PEAK_BYTES] = self.backward_peak_cuda if on_cuda else self.backward_peak
            self._write_backward_peaks(profile, on_cuda)
        if on_cuda:
            mem["cuda"] = self._cuda_report(profile)
        mem["timeline"] = self._timeline.to_dict(mem["allocator"], self._cuda_base)
        mem["storages"] = self._records.to_dict()
        if (dropped := self._records.notice()) is not None:
            self.notices.append(dropped)
        if self._tree is not None:
            owned = owned_parameters(self._tree)
            fill_gradients(profile, owned, force=self.saw_backward)
            record_parameters(mem, owned)
        profile.notices.extend(self.notices)

    def _write_backward_peaks(self, profile: Profile, on_cuda: bool) -> None:
        """``backward_peak_bytes``: self, the highest of the module's own backward
        intervals; inclusive, the highest over its subtree (each above its own start)."""
        own = {
            id(node): (cuda if on_cuda and cuda >= 0 else sim)
            for node, sim, cuda in self._bw_peaks.values()
        }
        for node in reversed(list(profile.root.walk())):  # children before parents
            mine = own.get(id(node), 0)
            node.self_metrics[ms.BACKWARD_PEAK_BYTES] = mine
            node.metrics[ms.BACKWARD_PEAK_BYTES] = max(
                [mine, *(c.metrics[ms.BACKWARD_PEAK_BYTES] for c in node.children)]
            )

    def _cuda_report(self, profile: Profile) -> dict[str, Any]:
        """Allocator and simulated figures side by side, with the largest disagreement."""
        worst = ("", 0)
        for node in profile.root.walk():
            if ms.PEAK_BYTES not in node.metrics:  # never entered
                continue
            d = node.metrics[ms.PEAK_BYTES] - node.metrics[ms.SIMULATED_PEAK_BYTES]
            if abs(d) > abs(worst[1]):
                worst = (node.path, int(d))
        return {
            "device": str(self._cuda_device),
            "peak_before_session_bytes": self._cuda_peak_before,
            "forward_peak_bytes": profile.root.metrics.get(ms.PEAK_BYTES, 0),
            "simulated_forward_peak_bytes": profile.root.metrics.get(ms.SIMULATED_PEAK_BYTES, 0),
            "forward_end_bytes": self.forward_end_cuda,
            "simulated_forward_end_bytes": self.forward_end,
            "session_peak_bytes": self.session_peak_cuda,
            "simulated_session_peak_bytes": self.session_peak,
            ms.BACKWARD_PEAK_BYTES: self.backward_peak_cuda,
            "simulated_backward_peak_bytes": self.backward_peak,
            "largest_peak_difference": {"path": worst[0], "bytes": worst[1]},
        }
