"""Memory through the public options: ls.profile(memory=True), the console and the CLI."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import layerscope as ls
from helpers.snapshots import ModelSnapshot
from layerscope.cli import main
from layerscope.render.console import render_text


def test_profile_memory_option_and_console() -> None:
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10))
    x = torch.randn(32, 128)
    snap = ModelSnapshot.take(model)
    prof = ls.profile(model, x, memory=True, backward=True)
    snap.assert_unchanged(model)
    # fc1 saves its input x: 32*128*4 = 16,384 B; relu saves its output 32*256*4 = 32,768 B;
    # fc2's input is that same storage (counted once, at relu); weights are not activations
    assert prof.node("0").self_metrics["activation_bytes"] == 32 * 128 * 4
    assert prof.node("1").self_metrics["activation_bytes"] == 32 * 256 * 4
    assert prof.node("2").self_metrics["activation_bytes"] == 0
    assert prof.root.metrics["activation_bytes"] == 16_384 + 32_768
    assert prof.node("2").self_metrics["output_bytes"] == 32 * 10 * 4
    # gradients: fc1 (128*256 + 256)*4 = 132,096 B; fc2 (256*10 + 10)*4 = 10,280 B
    assert prof.node("0").metrics["grad_bytes"] == 132_096
    assert prof.root.metrics["grad_bytes"] == 132_096 + 10_280
    ls.record_training_footprint(prof, "adamw")
    text = render_text(prof, width=220)
    assert "Saved" in text and "Peak" in text and "Grad size" in text
    assert "Memory (simulated): forward peak" in text and "Training step (adamw)" in text
    assert ls.Profile.from_dict(prof.to_dict()) == prof
    prof.self_check()


def test_cli_memory(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "examples:tiny_resnet", "--memory", "--width", "220"]) == 0
    out = capsys.readouterr().out
    assert "Saved" in out and "forward peak" in out


def _accumulating(steps: int, active: int) -> ls.Profile:
    """A loop of ``steps`` steps, each 4 micro-batches (batch 32) and their loss, the
    last ``active`` analysed with memory=True."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))
    batches = [torch.randn(32, 64) for _ in range(4)]
    wait = steps - active
    p = ls.Profiler(model, memory=True, schedule=ls.schedule(wait=wait, active=active, repeat=1))
    with p:
        for _ in range(steps):
            for x in batches:
                (model(x).pow(2).mean() / len(batches)).backward()
            p.step()
    return p.profile


def _memory_line(prof: ls.Profile) -> str:
    text = prof.render(width=400)
    return next(line for line in text.splitlines() if line.startswith("Memory"))


# Per micro-batch: Linear 0 saves its input x, 32*64*4 = 8 KiB; GELU its input (Linear 0's
# output), 32*256*4 = 32 KiB; Linear 2 its input (GELU's output), 32 KiB: 72 KiB in the
# model. The loss's pow saves the model's output, 32*64*4 = 8 KiB (mean and the division
# save nothing). Forward peak of one call: the three outputs, 32 + 32 + 8 = 72 KiB.


def test_memory_footer_with_micro_batches_says_what_it_sums() -> None:
    prof = _accumulating(steps=2, active=1)
    # one analysed step: 4 × (72 + 8) = 320 KiB saved, 4 × 8 = 32 KiB of it by the loss
    assert prof.memory["activation_bytes"] == 4 * (72 + 8) * 1024
    assert prof.outside["activation_bytes"] == 4 * 8 * 1024
    assert _memory_line(prof).startswith(
        "Memory (simulated): forward peak 72.00 KiB (the highest of 4 calls), saved for "
        "backward 320.00 KiB (summed over 4 model calls, 32.00 KiB of it saved outside the "
        "model, by the loss or code around the calls), backward peak "
    )


def test_memory_footer_of_several_analysed_steps_names_the_largest() -> None:
    prof = _accumulating(steps=2, active=2)
    # the cycle keeps the largest step's 320 KiB; its calls are the two steps' 8
    assert prof.memory["activation_bytes"] == 4 * (72 + 8) * 1024
    assert prof.root.calls == 8
    assert _memory_line(prof).startswith(
        "Memory (simulated): forward peak 72.00 KiB (the highest of 8 calls), saved for "
        "backward 320.00 KiB (the largest of 2 analysed steps: its model calls summed, the "
        "loss and other code outside the model included), backward peak "
    )


def test_memory_footer_of_one_call_and_a_loss() -> None:
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))
    x = torch.randn(32, 64)
    prof = ls.profile(model, x, memory=True, backward=True, loss_fn=lambda y: y.pow(2).mean())
    # 72 KiB in the model, 8 KiB by the loss's pow (above): 80 KiB
    assert _memory_line(prof).startswith(
        "Memory (simulated): forward peak 72.00 KiB, saved for backward 80.00 KiB (8.00 KiB "
        "of it saved outside the model, by the loss or code around the calls), backward peak "
    )
    # no loss that saves anything (out.sum()): the plain figures
    prof = ls.profile(model, x, memory=True, backward=True)
    assert _memory_line(prof).startswith(
        "Memory (simulated): forward peak 72.00 KiB, saved for backward 72.00 KiB, backward "
    )


class ListParent(nn.Module):
    """A ModuleList its parent never calls: the parent calls each block directly."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(64, 64) for _ in range(2)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = torch.relu(block(x))
        return x


def test_a_module_never_entered_has_no_peak() -> None:
    from layerscope.export.html import report_data

    prof = ls.profile(ListParent(), torch.randn(8, 64), memory=True)
    # each Linear's peak: its output, 8*64*4 = 2,048 B = 2.00 KiB; the root's: both relu
    # outputs (saved for backward, 2 x 2,048) and block 1's output while its relu runs
    # (2,048): 6,144 B = 6.00 KiB. The ModuleList never runs: no peak, a blank cell.
    blocks = prof.node("blocks")
    assert blocks.calls == 0
    assert "peak_bytes" not in blocks.metrics and "peak_bytes" not in blocks.self_metrics
    assert prof.memory["forward_peak_bytes"] == 6_144
    text = prof.render(columns=["peak_bytes", "calls"], fold=False, width=80)
    assert text.splitlines()[:6] == [
        "Module                         Peak   Calls",
        "───────────────────────────────────────────",
        "ListParent                 6.00 KiB       1",
        "└─ (1) blocks ModuleList                  -",
        "   ├─ (1.1) 0 Linear       2.00 KiB       1",
        "   └─ (1.2) 1 Linear       2.00 KiB       1",
    ]
    loaded = ls.Profile.from_dict(prof.to_dict())
    assert loaded == prof
    text = loaded.render(view="table", columns=["peak_bytes", "self_peak_bytes"], width=80)
    assert text.splitlines()[:5] == [
        "Module                          Peak   Self peak",
        "────────────────────────────────────────────────",
        "ListParent                  6.00 KiB    6.00 KiB",
        "└─ (1) blocks ModuleList",
        "   └─ (1.1) 0–1 Linear ×2   2.00 KiB    2.00 KiB",
    ]
    # the HTML report's data: null (a blank cell) for the ModuleList, in pre-order
    assert report_data(prof)["v"]["peak_bytes"] == [6_144, None, 2_048, 2_048]
