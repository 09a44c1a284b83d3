"""The kernels of a plan's analysis, by class, and the predicted time of each module.

``KernelRecorder`` rides along the plan's one analysis (after the FLOP and byte
counters, whose per-op increments it reads): every op that moves bytes (or counts
FLOPs) is one kernel,
recorded by module, phase and class with what its rate depends on:

- ``matmul``: ``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``_scaled_mm``, the grouped
  matmuls of a mixture of experts, by output shape (batch, M, N); convolutions without
  a shape (the large-matmul rate);
- ``attention``: ``scaled_dot_product_attention``'s fused kernels by backend (flash,
  efficient, cudnn), head dim, query length and causality (the math backend is its
  matmuls and softmax, recorded as those);
- ``memory``: every other kernel, by op.

``predict`` prices the records on a device's achievable rates (``analysis.rates``): per
kernel ``max(flops / achievable FLOP/s, bytes / achievable bandwidth) + launch``, summed
per module like ``analysis.roofline.roof_times``. Compiled (``fused``: ``torch.compile``,
whose Inductor fuses the pointwise and reduction ops between two matmuls into one
kernel), a module's memory-class kernels of one phase run as one kernel that moves as
many bytes as the largest of them (a fused chain reads its inputs and writes its outputs
once, as one of its ops did alone) with one launch; matmuls and attention stay as they
are (extern kernels). A stated rule: Inductor's fusions cross module boundaries, and its
recomputation of pointwise ops in the backward (which saves activations) is not counted.
A profile without records (a given or loaded one) is priced per module: its own work at
the large-matmul share of the peak and the achievable bandwidth, no launches (the plan's
notes say so).
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from math import prod
from typing import Any

from torch import Tensor
from torch._ops import OpOverload

import layerscope.metricspec as ms
from layerscope.analysis.rates import Rates
from layerscope.analysis.roofline import work
from layerscope.collect.observer import Observer
from layerscope.profile import Node, Profile

__all__ = [
    "FLOAT8_SKIPPED",
    "KernelRecorder",
    "Kernels",
    "Predicted",
    "float8",
    "float8_linears",
    "fused",
    "kernels_of",
    "predict",
    "record",
]

#: grouped matmuls (a mixture of experts' kernel, transformers' ``grouped_mm``) too:
#: their output (tokens x experts routed, N) is one matmul's as the library tiles it
_MATMULS = frozenset({"mm", "addmm", "bmm", "baddbmm", "_scaled_mm", "_int_mm", "_grouped_mm",
                      "_scaled_grouped_mm", "_scaled_grouped_mm_v2"})  # fmt: skip
_CONVOLUTIONS = frozenset({"convolution", "convolution_backward", "_convolution"})
#: op name prefixes of the fused attention kernels, and their (B, H, S, D) layout: True
#: when the sequence is dim -2 (sdpa's ops), False when it is dim 1 (the raw kernels)
_ATTENTION = (("_scaled_dot_product_", True), ("_flash_attention_", False),
              ("_efficient_attention_", False))  # fmt: skip
#: (path, phase, class, detail): [kernels, flops, bytes, published attention FLOPs]
Key = tuple[str, str, str, tuple[Any, ...]]


@dataclass
class Kernels:
    """An analysis's kernels: ``rows`` by (module path, phase, class, detail)."""

    rows: dict[Key, list[int]] = field(default_factory=dict)
    #: bytes of the keys and values each module's forward attention kernels read (the
    #: tensors context parallelism all-gathers: ``planning.contextparallel``)
    kv: dict[str, int] = field(default_factory=dict)

    def count(self) -> int:
        return sum(r[0] for r in self.rows.values())


#: The kernels recorded for each plan analysis, by ``id`` of its Profile while it lives
#: (a Profile compares by value: no hash).
_RECORDED: dict[int, Kernels] = {}


def kernels_of(prof: Profile) -> Kernels | None:
    """The kernels recorded for ``prof``'s analysis; None for a given or loaded profile."""
    return _RECORDED.get(id(prof))


def record(prof: Profile, kernels: Kernels) -> None:
    """Keep ``kernels`` for ``prof`` until it is collected."""
    key = id(prof)
    _RECORDED[key] = kernels
    weakref.finalize(prof, _RECORDED.pop, key, None)


def _arg(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any], name: str) -> Any:
    """An op's argument by its schema's name (None when it has none)."""
    for i, a in enumerate(func._schema.arguments):
        if a.name == name:
            if name in kwargs:
                return kwargs[name]
            return args[i] if i < len(args) else getattr(a, "default_value", None)
    return None


def classify(
    func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, backward: bool
) -> tuple[str, tuple[Any, ...], int]:
    """(class, detail, the PaLM attention FLOPs of a forward attention kernel: 12 B H
    Sq Sk D) of one op."""
    name = func._schema.name.split("::")[-1]
    if name in _MATMULS:
        shape = out.shape if isinstance(out, Tensor) else ()
        if len(shape) >= 2:
            return "matmul", (int(prod(shape[:-2])), int(shape[-2]), int(shape[-1])), 0
        return "matmul", (), 0
    if name in _CONVOLUTIONS:
        return "matmul", (), 0
    for prefix, sdpa_layout in _ATTENTION:
        if name.startswith(prefix) and "attention" in name:
            kind = "cudnn" if "cudnn" in name else "efficient" if "efficient" in name else "flash"
            q, k = _arg(func, args, kwargs, "query"), _arg(func, args, kwargs, "key")
            causal = bool(
                _arg(func, args, kwargs, "is_causal") or _arg(func, args, kwargs, "causal")
            )
            if not isinstance(q, Tensor) or q.dim() != 4:
                return "attention", (kind, 0, 0, causal), 0
            b, d = int(q.shape[0]), int(q.shape[-1])
            h, sq = (q.shape[1], q.shape[2]) if sdpa_layout else (q.shape[2], q.shape[1])
            sk = (k.shape[2] if sdpa_layout else k.shape[1]) if isinstance(k, Tensor) else sq
            direction = "backward" if "backward" in name else "forward"
            palm = 12 * b * int(h) * int(sq) * int(sk) * d if direction == "forward" else 0
            return "attention", (kind, d, int(sq), causal), palm
    return "memory", (name,), 0


class KernelRecorder(Observer):
    """Records every op's kernel (module docstring); install after the FLOP and byte
    counters (``ls.profile``'s ``observers=`` are)."""

    def __init__(self) -> None:
        self.kernels = Kernels()
        self._seen: dict[tuple[int, bool], tuple[float, float]] = {}

    def on_op(
        self,
        func: OpOverload,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        out: Any,
        node: Node,
        backward: bool,
    ) -> None:
        m = node.self_metrics
        f_key, b_key = (
            (ms.BACKWARD_FLOPS, ms.BACKWARD_BYTES_ACCESSED)
            if backward
            else (ms.FLOPS, ms.BYTES_ACCESSED)
        )
        flops, nbytes = float(m.get(f_key, 0) or 0), float(m.get(b_key, 0) or 0)
        before = self._seen.get((id(node), backward), (0.0, 0.0))
        self._seen[(id(node), backward)] = (flops, nbytes)
        moved, done = nbytes - before[1], flops - before[0]
        if moved <= 0 and done <= 0:
            return  # a view, or an op that does nothing: no kernel
        kind, detail, palm = classify(func, args, kwargs, out, backward)
        key = (node.path, "backward" if backward else "forward", kind, detail)
        row = self.kernels.rows.get(key)
        if row is None:
            row = self.kernels.rows[key] = [0, 0, 0, 0]
        row[0] += 1
        row[1] += int(done)
        row[2] += int(moved)
        row[3] += palm
        if kind == "attention" and not backward:
            k, v = _arg(func, args, kwargs, "key"), _arg(func, args, kwargs, "value")
            held = sum(t.numel() * t.element_size() for t in (k, v) if isinstance(t, Tensor))
            self.kernels.kv[node.path] = self.kernels.kv.get(node.path, 0) + held


@dataclass
class Predicted:
    """Predicted seconds of each node's forward and backward, inclusive (by ``id``),
    the kernels priced, and the published convention's attention FLOPs per micro-batch
    (forward and backward: 12 B H Sq Sk D per attention kernel)."""

    forward: dict[int, float]
    backward: dict[int, float]
    kernels: int
    attention_flops: int
    recorded: bool


def fused(kernels: Kernels) -> Kernels:
    """The kernels as ``torch.compile`` runs them (module docstring): each module's
    memory-class kernels of a phase one kernel, moving the bytes of the largest."""
    out = Kernels()
    groups: dict[tuple[str, str], list[int]] = {}
    for key, row in kernels.rows.items():
        if key[2] != "memory":
            out.rows[key] = list(row)
            continue
        group = groups.setdefault((key[0], key[1]), [1, 0, 0, 0])
        group[1] += row[1]
        group[2] = max(group[2], row[2] // max(row[0], 1))
        group[3] += row[3]
    for (path, phase), row in groups.items():
        out.rows[(path, phase, "memory", ("fused",))] = row
    return out


#: The output projection float8 training leaves in high precision (torchtitan's default
#: ``filter_fqns``: ``output``; transformers names it ``lm_head``).
FLOAT8_SKIPPED = ("output", "lm_head")


_FEATURES = re.compile(r"in_features=(\d+), out_features=(\d+)")


def _float8_shaped(node: Node) -> bool:
    """Whether a linear's features are multiples of 16, as ``torch._scaled_mm`` needs
    (torchao's and torchtitan's filters leave the others in high precision)."""
    found = _FEATURES.search(node.repr or "")
    return found is None or all(int(d) % 16 == 0 for d in found.groups())


def float8_linears(prof: Profile) -> frozenset[str]:
    """The paths of the ``nn.Linear`` modules torchao's float8 training converts: all
    but the output projection (``FLOAT8_SKIPPED``) and those whose features are not
    multiples of 16 (a LoRA adapter of rank 8)."""
    return frozenset(
        n.path for n in prof.root.walk()
        if n.type == "Linear" and n.path.rsplit(".", 1)[-1] not in FLOAT8_SKIPPED
        and _float8_shaped(n)
    )  # fmt: skip


def float8(kernels: Kernels, linears: frozenset[str], peak_ratio: float, shard: int = 1) -> Kernels:
    """The kernels as torchao's float8 training runs them (tensorwise scaling: every
    ``nn.Linear`` in ``linears`` has its three matmuls take float8 operands,
    ``torch._scaled_mm``, and casts each operand with a dynamic per-tensor scale):

    - a linear's matmul (forward, grad input, grad weight) reads its operands at 1 byte
      instead of 2 and runs at the float8 peak: its bytes are the bfloat16 output plus
      half the rest, its FLOPs divided by ``peak_ratio`` (float8 peak / compute peak), so
      they price at the float8 peak;
    - the casts, as memory kernels of the linear: forward, the input and the weight
      (an amax read, a cast read and a float8 write: 2 + 2 + 1 bytes an element);
      backward, the output's gradient likewise, and a float8 transpose (1 + 1) of the
      saved input and weight for the gradients' matmuls;
    - ``shard`` > 1: FSDP2 all-gathers the weights in float8 (``float8_all_gather``), so
      each rank casts its ``1 / shard`` of a weight before the all-gather, and the
      forward's weight cast moves that share of the bytes.

    Element counts come from the forward matmul's output ``(B, M, N)`` and FLOPs
    (``K = FLOPs / (2 B M N)``): input ``B M K``, weight ``N K``, output gradient ``B M N``."""
    out = Kernels()
    forward: dict[str, tuple[int, int, int]] = {}
    for key, row in kernels.rows.items():
        path, phase, kind, detail = key
        if kind != "matmul" or path not in linears or len(detail) != 3:
            out.rows[key] = list(row)
            continue
        b, m, n = detail
        count, flops, nbytes = row[0], row[1], row[2]
        written = 2 * b * m * n * count
        out.rows[key] = [count, round(flops / peak_ratio), written + (nbytes - written) // 2,
                         row[3]]  # fmt: skip
        if phase == "forward" and b * m * n:
            k = flops // (2 * b * m * n * max(count, 1))
            forward[path] = (b * m * k * count, n * k * count, b * m * n * count)
    cast = 5  # bytes an element: amax read, cast read, float8 write
    for path, (inputs, weights, grads) in forward.items():
        # forward: an amax and a cast of the input and of the weight (4 kernels)
        ahead = cast * inputs + cast * weights // shard
        out.rows[(path, "forward", "memory", ("float8_cast",))] = [4, 0, ahead, 0]
        # backward: the output gradient's amax and cast, the two transposes (4 kernels)
        back = cast * grads + 2 * (inputs + weights)
        out.rows[(path, "backward", "memory", ("float8_cast",))] = [4, 0, back, 0]
    return out


def _price(rates: Rates, peak: float, bandwidth: float, key: Key, row: list[int]) -> float:
    """Seconds of one record's kernels on the rates."""
    count, flops, nbytes = row[0], row[1], row[2]
    kind, detail = key[2], key[3]
    if kind == "matmul":
        share = rates.matmul_fraction(detail[1], detail[2], detail[0]) if detail else rates.matmul
    elif kind == "attention":
        share = rates.attention_fraction(detail[0], key[1], detail[1], detail[2], detail[3])
    else:
        share = rates.matmul
    share = min(1.0, share)
    fast = max(flops / (peak * share), nbytes / (bandwidth * min(1.0, rates.bandwidth)))
    return fast + count * rates.launch


def predict(
    prof: Profile,
    rates: Rates,
    peak: float,
    bandwidth: float,
    fuse: bool = False,
    float8_peak: float | None = None,
    faster: Mapping[int, float] | None = None,
    attention_scale: int = 1,
    float8_shard: int = 1,
) -> Predicted:
    """Each node's predicted forward and backward seconds on ``rates`` (module
    docstring), ``peak`` and ``bandwidth`` the datasheet's for the compute dtype;
    ``fuse``: as ``torch.compile`` runs the kernels (``fused``); ``float8_peak``: the
    linears in float8 at that peak (``float8``; ``float8_shard``: their weights gathered
    in float8 over that many GPUs); ``faster``: on a profile without kernel
    records, nodes (by ``id``) whose FLOPs run at that multiple of the peak;
    ``attention_scale``: the attention kernels' work that many times the analysis's
    (context parallelism: a rank's queries against every rank's keys)."""
    kernels = kernels_of(prof)
    if kernels is not None and float8_peak:
        kernels = float8(kernels, float8_linears(prof), float8_peak / peak, float8_shard)
    if kernels is not None and fuse:
        kernels = fused(kernels)
    own: dict[str, dict[str, float]] = {"forward": {}, "backward": {}}
    count = palm = 0
    if kernels is not None:
        paths = {n.path for n in prof.root.walk()}
        for key, row in kernels.rows.items():
            path, phase = key[0], key[1]
            if path not in paths:
                continue  # work outside the model (the loss): not in the bound either
            if key[2] == "attention" and attention_scale != 1:
                row = [row[0], *(attention_scale * x for x in row[1:])]
            own[phase][path] = own[phase].get(path, 0.0) + _price(rates, peak, bandwidth, key, row)
            count += row[0]
            palm += row[3]
    times: dict[str, dict[int, float]] = {}
    achievable = (peak * min(1.0, rates.matmul), bandwidth * min(1.0, rates.bandwidth))
    for phase in ("forward", "backward"):
        out: dict[int, float] = {}
        for node in reversed(list(prof.root.walk())):
            if kernels is not None:
                t = own[phase].get(node.path, 0.0)
            else:
                w = work(node.self_metrics, phase)
                scale = faster.get(id(node), 1.0) if faster else 1.0
                t = (
                    max(w[0] / (achievable[0] * scale), w[1] / achievable[1])
                    if w is not None
                    else 0.0
                )
            out[id(node)] = t + sum(out.get(id(c), 0.0) for c in node.children)
        times[phase] = out
    # the convention counts the backward as twice the forward: 12 = 3 x 4 B H Sq Sk D
    return Predicted(times["forward"], times["backward"], count, palm, kernels is not None)


def recorded_paths(kernels: Kernels) -> Mapping[str, int]:
    """Kernels per module path (for tests and notes)."""
    out: dict[str, int] = {}
    for key, row in kernels.rows.items():
        out[key[0]] = out.get(key[0], 0) + row[0]
    return out
