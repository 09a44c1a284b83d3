"""``PassContext``: what every timer backend shares (model call, grads, loss, stamper,
progress, whole-model latency runs), so backends only add their own instrumentation.
"""

from __future__ import annotations

import copy
import enum
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils._pytree import tree_leaves

from layerscope.collect.common import default_loss
from layerscope.collect.signature import iter_tensors
from layerscope.collect.timing.clock import Stamper
from layerscope.collect.timing.index import ModuleIndex
from layerscope.collect.timing.options import TimingOptions
from layerscope.collect.timing.progress import Progress
from layerscope.errors import LayerscopeError, ModelError

#: Input leaves a call cannot change but in place (tensors) or at all.
_PLAIN = (Tensor, int, float, complex, bool, str, bytes, type(None), torch.dtype,
          torch.device, torch.layout, torch.memory_format, enum.Enum)  # fmt: skip


def stateful_copy(args: Any, kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """A deep copy of inputs that hold objects a call may change (a KV cache the model
    appends to, an object of the user's), to give each timed run the inputs as given;
    None when every input is a tensor or a plain value (or cannot be copied)."""
    if all(isinstance(x, _PLAIN) for x in tree_leaves((args, kwargs))):
        return None
    try:
        return copy.deepcopy((tuple(args or ()), dict(kwargs or {})))
    except Exception:  # an input that cannot be copied: the runs share it
        return None


class PassContext:
    """What every timer backend needs: the model call, grads, loss, stamps and progress."""

    def __init__(
        self,
        model: nn.Module,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        options: TimingOptions,
        index: ModuleIndex,
        device: torch.device,
    ) -> None:
        self.model = model
        self.args = args
        self.kwargs = kwargs
        self.options = options
        self.index = index
        self.device = device
        self.stamper = Stamper(options.clock, device, options.sync)
        self.progress: Progress = Progress(False, 1, "")
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.input_leaves = [
            t for t in iter_tensors((args, kwargs)) if t.requires_grad and t.is_leaf
        ]
        self.overhead: dict[str, float] = {}
        #: Whole-model series (ns) from the bare runs: latency, forward/backward_latency.
        self.whole: dict[str, list[float]] = {}
        #: Paths of the analysed profile's regions (the kineto timer times the user's
        #: ``record_function`` labels that are regions there as regions).
        self.region_paths: frozenset[str] = frozenset()
        #: the inputs as given (``stateful_copy``), copied again for every run; None:
        #: every run takes ``args`` and ``kwargs`` themselves
        self.template: tuple[tuple[Any, ...], dict[str, Any]] | None = None

    def inputs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """One run's inputs: a fresh copy of the inputs as given, or the inputs."""
        if self.template is None:
            return self.args, self.kwargs
        return copy.deepcopy(self.template)

    def call(self) -> Any:
        """One forward of the model under the chosen grad mode."""
        args, kwargs = self.inputs()  # copied outside the grad mode, before the run
        with self.options.grad_context():
            return self.model(*args, **kwargs)

    def loss(self, out: Any) -> Tensor:
        if self.options.loss_fn is not None:
            return self.options.loss_fn(out)

        return default_loss(out)

    def clear_grads(self) -> None:
        """Start each repeat as ``optimizer.zero_grad()`` would (``set_to_none``), so each
        backward allocates its grads like a training step; the originals are restored."""
        for p in self.params:
            p.grad = None
        for t in self.input_leaves:
            t.grad = None

    def bare_run(self, record: bool) -> None:
        """One uninstrumented run (forward, and loss + backward with ``backward=True``);
        ``record`` adds its times to the whole-model latency series."""
        options, stamper = self.options, self.stamper
        self.clear_grads()
        stamper.begin()
        try:
            t0 = stamper.record()
            out = self.call()
            t1 = stamper.record()
            t2 = t1
            if options.backward:
                self.loss(out).backward()  # type: ignore[no-untyped-call]
                t2 = stamper.record()
        except LayerscopeError:
            raise
        except Exception as e:
            raise self.model_error(e) from e
        del out
        stamper.end()
        if record:
            clock_read = self.overhead.get("clock_read", 0.0)
            a, b, c = stamper.ns(t0), stamper.ns(t1), stamper.ns(t2)
            fwd = max(b - a - clock_read, 0.0)
            self.whole.setdefault("forward_latency", []).append(fwd)
            total = fwd
            if options.backward:
                bwd = max(c - b - clock_read, 0.0)
                self.whole.setdefault("backward_latency", []).append(bwd)
                total += bwd
            self.whole.setdefault("latency", []).append(total)
        stamper.recycle([t0, t1, t2] if options.backward else [t0, t1])
        self.progress.advance()

    def model_error(self, e: Exception) -> ModelError:
        site = self.index.site(e)
        path = self.index.paths[site] if site is not None else None
        typ = type(self.index.module_at(site)).__name__ if site is not None else None
        where = self.index.where(e)
        return ModelError(
            f"the model raised {type(e).__name__}{where} during the timing pass: {e}",
            path=path,
            module_type=typ,
        )
