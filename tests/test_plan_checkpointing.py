"""Choosing modules to checkpoint (``layerscope.planning.checkpointing``): the repeated
blocks, ``"blocks"``, and a greedy choice under an activation budget. Every figure is
checked against a real run of the same model with the chosen modules under
non-reentrant ``torch.utils.checkpoint`` (early stop off), profiled again."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import set_checkpoint_early_stop

import layerscope as ls
from helpers.models import with_checkpoint
from layerscope.errors import InvalidInputError
from layerscope.planning.checkpointing import choose_checkpoints, repeated_blocks, resolve

D, HEADS, T, B = 32, 4, 8, 2


class LlamaBlock(nn.Module):
    """RMSNorm, causal attention through SDPA (q, k, v, o projections), RMSNorm, SwiGLU."""

    def __init__(self) -> None:
        super().__init__()
        self.input_norm = nn.RMSNorm(D)
        self.q, self.k, self.v, self.o = (nn.Linear(D, D, bias=False) for _ in range(4))
        self.post_norm = nn.RMSNorm(D)
        self.gate, self.up = nn.Linear(D, 2 * D, bias=False), nn.Linear(D, 2 * D, bias=False)
        self.down = nn.Linear(2 * D, D, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        h = self.input_norm(x)
        q, k, v = (
            p(h).view(B, T, HEADS, D // HEADS).transpose(1, 2) for p in (self.q, self.k, self.v)
        )
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, D)
        x = x + self.o(a)
        h = self.post_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))  # type: ignore[no-any-return]


class Llama(nn.Module):
    def __init__(self, n: int = 3) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, D)
        self.layers = nn.ModuleList(LlamaBlock() for _ in range(n))
        self.norm = nn.RMSNorm(D)
        self.head = nn.Linear(D, 50, bias=False)

    def forward(self, ids: Tensor) -> Tensor:
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))  # type: ignore[no-any-return]


def cnn() -> nn.Module:
    def block(c: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU())

    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), *(block(8) for _ in range(3)), nn.Flatten())


def llama_input() -> Tensor:
    return torch.randint(0, 50, (B, T))


def cnn_input() -> Tensor:
    return torch.randn(2, 3, 8, 8)


MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[], Tensor], list[str]]] = {
    "llama": (Llama, llama_input, ["layers.0", "layers.1", "layers.2"]),
    "cnn": (cnn, cnn_input, ["1", "2", "3"]),
}


def measure(model: nn.Module, x: Tensor) -> ls.Profile:
    torch.manual_seed(1)
    return ls.profile(
        model.train(), x, backward=True, memory=True, loss_fn=lambda o: o.float().pow(2).mean()
    )


def real(model: nn.Module, x: Tensor, paths: tuple[str, ...]) -> tuple[int, int]:
    with set_checkpoint_early_stop(False):
        prof = measure(with_checkpoint(model, *paths), x)
    m = prof.root.metrics
    return int(m["activation_bytes"]), int(m.get("recompute_flops", 0))


def plain(name: str) -> tuple[nn.Module, Tensor, ls.Profile]:
    """The model ``name``, its input, and its profile without checkpointing."""
    build, make_input, _ = MODELS[name]
    torch.manual_seed(0)
    model, x = build(), make_input()
    return model, x, measure(model, x)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_blocks_are_found_and_their_figures_are_real(name: str) -> None:
    model, x, prof = plain(name)
    blocks = MODELS[name][2]
    assert repeated_blocks(prof) == blocks
    choice = resolve(prof, "blocks")
    assert choice.paths == tuple(blocks)
    assert (choice.kept_activation_bytes, choice.recompute_flops) == real(model, x, choice.paths)
    assert resolve(prof, None).kept_activation_bytes == prof.root.metrics["activation_bytes"]
    assert resolve(prof, None).recompute_flops == 0


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_choice_fits_its_budget_in_a_real_run(name: str) -> None:
    model, x, prof = plain(name)
    full = int(prof.root.metrics["activation_bytes"])
    every = resolve(prof, "blocks").kept_activation_bytes
    assert every < full
    assert choose_checkpoints(prof, full).paths == ()  # fits already: nothing to recompute
    budget = (full + every) // 2
    choice = choose_checkpoints(prof, budget)
    assert choice.fits and choice.paths
    kept, recomputed = real(model, x, choice.paths)
    assert (choice.kept_activation_bytes, choice.recompute_flops) == (kept, recomputed)
    assert kept <= budget
    # less recomputation than checkpointing every block
    assert choice.recompute_flops <= resolve(prof, "blocks").recompute_flops
    # a budget below what every block checkpointed keeps: the best set, not fitting
    tight = choose_checkpoints(prof, every // 4)
    assert not tight.fits
    assert tight.kept_activation_bytes <= every


def test_bad_choices() -> None:
    prof = measure(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), torch.randn(2, 4))
    assert repeated_blocks(prof) == []
    with pytest.raises(InvalidInputError, match="no repeated blocks"):
        resolve(prof, "blocks")
    with pytest.raises(InvalidInputError, match="checkpoint must be None, 'blocks'"):
        resolve(prof, "everything")
    with pytest.raises(InvalidInputError, match="budget must be a whole number"):
        choose_checkpoints(prof, -1)


def planned(
    prof: ls.Profile, checkpoint: str | list[str] | None, budget: int | None = None
) -> ls.Plan:
    """One GPU, float32, plain SGD (no optimizer states), nothing reserved."""
    return ls.plan(
        prof, sharding="none", world_size=1, precision="fp32", optimizer="sgd",
        checkpoint=checkpoint, budget=budget, reserve_bytes=0,
    )  # fmt: skip


def on_meta(name: str) -> tuple[nn.Module, Tensor, ls.Profile]:
    """The model ``name`` and its input, and a profile of a meta copy steered to this
    CPU's kernels (what a plan of a model too large for the machine starts from)."""
    model, x, _ = plain(name)
    torch.manual_seed(1)
    prof = ls.profile(
        ls.to_meta(model).train(), x.to("meta"), backward=True, memory=True, target="cpu",
        loss_fn=lambda o: o.float().pow(2).mean(),
    )  # fmt: skip
    return model, x, prof


@pytest.mark.parametrize(
    ("name", "device"),
    [
        # llama run for real on the CPU takes over 2 s
        pytest.param(n, d, marks=[pytest.mark.slow] if (n, d) == ("llama", "cpu") else [])
        for n in sorted(MODELS)
        for d in ("cpu", "meta")
    ],
)
def test_plan_checkpoint_figures_equal_real_runs(name: str, device: str) -> None:
    """``ls.plan``'s kept activation bytes, recompute FLOPs and peak for no
    checkpointing, every block, one block's child, and a block with another's child,
    against the model run with those modules under non-reentrant
    ``torch.utils.checkpoint`` (early stop off) and profiled (its parameters, buffers,
    input and measured peak: plain SGD keeps no states)."""
    model, x, prof = plain(name) if device == "cpu" else on_meta(name)
    blocks = MODELS[name][2]
    child = next(iter(n.path for n in prof.node(blocks[1]).children))
    for checkpoint in (None, "blocks", [child], [blocks[0], child]):
        plan = planned(prof, checkpoint)
        want = real(model, x, tuple(plan.checkpoint))
        assert (plan.kept_activation_bytes, plan.recompute_flops) == want, checkpoint
        # the step's peak: parameters and buffers, the input, the measured session peak
        with set_checkpoint_early_stop(False):
            mem = measure(with_checkpoint(model, *plan.checkpoint), x).memory
        peak = mem["baseline_bytes"] + mem["session_peak_bytes"] + x.nbytes
        assert plan.peak_bytes == peak, checkpoint
    assert planned(prof, "blocks").checkpoint == blocks


class CastNorm(nn.Module):
    """transformers' ``LlamaRMSNorm``: the input cast to float32 first, so in bfloat16
    the float32 copy is saved and nothing saves the input itself."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: Tensor) -> Tensor:
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * h.to(x.dtype)


class CastBlock(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm, self.fc = CastNorm(d), nn.Linear(d, d, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.fc(self.norm(x))  # type: ignore[no-any-return]


def test_a_checkpointed_block_holds_an_input_nothing_saved() -> None:
    """In bfloat16 no op of a block saves its input (the norm saves its float32 copy),
    so the analysis frees it in the forward; the checkpointed run keeps it (64 x 16 x 2
    = 2,048 B a block, but the first block's, the step's input) until the block's
    backward ends. The plan's peak equals the real run's with 2 and 4 blocks (before,
    the plan came out 2,048 and 5,056 B short: the peak is in the last block's backward,
    with the held inputs of the blocks before it)."""
    for blocks, checkpoint in itertools.product((2, 4), (None, "blocks")):
        torch.manual_seed(0)
        model = nn.Sequential(*(CastBlock(16) for _ in range(blocks))).to(torch.bfloat16)
        x = torch.randn(64, 16, dtype=torch.bfloat16)
        prof = measure(model, x)
        plan = ls.plan(
            prof, sharding="none", world_size=1, precision="bf16", optimizer="sgd",
            checkpoint=checkpoint, reserve_bytes=0,
        )  # fmt: skip
        with set_checkpoint_early_stop(False):
            mem = measure(with_checkpoint(model, *plan.checkpoint), x).memory
        peak = mem["baseline_bytes"] + mem["session_peak_bytes"] + x.nbytes
        assert plan.peak_bytes == peak, (blocks, checkpoint)


def test_auto_fits_the_budget_in_a_real_run() -> None:
    """``checkpoint="auto"`` on a whole-GPU budget halfway between the plans without and
    with every block checkpointed: a set that fits, whose real run (parameters and
    buffers, the input, and the step's measured peak) fits that budget too."""
    model, x, prof = plain("cnn")
    none, every = planned(prof, None), planned(prof, "blocks")
    assert every.peak_bytes < none.peak_bytes
    budget = (none.peak_bytes + every.peak_bytes) // 2
    auto = planned(prof, "auto", budget=budget)
    assert auto.fits and auto.checkpoint
    assert auto.recompute_flops <= every.recompute_flops
    with set_checkpoint_early_stop(False):
        run = measure(with_checkpoint(model, *auto.checkpoint), x)
    mem = run.memory
    measured = mem["baseline_bytes"] + mem["session_peak_bytes"] + x.nbytes
    assert measured <= budget
    assert planned(prof, "auto", budget=none.peak_bytes).checkpoint == []  # fits already


def test_auto_says_when_nothing_fits() -> None:
    """The small Llama's peak is its gradients and weights at the end of the backward:
    checkpointing cannot lower it, so a budget below it does not fit, every block
    checkpointed, and the plan says so."""
    _, _, prof = plain("llama")
    none = planned(prof, None)
    assert planned(prof, "blocks").peak_bytes == none.peak_bytes
    budget = none.peak_bytes // 2  # below the parameters and gradients alone
    assert budget < 2 * prof.root.metrics["param_bytes"]
    auto = planned(prof, "auto", budget=budget)
    assert auto.fits is False and auto.headroom_bytes == budget - auto.peak_bytes
    assert auto.checkpoint == MODELS["llama"][2]
    assert any("does not fit" in note for note in auto.notes)


def test_plan_checkpoints_gpt2() -> None:
    """transformers' GPT-2 (random weights, 2 layers, no KV cache): the plan's figures for
    every block and for one block's attention equal the real checkpointed runs."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16, use_cache=False
    )
    model = transformers.GPT2Model(config).train()
    ids = torch.randint(0, 64, (2, 8))

    def run(m: nn.Module) -> ls.Profile:
        torch.manual_seed(1)
        return ls.profile(m, ids, backward=True, memory=True, loss_fn=lambda o: o[0].sum())

    prof = run(model)
    for checkpoint in ("blocks", ["h.1.attn"]):
        plan = planned(prof, checkpoint)
        with set_checkpoint_early_stop(False):
            m = run(with_checkpoint(model, *plan.checkpoint)).root.metrics
        want = (m["activation_bytes"], m["recompute_flops"])
        assert (plan.kept_activation_bytes, plan.recompute_flops) == want, checkpoint
    assert planned(prof, "blocks").checkpoint == ["h.0", "h.1"]


@pytest.mark.parametrize("layers", [2, 4])
def test_an_encoder_decoders_blocks_are_both_stacks_whole(layers: int) -> None:
    """T5's first block of each stack holds the relative position bias, so the fold's
    run of alike blocks leaves it out (and with 2 blocks a stack there is no run at
    all): the repeated blocks are every T5Block of the encoder and the decoder."""
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(vocab_size=128, d_model=32, d_kv=8, d_ff=64, num_layers=layers,
                      num_decoder_layers=layers, num_heads=4)  # fmt: skip
    with torch.device("meta"):
        model = T5ForConditionalGeneration(config)
    prof = ls.profile(
        model, torch.zeros(2, 16, dtype=torch.long, device="meta"),
        kwargs={"decoder_input_ids": torch.zeros(2, 8, dtype=torch.long, device="meta")},
        backward=True, memory=True, loss_fn=lambda o: o.logits.float().sum(),
    )  # fmt: skip
    stacks = ("encoder", "decoder")
    assert repeated_blocks(prof) == [f"{s}.block.{i}" for s in stacks for i in range(layers)]
    plan = ls.plan(prof, world_size=2, checkpoint="blocks", precision="fp32")
    assert len(plan.checkpoint) == 2 * layers
    assert plan.options["fsdp_units"][-2 * layers :] == plan.checkpoint
