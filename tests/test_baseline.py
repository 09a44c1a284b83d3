"""The bytes a rank holds when a session starts (``memory["baseline"]``), by kind, and
which step of a loop was analysed (optimizer states, DDP's bucket rebuild)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn

import layerscope as ls
from layerscope.session.stepfacts import BUCKETS_REBUILT, STATES_CREATED

#: nn.Linear(64, 32) in float32: weight 64 * 32 * 4 + bias 32 * 4 bytes.
LINEAR = 64 * 32 * 4 + 32 * 4  # 8,320


class Held(nn.Module):
    """A Linear, a second one tied to its weight, a buffer and plain tensor attributes."""

    scale: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(64, 32)
        self.b = nn.Linear(64, 32, bias=False)
        self.b.weight = self.a.weight  # tied: one storage
        self.register_buffer("scale", torch.ones(10))  # 40 B
        self.cache = torch.zeros(6)  # 24 B, a plain attribute
        self.extra = [torch.zeros(3), self.cache]  # 12 B new; the cache again

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.a(x) + self.b(x) * self.scale.sum()
        return out


def _trained() -> tuple[Held, torch.optim.Optimizer, torch.Tensor]:
    """The model after one SGD step with momentum: gradients and momentum buffers exist."""
    torch.manual_seed(0)
    model = Held()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(4, 64)
    model(x).sum().backward()
    opt.step()
    return model, opt, x


def test_baseline_by_kind_each_storage_once() -> None:
    model, opt, x = _trained()
    with ls.Profiler(model, memory=True, optimizer=opt) as p:
        model(x).sum().backward()  # accumulates into the gradients in place
    mem = p.profile.memory
    assert mem["baseline"] == {
        "parameters": LINEAR,  # the tied weight once
        "gradients": LINEAR,  # one .grad per parameter tensor: 8,192 + 128
        "optimizer_states": LINEAR,  # one momentum buffer per parameter tensor
        "buffers": 10 * 4,
        "other": 6 * 4 + 3 * 4,  # the cache once, though held twice
    }
    assert mem["baseline_bytes"] == 3 * LINEAR + 40 + 36  # 25,036
    text = p.profile.render(view="table", width=200)
    assert (
        "Held at start: 24.45 KiB (params 8.12 KiB, grads 8.12 KiB, optimizer states "
        f"8.12 KiB, buffers 40 B, other tensors 36 B); absolute peak "
        f"{ls.render.units.nbytes(25_036 + mem['session_peak_bytes'])}"
    ) in text


def test_freed_baseline_lowers_the_level() -> None:
    """A gradient freed in the session takes its bytes off the level, so the baseline
    plus the session's peak is the rank's peak: here the start itself."""
    model, opt, x = _trained()
    with ls.Profiler(model, memory=True, optimizer=opt) as p:
        opt.zero_grad(set_to_none=True)  # frees 8,320 B of gradients
        with torch.no_grad():
            y = model(x)  # keeps a 4 x 32 float32 output: 512 B
    mem = p.profile.memory
    assert y.shape == (4, 32)
    assert mem["timeline"]["event"][-1] == "end"
    assert mem["timeline"]["bytes"][-1] == -LINEAR + 4 * 32 * 4  # -7,808
    assert mem["session_peak_bytes"] == 0  # never above the start
    assert mem["baseline"]["gradients"] == LINEAR  # held when the session began


def test_without_an_optimizer_no_states_are_counted() -> None:
    model, _, x = _trained()
    prof = ls.profile(model, x, memory=True)
    assert prof.memory["baseline"]["optimizer_states"] == 0
    assert prof.memory["baseline"]["gradients"] == LINEAR
    assert prof.model.get("loop") is None
    model, opt, x = _trained()
    given = ls.profile(model, x, memory=True, optimizer=opt)
    assert given.memory["baseline"]["optimizer_states"] == LINEAR  # momentum buffers


def test_optimizer_seen_stepping_is_found() -> None:
    """AdamW keeps exp_avg and exp_avg_sq per parameter tensor (8,320 B each in all) and a
    4-byte ``step`` per tensor: 2 * 8,320 + 2 * 4 = 16,648 B."""
    torch.manual_seed(0)
    model = nn.Linear(64, 32)
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(4, 64)

    def train_step() -> None:
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()

    # step 0 is not analysed, but the Profiler sees the optimizer step in it
    p = ls.Profiler(model, memory=True, schedule=ls.schedule(wait=1, active=1, repeat=1))
    with p:
        for _ in range(2):
            train_step()
            p.step()
    assert p.profile.memory["baseline"]["optimizer_states"] == 2 * LINEAR + 2 * 4
    assert p.profile.model["loop"]["optimizer_states"] is True
    assert STATES_CREATED not in p.profile.notices
    # first seen inside the session: counted at its step(), before the step
    with ls.Profiler(model, memory=True) as q:
        train_step()
    assert q.profile.memory["baseline"]["optimizer_states"] == 2 * LINEAR + 2 * 4
    assert STATES_CREATED not in q.profile.notices


def test_the_first_step_is_named() -> None:
    torch.manual_seed(0)
    model = nn.Linear(64, 32)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(4, 64)
    seen: list[ls.Profile] = []
    p = ls.Profiler(model, memory=True, schedule=ls.schedule(active=1, repeat=2))
    with p:
        p.on_ready = seen.append
        for _ in range(2):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
            p.step()
    first, second = seen
    assert first.model["loop"]["optimizer_states"] is False
    assert first.memory["baseline"]["optimizer_states"] == 0
    assert STATES_CREATED in first.notices
    assert STATES_CREATED == (
        "the optimizer's states were created in an analysed step (its first step()): the "
        "memory figures of that step lack them at its start and include their allocation; "
        "for steady-state memory figures analyse a later step, e.g. ls.schedule(wait=2)"
    )
    assert second.model["loop"]["optimizer_states"] is True
    assert second.memory["baseline"]["optimizer_states"] == LINEAR
    assert STATES_CREATED not in second.notices
    assert second.model["loop"]["ddp_rebuilt_buckets"] is None  # no DDP


def test_plain_sgd_has_no_states_and_no_notice() -> None:
    torch.manual_seed(0)
    model = nn.Linear(64, 32)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with ls.Profiler(model, memory=True, optimizer=[opt]) as p:
        model(torch.randn(4, 64)).sum().backward()
        opt.step()
    assert STATES_CREATED not in p.profile.notices
    assert p.profile.memory["baseline"]["optimizer_states"] == 0


def test_optimizer_option_is_checked() -> None:
    with pytest.raises(ls.InvalidInputError) as info:
        ls.Profiler(nn.Linear(2, 2), optimizer="adamw")  # type: ignore[arg-type]
    assert str(info.value) == (
        "optimizer must be a torch.optim.Optimizer, a list of them, or None, got 'adamw'"
    )


def test_baseline_on_meta() -> None:
    with torch.device("meta"):
        model = nn.Linear(64, 32)
    prof = ls.profile(model, torch.randn(4, 64, device="meta"), memory=True)
    assert prof.memory["baseline"]["parameters"] == LINEAR
    assert prof.memory["baseline_bytes"] == LINEAR


def test_baseline_survives_json_and_cycles(tmp_path: Path) -> None:
    model, opt, x = _trained()
    p = ls.Profiler(model, memory=True, optimizer=opt, schedule=ls.schedule(active=2))
    with p:
        for _ in range(2):
            model(x).sum().backward()
            p.step()
    prof = p.profile
    assert prof.memory["baseline"]["gradients"] == LINEAR
    prof.save(tmp_path / "p.json")
    back = ls.load(tmp_path / "p.json")
    assert back.memory["baseline"] == prof.memory["baseline"]
    assert back.memory["baseline_bytes"] == 3 * LINEAR + 40 + 36
    assert back.model["loop"]["optimizer_states"] is True
    assert back.render(width=80) == prof.render(width=80)


def test_ddp_bucket_rebuild_is_named(tmp_path: Path) -> None:
    """One rank of gloo in this process: DDP rebuilds its buckets in the forward of its
    second iteration, and only then."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        ddp = nn.parallel.DistributedDataParallel(nn.Linear(8, 4))
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
        seen: list[ls.Profile] = []
        p = ls.Profiler(ddp, schedule=ls.schedule(active=1, repeat=3), on_ready=seen.append)
        with p:
            for _ in range(3):
                opt.zero_grad()
                ddp(torch.randn(2, 8)).sum().backward()
                opt.step()
                p.step()
    finally:
        dist.destroy_process_group()
    loops = [
        (s.model["loop"]["optimizer_states"], s.model["loop"]["ddp_rebuilt_buckets"]) for s in seen
    ]
    assert loops == [(False, False), (True, True), (True, False)]
    assert [BUCKETS_REBUILT in s.notices for s in seen] == [False, True, False]
    assert [STATES_CREATED in s.notices for s in seen] == [True, False, False]
    assert BUCKETS_REBUILT == (
        "DistributedDataParallel rebuilt its gradient buckets in an analysed step (once, in "
        "the forward of its second iteration): the memory figures include the new buckets' "
        "allocation; for steady-state memory figures analyse a later step, e.g. "
        "ls.schedule(wait=2)"
    )
