"""``Target``: the device a model will really run on, whose kernels a meta analysis follows."""

from __future__ import annotations

import re
from dataclasses import dataclass

from layerscope.errors import InvalidInputError
from layerscope.hardware import BY_NAME, DeviceSpec, is_profile_path, load_device

#: The runtime cuDNN version (``torch.backends.cudnn.version()``) the CUDA rules assume by
#: default: the one torch 2.13's CUDA 12.8/12.9/13.0 wheels ship (9.20.0, pinned in March
#: 2026, pytorch/pytorch#177321, before the 2.13 branch cut of June 2026). It decides
#: whether cuDNN attention comes first on sm90 (runtime cuDNN newer than 9.15) and its
#: head-dimension limit.
DEFAULT_CUDNN_VERSION = 92000

_ARCH = re.compile(r"sm(\d+)(\d)")


@dataclass(frozen=True)
class Target:
    """The device whose kernels a meta analysis follows.

    ``device_type`` is "cpu" or "cuda"; ``arch`` is None for the CPU and the compute
    capability for CUDA ("sm90", "sm80", "sm89"); ``cudnn_version`` is the runtime cuDNN
    the CUDA rules assume (None for the CPU); ``name`` is how it was asked for.
    """

    device_type: str
    arch: str | None = None
    name: str = ""
    cudnn_version: int | None = None

    def __post_init__(self) -> None:
        if self.device_type == "cpu":
            if self.arch is not None or self.cudnn_version is not None:
                raise InvalidInputError("a cpu target has no arch and no cudnn_version")
        elif self.device_type == "cuda":
            if self.arch is None or _ARCH.fullmatch(self.arch) is None:
                raise InvalidInputError(
                    f"a cuda target needs arch='sm<major><minor>' (e.g. 'sm90'), got {self.arch!r}"
                )
            if self.cudnn_version is None:
                object.__setattr__(self, "cudnn_version", DEFAULT_CUDNN_VERSION)
        else:
            raise InvalidInputError(
                f"Target.device_type must be 'cpu' or 'cuda', got {self.device_type!r}"
            )
        if not self.name:
            object.__setattr__(self, "name", self.device_type)

    @property
    def capability(self) -> tuple[int, int] | None:
        """The CUDA compute capability, (9, 0) for "sm90"; None for the CPU."""
        if self.arch is None:
            return None
        m = _ARCH.fullmatch(self.arch)
        assert m is not None  # checked in __post_init__
        return int(m.group(1)), int(m.group(2))

    def describe(self) -> str:
        """ "cpu", "cuda (sm90)" or "h100 (cuda sm90)": for a profile's footer."""
        if self.device_type == "cpu":
            return "cpu"
        if self.name == "cuda":
            return f"cuda ({self.arch})"
        return f"{self.name} (cuda {self.arch})"


def _device_type_and_arch(spec: DeviceSpec) -> tuple[str, str | None]:
    return ("cpu", None) if spec.kind == "cpu" else ("cuda", spec.arch)


def spec_target(spec: DeviceSpec) -> Target | None:
    """The Target whose kernels a meta analysis for ``spec`` follows: the CPU's, or a
    GPU's by its ``arch`` ("sm90"), a custom spec's too; None for a GPU spec whose arch
    names no compute capability (the CPU's kernels are then analysed)."""
    device_type, arch = _device_type_and_arch(spec)
    if device_type == "cuda" and (arch is None or _ARCH.fullmatch(arch) is None):
        return None
    return Target(device_type, arch, spec.name)


#: Every name ``parse_target`` knows, with what it stands for: "cpu"; "cuda", today's
#: data-centre GPUs, whose rules are sm90's; and every name and alias of a built-in
#: device spec (``hardware.BY_NAME``, the table ``ls.device_spec`` reads), as its arch.
KNOWN_TARGETS: dict[str, tuple[str, str | None]] = {
    "cpu": ("cpu", None),
    "cuda": ("cuda", "sm90"),
    **{name: _device_type_and_arch(spec) for name, spec in BY_NAME.items()},
}


def parse_target(value: str) -> Target:
    """The Target a name stands for: "cpu", "cuda" (sm90), or a built-in device spec's
    name or alias ("h100", "h100-sxm5", "a100", "l4", "rtx-4090", ...: sm90, sm80 or
    sm89, as ``ls.device_spec`` names them), a registered one's, or a device profile's
    path (``*.json``: its arch); case and surrounding blanks do not matter. Anything
    else raises ``InvalidInputError`` naming the known ones."""
    if not isinstance(value, str):
        raise InvalidInputError(f"target must be a string, got {type(value).__name__}")
    key = value.strip().lower()
    known = KNOWN_TARGETS.get(key)
    if known is None and (is_profile_path(key) or key in BY_NAME):
        # a device profile's path, or a spec registered after import (register_device)
        spec = load_device(value.strip()) if is_profile_path(key) else BY_NAME[key]
        known, key = _device_type_and_arch(spec), spec.name
    if known is None:
        raise InvalidInputError(
            f"unknown target {value!r}; known targets: {', '.join(KNOWN_TARGETS)}"
        )
    device_type, arch = known
    return Target(device_type, arch, key)


__all__ = ["DEFAULT_CUDNN_VERSION", "KNOWN_TARGETS", "Target", "parse_target", "spec_target"]
