"""Capture and restore what running a model may change, so profiling leaves no trace.

Covers the global RNG streams (CPU and initialised CUDA devices), every buffer's values
(BatchNorm running stats, counters), train/eval flags, ``requires_grad`` flags and
``.grad`` references. Buffers are cloned up front but written back only where their
values changed, so untouched buffers are never written.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn
from torch.nn.parameter import UninitializedTensorMixin


@dataclass
class ModelState:
    cpu_rng: Tensor
    cuda_rng: list[Tensor] | None
    training: list[tuple[nn.Module, bool]]
    params: list[tuple[str, nn.Parameter, bool, Tensor | None, int]] = field(default_factory=list)
    buffers: list[tuple[str, Tensor, Tensor]] = field(default_factory=list)

    @classmethod
    def capture(cls, model: nn.Module) -> ModelState:
        cuda_rng = None
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            cuda_rng = torch.cuda.get_rng_state_all()
        state = cls(
            cpu_rng=torch.get_rng_state(),
            cuda_rng=cuda_rng,
            training=[(m, m.training) for m in model.modules()],
        )
        for name, p in model.named_parameters(remove_duplicate=True):
            state.params.append((name, p, p.requires_grad, p.grad, p._version))
        with torch.no_grad():
            for name, b in model.named_buffers(remove_duplicate=True):
                if isinstance(b, UninitializedTensorMixin):
                    continue
                state.buffers.append((name, b, b.detach().clone()))
        return state

    def restore(self) -> list[str]:
        """Put everything back; return notices for changes that could not be undone."""
        notices: list[str] = []
        torch.set_rng_state(self.cpu_rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)
        for m, training in self.training:
            if m.training != training:
                m.training = training
        with torch.no_grad():
            for _name, b, saved in self.buffers:
                # Kernels such as batch_norm update running stats without bumping the
                # version counter, so compare values; write back only what differs.
                if b.device.type != "meta" and not torch.equal(b, saved):
                    b.copy_(saved)
        for name, p, requires_grad, grad, version in self.params:
            if p.requires_grad != requires_grad:
                p.requires_grad_(requires_grad)
            if p.grad is not grad:
                p.grad = grad
            if p._version != version:
                notices.append(
                    f"the model changed parameter {name} in place during forward; "
                    "layerscope cannot undo that"
                )
        return notices
