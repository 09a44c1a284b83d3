"""Device specs for the roofline: peak dense FLOP/s per dtype and memory bandwidth.

``device_spec("h100")`` answers a built-in spec (by name in ``SPECS`` or alias in
``ALIASES``: every one of them, ``BY_NAME``, is also a ``target=`` of
``collect.target``), a mapping builds a custom one, and ``"cpu"`` measures this machine
(``calibrate_cpu``, once per process and thread count). Figures are NVIDIA's published dense (not
2:4-sparse) numbers: where a datasheet prints only the sparse figure (marked with an
asterisk there), the dense one is half of it. 1 TFLOP/s = 1e12 FLOP/s; 1 TB/s = 1e12 B/s.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch

from layerscope.errors import InvalidInputError
from layerscope.validate import Label, check_keys, check_number, refuse, refuse_keys

T = 1e12


@dataclass(frozen=True)
class DeviceSpec:
    """A device's roof: dense peak FLOP/s per dtype and bytes/s of memory bandwidth.

    ``peak_flops`` keys are torch dtype names, plus ``"tfloat32"`` for float32 matmuls
    and convolutions on TF32 tensor cores."""

    name: str
    label: str
    kind: str  # "gpu" or "cpu"
    arch: str  # "sm90", "sm80", "sm89", "cpu"
    bandwidth: float
    peak_flops: Mapping[str, float]
    memory_bytes: int | None = None
    sources: tuple[str, ...] = ()
    notes: str = ""
    #: bytes/s one GPU sends to its peers in one direction (NVLink for SXM parts, the
    #: PCIe slot for PCIe parts); None where the spec does not say
    interconnect: float | None = None
    #: "nvlink", "pcie" or "" (unknown)
    interconnect_kind: str = ""
    #: GPUs in one node (a server) that the interconnect joins
    node_size: int = 8
    #: achievable rates by kernel class (``analysis.rates.Rates.to_dict``'s form), from a
    #: device profile ``layerscope calibrate`` wrote; None: the built-in or generic ones
    rates: Mapping[str, Any] | None = None
    #: the bytes a process can use: the total ``torch.cuda.mem_get_info()`` reports on
    #: the device (below the datasheet's, which counts in decimal GB and before the
    #: driver's share); None where not known (plans then budget ``memory_bytes``)
    usable_memory_bytes: int | None = None

    @property
    def budget_bytes(self) -> int | None:
        """What a plan budgets by default: the usable bytes, else the datasheet's."""
        return self.usable_memory_bytes or self.memory_bytes

    def peak(self, dtype: str = "float32", *, tensor_cores: bool = True) -> float:
        """Dense peak FLOP/s for ``dtype``; float32 uses the TF32 tensor-core peak when
        ``tensor_cores`` and the spec has one."""
        name = str(dtype).removeprefix("torch.")
        if name == "float32" and tensor_cores and "tfloat32" in self.peak_flops:
            name = "tfloat32"
        value = self.peak_flops.get(name)
        if value is None:
            raise InvalidInputError(
                f"{self.name} has no peak for {dtype!r}; known: {', '.join(self.peak_flops)}"
            )
        return value

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "label": self.label,
            "kind": self.kind,
            "arch": self.arch,
            "bandwidth": self.bandwidth,
            "peak_flops": dict(self.peak_flops),
            "memory_bytes": self.memory_bytes,
            "sources": list(self.sources),
            "notes": self.notes,
            "interconnect": self.interconnect,
            "interconnect_kind": self.interconnect_kind,
            "node_size": self.node_size,
            **({"rates": dict(self.rates)} if self.rates is not None else {}),
            **(
                {"usable_memory_bytes": self.usable_memory_bytes}
                if self.usable_memory_bytes is not None
                else {}
            ),
        }

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> DeviceSpec:
        """A custom spec: ``{"name": ..., "bandwidth": B/s, "peak_flops": {dtype: FLOP/s}}``
        and optionally ``label``, ``kind``, ``arch``, ``memory_bytes``, ``sources``,
        ``notes``, ``interconnect`` (B/s per direction), ``interconnect_kind``,
        ``node_size``, ``rates`` (a device profile's achievable rates)."""
        check_keys("the device spec", mapping, list(cls.__dataclass_fields__))
        for key in ("name", "bandwidth", "peak_flops"):
            if key not in mapping:
                raise InvalidInputError(f"a device spec needs {key!r}")
        name = mapping["name"]
        if not isinstance(name, str) or not name:
            refuse("name", name, "a non-empty string")
        bandwidth = check_number("bandwidth", mapping["bandwidth"], positive=True)
        peaks = mapping["peak_flops"]
        if not isinstance(peaks, Mapping) or not peaks:
            refuse("peak_flops", peaks, "a non-empty mapping of dtype -> FLOP/s")
        unknown = [k for k in peaks if k not in _DTYPE_NAMES]
        if unknown:  # a peak under another name would never be read (``peak``)
            refuse_keys("peak_flops", unknown, PEAK_DTYPES, noun="dtype",
                        more=", or another torch dtype's name")  # fmt: skip
        memory = mapping.get("memory_bytes")
        if memory is not None:
            memory = int(check_number("memory_bytes", memory, positive=True))
        link = mapping.get("interconnect")
        if link is not None:
            link = check_number("interconnect", link, positive=True)
        node = mapping.get("node_size", 8)
        if isinstance(node, bool) or not isinstance(node, int) or node < 1:
            refuse("node_size", node, "a positive int")
        return cls(
            name=name,
            label=str(mapping.get("label", name)),
            kind=str(mapping.get("kind", "gpu")),
            arch=str(mapping.get("arch", "custom")),
            bandwidth=bandwidth,
            peak_flops={
                str(k): check_number(f"peak_flops[{k!r}]", v, positive=True)
                for k, v in peaks.items()
            },
            memory_bytes=memory,
            sources=tuple(str(s) for s in mapping.get("sources", ("given by the user",))),
            notes=str(mapping.get("notes", "")),
            interconnect=link,
            interconnect_kind=str(mapping.get("interconnect_kind", "")),
            node_size=node,
            rates=_rates(mapping.get("rates")),
            usable_memory_bytes=_usable(mapping.get("usable_memory_bytes"), memory),
        )


#: The dtypes a datasheet gives peaks for (``peak_flops``'s usual keys): torch's names,
#: and ``"tfloat32"`` for float32 on TF32 tensor cores.
PEAK_DTYPES = ("float64", "float32", "tfloat32", "bfloat16", "float16", "float8_e4m3fn",
               "float8_e5m2", "int8")  # fmt: skip
#: Every key ``peak_flops`` accepts: ``PEAK_DTYPES`` and every torch dtype's own name
#: (``str(torch.half)`` is ``"torch.float16"``: aliases such as "half" are not names).
_DTYPE_NAMES = frozenset(
    [*PEAK_DTYPES]
    + [str(v).removeprefix("torch.") for v in vars(torch).values() if isinstance(v, torch.dtype)]
)
#: The masks of an attention curve (``analysis.rates``' table).
_MASKS = ("causal", "full")
#: The fused attention kernels ``F.scaled_dot_product_attention`` dispatches to, and the
#: directions a profile's attention table gives rates for (``analysis.rates`` reads them).
ATTENTION_KINDS = ("flash", "efficient", "cudnn")
DIRECTIONS = ("forward", "backward")


def _usable(value: Any, memory: int | None) -> int | None:
    """A spec's ``usable_memory_bytes``: a positive whole number of bytes, at most
    ``memory_bytes`` read as binary gigabytes when that is given (a process cannot use
    more than the device has; a datasheet's "80 GB" is 80 GiB of memory: the H100's
    usable 85,029,158,912 B is more than 80e9)."""
    if value is None:
        return None
    usable = int(check_number("usable_memory_bytes", value, positive=True))
    most = None if memory is None else memory * 2**30 // 10**9
    if most is not None and usable > most:
        refuse("usable_memory_bytes", value, f"at most memory_bytes as GiB ({most:,})")
    return usable


def _rates(value: Any) -> Mapping[str, Any] | None:
    """A spec's ``rates``: a mapping (``analysis.rates`` checks its figures) or None."""
    if value is not None and not isinstance(value, Mapping):
        refuse("rates", value, "a mapping of achievable rates (a device profile's)")
    if value is not None and isinstance(value.get("attention"), Mapping):
        _check_attention(Label("rates.attention"), value["attention"])
    return dict(value) if value is not None else None


def _check_attention(label: Label, table: Mapping[str, Any]) -> None:
    """The keys of a profile's attention table (kind -> direction -> mask -> head dim ->
    [[seq, fraction], ...]) and its sequence lengths: a key misspelled would be a curve
    never read (``analysis.rates`` reads the names it knows); the fractions are checked
    there."""
    check_keys(label, table, ATTENTION_KINDS, what="a mapping kind -> direction -> mask -> curve")
    for kind, by_dir in table.items():
        at = label.at(kind)
        check_keys(at, by_dir, DIRECTIONS, what="a mapping direction -> mask -> curve")
        for direction, by_mask in by_dir.items():
            check_keys(at.at(direction), by_mask, _MASKS, what="a mapping mask -> curve")
            for mask, by_head in by_mask.items():
                _check_curves(at.at(direction).at(mask), by_head)


def _check_curves(label: Label, by_head: Any) -> None:
    """``head dim -> [[seq, fraction], ...]``: positive whole head dims and sequences."""
    if not isinstance(by_head, Mapping):
        refuse(label, by_head, "a mapping head dim -> [[seq, fraction], ...]")
    for head, points in by_head.items():
        if not (str(head).isdecimal() and int(head) > 0):
            refuse(label, head, "keyed by head dims, positive whole numbers", why="a head dim")
        at = label.at(str(head))
        if not isinstance(points, list | tuple):
            refuse(at, points, "a list of [seq, fraction] points")
        for i, point in enumerate(points):
            if not (isinstance(point, list | tuple) and len(point) == 2):
                refuse(at.at(i), point, "a [seq, fraction] point")
            seq = point[0]
            whole = isinstance(seq, int | float) and float(seq).is_integer()
            if isinstance(seq, bool) or not whole or seq < 1:
                refuse(at.at(i), point, "a [seq, fraction] point",
                       why="seq is a sequence length: a whole number >= 1")  # fmt: skip


_H100 = "NVIDIA H100 Tensor Core GPU datasheet (2023), Technical Specifications table"
_H200 = "NVIDIA H200 Tensor Core GPU datasheet (2024), Technical Specifications table"
_A100 = "NVIDIA A100 Tensor Core GPU datasheet (2021), Technical Specifications table"
_L4 = "NVIDIA L4 Tensor Core GPU datasheet (2023), Specifications table"
_L40S = "NVIDIA L40S GPU datasheet (2023), Specifications table"
_ADA = "NVIDIA Ada Lovelace GPU architecture whitepaper v1.1 (2023), GeForce RTX 4090 table"
_HALF = "dense = the datasheet's sparse figure / 2 for the tensor-core dtypes"
_LINK = "interconnect per direction = the datasheet's bidirectional figure / 2"
#: NVLink per GPU and direction: H100/H200 SXM 900 GB/s bidirectional, A100 SXM 600
_NVLINK4, _NVLINK3 = 450e9, 300e9
#: a PCIe x16 slot per direction: Gen5 128 GB/s bidirectional, Gen4 64
_PCIE5, _PCIE4 = 64e9, 32e9

_SXM_PEAKS = {
    "float64": 66.9e12,  # FP64 tensor core
    "float32": 66.9e12,
    "tfloat32": 494.7e12,  # 989.4 sparse
    "bfloat16": 989.4e12,  # 1,978.9 sparse
    "float16": 989.4e12,
    "float8_e4m3fn": 1978.9e12,  # 3,957.8 sparse
    "int8": 1978.9e12,
}
_A100_PEAKS = {
    "float64": 19.5e12,  # FP64 tensor core
    "float32": 19.5e12,
    "tfloat32": 156.0e12,  # 312 sparse
    "bfloat16": 312.0e12,  # 624 sparse
    "float16": 312.0e12,
    "int8": 624.0e12,
}

#: What ``torch.cuda.mem_get_info()`` reports as the total on each part (torch's
#: out-of-memory message prints it: "GPU 0 has a total capacity of 79.19 GiB"), in bytes:
#: - h200: 150,109,880,320 B (139.80 GiB), measured on an H200 SXM with torch 2.11
#:   (``bench/results/h200-torch2.11.0/``); out-of-memory messages on H200s print 139.80;
#: - h100: 85,029,158,912 B (79.19 GiB), the H100 80GB HBM3's total global memory as
#:   ``cudaGetDeviceProperties`` lists it; out-of-memory messages on H100s print 79.19;
#: - a100-80gb and a100-40gb: out-of-memory messages on those parts print a total capacity
#:   of 79.15 and 39.39 GiB; taken as the least bytes that print so (79.145 and 39.385
#:   GiB, rounded down to a MiB): a budget never above the device's.
#: The other parts have no figure here: plans budget their datasheet bytes.
USABLE_MEMORY = {
    "h100": 85_029_158_912,
    "h200": 150_109_880_320,
    "a100-80gb": 81_045 * 2**20,
    "a100-40gb": 40_331 * 2**20,
}


_BUILTIN: tuple[DeviceSpec, ...] = (
    DeviceSpec(
        "h100", "NVIDIA H100 SXM5 80GB", "gpu", "sm90", 3.35e12, _SXM_PEAKS,
        80 * 10**9, (_H100 + ", H100 SXM column",), _HALF + "; " + _LINK, _NVLINK4, "nvlink",
    ),
    DeviceSpec(
        "h100-pcie", "NVIDIA H100 PCIe 80GB", "gpu", "sm90", 2.0e12,
        {
            "float64": 51.2e12, "float32": 51.2e12, "tfloat32": 378.0e12,
            "bfloat16": 756.0e12, "float16": 756.0e12, "float8_e4m3fn": 1513.0e12,
            "int8": 1513.0e12,
        },
        80 * 10**9, (_H100 + ", H100 PCIe column",), _HALF + "; " + _LINK, _PCIE5, "pcie",
    ),
    DeviceSpec(
        "h200", "NVIDIA H200 SXM 141GB", "gpu", "sm90", 4.8e12, _SXM_PEAKS,
        141 * 10**9, (_H200 + ", H200 SXM column",),
        _HALF + "; compute as the H100 SXM; " + _LINK, _NVLINK4, "nvlink",
    ),
    DeviceSpec(
        "a100-40gb", "NVIDIA A100 SXM4 40GB", "gpu", "sm80", 1.555e12, _A100_PEAKS,
        40 * 10**9, (_A100 + ", A100 40GB SXM column",), _HALF + "; " + _LINK, _NVLINK3,
        "nvlink",
    ),
    DeviceSpec(
        "a100-80gb", "NVIDIA A100 SXM4 80GB", "gpu", "sm80", 2.039e12, _A100_PEAKS,
        80 * 10**9, (_A100 + ", A100 80GB SXM column",), _HALF + "; " + _LINK, _NVLINK3,
        "nvlink",
    ),
    DeviceSpec(
        "l4", "NVIDIA L4 24GB", "gpu", "sm89", 300e9,
        {
            "float32": 30.3e12, "tfloat32": 60.0e12, "bfloat16": 121.0e12,
            "float16": 121.0e12, "float8_e4m3fn": 242.5e12, "int8": 242.5e12,
        },
        24 * 10**9, (_L4,), _HALF + "; PCIe Gen4 x16, " + _LINK, _PCIE4, "pcie",
    ),
    DeviceSpec(
        "l40s", "NVIDIA L40S 48GB", "gpu", "sm89", 864e9,
        {
            "float32": 91.6e12, "tfloat32": 183.0e12, "bfloat16": 362.05e12,
            "float16": 362.05e12, "float8_e4m3fn": 733.0e12, "int8": 733.0e12,
        },
        48 * 10**9, (_L40S,), _HALF + "; PCIe Gen4 x16, " + _LINK, _PCIE4, "pcie",
    ),
    DeviceSpec(
        "rtx4090", "NVIDIA GeForce RTX 4090 24GB", "gpu", "sm89", 1008e9,
        {
            "float32": 82.6e12, "tfloat32": 82.6e12, "bfloat16": 165.2e12,
            "float16": 165.2e12, "float8_e4m3fn": 330.3e12, "int8": 660.6e12,
        },
        24 * 10**9, (_ADA,),
        "FP16/BF16 with FP32 accumulate (PyTorch's default); dense figures; PCIe Gen4 x16, "
        + _LINK, _PCIE4, "pcie",
    ),
)  # fmt: skip
_BUILTIN = tuple(replace(s, usable_memory_bytes=USABLE_MEMORY.get(s.name)) for s in _BUILTIN)

#: Specs registered at run time (``register_device``), by name.
_REGISTERED: dict[str, DeviceSpec] = {}
#: Other names for the built-in specs.
ALIASES: dict[str, str] = {
    "h100-sxm": "h100",
    "h100-sxm5": "h100",
    "a100": "a100-80gb",
    "4090": "rtx4090",
    "rtx-4090": "rtx4090",
}
#: Built-in specs by name.
SPECS: dict[str, DeviceSpec] = {}
#: Every built-in spec by each of its names, aliases included: the one device table that
#: ``device_spec``, the kernel targets (``collect.target.parse_target``) and the CLI's
#: device lists read.
BY_NAME: dict[str, DeviceSpec] = {}
#: The built-in GPU specs' names, and every name a GPU target may take (aliases too).
GPU_SPECS: tuple[str, ...] = ()
GPUS: tuple[str, ...] = ()


def _index() -> None:
    """Derive the name tables above from the rows (``_BUILTIN``, ``ALIASES``)."""
    global GPU_SPECS, GPUS
    SPECS.clear()
    SPECS.update({s.name: s for s in _BUILTIN})
    SPECS.update(_REGISTERED)
    BY_NAME.clear()
    BY_NAME.update({**SPECS, **{a: SPECS[n] for a, n in ALIASES.items()}})
    GPU_SPECS = tuple(s.name for s in _BUILTIN if s.kind == "gpu")
    GPUS = tuple(name for name, spec in BY_NAME.items() if spec.kind == "gpu")


_index()


#: What names a device spec: a name (``device_spec``'s), a DeviceSpec, or a mapping of
#: its fields.
DeviceLike = str | DeviceSpec | Mapping[str, Any]


#: The built-in spec of a CUDA device from its name (``torch.cuda.get_device_name``):
#: (words the name must contain, words it must not, spec), first match wins. Every GPU
#: spec of ``_BUILTIN`` has a row (``tests/test_device_table.py`` checks). Variants with
#: other clocks, memory or power (H100 NVL, A100 PCIe, H200 NVL) have no spec here.
_GPU_NAMES: tuple[tuple[tuple[str, ...], tuple[str, ...], str], ...] = (
    (("h100", "pcie"), (), "h100-pcie"),
    (("h100", "hbm3"), ("nvl", "pcie"), "h100"),
    (("h100", "sxm"), ("nvl",), "h100"),
    (("h200",), ("nvl",), "h200"),
    (("a100", "sxm4", "80gb"), (), "a100-80gb"),
    (("a100", "sxm4", "40gb"), (), "a100-40gb"),
    (("l40s",), (), "l40s"),
    (("l4",), ("l40",), "l4"),
    (("rtx", "4090"), (), "rtx4090"),
)


def spec_of_gpu(name: str) -> str | None:
    """The built-in spec for a CUDA device's name (``"NVIDIA H100 80GB HBM3"``: ``"h100"``),
    or None for a device without one."""
    words = set(name.lower().replace("-", " ").split())
    for needed, excluded, spec in _GPU_NAMES:
        if all(w in words for w in needed) and not any(w in words for w in excluded):
            return spec
    return None


def known_devices() -> list[str]:
    """Every name ``device_spec`` accepts (a device profile's path too)."""
    return [*BY_NAME, "cpu"]


def is_profile_path(name: str) -> bool:
    """Whether a target names a device profile file (a ``.json`` path)."""
    return name.strip().lower().endswith(".json")


def load_device(path: str | os.PathLike[str]) -> DeviceSpec:
    """The spec in a device profile file (``layerscope calibrate``'s JSON: a spec's
    mapping with its ``rates``)."""
    try:
        with open(os.fspath(path), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise InvalidInputError(f"cannot read the device profile {os.fspath(path)!r}: {e}") from e
    if not isinstance(data, Mapping):
        raise InvalidInputError(f"the device profile {os.fspath(path)!r} is not a JSON object")
    try:
        spec = DeviceSpec.from_mapping(data)
    except InvalidInputError as e:
        raise InvalidInputError(f"the device profile {os.fspath(path)!r}: {e}") from None
    if spec.kind == "gpu" and re.fullmatch(r"sm\d+\d", spec.arch) is None:
        # without it a plan would follow the CPU's kernels (``collect.target.spec_target``)
        given = f"arch {spec.arch!r}" if "arch" in data else "no arch"
        raise InvalidInputError(
            f"the device profile {os.fspath(path)!r}: a GPU profile needs its compute "
            f"capability as arch, e.g. 'sm90' (H100, H200), 'sm80' (A100) or 'sm89' (L4, "
            f"L40S, RTX 4090), got {given} (a plan follows that GPU's kernels)"
        )
    return spec


def register_device(device: DeviceLike) -> DeviceSpec:
    """Make a spec (a device profile's path, a mapping or a DeviceSpec) a name every
    ``target=`` accepts, for this process; a built-in name is not replaced."""
    spec = load_device(device) if isinstance(device, str) else device_spec(device)
    if spec.name in SPECS and SPECS[spec.name] in _BUILTIN:
        raise InvalidInputError(f"{spec.name!r} is a built-in device; name the profile otherwise")
    _REGISTERED[spec.name] = spec
    _index()
    return spec


def device_spec(device: DeviceLike) -> DeviceSpec:
    """A spec by name (case-insensitive; ``"cpu"`` calibrates this machine), a device
    profile's path (``*.json``, ``load_device``), a ``DeviceSpec`` as it is, or a custom
    one from a mapping."""
    if isinstance(device, DeviceSpec):
        return device
    if isinstance(device, Mapping):
        return DeviceSpec.from_mapping(device)
    if not isinstance(device, str):
        raise InvalidInputError(
            f"a device spec is a name, a DeviceSpec or a mapping, got {device!r}"
        )
    name = device.strip().lower()
    if name == "cpu":
        return calibrate_cpu()
    if is_profile_path(name):
        return load_device(device.strip())
    spec = BY_NAME.get(name)
    if spec is None:
        close = difflib.get_close_matches(name, known_devices(), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise InvalidInputError(
            f"unknown device {device!r}{hint}; known: {', '.join(known_devices())}"
        )
    return spec


# ---- the CPU: measured -------------------------------------------------------------
_cpu_cache: dict[tuple[int, tuple[str, ...]], DeviceSpec] = {}
_cpu_lock = threading.Lock()


def _best(fn: Any, repeats: int) -> float:
    fn()  # warm up
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def calibrate_cpu(dtypes: tuple[str, ...] = ("float32", "bfloat16")) -> DeviceSpec:
    """This CPU's roof, measured (cached per process and thread count): peak FLOP/s per
    dtype from a 2048x2048 matmul (2 n^3 FLOPs), bandwidth from copying 64 MiB (read
    plus write: 2 x 64 MiB moved). Best of a few repeats."""
    threads = torch.get_num_threads()
    key = (threads, tuple(dtypes))
    with _cpu_lock:
        cached = _cpu_cache.get(key)
        if cached is not None:
            return cached
        n = 2048
        peaks: dict[str, float] = {}
        own = torch.Generator().manual_seed(0)  # the user's RNG does not move
        for name in dtypes:
            dtype = getattr(torch, name, None)
            if not isinstance(dtype, torch.dtype):
                raise InvalidInputError(f"unknown dtype {name!r}")
            a = torch.randn(n, n, generator=own).to(dtype)
            b = torch.randn(n, n, generator=own).to(dtype)
            peaks[name] = 2 * n**3 / _best(lambda a=a, b=b: torch.mm(a, b), 2)
        src = torch.empty(16 * 2**20, dtype=torch.float32).fill_(1.0)
        dst = torch.empty_like(src)
        bandwidth = 2 * src.nbytes / _best(lambda: dst.copy_(src), 5)
        spec = DeviceSpec(
            name="cpu",
            label=f"CPU ({threads} threads, calibrated)",
            kind="cpu",
            arch="cpu",
            bandwidth=bandwidth,
            peak_flops=peaks,
            sources=("measured by layerscope.hardware.calibrate_cpu on this machine",),
            notes=f"torch {torch.__version__}, {threads} threads",
        )
        _cpu_cache[key] = spec
        return spec


def spec_table_markdown() -> str:
    """The built-in specs as a Markdown table (docs/roofline.md shows it)."""
    lines = [
        "| name | device | BF16 | TF32 | FP32 | bandwidth | memory | interconnect |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for s in _BUILTIN:
        p = s.peak_flops
        link = f"{s.interconnect / 1e9:g} GB/s {s.interconnect_kind}" if s.interconnect else ""
        lines.append(
            f"| `{s.name}` | {s.label} | {p['bfloat16'] / T:g} | {p['tfloat32'] / T:g} | "
            f"{p['float32'] / T:g} | {s.bandwidth / T:g} TB/s | "
            f"{(s.memory_bytes or 0) / 10**9:g} GB | {link} |"
        )
    return "\n".join(lines) + "\n"


__all__ = [
    "ALIASES",
    "BY_NAME",
    "GPUS",
    "GPU_SPECS",
    "SPECS",
    "DeviceLike",
    "DeviceSpec",
    "calibrate_cpu",
    "device_spec",
    "is_profile_path",
    "known_devices",
    "load_device",
    "register_device",
    "spec_of_gpu",
    "spec_table_markdown",
]
