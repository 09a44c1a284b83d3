"""``ls.calibrate`` and ``layerscope calibrate``: measure the achievable rates of the CUDA
GPU present (``analysis.rates``) with kernel-level microbenchmarks, and write them as a
device profile that ``target=`` accepts (a ``.json`` path, or ``register_device``).

The suite, each timed with CUDA events (median of a few repeats after a warm-up):

- **matmul grid**: ``torch.mm`` of square and transformer-like shapes; the large-matmul
  share is the median over the grid of measured / (peak x the shape's tile and wave
  quantisation over the GPU's SMs), so the rates reproduce the grid;
- **attention grid**: ``F.scaled_dot_product_attention`` under each backend
  (``sdpa_kernel``: flash, efficient, cudnn) at head dims 64 and 128, lengths 512 to
  8k (batch x length = 16k tokens, 2048 / head dim heads, as FlashAttention-3's figures),
  causal or not, forward and backward; FLOPs as layerscope counts them (forward
  4 B H A D, backward 10 B H A D, A the attended entries); a backend that refuses a
  shape is left out;
- **bandwidth**: a copy of 1 GiB (read + write);
- **launch**: 2,000 back-to-back one-element kernels, eager.

Collectives (several GPUs) are not measured. The shares are of the datasheet's peak and
bandwidth of the GPU's built-in spec; a GPU without one gets its measured best matmul
rate and copy bandwidth as its roof (the profile's notes say so).
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from layerscope.analysis.rates import TILES, Rates
from layerscope.errors import InvalidInputError
from layerscope.hardware import SPECS, DeviceSpec, spec_of_gpu
from layerscope.metrics.flops.attention import NO_MASK, TOP_LEFT, attended_entries

__all__ = ["NO_GPU", "calibrate"]

NO_GPU = (
    "calibrate measures a CUDA GPU, and torch sees none here (torch.cuda.is_available() is "
    "False): run it on the machine whose GPU you plan for"
)
_MATMULS = ((1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
            (8192, 4096, 4096), (16384, 4096, 1024), (4096, 11008, 4096))  # fmt: skip
_MATMULS_QUICK = ((1024, 1024, 1024), (4096, 4096, 4096))
_SEQS = (512, 1024, 2048, 4096, 8192)
_SEQS_QUICK = (512, 2048)
_BACKENDS = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
             "cudnn": "CUDNN_ATTENTION"}  # fmt: skip


def _timed(fn: Callable[[], Any], repeats: int = 5) -> float:
    """Median seconds of ``fn`` on the current stream, after a warm-up."""
    fn()
    torch.cuda.synchronize()
    times: list[float] = []
    event: Any = torch.cuda.Event  # untyped in torch's stubs
    for _ in range(repeats):
        start, end = event(enable_timing=True), event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(float(start.elapsed_time(end)) / 1e3)
    return float(statistics.median(times))


def _matmul_grid(dtype: torch.dtype, quick: bool) -> list[tuple[int, int, int, float]]:
    """(m, n, k, FLOP/s) of each shape."""
    out = []
    for m, n, k in _MATMULS_QUICK if quick else _MATMULS:
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        b = torch.randn(k, n, device="cuda", dtype=dtype)

        def mm(a: torch.Tensor = a, b: torch.Tensor = b) -> torch.Tensor:
            return torch.mm(a, b)

        out.append((m, n, k, 2 * m * n * k / _timed(mm)))
        del a, b
    return out


def _attention_point(
    backend: Any, dtype: torch.dtype, head_dim: int, seq: int, causal: bool
) -> tuple[float, float] | None:
    """(forward FLOP/s, backward FLOP/s) of one shape under one backend; None when the
    backend refuses it."""
    from torch.nn.attention import sdpa_kernel

    batch, heads = max(1, 16384 // seq), max(1, 2048 // head_dim)
    shape = (batch, heads, seq, head_dim)
    q, k, v = (torch.randn(shape, device="cuda", dtype=dtype, requires_grad=True)
               for _ in range(3))  # fmt: skip
    entries = batch * heads * attended_entries(seq, seq, TOP_LEFT if causal else NO_MASK)
    try:
        with sdpa_kernel(backend):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            grad = torch.randn_like(out)
            forward = _timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
            backward = _timed(lambda: torch.autograd.grad(out, (q, k, v), grad, retain_graph=True))
    except RuntimeError:
        return None
    return 4 * entries * head_dim / forward, 10 * entries * head_dim / backward


def _attention_grid(dtype: torch.dtype, peak: float, quick: bool) -> dict[str, Any]:
    """The attention table (``Rates.attention``'s form) of every backend that runs."""
    from torch.nn.attention import SDPBackend

    table: dict[str, Any] = {}
    for kind, member in _BACKENDS.items():
        backend = getattr(SDPBackend, member, None)
        if backend is None:
            continue
        for head_dim in (64, 128):
            for causal in (False, True):
                for seq in _SEQS_QUICK if quick else _SEQS:
                    point = _attention_point(backend, dtype, head_dim, seq, causal)
                    if point is None:
                        continue
                    for direction, rate in zip(("forward", "backward"), point, strict=True):
                        curve = (
                            table.setdefault(kind, {})
                            .setdefault(direction, {})
                            .setdefault("causal" if causal else "full", {})
                            .setdefault(str(head_dim), [])
                        )
                        curve.append([seq, min(1.0, rate / peak)])
    return table


def _bandwidth() -> float:
    """Bytes/s of a 1 GiB copy (read + write)."""
    src = torch.empty(2**28, device="cuda", dtype=torch.float32).fill_(1.0)
    dst = torch.empty_like(src)
    seconds = _timed(lambda: dst.copy_(src))
    return 2 * src.nbytes / seconds


def _launch(kernels: int = 2000) -> float:
    """Seconds per eager kernel: back-to-back one-element adds."""
    x = torch.zeros(1, device="cuda")

    def many() -> None:
        for _ in range(kernels):
            x.add_(1.0)

    return _timed(many, repeats=3) / kernels


def _base(index: int) -> tuple[DeviceSpec | None, str]:
    """The GPU's built-in spec (None without one) and its CUDA name."""
    name = torch.cuda.get_device_name(index)
    spec = spec_of_gpu(name)
    return (SPECS[spec] if spec is not None else None), name


def calibrate(
    path: str | os.PathLike[str] | None = None,
    *,
    name: str | None = None,
    dtype: str = "bfloat16",
    device: int = 0,
    quick: bool = False,
) -> DeviceSpec:
    """Measure CUDA GPU ``device`` (module docstring) and return its spec with the rates
    measured; with ``path``, also write it there as JSON (a device profile ``target=``
    accepts). ``quick``: a smaller grid (seconds, for tests). On a machine without a CUDA
    GPU it raises ``InvalidInputError`` (``NO_GPU``)."""
    if not torch.cuda.is_available():
        raise InvalidInputError(NO_GPU)
    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise InvalidInputError(f"unknown dtype {dtype!r}")
    with torch.cuda.device(device):
        base, gpu = _base(device)
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        grid = _matmul_grid(torch_dtype, quick)
        bandwidth = _bandwidth()
        launch = _launch()
        notes = f"measured on {gpu} (torch {torch.__version__}) by layerscope calibrate"
        if base is None:
            peak = max(r for *_, r in grid)
            roof = {"bandwidth": bandwidth, "peak_flops": {dtype: peak}}
            notes += "; no datasheet spec: the roof is the best measured matmul and copy"
        else:
            peak, roof = base.peak(dtype), {}
        quant = Rates("probe", sms=sms, tiles=TILES)
        shares = [r / (peak * quant.quantisation(m, n)) for m, n, _, r in grid]
        attention = _attention_grid(torch_dtype, peak, quick)
    datasheet_bandwidth = base.bandwidth if base is not None else bandwidth
    rates = Rates.from_mapping({
        "name": name or f"{(base.name if base else 'gpu')}-calibrated",
        "calibrated": True,
        "matmul": min(1.0, statistics.median(shares)),
        "sms": sms,
        "tiles": [list(t) for t in TILES],
        "bandwidth": min(1.0, bandwidth / datasheet_bandwidth),
        "launch": launch,
        "attention": attention,
        "sources": [notes],
        "notes": notes,
    })  # fmt: skip
    mapping = {
        **(base.to_dict() if base is not None else {"kind": "gpu", "arch": _arch(device)}),
        **roof,
        "name": rates.name,
        "label": gpu,
        "sources": [notes],
        "notes": notes,
        "rates": rates.to_dict(),
    }
    spec = DeviceSpec.from_mapping(mapping)
    if path is not None:
        with open(os.fspath(path), "w", encoding="utf-8") as f:
            json.dump(spec.to_dict(), f, indent=1)
            f.write("\n")
    return spec


def _arch(device: int) -> str:
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm{major}{minor}"
