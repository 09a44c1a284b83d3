"""The roofline model per module: arithmetic intensity, the bound, the roofline time and,
with measured times, efficiency, derived from a profile's stored numbers and a device
spec (``layerscope.hardware``). Nothing here is stored as a metric.

For a module's forward (or backward) work of ``F`` FLOPs moving ``B`` bytes on a device
with peak ``P`` FLOP/s (for the profile's dtype) and memory bandwidth ``W`` bytes/s:

- arithmetic intensity ``I = F / B`` (FLOPs per byte);
- the ridge point ``P / W``: at lower intensity the work is **memory**-bound, at higher
  **compute**-bound;
- the roofline time ``max(F / P, B / W)``: no kernel can do that work faster on that
  device, so it is a lower bound on the time. A module's roofline time is that of its
  own work (its self FLOPs and bytes) plus its children's: work done one after the
  other (a kernel each) cannot share one roof, so this sum is a tighter lower bound
  than the roof of the summed work;
- with a measured time ``T`` (per-call time × calls), **efficiency** ``= roofline / T``
  (1 means the module ran at the roofline) and the time lost ``T - roofline``.

``estimate(profile, device)`` applies this to every module of a profile (one analysed on
``meta`` needs no hardware at all) and sums whole-model times.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import layerscope.metricspec as ms
from layerscope.errors import InvalidInputError
from layerscope.profile import Node, Profile
from layerscope.validate import check_bool

if TYPE_CHECKING:
    from layerscope.hardware import DeviceLike

Phase = Literal["forward", "backward"]

#: (FLOPs key, bytes key, time key) of each phase.
PHASE_KEYS: dict[str, tuple[str, str, str]] = {
    "forward": (ms.FLOPS, ms.BYTES_ACCESSED, ms.FORWARD_TIME),
    "backward": (ms.BACKWARD_FLOPS, ms.BACKWARD_BYTES_ACCESSED, ms.BACKWARD_TIME),
}


@dataclass(frozen=True)
class Roof:
    """A device's roof for one dtype: peak FLOP/s and bandwidth in bytes/s."""

    peak: float
    bandwidth: float
    name: str = ""
    dtype: str = "float32"

    @property
    def ridge(self) -> float:
        """FLOPs per byte where the bound turns from memory to compute."""
        return self.peak / self.bandwidth

    def time(self, flops: float, nbytes: float) -> float:
        """``max(flops / peak, bytes / bandwidth)``: the roofline time in seconds."""
        return max(flops / self.peak, nbytes / self.bandwidth)

    def bound(self, flops: float, nbytes: float) -> str:
        """Which roof limits this work: "compute" or "memory" ("" for no work)."""
        if not flops and not nbytes:
            return ""
        return "compute" if flops / self.peak >= nbytes / self.bandwidth else "memory"


def roof_of(
    device: DeviceLike,
    dtype: str = "float32",
    *,
    tensor_cores: bool = True,
) -> Roof:
    """The roof of a device spec (a name such as ``"h100"``, ``"cpu"``, a ``DeviceSpec``
    or a mapping) for ``dtype``."""
    from layerscope.hardware import device_spec

    spec = device_spec(device)
    tensor_cores = check_bool("tensor_cores", tensor_cores)
    return Roof(spec.peak(dtype, tensor_cores=tensor_cores), spec.bandwidth, spec.name, dtype)


def target_spec(profile: Profile) -> str | None:
    """The device spec of the profile's device: the one a meta analysis followed the
    kernels of (``target="h100"``: ``model["target"] == "h100 (cuda sm90)"``), when that
    names a spec, or the built-in spec of the GPU it ran on (``model["gpu"]``)."""
    from layerscope.hardware import BY_NAME, spec_of_gpu

    target = profile.model.get("target")
    if isinstance(target, str) and target:
        name = target.split(" ", 1)[0]
        return name if name in BY_NAME else None
    gpu = profile.model.get("gpu")
    return spec_of_gpu(gpu) if isinstance(gpu, str) else None


def device_note(profile: Profile, device: str) -> str | None:
    """A sentence for a roofline on ``device`` (a spec's name) of a profile that measured
    another device (a CPU-timed profile against ``"h100"``) or, analysed on meta, followed
    another device's kernels; None when they are the same or it cannot tell."""
    from layerscope.hardware import ALIASES

    roof = ALIASES.get(device, device)
    ran = profile.model.get("device")
    if not isinstance(ran, str) or not ran:
        return None
    if ran == "meta":
        target = profile.model.get("target")
        followed = target.split(" ", 1)[0] if isinstance(target, str) and target else "cpu"
        followed = ALIASES.get(followed, followed)
        if followed == roof:
            return None
        return (
            f"The profile was analysed on meta following {followed}'s kernels; the roofline "
            f"is {roof}'s, so the bytes moved are those of {followed}'s kernels."
        )
    kind = ran.split(":", 1)[0]
    gpu = profile.model.get("gpu")
    own = target_spec(profile)
    if own is not None and isinstance(gpu, str):  # a GPU whose spec it knows
        if own == roof:
            return None
        ran = gpu
    elif kind == roof or (kind != "cpu" and roof != "cpu"):  # a GPU it cannot tell
        return None
    if ms.FORWARD_TIME in profile.root.metrics or ms.BACKWARD_TIME in profile.root.metrics:
        return (
            f"The profile was measured on {ran}; the roofline is {roof}'s, so Eff compares "
            f"{ran}'s measured time with {roof}'s lower bound."
        )
    return (
        f"The profile was analysed on {ran}; the roofline is {roof}'s, so the bytes moved "
        f"are those of {ran}'s kernels."
    )


def intensity(flops: float | None, nbytes: float | None) -> float | None:
    """FLOPs per byte; None when either is unknown or no byte moved."""
    if flops is None or not nbytes:
        return None
    return float(flops) / float(nbytes)


def work(metrics: dict[str, Any], phase: str) -> tuple[float, float] | None:
    """(FLOPs, bytes) of ``phase`` in a metrics dict; None when the bytes were not counted."""
    flops_key, bytes_key, _ = PHASE_KEYS[phase]
    nbytes = metrics.get(bytes_key)
    if nbytes is None:
        return None
    return float(metrics.get(flops_key) or 0), float(nbytes)


def profile_dtype(profile: Profile) -> str:
    """The dtype a profile ran in (its ``Run`` line), float32 when it does not say."""
    dtype = profile.model.get("dtype")
    return dtype if isinstance(dtype, str) and dtype else "float32"


@dataclass
class ModuleEstimate:
    """One module's roofline numbers (inclusive, all its calls; seconds)."""

    path: str
    type: str
    depth: int
    calls: int
    flops: float
    bytes: float
    time: float
    bound: str
    backward_flops: float | None = None
    backward_bytes: float | None = None
    backward_time: float | None = None
    backward_bound: str | None = None
    measured: float | None = None
    backward_measured: float | None = None

    @property
    def intensity(self) -> float | None:
        return intensity(self.flops, self.bytes)

    @property
    def efficiency(self) -> float | None:
        """Roofline time / measured time (forward); None without a measured time."""
        return self.time / self.measured if self.measured else None

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if v is not None}
        out["intensity"] = self.intensity
        out["efficiency"] = self.efficiency
        return out


@dataclass
class Estimate:
    """Roofline times of every module of a profile on one device: lower bounds."""

    device: str
    dtype: str
    peak: float
    bandwidth: float
    modules: list[ModuleEstimate] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    #: The profile estimated: what ``render`` folds, filters and sorts.
    profile: Profile | None = field(default=None, repr=False, compare=False)

    @property
    def model(self) -> ModuleEstimate:
        """The whole model (the root)."""
        return self.modules[0]

    def module(self, path: str) -> ModuleEstimate:
        for m in self.modules:
            if m.path == path:
                return m
        raise KeyError(path)

    def __iter__(self) -> Iterator[ModuleEstimate]:
        return iter(self.modules)

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "dtype": self.dtype,
            "peak_flops": self.peak,
            "bandwidth": self.bandwidth,
            "lower_bound": True,
            "modules": [m.to_dict() for m in self.modules],
            "notices": list(self.notices),
        }

    def render(self, **options: Any) -> str:
        """The estimate as plain text: the table view of the profile with the estimate's
        columns, folded; it takes the view options (``width``, ``max_depth``, ``fold``,
        ``columns``, ``sort_by``, ``top``, ``include``, ``exclude``, ...)."""
        from layerscope.render.roofline import render_estimate

        return render_estimate(self, **options)

    def show(self, **options: Any) -> None:
        print(self.render(**options))

    def __str__(self) -> str:
        return self.render()


def roof_times(
    profile: Profile, roof: Roof, phase: str, faster: Mapping[int, float] | None = None
) -> dict[int, float]:
    """Inclusive roofline time (seconds, all calls) of every node, by ``id(node)``: the
    roof of its own work plus its children's times. Nodes without bytes count 0.
    ``faster``: nodes (by ``id``) whose FLOPs run at that multiple of the peak (a float8
    matmul on a bfloat16 roof)."""
    out: dict[int, float] = {}
    for node in reversed(list(profile.root.walk())):  # children before their parent
        own = work(node.self_metrics, phase)
        t = 0.0
        if own is not None:
            scale = faster.get(id(node), 1.0) if faster else 1.0
            t = roof.time(own[0] / scale, own[1])
        out[id(node)] = t + sum(out.get(id(c), 0.0) for c in node.children)
    return out


def _total_time(node: Node, key: str) -> float | None:
    t = node.metrics.get(key)
    return None if t is None else float(t) * node.calls


def estimate(
    profile: Profile,
    device: DeviceLike | None = None,
    *,
    dtype: str | None = None,
    tensor_cores: bool = True,
) -> Estimate:
    """Roofline times per module of ``profile`` on ``device`` (a lower bound: no kernel
    does the work faster), forward and, where the profile has a backward, backward.
    ``device`` defaults to the target a meta analysis followed (``target="h100"``), else
    ``"cpu"`` (this machine, calibrated).

    ``dtype`` picks the peak (default: the dtype the profile ran in); ``tensor_cores``
    (default on) lets float32 use the TF32 tensor-core peak where the spec has one, which
    keeps the estimate a lower bound whatever torch's TF32 setting. Needs the bytes moved
    (``count_bytes``, on by default); the FLOPs of ops without a formula are missing (the
    profile's ``unsupported_ops``), as in every FLOP total.
    """
    if not isinstance(profile, Profile):
        raise InvalidInputError(f"estimate needs a Profile, got {type(profile).__name__}")
    dtype = dtype or profile_dtype(profile)
    if device is None:
        device = target_spec(profile) or "cpu"
    roof = roof_of(device, dtype, tensor_cores=tensor_cores)
    if work(profile.root.metrics, "forward") is None:
        raise InvalidInputError(
            "the profile has no bytes moved (bytes_accessed): profile the model with "
            "count_bytes=True (the default) and an input, then estimate"
        )
    result = Estimate(roof.name, dtype, roof.peak, roof.bandwidth, profile=profile)
    nodes = list(profile.root.walk())
    times = {phase: roof_times(profile, roof, phase) for phase in PHASE_KEYS}
    for node in nodes:
        fwd = work(node.metrics, "forward")
        if fwd is None:
            continue
        flops, nbytes = fwd
        m = ModuleEstimate(
            path=node.path,
            type=node.type,
            depth=node.depth,
            calls=node.calls,
            flops=flops,
            bytes=nbytes,
            time=times["forward"][id(node)],
            bound=roof.bound(flops, nbytes),
            measured=_total_time(node, ms.FORWARD_TIME),
        )
        bwd = work(node.metrics, "backward")
        if bwd is not None:
            m.backward_flops, m.backward_bytes = bwd
            m.backward_time = times["backward"][id(node)]
            m.backward_bound = roof.bound(*bwd)
            m.backward_measured = _total_time(node, ms.BACKWARD_TIME)
        result.modules.append(m)
    note = device_note(profile, roof.name)
    if note is not None:
        result.notices.append(note)
    if profile.unsupported_ops:
        result.notices.append(
            f"{len(profile.unsupported_ops)} op(s) without a FLOP formula: their FLOPs are "
            "missing from the compute side (see the profile's unsupported ops)"
        )
    return result


__all__ = [
    "PHASE_KEYS",
    "Estimate",
    "ModuleEstimate",
    "Roof",
    "device_note",
    "estimate",
    "intensity",
    "profile_dtype",
    "roof_of",
    "roof_times",
    "work",
]
