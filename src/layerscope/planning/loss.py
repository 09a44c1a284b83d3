"""The loss of a plan (``loss=``): ``"plain"`` keeps the analysis as it ran (the model's
logits, and whatever the model or ``loss_fn`` computes from them); ``"fused"`` plans a
fused linear cross-entropy that never holds the full-vocabulary logits, as Liger's
``LigerFusedLinearCrossEntropyFunction`` runs it (linkedin/Liger-Kernel,
src/liger_kernel/ops/fused_linear_cross_entropy.py, ``fused_linear_cross_entropy_forward``).

The rule. The output projection (the last matmul module the forward enters: ``lm_head``;
refused when a module with weights follows it, as a base model's final norm does) and
the loss after it become one call: the tokens (``BT`` rows of the projection's input,
``H`` wide, ``V`` the projection's output width) are taken ``chunk`` at a time,
``chunk = min(BT, next_pow2(ceil(BT / ceil(V / H))))`` (Liger's: the logits of a chunk
about as large as the input), each chunk's logits made in the projection's output dtype,
the cross-entropy's gradient written over them in place, and the gradients of the input
(``zeros_like(input)``) and of the weight (``zeros_like(weight)``, when it is trainable)
accumulated in the forward; a float32 loss per token (``loss_1d``) is summed. So from the
projection's entry to the end of its backward the plan holds, instead of the analysed
logits, losses and their gradients: what was live at the projection's entry, the input's
gradient and the weight's (until the analysis counts that gradient), and at the loss's
own moment (the timeline's ``loss`` point) one chunk's logits and ``loss_1d`` too. The
step time is the analysis's: the same matmuls run (in the forward instead of the
backward)."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import prod
from typing import Any

import torch

from layerscope.analysis.whatif import OUTSIDE
from layerscope.errors import InvalidInputError
from layerscope.planning.timeline import Setup, grad_moments, inside
from layerscope.profile import Profile, TensorSpec

#: ``loss=``'s values
LOSSES = ("plain", "fused")


def _pow2(n: int) -> int:
    """The least power of 2 at least ``n`` (Triton's ``next_power_of_2``)."""
    return 1 << max(0, n - 1).bit_length()


def chunk_tokens(tokens: int, hidden: int, vocab: int) -> int:
    """Liger's chunk: ``min(BT, next_pow2(ceil(BT / ceil(V / H))))`` tokens."""
    return min(tokens, _pow2(-(-tokens // -(-vocab // hidden))))


@dataclass(frozen=True)
class FusedLoss:
    """The fused loss of one plan: the projection it replaces and its tensors' sizes."""

    path: str
    tokens: int
    hidden: int
    vocab: int
    #: bytes per element: the logits (the projection's output), its input, its weight
    logits_size: int
    input_size: int
    weight_size: int
    #: the projection's weight is trainable (its gradient is made in the forward)
    weight_grad: bool

    @property
    def chunk(self) -> int:
        return chunk_tokens(self.tokens, self.hidden, self.vocab)

    @property
    def chunk_bytes(self) -> int:
        """One chunk's logits (their gradient is written over them)."""
        return self.chunk * self.vocab * self.logits_size

    @property
    def grad_input_bytes(self) -> int:
        return self.tokens * self.hidden * self.input_size

    @property
    def grad_weight_bytes(self) -> int:
        return self.vocab * self.hidden * self.weight_size if self.weight_grad else 0

    @property
    def loss_bytes(self) -> int:
        """``loss_1d``: a float32 loss per token."""
        return 4 * self.tokens

    @property
    def logits_bytes(self) -> int:
        """The full logits a plain loss holds at the least, for the notes."""
        return self.tokens * self.vocab * self.logits_size

    def saved(self, prof: Profile) -> int:
        """What the analysed projection and loss saved for the backward, which the fused
        loss keeps none of: the storages first saved by the projection (its input), by
        the model's own ops (the root's: a transformers model's loss given ``labels``)
        or by the loss outside the model. The root's ops before the projection are taken
        to save nothing (a model's own ops are its modules')."""
        table = prof.memory.get("storages") or {}
        owners = {
            i for i, p in enumerate(table.get("paths") or ()) if p in (self.path, "", OUTSIDE)
        }
        return sum(int(b) for b, savers, _, _, param in table.get("rows") or ()
                   if savers and not param and savers[0] in owners)  # fmt: skip

    def note(self) -> str:
        return (
            f"loss='fused': {self.path!r} and the cross-entropy as one chunked kernel "
            f"(Liger's fused linear cross-entropy): {self.tokens:,} tokens in chunks of "
            f"{self.chunk:,}, {self.chunk_bytes:,} B of logits at a time instead of "
            f"{self.logits_bytes:,}; the input's and weight's gradients made in the forward"
        )


def _size(dtype: str) -> int:
    found = getattr(torch, dtype, None)
    return found.itemsize if isinstance(found, torch.dtype) else 4


def _entries(timeline: Mapping[str, Sequence[Any]]) -> tuple[list[str], list[str], int]:
    events, paths = list(timeline["event"]), list(timeline["path"])
    start = next((k for k, e in enumerate(events) if e == "backward"), len(events))
    return events, paths, start


def _weighted_after(
    prof: Profile, events: Sequence[str], paths: Sequence[str], path: str
) -> str | None:
    """The first module with parameters of its own that the forward enters after its
    last entry of ``path`` (outside ``path``), or None: the logits' projection is the
    last such module."""
    last = max(k for k, e in enumerate(events) if e == "enter" and paths[k] == path)
    for k in range(last + 1, len(events)):
        if events[k] != "enter" or inside(paths[k], path):
            continue
        try:
            node = prof.node(paths[k])
        except KeyError:
            continue
        if node.self_metrics.get("params", 0):
            return paths[k]
    return None


def fused_loss(prof: Profile) -> FusedLoss:
    """The fused loss of the analysis: its output projection, the last module with its
    own matmuls (and no children) the forward enters; ``InvalidInputError`` without one."""
    events, paths, start = _entries(prof.memory["timeline"])
    path = next(
        (
            paths[k]
            for k in range(start - 1, -1, -1)
            if events[k] == "enter"
            and not (node := prof.node(paths[k])).children
            and node.self_metrics.get("macs", 0)
        ),
        None,
    )
    if path is None:
        raise InvalidInputError(
            "loss='fused' fuses the output projection with the cross-entropy, but the "
            "forward enters no module with matmuls of its own; use loss='plain'"
        )
    after = _weighted_after(prof, events[:start], paths[:start], path)
    if after is not None:
        raise InvalidInputError(
            f"loss='fused' fuses the output projection with the cross-entropy, but the "
            f"last module with matmuls, {path!r}, is followed by {after!r}, which has "
            "weights of its own, so it does not make the logits (a base model without "
            "an output projection, e.g. LlamaModel rather than LlamaForCausalLM?); plan "
            "the model with its head, or use loss='plain'"
        )
    node = prof.node(path)
    given = [s for s in node.inputs[-1] if isinstance(s, TensorSpec)] if node.inputs else []
    made = [s for s in node.outputs[-1] if isinstance(s, TensorSpec)] if node.outputs else []
    if not given or not made or len(given[0].shape) < 2:
        raise InvalidInputError(
            f"loss='fused': the output projection {path!r} has no (tokens, hidden) input "
            "and logits output in the analysis; use loss='plain'"
        )
    x, out = given[0], made[0]
    hidden, vocab = int(x.shape[-1]), int(out.shape[-1])
    grads = prof.memory.get("grads") or {}
    weight = next(  # its own trainable weight, or a tied one counted elsewhere
        (g for g in grads.values() if list(g["shape"]) == [vocab, hidden]), None
    )
    own = int(node.self_metrics.get("params", 0))
    trainable = weight is not None and (not own or node.self_metrics.get("trainable_params", 0))
    return FusedLoss(
        path=path, tokens=prod(x.shape[:-1]), hidden=hidden, vocab=vocab,
        logits_size=_size(out.dtype), input_size=_size(x.dtype),
        weight_size=_size(str(weight["dtype"])) if weight else 0, weight_grad=bool(trainable),
    )  # fmt: skip


def loss_timeline(
    prof: Profile, setup: Setup, loss: str
) -> tuple[Mapping[str, Any], list[str], int]:
    """The timeline the plan replays for ``loss``, its notes and the change it makes to
    the activation bytes kept for the backward: the analysis's, none, 0 for ``"plain"``;
    for ``"fused"``, the analysis's with the module doc's rule, and the kept bytes less
    what the projection and the loss saved (``FusedLoss.saved``) plus the input's
    gradient, held from the forward to the backward in their place."""
    timeline = prof.memory["timeline"]
    if loss == "plain":
        return timeline, [], 0
    fused = fused_loss(prof)
    change = fused.grad_input_bytes - fused.saved(prof)
    return fused_timeline(timeline, fused, setup), [fused.note()], change


def fused_timeline(
    timeline: Mapping[str, Sequence[Any]], fused: FusedLoss, setup: Setup
) -> dict[str, Any]:
    """The analysed timeline with ``fused`` in place of the logits and the loss (module
    doc): a ``loss`` point after the projection's entry, and every point from there to
    the end of its backward holding what was live at its entry, the input's gradient,
    the weight's until the analysis counts gradients as large, and the gradients the
    analysis counts by then (the replay takes those out of the activations)."""
    events, paths, start = _entries(timeline)
    path = fused.path
    enter = max(k for k in range(start) if events[k] == "enter" and paths[k] == path)
    done = [k for k in range(start, len(events)) if events[k] in ("backward", "peak")
            and paths[k] != "<outside>" and inside(paths[k], path)]  # fmt: skip
    if not done:
        raise InvalidInputError(
            f"loss='fused': the backward never reaches the output projection {path!r}; "
            "use loss='plain'"
        )
    first: dict[str, int] = {}
    for k in range(start, len(events)):
        if events[k] in ("backward", "peak"):
            first.setdefault(paths[k], k)
    starts = grad_moments(setup, events, paths, first)
    keys, sums = [f for f, _ in starts], [0, *itertools.accumulate(g for _, g in starts)]

    def counted(k: int) -> int:  # the replay's analysed gradients by moment k
        return sums[bisect.bisect_left(keys, k)]

    base = int(timeline["bytes"][enter]) + fused.grad_input_bytes
    out: dict[str, Any] = {
        k: list(c) if isinstance(c, list | tuple) else c for k, c in timeline.items()
    }
    for k in range(enter + 1, done[-1] + 1):
        seen = counted(k)
        out["bytes"][k] = base + max(0, fused.grad_weight_bytes - seen) + seen
    at_loss = base + fused.grad_weight_bytes + fused.chunk_bytes + fused.loss_bytes
    moment = {"event": "loss", "path": path, "bytes": at_loss}
    for key, column in out.items():  # the loss's own moment, after the entry
        if isinstance(column, list) and len(column) == len(events):
            column.insert(enter + 1, moment.get(key, column[enter]))
    return out


__all__ = ["LOSSES", "FusedLoss", "chunk_tokens", "fused_loss", "fused_timeline", "loss_timeline"]
