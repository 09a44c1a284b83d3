"""The module scope stack: which module is running now, fed by forward pre/post hooks.

``ScopeTracker.current`` answers "which module is running" for any per-op observer (the
innermost module on the stack, the root when none is). Every module instance of the
model is instrumented, and put back in ``uninstall`` (called from ``finally``):

- a module without hooks of its own gets a ``forward`` instance attribute, a method
  wrapping its class's forward (``__wrapped__`` keeps ``inspect.signature`` right).
  nn.Module's call skips all hook machinery for a module without hooks, and that
  machinery costs more per call than this wrapper, so the common case stays on torch's
  fast path;
- a module that has hooks (the user's forward or backward hooks, a lazy module's
  initialiser, or global forward hooks for every module) or a ``forward`` of its own on
  the instance gets a forward pre hook
  (prepended, with kwargs) and a forward hook (``always_call=True``, appended) instead,
  so the user's pre and forward hooks run inside its scope: their work is the module's,
  and an error they raise names it.

Either way the stack stays balanced when a module raises, and the innermost module on an
exception's way out is remembered so the error can name where it happened.

Backward attribution: autograd numbers every node it creates with a thread-local
sequence number. Each hook records "from this sequence number on, new autograd nodes
belong to this module", a step function over sequence numbers; a backward op is then
attributed by looking up its autograd node's number (``grad_owner``), O(log n), with no
graph walks and no references kept to the user's graph.
"""

from __future__ import annotations

import sys
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Sequence
from types import FrameType, MethodType
from typing import Any

import torch
from torch import nn
from torch.autograd.graph import Node as GraphNode
from torch.utils.hooks import BackwardHook, RemovableHandle

from layerscope.collect import tensorhooks
from layerscope.collect.active import active
from layerscope.collect.common import install_hook_pairs, remove_hooks
from layerscope.collect.enginesite import engine_site
from layerscope.collect.errorsites import forget_swallowed, keep_only
from layerscope.collect.observer import Observer, observer_error
from layerscope.collect.signature import flatten, flatten_call, signature_of, tensor_key
from layerscope.collect.tree import ModelTree
from layerscope.errors import LayerscopeError
from layerscope.profile import Node, Signature
from layerscope.torchapi import (
    NO_SEQUENCE,
    STOP_RECOMPUTATION,
    current_autograd_node,
    get_sequence_nr,
)

#: Distinct input/output signatures kept per module; later distinct ones are only counted.
MAX_SIGNATURES = 16
#: Path, name and type of the node that stands for work outside the profiled module.
OUTSIDE = "<outside>"
_get_ident = threading.get_ident
_perf_counter = time.perf_counter


#: The stand-in for "no module" on the stack under a region's frame, and in
#: ``ModelTree.module`` for a region node once attached: it holds no tensors.
REGION_MODULE = nn.Module()
#: ``Node.type`` of a region node.
REGION = "region"


def _global_forward_hooks() -> bool:
    """Whether forward (pre) hooks for every module are registered
    (``nn.modules.module.register_module_forward_hook``): they run outside a wrapped
    ``forward``, so with them every module gets the hook pair, which they run inside."""
    return bool(
        getattr(nn.modules.module, "_global_forward_hooks", None)
        or getattr(nn.modules.module, "_global_forward_pre_hooks", None)
    )


class ScopeTracker:
    """Keeps the stack of running modules and records calls and shapes per node."""

    #: The thread that installed the tracker: module hooks and forwards are global, so
    #: calls of the model from other threads reach them too, and are not counted (except
    #: while a backward pass runs them: autograd's worker threads recompute checkpointed
    #: forwards). How many such calls were skipped is ``foreign_calls``.
    _thread: int | None = None
    foreign_calls: int = 0
    #: While set, the module every op is attributed to, and its phase (True: backward,
    #: None: the phase the op runs in), whatever runs: work done for a module away from
    #: its calls (FSDP2's reduce-scatter of a unit's gradients, ``metrics.fsdpunits``).
    charged: tuple[Node, bool | None] | None = None
    #: Called with the model at each forward call of the root (not a recomputation).
    on_root_call: Callable[[nn.Module], None] | None = None

    def __init__(
        self, tree: ModelTree, record_shapes: bool = True, observers: Sequence[Observer] = ()
    ) -> None:
        self.tree = tree
        self.record_shapes = record_shapes
        self._enter = [o.on_enter for o in observers if o.overrides("on_enter")]
        self._exit = [o.on_exit for o in observers if o.overrides("on_exit")]
        #: The running modules, innermost last: (node, module, exception being handled
        #: when it was entered, whether a backward pass was running it).
        self.stack: list[tuple[Node, nn.Module, BaseException | None, bool]] = []
        #: calls of a module registered under several paths of one parent, by (parent
        #: node, module): the turn of the next (``_resolve``)
        self._turns: dict[tuple[int, int], int] = {}
        #: Where work done while no call of the profiled module runs is counted (the
        #: loss, the user's code around the calls): ``Profile.outside``, not the root.
        self.outside = Node(path=OUTSIDE, name=OUTSIDE, type=OUTSIDE)
        #: The innermost running module's node; ``outside`` when none is running.
        self.current: Node = self.outside
        #: Whether that module's forward was run by a backward pass (a recomputation).
        self.current_in_backward = False
        self.called: list[Node] = []  # each node that ran, in the order of its first call
        # id(node) -> {"inputs"/"outputs": distinct signatures seen but not kept}
        self.extra_signatures: dict[int, dict[str, int]] = {}
        # id(exc) -> (exc, node, thread that marked it): where an exception on its way out
        # was raised. Kept only while it may still be on its way: a module that returns
        # normally forgets those its thread is not handling (``errorsites.forget_swallowed``), as
        # they were caught and dropped, and their tracebacks hold the frames' tensors.
        self.error_site: dict[int, tuple[BaseException, Node, int]] = {}
        self.backward_error_site: dict[int, tuple[BaseException, Node, int]] = {}
        # (node, is output, entry) of every distinct call, in order, its entry as cheap as
        # it can be told apart by (see _signature_of): one table for all the modules, so
        # a call touches no per-module state. record_signatures() turns them into the
        # nodes' Signatures.
        self._calls: dict[tuple[Node, bool, Any], None] = {}
        self._handles: list[RemovableHandle] = []
        # (module, the forward method set on it, its tie to the session); empty once
        # uninstalled
        self._wrapped: list[tuple[nn.Module, MethodType, list[Any]]] = []
        self._grad_starts: list[int] = []  # sequence numbers where ownership changes
        self._grad_owners: list[Node] = []
        #: The owner of the autograd node whose op the dispatch mode saw last: where an
        #: error the engine raises while running a node is placed.
        self.last_backward: Node | None = None
        self._owner_of_param: dict[int, Node] | None = None  # id(tensor) -> its node
        # ---- user regions (enter_region/exit_region) ----
        #: (id(scope node it was entered in), name) -> its node; ``outside`` is a scope.
        self.regions: dict[tuple[int, str], Node] = {}
        #: id(region node) -> the scope node it was entered in (``outside`` included).
        self.region_parent: dict[int, Node] = {}
        #: id(region node) -> how many nodes ``called`` held at its first call (regions
        #: are not in ``called``, which lists module nodes only).
        self.region_created: dict[int, int] = {}
        #: id(region node) -> wall seconds of each of its calls.
        self.region_times: dict[int, list[float]] = {}
        #: Each ended region call, in order of its end (inner ones first): (region node,
        #: index in ``called`` at its entry, the same at its exit).
        self.region_calls: list[tuple[Node, int, int]] = []
        #: Module calls entered so far (each call, not only first ones).
        self.module_calls = 0
        #: id(region node) -> whether a module call ran inside one of its calls, for the
        #: regions made from the user's ``record_function`` labels (``collect.labels``).
        self.label_regions: dict[int, bool] = {}
        self._active: list[ScopeTracker] | None = None  # the thread's list it is in

    # ---- queries used by observers -------------------------------------------------
    def backward_owner(self, grad_node: Any) -> Node:
        """The module a backward op running in this autograd node is counted in: the
        running module if the backward pass itself runs its forward (activation
        checkpointing recomputes it there), else the module whose forward created the
        node."""
        owner = self.current if self.current_in_backward else self.grad_owner(grad_node)
        self.last_backward = owner
        return owner

    def grad_owner(self, grad_node: Any) -> Node:
        """The module whose forward created this autograd node (``outside`` if none
        did); for a gradient accumulated into a parameter's ``.grad``, the module that
        owns the parameter."""
        seq = grad_node._sequence_nr()
        if seq == NO_SEQUENCE:
            return self._param_owner(grad_node)
        i = bisect_right(self._grad_starts, seq) - 1
        if i < 0:
            return self.outside
        return self._grad_owners[i]

    def node_of(self, module: nn.Module) -> Node | None:
        """The node a call of ``module`` runs as now (for a module under several paths,
        the one whose parent is running); None for a module not in the profiled model."""
        if id(module) not in self.tree.nodes_of:
            return None
        return self._resolve(module)

    def _param_owner(self, grad_node: Any) -> Node:
        """The node a tensor of an AccumulateGrad node (a leaf's ``.grad``) is counted at:
        the module holding the parameter (their common ancestor for a shared one)."""
        variable = getattr(grad_node, "variable", None)
        if variable is None:
            return self.outside
        if self._owner_of_param is None:
            holders: dict[int, list[Node]] = {}
            for node in self.tree.root.walk():
                for t in self.tree.module[id(node)]._parameters.values():
                    if t is not None:
                        holders.setdefault(id(t), []).append(node)
            tree = self.tree
            self._owner_of_param = {
                k: v[0] if len(v) == 1 else tree.lowest_common_ancestor(v)
                for k, v in holders.items()
            }
        return self._owner_of_param.get(id(variable), self.outside)

    def _owns_new_grad_nodes(self, node: Node) -> None:
        seq = get_sequence_nr()
        if self._grad_starts[-1] == seq:
            self._grad_owners[-1] = node
        else:
            self._grad_starts.append(seq)
            self._grad_owners.append(node)

    # ---- installation --------------------------------------------------------------
    def install(self) -> None:
        self._thread = _get_ident()
        trackers = active.trackers
        trackers.append(self)
        self._active = trackers
        tensorhooks.acquire(self)  # released by uninstall, which any failure below calls
        self._foreign_lock = threading.Lock()
        self._grad_starts.append(get_sequence_nr())
        self._grad_owners.append(self.outside)
        try:
            hooked: list[nn.Module] = []
            everywhere = _global_forward_hooks()
            for m in self.tree.modules():
                if (
                    everywhere
                    or m._forward_pre_hooks
                    or m._forward_hooks
                    or m._backward_hooks
                    or m._backward_pre_hooks
                    or "forward" in m.__dict__  # the user's own per-instance forward
                ):
                    hooked.append(m)
                else:
                    self._wrap_forward(m)
            self._handles = install_hook_pairs(
                ((m, self._pre, self._post) for m in hooked),
                with_kwargs=True,
                prepend_pre=True,
                prepend_post=False,
            )
        except BaseException:
            self.uninstall()
            raise

    def uninstall(self) -> None:
        # From the list of the thread that installed it, whichever thread this is.
        trackers, self._active = self._active, None
        if trackers is not None:
            for i in range(len(trackers) - 1, -1, -1):
                if trackers[i] is self:
                    del trackers[i]
                    break
            tensorhooks.release(self)
        remove_hooks(self._handles)
        for module, wrapper, live in self._wrapped:
            if module.__dict__.get("forward") is wrapper:
                del module.__dict__["forward"]
            live.clear()
        self._wrapped.clear()

    def _wrap_forward(self, module: nn.Module) -> None:
        """Set ``module.forward`` to a method that runs the class's forward in scope.

        A bound method (not a closure over ``module``) so that a copy made while it is set
        (``copy.deepcopy`` copies ``__dict__``) is bound to the copy: the copy runs its
        own forward, untracked, then and after the session.
        """
        forward_fn = type(module).forward
        nodes = self.tree.nodes_of[id(module)]
        only = nodes[0] if len(nodes) == 1 else None  # else resolved per call
        # All that ties the wrapper to the session, emptied by uninstall: a copy of the
        # module made meanwhile keeps this forward (as a pass-through) but neither the
        # session nor the original module alive.
        live: list[Any] = [
            module,
            only,
            self._enter_node,
            self._leave,
            self._post,
            self._resolve,
            self._thread,
            self._skip_foreign,
        ]

        def forward(this: nn.Module, *args: Any, **kwargs: Any) -> Any:
            if not live or this is not live[0]:  # the session is over, or a copy
                return forward_fn(this, *args, **kwargs)
            module, only, enter, leave, post, resolve, thread, skip_foreign = live
            if _get_ident() != thread and skip_foreign():  # another thread's call
                return forward_fn(module, *args, **kwargs)
            enter(only if only is not None else resolve(module, True), module, args, kwargs)
            try:
                out = forward_fn(module, *args, **kwargs)
            except BaseException:
                post(module, args, kwargs, None)  # sees the exception in sys.exc_info()
                raise
            leave(module, out)
            return out

        forward.__wrapped__ = forward_fn  # type: ignore[attr-defined]
        method = MethodType(forward, module)
        self._wrapped.append((module, method, live))
        module.__dict__["forward"] = method

    # ---- user regions --------------------------------------------------------------
    def enter_region(self, name: str) -> Any:
        """A user region named ``name`` starts here: it becomes the innermost scope (a
        node of type ``region``, a child of the scope running now) until ``exit_region``
        with the token returned. Ops and modules run meanwhile are counted in it."""
        parent = self.current
        key = (id(parent), name)
        node = self.regions.get(key)
        if node is None:
            if parent is self.outside:
                path = f"{OUTSIDE}.[{name}]"
            else:
                path = f"{parent.path}.[{name}]" if parent.path else f"[{name}]"
            node = Node(path=path, name=name, type=REGION, depth=parent.depth + 1)
            self.regions[key] = node
            self.region_parent[id(node)] = parent
            self.region_times[id(node)] = []
            self.region_created[id(node)] = len(self.called)
        node.calls += 1
        in_backward = current_autograd_node() is not None
        frame = (node, REGION_MODULE, sys.exc_info()[1], in_backward)
        self.stack.append(frame)
        self.current = node
        self.current_in_backward = in_backward
        self._owns_new_grad_nodes(node)
        return (frame, len(self.called), _perf_counter())

    def exit_region(self, token: Any, *, count: bool = True) -> None:
        """The region ``enter_region`` returned ``token`` for ends (also when it raised:
        a frame left open inside it is closed too). ``count=False``: this call is not
        counted (its ops still are): an iterator's last ``next``, which found no item."""
        frame, start, t0 = token
        elapsed = _perf_counter() - t0
        node = frame[0]
        stack = self.stack
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] is frame:
                self._drop_frames(i)
                exc = sys.exc_info()[1]
                if exc is not None and exc is not frame[2]:
                    self.mark_error_site(exc, node)
                break
        if self._active is None:  # the session ended inside the region
            return
        if count:
            self.region_times[id(node)].append(elapsed)
        else:
            node.calls -= 1
        self.region_calls.append((node, start, len(self.called)))

    # ---- hooks ---------------------------------------------------------------------
    def _resolve(self, module: nn.Module, entering: bool = False) -> Node:
        """The node a call of ``module`` runs as: for a module registered under several
        paths, a path under the innermost module running (its parent, or a container
        above it that is never called, such as a ``ModuleList``); under several such
        paths (``ModuleList([block] * 4)``, ``Sequential(linear, act, linear)``), a call
        ``entering`` takes them in turn, in registration order, and otherwise the call
        running is the one on the stack."""
        nodes = self.tree.nodes_of[id(module)]
        if len(nodes) == 1:
            return nodes[0]
        frame = None if entering else self._frame_of(module)
        if frame is not None:
            return self.stack[frame][0]
        for node, *_ in reversed(self.stack):
            here = self.tree.under(nodes, node)
            if len(here) > 1 and entering:
                key = (id(node), id(module))
                self._turns[key] = turn = self._turns.get(key, -1) + 1
                return here[turn % len(here)]
            if here:
                return here[0]
        return nodes[0]

    def _frame_of(self, module: nn.Module) -> int | None:
        """Where ``module``'s frame is on the stack: normally the top, unless a pre hook
        of the user's that runs before ours raised (then it was never pushed)."""
        stack = self.stack
        for i in range(len(stack) - 1, -1, -1):
            if stack[i][1] is module:
                return i
        return None

    def _skip_foreign(self) -> bool:
        """For a module call from a thread other than the tracker's: whether to leave it
        uncounted (counting it in ``foreign_calls``), as every such call is unless a
        backward pass runs it."""
        if current_autograd_node() is not None:
            return False
        with self._foreign_lock:
            self.foreign_calls += 1
        return True

    def _pre(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """The forward pre hook of a module with hooks."""
        if _get_ident() != self._thread and self._skip_foreign():
            return
        self._enter_node(self._resolve(module, entering=True), module, args, kwargs)

    def _enter_node(
        self, node: Node, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """``module``'s forward (as ``node``) starts with these arguments."""
        if not node.calls:
            self.called.append(node)
        node.calls += 1
        self.module_calls += 1
        if self.record_shapes:
            key = None if kwargs else tensor_key(args)
            self._remember(node, False, key, flatten_call, args, kwargs)
        in_backward = current_autograd_node() is not None
        if node is self.tree.root and not in_backward and self.on_root_call is not None:
            self.on_root_call(module)
        self.stack.append((node, module, sys.exc_info()[1], in_backward))
        self.current = node
        self.current_in_backward = in_backward
        self._owns_new_grad_nodes(node)
        for on_enter in self._enter:
            try:
                on_enter(node, module, args, kwargs)
            except LayerscopeError:
                raise
            except Exception as e:  # the observer's fault, not the model's
                raise observer_error(on_enter, "on_enter", e) from e

    def _post(
        self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any
    ) -> None:
        """The forward hook (always called) of a module with hooks; also where a wrapped
        forward goes when it raises."""
        if _get_ident() != self._thread and current_autograd_node() is None:
            return  # another thread's call, skipped (and counted) at its entry
        i = self._frame_of(module)
        exc = sys.exc_info()[1]
        if i is None:
            if exc is not None:  # a pre hook that runs before ours raised: in this module
                self.mark_error_site(exc, self._resolve(module))
            return
        node, _, exc_at_entry, _ = self.stack[i]
        if exc is None or exc is exc_at_entry:
            self._leave(module, output)
            return
        self._drop_frames(i)
        self.mark_error_site(exc, node)
        self._notify_exit(node, module, None, True)

    def _drop_frames(self, i: int) -> Node:
        """Pop the stack down to below frame ``i`` (whose node is returned): the module
        there, and any left open inside it, have ended."""
        node = self.stack[i][0]
        del self.stack[i:]
        if self.stack:
            self.current, _, _, self.current_in_backward = self.stack[-1]
        else:
            self.current, self.current_in_backward = self.outside, False
        self._owns_new_grad_nodes(self.current)
        return node

    def _leave(self, module: nn.Module, output: Any) -> None:
        """``module``'s forward returned ``output``."""
        i = self._frame_of(module)
        if i is None:
            return
        node = self._drop_frames(i)
        if self.error_site or self.backward_error_site:  # forget those caught and dropped
            forget_swallowed((self.error_site, self.backward_error_site), _get_ident())
        if self.record_shapes:
            if type(output) is torch.Tensor and not output.is_nested:
                key: Any = (output.shape, output.dtype, output.device)
            else:
                key = tensor_key(output) if type(output) is tuple else None
            self._remember(node, True, key, flatten, output)
        if self._exit:
            self._notify_exit(node, module, output, False)

    def _notify_exit(self, node: Node, module: nn.Module, output: Any, raised: bool) -> None:
        """Hand a module's exit to the observers; what they raise is an ObserverError."""
        for on_exit in self._exit:
            try:
                on_exit(node, module, output, raised)
            except LayerscopeError:
                raise
            except Exception as e:  # the observer's fault, not the model's
                raise observer_error(on_exit, "on_exit", e) from e

    def _remember(
        self, node: Node, output: bool, key: Any, flat: Callable[..., Signature], *value: Any
    ) -> None:
        """Note a call of ``node`` (its inputs, or its output) by its cheap ``key`` when it
        has one, else by its Signature, ``flat(*value)``."""
        if key is not None:
            try:
                self._calls.setdefault((node, output, key), None)
                return
            except TypeError:  # symbolic sizes do not hash; their Signature does
                pass
        self._calls.setdefault((node, output, flat(*value)), None)

    def record_signatures(self) -> None:
        """Give each node the distinct Signatures of its calls, in order: the first
        ``MAX_SIGNATURES`` of its inputs and of its outputs; how many more there were goes
        to ``extra_signatures``."""
        grouped: dict[tuple[Node, bool], list[Signature]] = {}
        built: dict[tuple[bool, Any], Signature] = {}  # many modules share a key
        for node, output, entry in self._calls:
            sig = built.get((output, entry))
            if sig is None:
                sig = built[output, entry] = signature_of(entry, output)
            grouped.setdefault((node, output), []).append(sig)
        self._calls.clear()
        for (node, output), signatures in grouped.items():
            if len(signatures) > 1:
                signatures = list(dict.fromkeys(signatures))
            kind = "outputs" if output else "inputs"
            getattr(node, kind).extend(signatures[:MAX_SIGNATURES])
            if len(signatures) > MAX_SIGNATURES:
                self.extra_signatures.setdefault(id(node), {})[kind] = (
                    len(signatures) - MAX_SIGNATURES
                )

    def mark_error_site(self, exc: BaseException, node: Node) -> None:
        """Record that ``exc`` was raised in ``node``; the first (innermost) mark wins.
        Not kept: torch's signal that ends a checkpoint's recomputation early (non-reentrant
        ``torch.utils.checkpoint``), control flow that torch catches at once, whose
        traceback holds the recomputed tensors."""
        if type(exc) is STOP_RECOMPUTATION:
            return
        self.error_site.setdefault(id(exc), (exc, node, _get_ident()))

    def mark_backward_site(self, exc: BaseException, node: Node) -> None:
        """Record that ``exc`` was raised in the backward of ``node`` (by a tensor hook)."""
        self.backward_error_site.setdefault(id(exc), (exc, node, _get_ident()))

    def keep_site_of(self, exc: BaseException | None) -> None:
        """The session ended (with ``exc`` if it raised): forget every mark but ``exc``'s,
        which ``site_of`` and ``backward_site_of`` can still name afterwards."""
        keep_only((self.error_site, self.backward_error_site), exc)

    @property
    def installed(self) -> bool:
        """Whether the session is running (between ``install`` and ``uninstall``)."""
        return self._active is not None

    def site_of(self, exc: BaseException) -> Node | None:
        """The innermost module that was running when ``exc`` was raised, if any."""
        entry = self.error_site.get(id(exc))
        return entry[1] if entry is not None and entry[0] is exc else None

    def backward_site_of(self, exc: BaseException) -> Node | None:
        """For ``exc`` raised in a backward pass: the module whose forward created the
        autograd node that failed, found in the exception's own frames, innermost first.
        A custom ``autograd.Function``'s backward runs in a frame holding its node (the
        ``ctx``); a module's full backward hook or backward pre hook runs in a frame of
        torch's ``BackwardHook``, which names the module. A tensor hook registered during
        the session told the tracker itself (``collect.tensorhooks``)."""
        entry = self.backward_error_site.get(id(exc))
        if entry is not None and entry[0] is exc:
            return entry[1]
        tb = exc.__traceback__
        frames: list[FrameType] = []
        while tb is not None:
            frames.append(tb.tb_frame)
            tb = tb.tb_next
        for frame in reversed(frames):
            for value in frame.f_locals.values():
                if isinstance(value, BackwardHook):
                    module = value.module
                    if id(module) in self.tree.nodes_of:
                        return self._resolve(module)
                elif isinstance(value, GraphNode):
                    owner = self.grad_owner(value)
                    if owner is not self.outside:
                        return owner
        return engine_site(self, exc, frames)
