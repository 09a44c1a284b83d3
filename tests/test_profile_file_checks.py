"""A device profile file's mistakes are refused, naming the file and the key path: an
unknown ``peak_flops`` dtype, an unknown attention kind, direction or mask, a sequence
length below 1, and a GPU profile without its compute capability (``arch``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import layerscope as ls
from layerscope.errors import InvalidInputError

CURVE = {"full": {"128": [[512, 0.3]]}}


def _refusal(tmp_path: Path, **changes: Any) -> str:
    data = ls.device_spec("h100").to_dict() | {"name": "mine"}
    data |= changes
    data = {k: v for k, v in data.items() if v is not None}
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(InvalidInputError) as info:
        ls.device_spec(str(path))
    return str(info.value).removeprefix(f"the device profile {str(path)!r}: ")


def test_an_unknown_peak_dtype_is_refused(tmp_path: Path) -> None:
    assert _refusal(tmp_path, peak_flops={"bf16": 1e15, "float32": 1e14}) == (
        "unknown dtype 'bf16' in peak_flops (did you mean 'bfloat16'?); known: float64, "
        "float32, tfloat32, bfloat16, float16, float8_e4m3fn, float8_e5m2, int8, or another "
        "torch dtype's name"
    )


def test_an_unknown_attention_direction_kind_or_mask_is_refused(tmp_path: Path) -> None:
    rates = {"attention": {"flash": {"forwards": CURVE}}}
    assert _refusal(tmp_path, rates=rates) == (
        "unknown key 'forwards' in rates.attention.flash (did you mean 'forward'?); known: "
        "forward, backward"
    )
    rates = {"attention": {"flsh": {"forward": CURVE}}}
    assert _refusal(tmp_path, rates=rates) == (
        "unknown key 'flsh' in rates.attention (did you mean 'flash'?); known: flash, "
        "efficient, cudnn"
    )
    rates = {"attention": {"flash": {"forward": {"causl": CURVE["full"]}}}}
    assert _refusal(tmp_path, rates=rates) == (
        "unknown key 'causl' in rates.attention.flash.forward (did you mean 'causal'?); "
        "known: causal, full"
    )


def test_a_negative_sequence_length_is_refused(tmp_path: Path) -> None:
    rates = {"attention": {"flash": {"forward": {"full": {"128": [[-512, 0.3]]}}}}}
    assert _refusal(tmp_path, rates=rates) == (
        "rates.attention.flash.forward.full.128[0] must be a [seq, fraction] point, got "
        "[-512, 0.3] (seq is a sequence length: a whole number >= 1)"
    )


def test_a_gpu_profile_without_its_arch_is_refused(tmp_path: Path) -> None:
    said = (
        "a GPU profile needs its compute capability as arch, e.g. 'sm90' (H100, H200), "
        "'sm80' (A100) or 'sm89' (L4, L40S, RTX 4090), got {} (a plan follows that GPU's "
        "kernels)"
    )
    assert _refusal(tmp_path, arch=None) == said.format("no arch")
    assert _refusal(tmp_path, arch="hopper") == said.format("arch 'hopper'")


def test_a_top_level_mistake_names_the_file_too(tmp_path: Path) -> None:
    assert _refusal(tmp_path, bandwith=1.0).startswith(
        "unknown key 'bandwith' in the device spec (did you mean 'bandwidth'?); known: name, "
    )


def test_a_well_formed_profile_loads(tmp_path: Path) -> None:
    data = ls.device_spec("h100").to_dict() | {"name": "mine"}
    data["rates"] = {"attention": {"flash": {"forward": CURVE}}}
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    assert ls.device_spec(str(path)).arch == "sm90"
