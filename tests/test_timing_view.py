"""The timing pass through the public options: ls.profile(timing=...), the console, the CLI."""

from __future__ import annotations

import pytest

import layerscope as ls
from helpers.snapshots import ModelSnapshot
from layerscope.cli import main
from layerscope.examples import EXAMPLES
from layerscope.render.console import render_text

pytestmark = pytest.mark.usefixtures("seeded_one_thread")


def test_profile_timing_fills_times_and_latency() -> None:
    ex = EXAMPLES["tiny_resnet"]
    model, x = ex.build().train(), ex.example_input()
    snap = ModelSnapshot.take(model)
    prof = ls.profile(model, x, backward=True, timing={"warmup": 1, "repeats": 3})
    snap.assert_unchanged(model)  # BatchNorm stats after 1 + 3 + analysis train-mode runs
    for node in prof.nodes():  # medians: per-repeat sums are checked in test_timing.py
        assert node.metrics["forward_time"] >= node.self_metrics["forward_time"] >= 0
    assert prof.root.metrics["backward_time"] > 0
    assert prof.timing["repeats"] == 3 and prof.timing["batch_size"] == 2
    assert prof.root.metrics["macs"] > 0  # the analysis pass is still there
    text = render_text(prof, width=200)
    assert "Fwd time" in text and "Self bwd" in text and "Latency (forward + backward)" in text
    assert ls.Profile.from_dict(prof.to_dict()) == prof


def test_timing_options_are_checked() -> None:
    model, x = EXAMPLES["shared_mlp"].build(), EXAMPLES["shared_mlp"].example_input()
    with pytest.raises(ls.InvalidInputError, match="unknown option 'repeat' in timing"):
        ls.profile(model, x, timing={"repeat": 3})
    with pytest.raises(ls.InvalidInputError, match="need an input"):
        ls.profile(model, timing=True)


def test_cli_time(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["profile", "examples:shared_mlp", "--time", "--repeats", "2", "--warmup", "1"]
    assert main([*argv, "--width", "200"]) == 0
    out = capsys.readouterr().out
    assert "Fwd time" in out and "Timer hooks, 2 repeats after 1 warmup" in out
    assert main(["profile", "examples:shared_mlp", "--repeats", "2"]) == 2
    assert "needs --time" in capsys.readouterr().err
