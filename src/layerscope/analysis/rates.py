"""Achievable rates per kernel class on a device: what a plan's predicted step time
prices each kernel at (``docs/plan.md``, "The predicted step time").

The roofline (``analysis.roofline``) prices work at the datasheet's peak; real kernels
reach a fraction of it that depends on the kernel:

- **matmuls**: an achievable fraction of the dtype's peak for a large matmul, times the
  tile and wave quantisation of its output over the device's SMs: a (B, M, N) output in
  tiles of (tm, tn) is ``ceil(M / tm) * ceil(N / tn) * B`` tiles, run in waves of one
  tile per SM; the useful share is ``B * M * N / (waves * SMs * tm * tn)``, the best over
  the device's tiles (the library picks a tile per shape);
- **attention kernels** (``scaled_dot_product_attention``'s fused backends: flash,
  efficient, cudnn) by direction, causality, head dim and sequence length: a measured
  fraction of the dtype's peak, interpolated in log2 of the sequence length (the nearest
  head dim measured; the math backend is its matmuls and softmax, priced as those);
- **memory-bound kernels** at an achievable fraction of the bandwidth;
- a **launch cost** per kernel, eager.

A kernel's predicted time is ``max(flops / achievable FLOP/s, bytes / achievable
bandwidth) + launch``: never below its roofline time, as every fraction is at most 1.

``rates_of(spec)`` gives a device's rates: the spec's own (``DeviceSpec.rates``, from a
device profile ``layerscope calibrate`` wrote), else the built-in ones for the H100,
H200 and A100 below (each figure with its source), else generic defaults, marked
uncalibrated.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from layerscope.errors import InvalidInputError
from layerscope.hardware import ALIASES, ATTENTION_KINDS, DIRECTIONS, DeviceSpec
from layerscope.validate import check_keys, check_number

__all__ = [
    "ATTENTION_KINDS",
    "DIRECTIONS",
    "GENERIC",
    "PROFILES",
    "Rates",
    "builtin_rates",
    "rates_of",
]

#: (seq, fraction of the peak) points of one curve.
Curve = tuple[tuple[int, float], ...]
#: head dim -> curve
ByHeadDim = Mapping[int, Curve]
#: kind -> direction -> "causal"/"full" -> head dim -> curve
AttentionTable = Mapping[str, Mapping[str, Mapping[str, ByHeadDim]]]

# ---- stated defaults (no published source found: "uncalibrated") -------------------
#: A large matmul's share of the datasheet peak: layerscope's stated default.
GENERIC_MATMUL = 0.8
#: A streaming kernel's share of the datasheet bandwidth: layerscope's stated default.
GENERIC_BANDWIDTH = 0.9
#: Seconds per eager kernel launch: layerscope's stated default.
GENERIC_LAUNCH = 4e-6
#: How many times as long compute takes while a collective runs beside it (the two share
#: the SMs and memory bandwidth): 1.189, the average computational slowdown of
#: overlapped compute and communication Lee et al. measured over GPT and Llama training
#: on A100, H100, MI250 and MI210 ("Characterizing Compute-Communication Overlap in
#: GPU-Accelerated Distributed Deep Learning", arXiv 2507.03114, 2025: 18.9 % on
#: average, at most 40 %); NCCL issue 1428 reports 1.76 for a GEMM beside an all-gather
#: on an A100.
GENERIC_OVERLAP = 1.189
#: The output tiles a library picks from on sm80/sm90 (CUTLASS's usual threadblock
#: shapes; an assumption, stated).
TILES: tuple[tuple[int, int], ...] = ((128, 128), (128, 256), (256, 128))


@dataclass(frozen=True)
class Rates:
    """A device's achievable rates by kernel class (module docstring). Fractions are of
    the datasheet's peak FLOP/s (for the dtype computed in) and bandwidth."""

    name: str
    #: measured on the device by ``layerscope calibrate`` (else derived or stated)
    calibrated: bool = False
    matmul: float = GENERIC_MATMUL
    #: streaming multiprocessors; None: no wave quantisation
    sms: int | None = None
    tiles: tuple[tuple[int, int], ...] = TILES
    bandwidth: float = GENERIC_BANDWIDTH
    launch: float = GENERIC_LAUNCH
    #: compute beside a collective takes this many times as long (``GENERIC_OVERLAP``)
    overlap: float = GENERIC_OVERLAP
    attention: AttentionTable = field(default_factory=dict)
    sources: tuple[str, ...] = ()
    notes: str = ""

    # ---- the rates -------------------------------------------------------------------
    def quantisation(self, m: int, n: int, batch: int = 1) -> float:
        """The useful share of a (batch, m, n) output's tiles and waves (1 without SMs)."""
        if not self.sms or m <= 0 or n <= 0 or batch <= 0:
            return 1.0
        best = 0.0
        for tm, tn in self.tiles:
            tiles = math.ceil(m / tm) * math.ceil(n / tn) * batch
            waves = math.ceil(tiles / self.sms)
            best = max(best, batch * m * n / (waves * self.sms * tm * tn))
        return best

    def matmul_fraction(self, m: int | None, n: int | None, batch: int = 1) -> float:
        """The fraction of the peak a matmul of output (batch, m, n) reaches (shape not
        known: the large-matmul fraction)."""
        if m is None or n is None:
            return self.matmul
        return self.matmul * self.quantisation(m, n, batch)

    def attention_fraction(
        self, kind: str, direction: str, head_dim: int, seq: int, causal: bool
    ) -> float:
        """The fraction of the peak an attention kernel reaches; a kind without a table
        takes flash's, causal without a table the full table's, no table at all the
        large-matmul fraction."""
        table = self.attention.get(kind) or self.attention.get("flash")
        by_dir = table.get(direction) if table else None
        if not by_dir:
            return self.matmul
        by_head = by_dir.get("causal" if causal else "full") or by_dir.get("full")
        if not by_head:
            return self.matmul
        dims = sorted(by_head)
        nearest = min(dims, key=lambda d: (abs(math.log2(d) - math.log2(max(head_dim, 1))), d))
        return _interpolate(by_head[nearest], seq)

    # ---- files -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "calibrated": self.calibrated,
            "matmul": self.matmul,
            "sms": self.sms,
            "tiles": [list(t) for t in self.tiles],
            "bandwidth": self.bandwidth,
            "launch": self.launch,
            "overlap": self.overlap,
            "attention": {
                kind: {
                    d: {c: {str(h): [list(p) for p in curve] for h, curve in by_h.items()}
                        for c, by_h in by_c.items()}
                    for d, by_c in by_dir.items()
                }
                for kind, by_dir in self.attention.items()
            },
            "sources": list(self.sources),
            "notes": self.notes,
        }  # fmt: skip

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], name: str = "") -> Rates:
        """Rates from ``to_dict``'s form (a device profile's ``rates``); fractions must be
        in (0, 1]."""
        check_keys("the rates", data, list(cls.__dataclass_fields__))
        frac = {k: _fraction(k, data[k]) for k in ("matmul", "bandwidth") if k in data}
        sms = data.get("sms")
        if sms is not None:
            sms = int(check_number("rates sms", sms, positive=True))
        tiles = _tiles(data.get("tiles", TILES))
        return cls(
            name=str(data.get("name", name)),
            calibrated=bool(data.get("calibrated", False)),
            sms=sms,
            tiles=tiles,
            launch=check_number("rates launch", data.get("launch", GENERIC_LAUNCH), low=0.0),
            overlap=_overlap(data.get("overlap", GENERIC_OVERLAP)),
            attention=_attention_table(data.get("attention", {})),
            sources=tuple(str(s) for s in data.get("sources", ())),
            notes=str(data.get("notes", "")),
            **frac,
        )


def _tiles(value: Any) -> tuple[tuple[int, int], ...]:
    """``tiles``: one or more (rows, columns) output tiles, each a positive whole number."""
    ok = isinstance(value, list | tuple) and len(value) > 0
    pairs: list[tuple[int, int]] = []
    for t in value if ok else ():
        if not (isinstance(t, list | tuple) and len(t) == 2):
            ok = False
            break
        sizes = [check_number("rates tiles", d, positive=True) for d in t]
        if not all(float(d).is_integer() for d in sizes):
            ok = False
            break
        pairs.append((int(sizes[0]), int(sizes[1])))
    if not ok:
        raise InvalidInputError(
            f"rates tiles: a list of [rows, columns] output tiles of whole positive sizes, "
            f"got {value!r}"
        )
    return tuple(pairs)


def _overlap(value: Any) -> float:
    number = check_number("rates overlap", value, positive=True)
    if number < 1:
        raise InvalidInputError(
            f"rates overlap={number}: compute beside a collective takes at least as long "
            "as alone (1 or more)"
        )
    return float(number)


def _fraction(name: str, value: Any) -> float:
    number = check_number(f"rates {name}", value, positive=True)
    if number > 1:
        raise InvalidInputError(f"rates {name} is a fraction of the peak in (0, 1], got {value}")
    return number


def _attention_table(data: Any) -> AttentionTable:
    """The attention table of a mapping, every curve's points sorted by sequence length."""
    if not isinstance(data, Mapping):
        raise InvalidInputError("rates attention: a mapping kind -> direction -> mask -> curve")
    out: dict[str, dict[str, dict[str, dict[int, Curve]]]] = {}
    for kind, by_dir in data.items():
        for direction, by_mask in by_dir.items():
            for mask, by_head in by_mask.items():
                for head, points in by_head.items():
                    curve = tuple(
                        sorted((int(s), _fraction(f"attention {kind}", f)) for s, f in points)
                    )
                    if not curve:
                        raise InvalidInputError(f"rates attention {kind}: an empty curve")
                    out.setdefault(str(kind), {}).setdefault(str(direction), {}).setdefault(
                        str(mask), {}
                    )[int(head)] = curve
    return out


def _interpolate(curve: Curve, seq: int) -> float:
    """The curve's fraction at ``seq``: linear in log2(seq) between points, flat beyond."""
    seqs = [s for s, _ in curve]
    if seq <= seqs[0]:
        return curve[0][1]
    if seq >= seqs[-1]:
        return curve[-1][1]
    i = bisect.bisect_right(seqs, seq)
    (s0, f0), (s1, f1) = curve[i - 1], curve[i]
    t = (math.log2(seq) - math.log2(s0)) / (math.log2(s1) - math.log2(s0))
    return f0 + t * (f1 - f0)


# ---- built-in rates: published kernel benchmarks --------------------------------------
_SEQS = (512, 1024, 2048, 4096, 8192, 16384)
#: BF16 dense peak the H100 SXM5 figures below are shares of (``hardware``'s h100).
_H100_PEAK = 989.4
_FA3 = (
    "Shah et al., FlashAttention-3 (arXiv:2407.08608, 2024), Figures 5-6: attention "
    "forward and backward TFLOP/s on an H100 80GB SXM5, BF16, by sequence length "
    "(FlashAttention-2 and cuDNN bars; causal FLOPs counted as half)"
)
_FA2 = (
    "Dao, FlashAttention-2 (arXiv:2307.08691, 2023), section 4.1: on an A100 the forward "
    "reaches up to 73% and the backward up to 63% of the peak"
)
_SM_H100 = "NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022): 132 SMs (SXM5), 114 (PCIe)"
_SM_A100 = "NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020): 108 SMs"
_STATED = (
    f"matmul share {GENERIC_MATMUL}, bandwidth share {GENERIC_BANDWIDTH} and launch "
    f"{GENERIC_LAUNCH * 1e6:g} us are layerscope's stated defaults"
)
_STATED_BW = (
    f"bandwidth share {GENERIC_BANDWIDTH} and launch {GENERIC_LAUNCH * 1e6:g} us are "
    "layerscope's stated defaults"
)
_MAMF = (
    "Bekman, Machine Learning Engineering (github.com/stas00/ml-engineering), "
    "compute/accelerator, 'Maximum Achievable Matmul FLOPS comparison table', BF16: "
    "A100 SXM 271.2 of 312 TFLOP/s (86.9%), H100 SXM 794.5 of 989 (80.3%): the best "
    "torch.mm over a search of shapes"
)
#: A large matmul's share of the BF16 peak from that table.
_MAMF_H100, _MAMF_A100 = 794.5 / 989, 271.2 / 312
_XLA = (
    "OpenXLA, xla/service/gpu/model/matmul_interpolator_data.h (2025), measured sm_90 "
    "bf16 matmuls: 783 to 808 TFLOP/s (0.79 to 0.82 of 989) for batch 1 to 4 of "
    "4096 x 4096 x 4096, agreeing with MAMF's H100 share"
)

#: TFLOP/s read off FlashAttention-3's Figure 5 (forward) and 6 (backward), H100 SXM5,
#: at _SEQS: (kind, direction, mask, head dim) -> six values. FlashAttention-2 is what
#: torch's flash backend runs. The forward at 512 tokens, hd 128, cuDNN: 497.
_H100_TFLOPS: dict[tuple[str, str, str, int], tuple[float, ...]] = {
    ("flash", "forward", "full", 128): (309, 350, 362, 368, 370, 370),
    ("flash", "forward", "causal", 128): (191, 260, 298, 319, 333, 335),
    ("flash", "forward", "full", 256): (275, 313, 321, 323, 324, 326),
    ("flash", "forward", "causal", 256): (208, 251, 278, 293, 297, 298),
    ("flash", "backward", "full", 128): (214, 260, 291, 310, 318, 322),
    ("cudnn", "forward", "full", 128): (497, 574, 617, 609, 600, 595),
    ("cudnn", "forward", "causal", 128): (315, 410, 484, 518, 529, 539),
    ("cudnn", "forward", "full", 256): (470, 546, 580, 581, 580, 581),
    ("cudnn", "forward", "causal", 256): (308, 391, 450, 483, 497, 509),
    ("cudnn", "backward", "full", 128): (305, 408, 465, 499, 518, 516),
}


def _curve(values: Sequence[float], scale: float = 1.0) -> Curve:
    return tuple((s, min(1.0, v * scale)) for s, v in zip(_SEQS, values, strict=True))


def _h100_attention() -> AttentionTable:
    """FlashAttention-3's figures as shares of the BF16 peak; a causal backward (not in
    the figures) as the full backward times the forward's causal/full ratio per length."""
    out: dict[str, dict[str, dict[str, dict[int, Curve]]]] = {}
    for (kind, direction, mask, head), values in _H100_TFLOPS.items():
        by_mask = out.setdefault(kind, {}).setdefault(direction, {}).setdefault(mask, {})
        by_mask[head] = _curve(values, 1 / _H100_PEAK)
    for kind in ("flash", "cudnn"):
        full, causal = (
            _H100_TFLOPS[kind, "forward", "full", 128],
            _H100_TFLOPS[kind, "forward", "causal", 128],
        )
        back = _H100_TFLOPS[kind, "backward", "full", 128]
        derived = [b * c / f for b, c, f in zip(back, causal, full, strict=True)]
        out[kind]["backward"]["causal"] = {128: _curve(derived, 1 / _H100_PEAK)}
    # the efficient (CUTLASS) kernel has no H100 figure there: flash's, stated
    out["efficient"] = out["flash"]
    return out


def _a100_attention() -> AttentionTable:
    """The H100 FlashAttention-2 curves' shapes, scaled so the longest length reaches
    FlashAttention-2's A100 shares (73% forward, 63% backward); cuDNN and the
    efficient kernel as flash (no A100 figure found)."""
    h100 = _h100_attention()["flash"]
    top = {"forward": 0.73, "backward": 0.63}
    flash = {
        d: {
            m: {h: tuple((s, min(1.0, f * top[d] / curve[-1][1])) for s, f in curve)
                for h, curve in by_h.items()}
            for m, by_h in by_m.items()
        }
        for d, by_m in h100.items()
    }  # fmt: skip
    return {"flash": flash, "efficient": flash, "cudnn": flash}


def _builtin() -> dict[str, Rates]:
    h100_attention = _h100_attention()
    a100_attention = _a100_attention()
    derived_h100 = (_MAMF, _XLA, _FA3, _SM_H100, _STATED_BW)
    a100 = (_MAMF, _FA2, _FA3, _SM_A100, _STATED_BW)
    published = "matmul and attention from published kernel benchmarks; "
    return {
        "h100": Rates("h100", matmul=_MAMF_H100, sms=132, attention=h100_attention,
                      sources=derived_h100, notes=published + _STATED_BW),
        "h100-pcie": Rates("h100-pcie", sms=114, attention=h100_attention,
                           sources=(_FA3, _SM_H100, _STATED),
                           notes="attention shares of the H100 SXM5's; " + _STATED),
        "h200": Rates("h200", matmul=_MAMF_H100, sms=132, attention=h100_attention,
                      sources=(*derived_h100, "H200: the H100 SXM5's SMs and clocks (its "
                               "datasheet's compute figures are the H100 SXM's)"),
                      notes="the H100 SXM's published matmul and attention shares; "
                      + _STATED_BW),
        "a100-40gb": Rates("a100-40gb", matmul=_MAMF_A100, sms=108,
                           attention=a100_attention, sources=a100,
                           notes=published + _STATED_BW),
        "a100-80gb": Rates("a100-80gb", matmul=_MAMF_A100, sms=108,
                           attention=a100_attention, sources=a100,
                           notes=published + _STATED_BW),
    }  # fmt: skip


_BUILTIN: dict[str, Rates] = {}


#: Measured device profiles shipped with layerscope (``bench/calibrate_profiles.py`` on a
#: GPU writes them): ``<spec name>.json``, whose rates replace the derived ones.
PROFILES = Path(__file__).resolve().parent / "profiles"


def _measured() -> dict[str, Rates]:
    """The shipped measured rates by spec name (none where no file is shipped)."""
    found: dict[str, Rates] = {}
    for path in sorted(PROFILES.glob("*.json")) if PROFILES.is_dir() else ():
        data = json.loads(path.read_text(encoding="utf-8"))
        found[path.stem] = Rates.from_mapping(data["rates"], path.stem)
    return found


def builtin_rates() -> dict[str, Rates]:
    """The built-in rates by device spec name (built once): measured where a profile is
    shipped, else derived from published benchmarks and stated defaults."""
    if not _BUILTIN:
        _BUILTIN.update(_builtin())
        _BUILTIN.update(_measured())
    return _BUILTIN


#: Generic rates for a device without its own: the stated defaults and H100's attention
#: shares, no wave quantisation.
GENERIC = "generic"


def rates_of(spec: DeviceSpec) -> Rates:
    """The rates a plan prices ``spec``'s kernels at: the spec's own (a device profile),
    the built-in ones by its name, else generic ones (``calibrated`` False and ``name``
    ``"generic"``: the plan's notes say so)."""
    own = getattr(spec, "rates", None)
    if own:
        return Rates.from_mapping(own, spec.name)
    table = builtin_rates()
    found = table.get(ALIASES.get(spec.name, spec.name))
    if found is not None:
        return found
    return Rates(GENERIC, attention=table["h100"].attention, notes=_STATED,
                 sources=(_STATED, _FA3))  # fmt: skip
