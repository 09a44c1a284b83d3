"""What layerscope reports on a real GPU, beside what the GPU itself says.

    python bench/cuda_check.py [--layers 2]

Each check prints its numbers and goes on when one fails (the traceback is printed and
the exit status is 1 at the end):

- ``allocator``: GPT-2 (random weights, built from a config) in training mode with
  ``memory=True, backward=True``: per module, the caching allocator's peak against the
  simulated one (the allocator rounds blocks to 512 B and may add cuBLAS workspaces);
- ``steered``: the same model in bfloat16 on this GPU and on ``meta`` steered to this
  GPU: FLOPs, backward FLOPs, activation and output bytes and simulated peaks per module
  must be equal; every module that differs is listed;
- ``baseline``: after one AdamW step, the session's baseline by kind against
  ``torch.cuda.memory_allocated()`` at the start;
- ``timers``: hooks (CUDA events) and kineto timing of the model's forward and backward;
  self times must add up to the root's;
- ``zoo``: layers in float32, bfloat16 and float16, training with backward, on this
  GPU and on ``meta`` steered to it: every metric that differs is listed (cuDNN RNNs
  are not steered, so their differences are expected);
- ``kineto_trace``: what torch.profiler's events hold for a timed run with backward
  (repeats, module ranges, spans per repeat), on the CPU and on the GPU;
- ``cli``: ``layerscope profile`` on the GPU with every measurement on, as text at 80
  columns and as an HTML report;
- ``plan``: ``ls.plan`` for one GPU (AdamW; fp32, bf16 autocast as DDP's mixed
  precision less DDP's bucket, every block checkpointed) against a real training
  step's peak allocated bytes here, less the workspaces;
- ``generate``: ``profile_generate`` with timing on a 0.6B Llama in bfloat16, plain
  ``generate()`` timed, and ``estimate_generate`` for this GPU from a meta copy.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

import layerscope as ls
from layerscope.collect.target import Target

FAILED: list[str] = []
#: ``--cpu`` runs the checks that need no GPU on the CPU (to try the script itself)
DEV = "cuda"


def check(name: str) -> Callable[[Callable[[], None]], Callable[[], None]]:
    def wrap(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            print(f"\n=== {name} ===", flush=True)
            start = time.perf_counter()
            try:
                fn()
            except Exception:
                traceback.print_exc()
                FAILED.append(name)
            print(f"--- {name}: {time.perf_counter() - start:.1f} s", flush=True)

        run.__name__ = name
        return run

    return wrap


def gpt2(layers: int) -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=layers, n_embd=256, n_head=4, vocab_size=1000, n_positions=256)
    config._attn_implementation = "sdpa"
    return GPT2LMHeadModel(config)


def bert() -> nn.Module:
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    config = BertConfig(
        num_hidden_layers=2, hidden_size=256, num_attention_heads=4, intermediate_size=512,
        vocab_size=1000, max_position_embeddings=256,
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    return BertForMaskedLM(config)


def llama() -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        num_hidden_layers=2, hidden_size=256, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=512, vocab_size=1000, max_position_embeddings=256,
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    return LlamaForCausalLM(config)


HF_MODELS: dict[str, Callable[[], nn.Module]] = {
    "gpt2": lambda: gpt2(2),
    "bert": bert,
    "llama": llama,
}


def ids(device: str | torch.device) -> torch.Tensor:
    return torch.randint(0, 1000, (4, 128), device=device)


def loss(out: Any) -> torch.Tensor:
    """A loss that reads every output element (the logits of a Hugging Face model)."""
    if not isinstance(out, torch.Tensor):
        out = out.logits if hasattr(out, "logits") else out.last_hidden_state
    result: torch.Tensor = out.float().pow(2).mean()
    return result


def this_gpu() -> Target:
    major, minor = torch.cuda.get_device_capability()
    cudnn = torch.backends.cudnn.version()  # type: ignore[no-untyped-call]
    return Target("cuda", f"sm{major}{minor}", "this-gpu", int(cudnn or 0))


def warm() -> None:
    a = torch.randn(64, 256, device="cuda")
    (a @ torch.randn(256, 256, device="cuda")).sum()
    torch.cuda.synchronize()


def _zoo() -> list[tuple[str, Callable[[], nn.Module], list[Any]]]:
    """(name, builder, input shapes; "ids" for token ids) of the layers compared."""
    img, seq = (4, 16, 12, 12), (4, 24, 64)
    return [
        ("linear", lambda: nn.Linear(64, 96), [seq]),
        ("conv1d", lambda: nn.Conv1d(16, 32, 3, padding=1), [(4, 16, 40)]),
        ("conv2d", lambda: nn.Conv2d(16, 32, 3, stride=2), [img]),
        ("conv3d", lambda: nn.Conv3d(4, 8, 3), [(2, 4, 6, 6, 6)]),
        ("convT2d", lambda: nn.ConvTranspose2d(16, 8, 2, stride=2), [img]),
        ("dwconv", lambda: nn.Conv2d(16, 16, 3, groups=16), [img]),
        ("batchnorm", lambda: nn.BatchNorm2d(16), [img]),
        (
            "batchnorm_eval",
            lambda: nn.Sequential(nn.Conv2d(16, 16, 1), nn.BatchNorm2d(16).eval()),
            [img],
        ),
        ("layernorm", lambda: nn.LayerNorm(64), [seq]),
        ("groupnorm", lambda: nn.GroupNorm(4, 16), [img]),
        ("instancenorm", lambda: nn.InstanceNorm2d(16, affine=True), [img]),
        ("rmsnorm", lambda: nn.RMSNorm(64), [seq]),
        ("embedding", lambda: nn.Embedding(50, 32), ["ids"]),
        ("embeddingbag", lambda: nn.EmbeddingBag(50, 32), ["ids"]),
        ("mha", lambda: Self(nn.MultiheadAttention(64, 4, batch_first=True)), [seq]),
        (
            "mha_dropout",
            lambda: Self(nn.MultiheadAttention(64, 4, dropout=0.1, batch_first=True)),
            [seq],
        ),
        (
            "encoder_layer",
            lambda: nn.TransformerEncoderLayer(64, 4, 128, batch_first=True),
            [seq],
        ),
        ("dropout", lambda: nn.Dropout(0.2), [seq]),
        ("gelu", lambda: nn.GELU(), [seq]),
        ("gelu_tanh", lambda: nn.GELU("tanh"), [seq]),
        ("silu", lambda: nn.SiLU(), [seq]),
        ("softmax", lambda: nn.Softmax(-1), [seq]),
        ("logsoftmax", lambda: nn.LogSoftmax(-1), [seq]),
        ("maxpool", lambda: nn.MaxPool2d(2), [img]),
        ("avgpool", lambda: nn.AvgPool2d(3, stride=2), [img]),
        ("adaptive_avg", lambda: nn.AdaptiveAvgPool2d(5), [img]),
        ("adaptive_max", lambda: nn.AdaptiveMaxPool2d(5), [img]),
        ("upsample", lambda: nn.Upsample(scale_factor=2, mode="bilinear"), [img]),
        ("upsample_nearest", lambda: nn.Upsample(scale_factor=2), [img]),
        ("pixel_shuffle", lambda: nn.PixelShuffle(2), [img]),
        ("lstm", lambda: First(nn.LSTM(64, 32, batch_first=True)), [seq]),
        ("gru", lambda: First(nn.GRU(64, 32, num_layers=2, batch_first=True)), [seq]),
    ]


class Self(nn.Module):
    """Self-attention through ``nn.MultiheadAttention``: its output only."""

    def __init__(self, attn: nn.MultiheadAttention) -> None:
        super().__init__()
        self.attn = attn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.attn(x, x, x, need_weights=False)[0]
        return out


class First(nn.Module):
    """An RNN's output sequence only."""

    def __init__(self, rnn: nn.Module) -> None:
        super().__init__()
        self.rnn = rnn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rnn(x)[0]  # type: ignore[no-any-return]


ZOO = _zoo()
KEYS = ("flops", "backward_flops", "activation_bytes", "output_bytes")


def compare(name: str, dtype: torch.dtype, model: nn.Module, inputs: list[torch.Tensor]) -> int:
    """Profile ``model`` on this GPU and on meta steered to it; print and count the
    metrics that differ."""
    real = [t.clone().to(DEV).requires_grad_(t.is_floating_point()) for t in inputs]
    meta = [t.to("meta").requires_grad_(t.is_floating_point()) for t in inputs]
    gpu = ls.profile(model.to(DEV), args=real, memory=True, backward=True, loss_fn=loss)
    target = this_gpu() if DEV == "cuda" else "cpu"
    met = ls.profile(
        ls.to_meta(model), args=meta, memory=True, backward=True, loss_fn=loss, target=target
    )
    wrong = []
    for node in gpu.nodes():
        other = met.node(node.path).metrics
        for key in KEYS:
            if node.metrics.get(key) != other.get(key):
                got = (node.metrics.get(key), other.get(key))
                wrong.append(f"{node.path or '<root>'} {key} gpu {got[0]} meta {got[1]}")
        peak = node.metrics.get("simulated_peak_bytes", node.metrics.get("peak_bytes"))
        if peak != other.get("peak_bytes"):
            wrong.append(
                f"{node.path or '<root>'} peak gpu(sim) {peak} meta {other.get('peak_bytes')}"
            )
    kernels = met.model.get("kernels")
    print(f"{name:18} {str(dtype)[6:]:9} {'ok' if not wrong else 'DIFF'} {kernels or ''}")
    for line in wrong:
        print("    ", line)
    return len(wrong)


def real_step(model: nn.Module, precision: str, checkpoint: bool) -> tuple[int, int]:
    """A real AdamW training step on this GPU: the bytes allocated before the third step
    beyond the parameters, optimizer states and input (workspaces), and the step's peak."""
    from torch.utils.checkpoint import set_checkpoint_early_stop

    model = model.to(DEV).train()
    if checkpoint:
        model.gradient_checkpointing_enable({"use_reentrant": False})  # type: ignore[operator]
    opt = torch.optim.AdamW(model.parameters())
    x = ids(DEV)

    def step() -> None:
        with torch.autocast(DEV, torch.bfloat16, enabled=precision == "bf16-mixed"):
            out = model(x)
        loss(out).backward()  # type: ignore[no-untyped-call]
        opt.step()
        opt.zero_grad(set_to_none=True)

    with set_checkpoint_early_stop(False):
        step()
        step()
        torch.cuda.synchronize()
        states = [t for s in opt.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
        held = sum(t.nbytes for t in [*model.parameters(), *states, x] if t.is_cuda)
        extra = torch.cuda.memory_allocated() - held
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
    return extra, torch.cuda.max_memory_allocated()


def generate_vs_estimate() -> None:
    """A 0.6B-parameter Llama in bfloat16 generating 16 tokens for 8 sequences of 512:
    ``profile_generate`` with timing, plain ``generate()`` timed, and the estimate for
    this GPU from a meta copy."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        num_hidden_layers=8, hidden_size=2048, num_attention_heads=16, num_key_value_heads=4,
        intermediate_size=5632, vocab_size=32000, max_position_embeddings=4096,
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device(DEV):
        model = LlamaForCausalLM(config).to(torch.bfloat16).eval()  # type: ignore[arg-type]
    batch, prompt, new = 8, 512, 16
    x = torch.randint(0, 32000, (batch, prompt), device=DEV)
    start = time.perf_counter()
    gen = ls.profile_generate(model, x, max_new_tokens=new, timing=5)
    print(f"profile_generate took {time.perf_counter() - start:.1f} s")
    print(gen.render(width=80))
    walls = []
    for _ in range(3):
        torch.cuda.synchronize()
        start = time.perf_counter()
        model.generate(x, max_new_tokens=new, min_new_tokens=new, do_sample=False)
        torch.cuda.synchronize()
        walls.append(time.perf_counter() - start)
    calls = sum(r.time or 0.0 for r in gen.calls)
    print(f"generate() wall {min(walls) * 1e3:.1f} ms; the calls' medians sum {calls * 1e3:.1f} ms")
    target = "h200" if "H200" in torch.cuda.get_device_name() else "h100"
    with torch.device("meta"):
        meta = LlamaForCausalLM(config).to(torch.bfloat16)  # type: ignore[arg-type]
    est = ls.estimate_generate(meta, target=target, prompt=prompt, new_tokens=new, batch=[batch])
    print(est.render(width=80))
    decode = [r.time or 0.0 for r in gen.calls if r.stage == "decode"]
    measured = sorted(decode)[len(decode) // 2]
    prefill = gen.calls[0].time or 0.0
    print(
        f"prefill measured {prefill * 1e3:.3f} ms, bound {est.prefill_time * 1e3:.3f} ms "
        f"(x{prefill / est.prefill_time:.2f}); decode per token measured "
        f"{measured * 1e3:.3f} ms, bound {est.decode_time_per_token * 1e3:.3f} ms "
        f"(x{measured / est.decode_time_per_token:.2f})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--cpu", action="store_true", help="try the script without a GPU")
    parser.add_argument("--checks", default="", help="comma-separated check names (all)")
    args = parser.parse_args()
    global DEV
    DEV = "cpu" if args.cpu else "cuda"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print("torch", torch.__version__, "cuda", torch.version.cuda)
    if DEV == "cuda":
        print(torch.cuda.get_device_name(), torch.cuda.get_device_capability())
        print("cudnn", torch.backends.cudnn.version())  # type: ignore[no-untyped-call]
        warm()

    @check("allocator")
    def allocator() -> None:
        model = gpt2(args.layers).to(DEV).train()
        prof = ls.profile(model, ids(DEV), memory=True, backward=True, loss_fn=loss)
        print("allocator:", prof.memory.get("allocator"))
        print({k: v for k, v in prof.memory.get("cuda", {}).items()})
        rows = []
        for node in prof.nodes():
            m = node.metrics
            if "peak_bytes" in m and "simulated_peak_bytes" in m:
                rows.append((node.path, m["simulated_peak_bytes"], m["peak_bytes"]))
        for path, sim, real in rows[:40]:
            print(f"{path or '(root)':40} sim {sim:>12,} cuda {real:>12,} diff {real - sim:>+12,}")
        print(prof.render(width=80, columns=["peak_bytes", "activation_bytes"]))

    @check("steered")
    def steered() -> None:
        wrong = 0
        for name, build in HF_MODELS.items():
            for dtype in (torch.float32, torch.bfloat16):
                model = build().to(dtype).train()
                wrong += compare(name, dtype, model, [ids("cpu")])
        if wrong:
            raise AssertionError(f"{wrong} differences between the GPU and steered meta")

    @check("baseline")
    def baseline() -> None:
        model = gpt2(args.layers).to(DEV).train()
        opt = torch.optim.AdamW(model.parameters())
        x = ids(DEV)
        loss(model(x)).backward()  # type: ignore[no-untyped-call]
        opt.step()
        cuda = DEV == "cuda"
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        allocated = torch.cuda.memory_allocated() if cuda else None
        prof = ls.profile(model, x, memory=True, backward=True, loss_fn=loss, optimizer=opt)
        peak = torch.cuda.max_memory_allocated() if cuda else None
        base = prof.memory.get("baseline")
        print("baseline:", base)
        print("allocated at start", allocated, "max allocated during", peak)
        print("session_peak_bytes", prof.memory.get("session_peak_bytes"))
        print(prof.render(width=80))

    @check("timers")
    def timers() -> None:
        model = gpt2(args.layers).to(DEV).train()
        x = ids(DEV)
        for timer in ("hooks", "kineto"):
            opts = {"timer": timer, "repeats": 5, "warmup": 2}
            if timer == "kineto":
                opts["ops"] = True
            prof = ls.profile(model, x, backward=True, loss_fn=loss, timing=opts)
            root = prof.root.metrics
            selfs = {
                key: sum(n.self_metrics.get(key, 0) for n in prof.nodes())
                for key in ("forward_time", "backward_time", "device_time")
                if key in root
            }
            print(timer, prof.timing.get("clock"), {k: root[k] for k in selfs}, "self sums", selfs)
            print(prof.render(width=80, top=8, sort_by="forward_time"))

    @check("cli")
    def cli() -> None:
        env = {**os.environ, "COLUMNS": "80"}
        base = [sys.executable, "-m", "layerscope", "profile", "examples:tiny_gpt"]
        opts = ["--device", DEV, "--train", "--backward", "--memory", "--time"]
        for extra in ([], ["-o", str(out / "tiny_gpt_cuda.html")], ["--timer", "kineto"]):
            cmd = base + opts + extra
            print("$", " ".join(cmd[1:]))
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
            print(done.stdout[-6000:], done.stderr[-3000:])
            if done.returncode:
                raise AssertionError(f"exit status {done.returncode}")

    @check("zoo")
    def zoo() -> None:
        total = 0
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            for name, build, shapes in ZOO:
                torch.manual_seed(0)
                model = build().to(dtype).train()
                inputs = [
                    torch.randint(0, 50, (8, 5))
                    if shape == "ids"
                    else torch.randn(*shape, dtype=dtype)
                    for shape in shapes
                ]
                try:
                    total += compare(name, dtype, model, inputs)
                except Exception as e:
                    total += 1
                    print("ERROR", name, dtype, type(e).__name__, str(e)[:300])
        print("differences in all", total)

    @check("kineto_trace")
    def kineto_trace() -> None:
        from layerscope import examples
        from layerscope.collect.timing import kineto
        from layerscope.collect.timing.runner import time_profile

        original = kineto.parse_events

        def spy(events: Any, index: Any, result: Any, warm: int, *rest: Any, **kw: Any) -> None:
            reps = [e for e in events if e.name == kineto.REPEAT_LABEL]
            mods = [e for e in events if e.name.startswith(kineto.MODULE_PREFIX)]
            print("events", len(events), "repeats", len(reps), "warm", warm, "modules", len(mods))
            for r in reps:
                kids = [c.name for c in r.cpu_children]
                print(
                    "  repeat", r.time_range.start, r.time_range.end, r.thread, len(kids), kids[:4]
                )
            for m in mods[:3]:
                parent = m.cpu_parent.name if m.cpu_parent is not None else None
                print("  module", m.name, m.thread, m.time_range.start, "parent", parent)
            original(events, index, result, warm, *rest, **kw)
            print("  spans per repeat", [len(sp.forward) for sp in result.spans])

        kineto.parse_events = spy
        try:
            for device in ("cpu", DEV):
                ex = examples.get("tiny_resnet")
                model = ex.build().to(device).train()
                x = ex.example_input().to(device)
                prof = ls.profile(model, x)
                time_profile(
                    prof, model, (x,), timer="kineto", ops=True, backward=True, warmup=1,
                    repeats=2, progress=False,
                )  # fmt: skip
                trace = prof.timing["trace"]
                print(device, {k: len(v) if isinstance(v, list) else v for k, v in trace.items()})
        finally:
            kineto.parse_events = original

    @check("plan")
    def plan() -> None:
        target = "h200" if "H200" in torch.cuda.get_device_name() else "h100"
        for precision, checkpoint in (("fp32", None), ("bf16-mixed", None), ("fp32", "blocks")):
            # autocast is DDP's mixed precision: DDP on one GPU, less its bucket
            sharding = "ddp" if precision == "bf16-mixed" else "none"
            # transformers turns the cache off under its gradient checkpointing
            kwargs = {"use_cache": False} if checkpoint else None
            plan = ls.plan(
                gpt2(4), ids("cpu"), kwargs=kwargs, target=target, world_size=1,
                sharding=sharding, precision=precision, checkpoint=checkpoint,
                reserve_bytes=0, loss_fn=loss,
            )  # fmt: skip
            planned = plan.peak_bytes - plan.memory["comm_buffer_bytes"]
            # what the GPU holds at rest beyond the model states and the input: cuBLAS
            # and cuBLASLt workspaces (the plan's reserve stands for them)
            extra, peak = real_step(gpt2(4), precision, checkpoint is not None)
            real = peak - extra
            print(
                f"{precision:10} {checkpoint or '-':6} plan {planned:>12,} "
                f"({plan.peak_phase.get('phase')}) measured {real:>12,} (+{extra:,} "
                f"workspaces) diff {real - planned:>+11,} ({(real - planned) / real:+.2%})"
            )
            print("   plan memory", plan.memory, "states", plan.states)

    @check("generate")
    def generate() -> None:
        generate_vs_estimate()

    chosen = {name for name in args.checks.split(",") if name}
    for fn in (allocator, steered, zoo, kineto_trace, baseline, timers, cli, plan, generate):
        if not chosen or fn.__name__ in chosen:
            fn()
    print("\nfailed:", FAILED or "none")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
