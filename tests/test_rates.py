"""Achievable rates (``analysis.rates``), device profiles as targets, and the plan's
predicted step time beside its roofline bound (``planning.kernels``, ``planning.build``)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import layerscope as ls
from helpers.models import meta_mixtral
from layerscope import hardware
from layerscope.analysis.rates import Rates, builtin_rates, rates_of
from layerscope.collect.target.spec import parse_target
from layerscope.errors import InvalidInputError
from layerscope.examples import EXAMPLES
from layerscope.hardware import device_spec, register_device
from layerscope.planning.kernels import _price, kernels_of

H100 = builtin_rates()["h100"]


# ---- the rates -------------------------------------------------------------------------
def test_tile_and_wave_quantisation_over_the_h100s_132_sms() -> None:
    # 4096 x 4096 in 128 x 128 tiles: 32 * 32 = 1024 tiles, ceil(1024 / 132) = 8 waves;
    # useful 4096^2 / (8 * 132 * 128 * 128) = 16777216 / 17301504 (128 x 256: 512 tiles,
    # 4 waves, the same share)
    assert H100.quantisation(4096, 4096) == pytest.approx(16777216 / 17301504)
    # a large matmul at 794.5 of 989 TFLOP/s (the MAMF table), times the quantisation
    assert H100.matmul_fraction(4096, 4096) == pytest.approx(794.5 / 989 * 16777216 / 17301504)
    # 1024 x 1024: 64 tiles of 128 x 128 in one wave: 1048576 / (132 * 16384)
    assert H100.quantisation(1024, 1024) == pytest.approx(1048576 / (132 * 16384))
    # a batch of 8 (1024, 1024) outputs: 512 tiles, 4 waves: 8 * 1048576 / (4 * 132 * 16384)
    assert H100.quantisation(1024, 1024, 8) == pytest.approx(8388608 / 8650752)
    assert H100.matmul_fraction(None, None) == 794.5 / 989  # no shape: the large share
    assert builtin_rates()["a100-80gb"].matmul == 271.2 / 312
    assert rates_of(device_spec("a100")).sms == 108


def test_attention_shares_interpolate_in_log_length() -> None:
    f = H100.attention_fraction
    # FlashAttention-3's Figure 5, FlashAttention-2 forward, hd 128: 350 at 1k, 362 at 2k
    assert f("flash", "forward", 128, 2048, False) == pytest.approx(362 / 989.4)
    assert f("flash", "forward", 128, 1448, False) == pytest.approx(
        (350 + (362 - 350) * (10.5 - 10)) / 989.4, rel=1e-3
    )  # log2(1448) = 10.4998...
    assert f("flash", "forward", 128, 100, False) == pytest.approx(309 / 989.4)  # flat below
    assert f("flash", "forward", 128, 1 << 15, False) == pytest.approx(370 / 989.4)  # above
    assert f("flash", "forward", 96, 4096, True) == pytest.approx(319 / 989.4)  # nearest: 128
    assert f("cudnn", "forward", 256, 8192, True) == pytest.approx(497 / 989.4)
    # the causal backward: the full backward x the forward's causal / full (512: 214 x 191 / 309)
    assert f("flash", "backward", 128, 512, True) == pytest.approx(214 * 191 / 309 / 989.4)
    assert f("efficient", "forward", 128, 2048, False) == f("flash", "forward", 128, 2048, False)
    # the A100: the curve's shape scaled to FlashAttention-2's 73% forward at the longest
    a100 = builtin_rates()["a100-80gb"]
    assert a100.attention_fraction("flash", "forward", 128, 16384, False) == pytest.approx(0.73)
    assert a100.attention_fraction("flash", "forward", 128, 512, False) == pytest.approx(
        309 / 370 * 0.73
    )


def test_rates_round_trip_and_refuse_a_share_above_one() -> None:
    again = Rates.from_mapping(json.loads(json.dumps(H100.to_dict())))
    assert again == H100
    with pytest.raises(InvalidInputError, match=r"rates matmul is a fraction of the peak"):
        Rates.from_mapping({"matmul": 1.2})
    # a negative launch would price kernels below their roofline; a tile of 0 divides by 0
    with pytest.raises(InvalidInputError, match=r"rates launch must be a number >= 0"):
        Rates.from_mapping({"launch": -1e-5})
    for tiles in ([[0, 128]], [], [[128]], [[128.5, 2]]):
        with pytest.raises(InvalidInputError, match="rates tiles"):
            Rates.from_mapping({"tiles": tiles})
    assert Rates.from_mapping({"tiles": [[128, 256]], "launch": 0}).tiles == ((128, 256),)
    generic = rates_of(device_spec("l4"))
    assert (generic.name, generic.calibrated, generic.sms) == ("generic", False, None)


def test_a_kernel_is_priced_at_its_share_plus_the_launch() -> None:
    rates = Rates(
        "toy",
        matmul=0.5,
        sms=4,
        tiles=((16, 16),),
        bandwidth=0.5,
        launch=1e-6,
        attention={"flash": {"forward": {"full": {64: ((256, 0.2), (1024, 0.4))}}}},
    )
    # attention at 512 tokens: halfway in log2 between 0.2 and 0.4 = 0.3 of 1e12 FLOP/s;
    # 3e6 FLOPs / 3e11 = 1e-5 s against 1e3 bytes / 5e8 = 2e-6 s, plus 1 us
    key: Any = ("a", "forward", "attention", ("flash", 64, 512, False))
    assert _price(rates, 1e12, 1e9, key, [1, 3_000_000, 1000, 0]) == pytest.approx(1.1e-5)
    # two memory-bound kernels: 4e6 bytes at half of 1e9 B/s = 8e-3 s, plus 2 launches
    key = ("a", "forward", "memory", ("add",))
    assert _price(rates, 1e12, 1e9, key, [2, 10, 4_000_000, 0]) == pytest.approx(8e-3 + 2e-6)


# ---- device profiles as targets --------------------------------------------------------
TOY: dict[str, Any] = {
    "name": "toy",
    "bandwidth": 1e12,
    "peak_flops": {"bfloat16": 1e12, "float32": 1e12},
    "arch": "sm90",
    "memory_bytes": 10**9,
    "rates": {"matmul": 0.5, "sms": 4, "tiles": [[16, 16]], "bandwidth": 0.5,
              "launch": 1e-6, "calibrated": True},
}  # fmt: skip


def test_a_device_profile_file_is_a_target(tmp_path: Path) -> None:
    path = tmp_path / "toy.json"
    path.write_text(json.dumps(TOY), encoding="utf-8")
    spec = device_spec(str(path))
    assert (spec.name, spec.rates and spec.rates["sms"]) == ("toy", 4)
    assert parse_target(str(path)).arch == "sm90"
    plan = ls.plan(nn.Linear(4, 4), torch.randn(2, 4), target=str(path), world_size=1)
    assert plan.rates == "toy" and plan.device["name"] == "toy"
    with pytest.raises(InvalidInputError, match="cannot read the device profile"):
        device_spec(str(tmp_path / "missing.json"))
    try:
        registered = register_device(str(path))
        assert device_spec("toy") is registered and parse_target("toy").arch == "sm90"
        with pytest.raises(InvalidInputError, match="is a built-in device"):
            register_device({**TOY, "name": "h100"})
    finally:  # the registry is the process's: leave it as it was
        hardware._REGISTERED.pop("toy", None)
        hardware._index()
    assert "toy" not in hardware.BY_NAME


# ---- the prediction ----------------------------------------------------------------------
def _toy_plan() -> ls.Plan:
    torch.manual_seed(0)
    model = nn.Linear(64, 32, bias=False)
    return ls.plan(model, torch.randn(8, 64), target=TOY, world_size=1, sharding="ddp",
                   precision="bf16")  # fmt: skip


def test_the_predicted_step_of_one_linear_by_hand() -> None:
    plan = _toy_plan()
    # forward mm: (8, 64) @ (64, 32): 2 * 8 * 64 * 32 = 32768 FLOPs, bytes
    # (8*64 + 64*32 + 8*32) * 2 = 5632. Output (8, 32) in 16 x 16 tiles: 1 * 2 = 2 tiles,
    # one wave of 4 SMs: share 0.5 * (8 * 32) / (4 * 256) = 0.125; 32768 / 1.25e11 =
    # 2.62144e-7 s (bytes: 5632 / 5e11 = 1.1e-8, less), plus 1 us
    forward = 32768 / (1e12 * 0.125) + 1e-6
    # backward: the weight's gradient, (32, 8) @ (8, 64): 32768 FLOPs, output (32, 64):
    # 2 * 4 = 8 tiles, 2 waves, share 0.5 * 2048 / (2 * 4 * 256) = 0.5: 6.5536e-8 s + 1 us
    backward = 32768 / (1e12 * 0.5) + 1e-6
    assert plan.time["compute"] == pytest.approx(forward + backward)
    # the optimizer (AdamW, bf16): 2 x (4096 params + 8196 states) + 4096 grads = 28680
    # bytes at half the bandwidth
    assert plan.time["optimizer"] == pytest.approx(28680 / 5e11)
    assert plan.step_time == pytest.approx(forward + backward + 28680 / 5e11)
    assert plan.kernels == 2  # the loss's kernels are outside the model
    # the bound: each phase max(32768 / 1e12, bytes / 1e12) = 3.2768e-8, the optimizer
    # 28680 / 1e12
    assert plan.step_time_bound == pytest.approx(2 * 3.2768e-8 + 28680 / 1e12)
    assert plan.time_bound == {"compute": pytest.approx(6.5536e-8), "recompute": 0,
                               "exposed_comm": 0.0, "optimizer": pytest.approx(2.868e-8),
                               "comm": 0.0}  # fmt: skip
    assert plan.mfu_counted == pytest.approx(65536 / (plan.step_time * 1e12))
    assert plan.mfu is None and plan.tokens_per_s is None  # no token ids


def test_a_given_profile_is_priced_per_module() -> None:
    torch.manual_seed(0)
    model = nn.Linear(64, 32, bias=False).to(torch.bfloat16)
    prof = ls.profile(model, torch.randn(8, 64, dtype=torch.bfloat16), backward=True,
                      memory=True)  # fmt: skip
    plan = ls.plan(prof, target=TOY, world_size=1, sharding="ddp", precision="bf16")
    m = prof.root.self_metrics
    # no kernel records: the module's own work at the matmul share and achievable bandwidth
    expected = sum(
        max(m[f] / 5e11, m[b] / 5e11)
        for f, b in (("flops", "bytes_accessed"), ("backward_flops", "backward_bytes_accessed"))
    )
    assert plan.time["compute"] == pytest.approx(expected)
    assert any("no kernel records" in n for n in plan.notes)
    assert plan.step_time_bound is not None and plan.step_time_bound <= plan.step_time


class _Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(64, 32)
        self.qkv = nn.Linear(32, 96, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        b, t = ids.shape
        q, k, v = self.qkv(self.embed(ids)).view(b, t, 3, 2, 16).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_attention_kernels_and_the_published_mfu() -> None:
    ids = torch.randint(0, 64, (2, 128))
    plan = ls.plan(_Attention(), ids, target="h100", world_size=1)
    rows = kernels_of(plan.analysis) if plan.analysis is not None else None
    assert rows is not None
    attention = {k[1]: (k[3], r) for k, r in rows.rows.items() if k[2] == "attention"}
    # sm90 steers sdpa to cuDNN for this shape: head dim 16, 128 queries, causal
    assert attention["forward"][0] == attention["backward"][0] == ("cudnn", 16, 128, True)
    # the convention's attention FLOPs: 12 B H Sq Sk D = 12 * 2 * 2 * 128 * 128 * 16
    palm = 12 * 2 * 2 * 128 * 128 * 16
    assert attention["forward"][1][3] == palm and attention["backward"][1][3] == 0
    n = 64 * 32 + 32 * 96  # trainable parameters
    assert plan.mfu_flops == 6 * n * 256 + palm
    assert plan.mfu == pytest.approx((6 * n * 256 + palm) / (plan.step_time * 989.4e12))
    assert plan.tokens_per_s == pytest.approx(256 / plan.step_time)
    assert plan.tokens_per_s_bound == pytest.approx(256 / (plan.step_time_bound or 1))


def test_a_mixture_of_experts_mfu_counts_its_active_parameters() -> None:
    """Mixtral, 2 layers of 4 experts, top 2, hidden 64, MLP 128, 4 heads of 16 (2 KV
    heads), vocabulary 256: 254,784 parameters, of which the experts' 2 x 4 x (256 x 64
    + 64 x 128) = 196,608; a token runs 2 of 4, so N = 254,784 - 196,608 / 2 = 156,480
    (as MoE runs publish MFU). 2 x 64 tokens; attention 12 B H Sq Sk D = 12 x 2 x 4 x 64
    x 64 x 16 a layer."""
    model = meta_mixtral()
    assert sum(p.numel() for p in model.parameters()) == 254_784
    plan = ls.plan(model, torch.zeros(2, 64, dtype=torch.long), world_size=1, sharding="none")
    attention = 2 * 12 * 2 * 4 * 64 * 64 * 16
    assert plan.mfu_flops == 6 * 156_480 * 128 + attention
    assert any("top-k / experts: 0.5" in n for n in plan.notes)


@pytest.mark.parametrize("sharding", ["fsdp", "ddp", "zero2"])
def test_the_bound_never_exceeds_the_prediction(sharding: str) -> None:
    example = EXAMPLES["tiny_gpt"]
    model, ids = example.build(), example.example_input()
    for checkpoint in (None, "blocks"):
        plan = ls.plan(model, ids, target="a100", world_size=8, sharding=sharding,
                       checkpoint=checkpoint)  # fmt: skip
        assert plan.step_time_bound is not None and plan.time_bound is not None
        assert plan.step_time_bound <= plan.step_time
        for part in ("compute", "recompute", "optimizer"):
            assert plan.time_bound[part] <= plan.time[part]


def test_hidden_collectives_slow_the_compute_they_overlap(tmp_path: Path) -> None:
    """FSDP2 over 8 A100s: compute beside a hidden collective takes 1.189 times as long
    (Lee et al.'s average), so each hidden second adds 1 - 1 / 1.189 = 0.159 s
    (``contention``), part of the step; the bound has none. A device profile's own
    ``overlap`` of 1 (no slowdown) drops the part, one below 1 is refused."""
    example = EXAMPLES["tiny_gpt"]
    model, ids = example.build(), example.example_input()
    plan = ls.plan(model, ids, target="a100", world_size=8, sharding="fsdp")
    t = plan.time
    hidden = t["comm"] - t["exposed_comm"]
    assert hidden > 0 and H100.overlap == 1.189
    assert t["contention"] == pytest.approx(hidden * (1 - 1 / 1.189))
    assert plan.step_time == pytest.approx(
        t["compute"] + t["recompute"] + t["exposed_comm"] + t["contention"] + t["optimizer"]
    )
    assert plan.time_bound is not None and "contention" not in plan.time_bound
    assert any("hidden collectives adds 0.159 s" in n for n in plan.notes)
    path = tmp_path / "toy.json"
    path.write_text(json.dumps({**TOY, "rates": {**TOY["rates"], "overlap": 1}}), "utf-8")
    same = ls.plan(model, ids, target=str(path), world_size=8, sharding="fsdp")
    assert same.time["comm"] > same.time["exposed_comm"]
    assert "contention" not in same.time
    with pytest.raises(InvalidInputError, match=r"overlap=0\.5: compute beside a collective"):
        Rates.from_mapping({"overlap": 0.5})


def test_layerscope_plan_takes_a_device_profile(tmp_path: Path) -> None:
    from layerscope.cli import main

    path = tmp_path / "toy.json"
    path.write_text(json.dumps(TOY), encoding="utf-8")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["plan", "examples:tiny_gpt", "--target", str(path), "--world-size", "1",
                     "--sharding", "none", "--json", str(tmp_path / "plan.json")])  # fmt: skip
    assert code == 0
    assert out.getvalue().startswith("Plan for one GPU of 1: toy\n")
    saved = ls.load_plan(tmp_path / "plan.json")
    assert saved.rates == "toy" and saved.options["target"] == saved.device["name"] == "toy"


def test_layerscope_profile_follows_a_device_profiles_kernels(tmp_path: Path) -> None:
    from layerscope.cli import main

    path = tmp_path / "toy.json"
    path.write_text(json.dumps(TOY), encoding="utf-8")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["profile", "examples:tiny_gpt", "--device", "meta", "--target", str(path),
                     "--json", str(tmp_path / "p.json")])  # fmt: skip
    assert code == 0
    assert ls.load(tmp_path / "p.json").model["target"] == "toy (cuda sm90)"


def test_a_shipped_measured_profile_replaces_the_derived_rates(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from layerscope.analysis import rates as rates_module

    measured = {**TOY, "name": "h200", "rates": {**TOY["rates"], "sms": 132}}
    (tmp_path / "h200.json").write_text(json.dumps(measured), encoding="utf-8")
    monkeypatch.setattr(rates_module, "PROFILES", tmp_path)
    monkeypatch.setattr(rates_module, "_BUILTIN", {})
    table = builtin_rates()
    assert (table["h200"].calibrated, table["h200"].matmul, table["h200"].launch) == (
        True, 0.5, 1e-6,
    )  # fmt: skip
    assert table["h100"].calibrated is False  # no file: the derived rates


def test_grad_accum_repeats_the_kernels_and_not_the_optimizer() -> None:
    torch.manual_seed(0)
    plan = ls.plan(nn.Linear(64, 32, bias=False), torch.randn(8, 64), target=TOY, world_size=1,
                   sharding="ddp", precision="bf16", grad_accum=2)  # fmt: skip
    # twice the forward and backward of one micro-batch (as derived by hand above), the
    # optimizer once
    one = (32768 / 1.25e11 + 1e-6) + (32768 / 5e11 + 1e-6)
    assert plan.time["compute"] == pytest.approx(2 * one)
    assert plan.time["optimizer"] == pytest.approx(28680 / 5e11)
    assert plan.kernels == 4


def test_the_a100_runs_flash_for_a_small_head_dim() -> None:
    ids = torch.randint(0, 64, (2, 128))
    plan = ls.plan(_Attention(), ids, target="a100", world_size=1)
    rows = kernels_of(plan.analysis) if plan.analysis is not None else None
    assert rows is not None
    kinds = {k[3] for k in rows.rows if k[2] == "attention"}
    # on sm80 torch tries flash first (cuDNN first on sm90, above): head dim 16, causal
    assert kinds == {("flash", 16, 128, True)}


def test_compiled_kernels_fuse_each_modules_pointwise_ops() -> None:
    """``torch.compile``'s rule (``kernels.fused``): a module's memory-class kernels of one
    phase become one kernel moving the bytes of the largest (per kernel), with one launch;
    matmuls stay."""
    from layerscope.planning.kernels import Kernels, fused

    k = Kernels(
        {
            ("norm", "forward", "memory", ("pow",)): [1, 10, 400, 0],
            ("norm", "forward", "memory", ("mul",)): [2, 20, 1000, 0],  # 500 B each
            ("norm", "backward", "memory", ("mul",)): [3, 0, 900, 0],
            ("fc", "forward", "matmul", (1, 8, 32)): [1, 32768, 5632, 0],
        }
    )
    out = fused(k).rows
    assert out[("norm", "forward", "memory", ("fused",))] == [1, 30, 500, 0]
    assert out[("norm", "backward", "memory", ("fused",))] == [1, 0, 300, 0]
    assert out[("fc", "forward", "matmul", (1, 8, 32))] == [1, 32768, 5632, 0]
    assert fused(k).count() == 3 and k.count() == 7


def test_a_compiled_plan_launches_one_kernel_per_fused_group() -> None:
    """An RMSNorm-like root (pow, mean, add, rsqrt, mul) before a linear: eager, 5 memory
    kernels and the linear's matmul forward, its weight gradient's backward (the input
    needs no gradient): 7; compiled, the root's 5 fuse into one: 3. The prediction is
    lower, and so is the bound, the fused kernels' own roofline (one memory kernel moves
    the bytes of the largest of the five), never above the prediction; the options say
    so."""

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(64, 64, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
            out: torch.Tensor = self.fc(y)
            return out

    x = torch.randn(8, 64)
    common: dict[str, Any] = {"target": "h100", "world_size": 1, "sharding": "none",
                              "precision": "fp32"}  # fmt: skip
    eager = ls.plan(Net(), x, **common)
    compiled = ls.plan(Net(), x, **common, compile=True)
    assert compiled.options["compile"] is True and "compile" not in eager.options
    assert (
        ", compiled;" in compiled.render(width=200)
        and "compiled" not in eager.render(width=200).splitlines()[1]
    )
    assert (eager.kernels, compiled.kernels) == (7, 3)
    assert compiled.step_time < eager.step_time
    assert compiled.step_time_bound is not None and eager.step_time_bound is not None
    assert compiled.step_time_bound < eager.step_time_bound
    assert compiled.step_time_bound <= compiled.step_time
    # a given profile has no kernel records to reprice: refused, not silently eager
    prof = ls.profile(Net(), x, backward=True, memory=True)
    with pytest.raises(InvalidInputError, match="compile reprices the analysis's kernels"):
        ls.plan(prof, **common, compile=True)


def test_float8_linears_by_hand() -> None:
    """torchao's tensorwise float8 (``kernels.float8``) on a linear of 64 -> 32 features
    over 8 rows: its forward matmul reads float8 operands and runs at twice the bf16
    peak; the casts are charged as memory kernels."""
    from layerscope.planning.kernels import Kernels, float8

    k = Kernels(
        {
            # (8, 64) @ (64, 32): 2 * 8 * 64 * 32 = 32768 FLOPs, (512 + 2048 + 256) * 2 B
            ("fc", "forward", "matmul", (1, 8, 32)): [1, 32768, 5632, 0],
            ("fc", "backward", "matmul", (1, 32, 64)): [1, 32768, 5248, 0],
            ("norm", "forward", "memory", ("mul",)): [1, 10, 100, 0],
        }
    )
    rows = float8(k, frozenset({"fc"}), 2.0).rows
    # written: 8 x 32 outputs at 2 B = 512; the operands' 5120 B at 1 byte: 2560
    assert rows[("fc", "forward", "matmul", (1, 8, 32))] == [1, 16384, 512 + 2560, 0]
    # the weight's gradient (32, 64): 4096 B written, (5248 - 4096) / 2 = 576 read
    assert rows[("fc", "backward", "matmul", (1, 32, 64))] == [1, 16384, 4096 + 576, 0]
    # K = 32768 / (2 * 8 * 32) = 64: input 8 x 64 = 512, weight 32 x 64 = 2048, output
    # gradient 8 x 32 = 256 elements; 5 B an element cast, 2 B an element transposed
    assert rows[("fc", "forward", "memory", ("float8_cast",))] == [4, 0, 5 * (512 + 2048), 0]
    assert rows[("fc", "backward", "memory", ("float8_cast",))] == [
        4, 0, 5 * 256 + 2 * (512 + 2048), 0,
    ]  # fmt: skip
    assert rows[("norm", "forward", "memory", ("mul",))] == [1, 10, 100, 0]


def test_a_float8_plan_needs_float8_tensor_cores() -> None:
    x = torch.randn(8, 64)
    common: dict[str, Any] = {"world_size": 1, "sharding": "none", "precision": "bf16-mixed"}
    plain = ls.plan(nn.Linear(64, 64), x, target="h100", **common)
    fp8 = ls.plan(nn.Linear(64, 64), x, target="h100", float8=True, **common)
    assert fp8.options["float8"] is True
    # the bound is the float8 kernels' roofline (the casts' bytes dominate so small a
    # linear), never above the prediction
    assert fp8.step_time_bound is not None and fp8.step_time_bound <= fp8.step_time
    assert fp8.kernels is not None and plain.kernels is not None
    assert fp8.kernels == plain.kernels + 8  # the casts: 4 forward, 4 backward
    with pytest.raises(InvalidInputError, match="a100-80gb does not have"):
        ls.plan(nn.Linear(64, 64), x, target="a100", float8=True, **common)


def test_mfu_says_when_it_leaves_out_attention_that_ran_unfused() -> None:
    """Eager attention runs matmuls and a softmax, not an SDPA fused kernel: mfu counts no
    attention for it (only 6 N per token), which a note says; with SDPA it counts 12 B H
    Sq Sk D per layer and says nothing. 2 layers, 4 heads of 16, 2 x 64 tokens: 12 x 2 x
    4 x 64 x 64 x 16 = 6,291,456 FLOPs a layer forward, x 2 layers = 12,582,912."""
    from transformers import LlamaConfig, LlamaForCausalLM

    flops: dict[str, int] = {}
    notes: dict[str, list[str]] = {}
    for impl in ("eager", "sdpa"):
        kinds: dict[str, Any] = {"attn_implementation": impl}
        config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                             use_cache=False, **kinds)  # fmt: skip
        plan = ls.plan(LlamaForCausalLM(config), input_shape=(2, 64), world_size=1)
        assert plan.mfu_flops is not None
        flops[impl] = plan.mfu_flops
        notes[impl] = [n for n in plan.notes if n.startswith("mfu counts attention")]
    assert flops["sdpa"] - flops["eager"] == 12 * 2 * 4 * 64 * 64 * 16 * 2
    assert len(notes["eager"]) == 1 and notes["sdpa"] == []
    # float32 with grouped KV heads: SDPA's math path on an H100 (its _safe_softmax)
    sdpa: dict[str, Any] = {"attn_implementation": "sdpa"}
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                         use_cache=False, **sdpa)  # fmt: skip
    plan = ls.plan(LlamaForCausalLM(config), input_shape=(2, 64), world_size=1, precision="fp32")
    assert plan.mfu_flops == flops["eager"]
    assert [n for n in plan.notes if n.startswith("mfu counts attention")] == notes["eager"]
