"""Device specs, the roofline per module and ``ls.estimate``, with exact numbers.

A custom spec with round numbers keeps the arithmetic by hand: peak 1,000 FLOP/s,
bandwidth 100 B/s, ridge 10 FLOP/B.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import layerscope as ls
from layerscope.analysis.catalog import Values
from layerscope.analysis.roofline import device_note, roof_of, target_spec
from layerscope.export.html import to_html_text
from layerscope.hardware import SPECS, calibrate_cpu, spec_table_markdown

SPEC = {"name": "toy", "bandwidth": 100, "peak_flops": {"float32": 1000}}
DOCS = Path(__file__).resolve().parent.parent / "docs" / "roofline.md"


def _mlp_profile(backward: bool = False) -> ls.Profile:
    """Linear(8, 16) - ReLU - Linear(16, 4) on (2, 8). Forward, per module:
    Linear 0: 2*2*8*16 + 2*16 = 544 FLOPs; bytes: reads bias 16, x 2*8, W 16*8 and
    writes 2*16 floats = (16 + 16 + 128 + 32) * 4 = 768 B.
    ReLU: 32 FLOPs; reads and writes 32 floats = 256 B.
    Linear 2: 2*2*16*4 + 2*4 = 264 FLOPs; (4 + 32 + 64 + 8) * 4 = 432 B."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    return ls.profile(model, torch.randn(2, 8), backward=backward)


def test_estimate_per_module_and_whole_model() -> None:
    est = ls.estimate(_mlp_profile(), SPEC)
    assert (est.device, est.dtype, est.peak, est.bandwidth) == ("toy", "float32", 1000, 100)
    first = est.module("0")
    assert (first.flops, first.bytes) == (544, 768)
    # max(544 / 1000, 768 / 100) = 7.68 s, memory-bound; intensity 544 / 768
    assert first.time == pytest.approx(7.68) and first.bound == "memory"
    assert first.intensity == pytest.approx(544 / 768)
    assert est.module("1").time == pytest.approx(2.56)  # max(0.032, 256 / 100)
    assert est.module("2").time == pytest.approx(4.32)  # max(0.264, 432 / 100)
    # the model: the roof of its own work (none) plus its children's: 7.68 + 2.56 + 4.32
    assert est.model.time == pytest.approx(14.56)
    assert est.model.measured is None and est.model.efficiency is None
    text = est.render(width=80)
    assert "lower bound" in text and "14.6 s" in text and "Fwd min" in text


def test_compute_bound_work_and_the_ridge() -> None:
    roof = roof_of(SPEC)
    assert roof.ridge == 10
    assert roof.bound(2000, 100) == "compute" and roof.time(2000, 100) == 2.0
    assert roof.bound(0, 0) == ""


def test_backward_estimate() -> None:
    est = ls.estimate(_mlp_profile(backward=True), SPEC)
    relu = est.module("1")
    # threshold_backward reads the gradient and the output and writes the input
    # gradient: 3 * 32 floats = 384 B, 32 FLOPs: max(0.032, 3.84)
    assert relu.backward_bytes == 384 and relu.backward_time == pytest.approx(3.84)


def test_efficiency_and_lost_time_from_measured_times() -> None:
    prof = _mlp_profile()
    for node in prof.root.walk():  # a made-up timing pass: 10 s per call for everyone
        node.metrics["forward_time"] = 10.0
        node.self_metrics["forward_time"] = 10.0 if node.path else 0.0
    values = Values(prof, roof=roof_of(SPEC))
    first = prof.node("0")
    assert values.get(first, "efficiency") == pytest.approx(76.8)  # 7.68 / 10
    assert values.get(first, "lost_time") == pytest.approx(2.32)
    assert values.get(first, "roofline_time") == pytest.approx(7.68)
    assert values.get(prof.root, "roofline_time") == pytest.approx(14.56)
    assert values.get(prof.root, "self_roofline_time") == 0.0
    assert values.bound(first, "bound") == "memory"
    assert values.get(first, "intensity") == pytest.approx(544 / 768)
    est = ls.estimate(prof, SPEC)
    assert est.module("0").efficiency == pytest.approx(0.768)


def test_roofline_view_and_columns() -> None:
    prof = ls.profile(
        nn.Sequential(nn.Linear(64, 64), nn.ReLU()),
        torch.randn(8, 64),
        timing={"repeats": 2, "warmup": 0, "progress": False},
    )
    text = prof.render(view="roofline", device="h100", width=120)
    assert text.startswith("Roofline on h100 (float32: peak 495 TFLOP/s, 3.35 TB/s")
    for header in ("FLOP/B", "Bound", "Roofline", "Measured", "Eff", "Lost"):
        assert header in text
    table = prof.render(columns=["flops", "intensity", "roofline_time"], device="a100")
    assert "FLOP/B" in table and "Roofline" in table
    with pytest.raises(ls.InvalidInputError, match="needs a device spec"):
        prof.render(view="roofline")
    with pytest.raises(ls.InvalidInputError, match="did you mean h100"):
        prof.render(view="roofline", device="h10")


def test_estimate_needs_bytes() -> None:
    torch.manual_seed(0)
    prof = ls.profile(nn.Linear(4, 4), torch.randn(2, 4), count_bytes=False)
    with pytest.raises(ls.InvalidInputError, match="no bytes moved"):
        ls.estimate(prof, "h100")


def test_estimate_of_a_loaded_profile(tmp_path: Path) -> None:
    prof = _mlp_profile()
    prof.save(tmp_path / "p.json")
    again = ls.estimate(ls.load(tmp_path / "p.json"), SPEC)
    assert again.model.time == pytest.approx(14.56)


def _three_linears() -> ls.Profile:
    """Three Linear(8, 8) on (2, 8), a run the views fold to ``0–2 ×3``. Each: 2*2*8*8 +
    2*8 = 272 FLOPs; reads bias 8, x 16, W 64 and writes 16 floats: 104 * 4 = 416 B."""
    torch.manual_seed(0)
    return ls.profile(nn.Sequential(*[nn.Linear(8, 8) for _ in range(3)]), torch.randn(2, 8))


def test_estimate_folds_and_takes_the_view_options() -> None:
    est = ls.estimate(_three_linears(), SPEC)
    # each Linear max(272 / 1000, 416 / 100) = 4.16 s; three: 816 FLOPs, 1,248 B
    # (1.22 KiB), 12.48 s; intensity 272 / 416 = 0.654
    assert est.render(width=80).splitlines() == [
        "Roofline on toy (float32: peak 1 KFLOP/s, 100B/s; ridge 10 FLOP/B)",
        "",
        "Estimated time (a lower bound: no kernel does the work faster): forward 12.5 s.",
        "",
        "Module                 FLOPs      Bytes   FLOP/B   Bound    Fwd min",
        "───────────────────────────────────────────────────────────────────",
        "Sequential               816   1.22 KiB    0.654   memory    12.5 s",
        "└─ (1) 0–2 Linear ×3     816   1.22 KiB    0.654   memory    12.5 s",
        "The profile was analysed on cpu; the roofline is toy's, so the bytes moved are",
        "  those of cpu's kernels.",
    ]
    text = est.render(width=80, fold=False, columns=["roofline_time"], top=1, max_depth=1)
    assert text.splitlines()[4:] == [
        "Module            Fwd min",
        "─────────────────────────",
        "Sequential         12.5 s",
        "└─ (1) 0 Linear    4.16 s",
        "Showing 2 of 4 rows (max_depth 1; top 1 by FLOPs).",
        "The profile was analysed on cpu; the roofline is toy's, so the bytes moved are",
        "  those of cpu's kernels.",
    ]
    with pytest.raises(ls.InvalidInputError, match="device does not apply to an estimate"):
        est.render(device="h100")


def test_roofline_view_folds() -> None:
    prof = _three_linears()
    # on the H100 (float32 on TF32 tensor cores: 494.7 TFLOP/s, 3.35 TB/s): each Linear
    # max(272 / 494.7e12, 416 / 3.35e12) = 0.124 ns, memory-bound; three 0.373 ns
    assert prof.render(view="roofline", device="h100", width=80).splitlines()[2:6] == [
        "Module   Type     FLOPs      Bytes   FLOP/B   Bound    Roofline",
        "───────────────────────────────────────────────────────────────",
        "0–2 ×3   Linear     816   1.22 KiB    0.654   memory   0.373 ns",
        "Roofline time = max(FLOPs / peak, bytes / bandwidth): a lower bound on the time.",
    ]
    text = prof.render(view="roofline", device="h100", width=80, fold=False, top=2)
    assert text.splitlines()[2:8] == [
        "Module   Type     FLOPs   Bytes   FLOP/B   Bound    Roofline",
        "────────────────────────────────────────────────────────────",
        "0        Linear     272   416 B    0.654   memory   0.124 ns",
        "1        Linear     272   416 B    0.654   memory   0.124 ns",
        "Roofline time = max(FLOPs / peak, bytes / bandwidth): a lower bound on the time.",
        "Showing 2 of 3 rows (top 2 by Self roofline).",
    ]


def test_a_roofline_on_another_device_says_which_the_profile_measured() -> None:
    prof = _mlp_profile()
    assert device_note(prof, "cpu") is None
    untimed = (
        "The profile was analysed on cpu; the roofline is h100's, so the bytes moved are "
        "those of cpu's kernels."
    )
    assert device_note(prof, "h100") == untimed
    for node in prof.root.walk():  # a made-up timing pass
        node.metrics["forward_time"] = node.self_metrics["forward_time"] = 1.0
    timed = (
        "The profile was measured on cpu; the roofline is h100's, so Eff compares cpu's "
        "measured time with h100's lower bound."
    )
    assert device_note(prof, "h100") == timed
    text = prof.render(view="roofline", device="h100", width=200)
    assert timed in text.splitlines()
    # a column of the roofline in another view says it too; intensity alone needs no device
    assert timed in prof.render(columns=["efficiency"], device="h100", width=200).splitlines()
    assert timed not in prof.render(columns=["intensity"], device="h100", width=200)
    assert ls.estimate(prof, "h100").notices == [timed]
    # a GPU of a model layerscope cannot tell: no note against a GPU, one against the CPU
    prof.model["device"] = "cuda:0"
    assert device_note(prof, "h100") is None
    assert device_note(prof, "cpu") == (
        "The profile was measured on cuda:0; the roofline is cpu's, so Eff compares "
        "cuda:0's measured time with cpu's lower bound."
    )


def test_a_meta_analysis_estimated_on_another_target_says_which_it_followed() -> None:
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
    prof = ls.profile(model, torch.empty(2, 8, device="meta"), target="h100")
    assert prof.model["target"] == "h100 (cuda sm90)"
    assert ls.estimate(prof).notices == []  # the target's own spec
    assert ls.estimate(prof, "h100-sxm").notices == []  # an alias of it
    followed = (
        "The profile was analysed on meta following h100's kernels; the roofline is "
        "a100-80gb's, so the bytes moved are those of h100's kernels."
    )
    assert ls.estimate(prof, "a100").notices == [followed]
    assert followed in ls.estimate(prof, "a100").render(width=200).splitlines()
    prof.model["target"] = "cpu"  # a meta analysis follows the CPU's kernels by default
    assert device_note(prof, "h100") == (
        "The profile was analysed on meta following cpu's kernels; the roofline is "
        "h100's, so the bytes moved are those of cpu's kernels."
    )


# ---- the specs ---------------------------------------------------------------------
def test_builtin_specs_and_aliases() -> None:
    h100 = ls.device_spec("H100")
    assert h100 is ls.device_spec("h100-sxm") is SPECS["h100"]
    # the datasheet prints 1,979 TFLOP/s BF16 with sparsity: dense is half
    assert h100.peak("bfloat16") == 989.4e12
    assert h100.peak("float32") == 494.7e12  # TF32 tensor cores
    assert h100.peak("float32", tensor_cores=False) == 66.9e12
    assert h100.bandwidth == 3.35e12
    assert ls.device_spec("a100").name == "a100-80gb"
    assert ls.device_spec("a100-40gb").bandwidth == 1.555e12
    assert ls.device_spec("4090").name == "rtx4090"
    assert all(spec.sources for spec in SPECS.values())
    with pytest.raises(ls.InvalidInputError, match="no peak for 'float8'"):
        h100.peak("float8")


def test_custom_spec_validation() -> None:
    spec = ls.device_spec(SPEC)
    assert ls.DeviceSpec.from_mapping(spec.to_dict()) == spec
    with pytest.raises(ls.InvalidInputError, match="bandwidth must be a positive number"):
        ls.device_spec({**SPEC, "bandwidth": -1})
    with pytest.raises(ls.InvalidInputError, match="unknown key 'bandwith' in the device spec"):
        ls.device_spec({**SPEC, "bandwith": 1})
    with pytest.raises(ls.InvalidInputError, match="needs 'peak_flops'"):
        ls.device_spec({"name": "x", "bandwidth": 1})


def test_cpu_calibration_is_measured_once() -> None:
    cpu = ls.device_spec("cpu")
    assert cpu is calibrate_cpu()  # cached for this process and thread count
    assert cpu.kind == "cpu" and cpu.bandwidth > 0 and cpu.peak("float32") > 0


def test_docs_show_the_table_of_the_code() -> None:
    assert spec_table_markdown() in DOCS.read_text(encoding="utf-8")


def test_a_meta_target_is_the_default_device() -> None:
    """Analysed on meta for an H100, the estimate, the roofline view and columns and the
    HTML chart use the H100's spec unless told otherwise; a CPU-run profile has none."""
    model = ls.to_meta(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)))
    prof = ls.profile(model, torch.empty(2, 8, device="meta"), target="h100")
    assert prof.model["target"] == "h100 (cuda sm90)" and target_spec(prof) == "h100"
    est = ls.estimate(prof)
    assert est.device == "h100"
    # Linear 0: 768 B at 3.35 TB/s (memory-bound: 544 FLOPs at 495 TFLOP/s is shorter)
    assert est.module("0").time == pytest.approx(768 / 3.35e12)
    assert ls.estimate(prof, SPEC).device == "toy"
    assert prof.render(view="roofline", width=120).startswith("Roofline on h100 (float32")
    assert "Roofline" in prof.render(columns=["flops", "roofline_time"])
    assert '"roof":{"name":"h100"' in to_html_text(prof)
    assert target_spec(_mlp_profile()) is None
    cuda = ls.profile(model, torch.empty(2, 8, device="meta"), target="cuda")
    assert target_spec(cuda) is None  # "cuda (sm90)": rules, not a spec


@pytest.mark.parametrize(
    ("name", "spec"),
    [
        ("NVIDIA H100 80GB HBM3", "h100"),  # the SXM part
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H100 NVL", None),  # other memory and clocks: no built-in spec
        ("NVIDIA H200", "h200"),
        ("NVIDIA H200 NVL", None),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
        ("NVIDIA A100 80GB PCIe", None),
        ("NVIDIA L4", "l4"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA GeForce RTX 4090", "rtx4090"),
        ("Tesla T4", None),
    ],
)
def test_the_spec_of_a_gpu_by_its_name(name: str, spec: str | None) -> None:
    from layerscope.hardware import spec_of_gpu

    assert spec_of_gpu(name) == spec


def test_a_profile_from_a_known_gpu_takes_its_spec() -> None:
    """A profile that ran on a GPU with a built-in spec (``model["gpu"]``) gets that roof
    by default, and a note against another device's; the same profile from a GPU
    without one gets neither."""
    prof = ls.profile(nn.Linear(64, 64), torch.randn(8, 64))
    prof.model.update(device="cuda:0", gpu="NVIDIA H100 80GB HBM3")
    assert target_spec(prof) == "h100"
    assert ls.estimate(prof).device == "h100"
    assert "Roofline on h100 (float32" in prof.render(view="roofline", width=100)
    assert device_note(prof, "h100") is None
    assert device_note(prof, "a100-80gb") == (
        "The profile was analysed on NVIDIA H100 80GB HBM3; the roofline is a100-80gb's, "
        "so the bytes moved are those of NVIDIA H100 80GB HBM3's kernels."
    )
    prof.model["gpu"] = "Tesla T4"
    assert target_spec(prof) is None
    assert device_note(prof, "h100") is None  # a GPU it cannot tell from another


@pytest.mark.cuda
def test_a_cuda_profile_names_its_gpu() -> None:
    from layerscope.hardware import spec_of_gpu

    prof = ls.profile(nn.Linear(64, 64).cuda(), torch.randn(8, 64, device="cuda"))
    name = torch.cuda.get_device_name()
    assert prof.model["gpu"] == name
    assert target_spec(prof) == spec_of_gpu(name)


def test_the_cli_takes_the_roof_of_the_gpu_it_runs_on(monkeypatch: pytest.MonkeyPatch) -> None:
    from layerscope.cli.profile_cmd import gpu_spec

    assert gpu_spec("cpu") is None and gpu_spec(None) is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 PCIe")
    assert gpu_spec("cuda") == gpu_spec("cuda:1") == "h100-pcie"
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    assert gpu_spec("cuda") is None
