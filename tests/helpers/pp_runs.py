"""Real pipeline-parallel training steps on CPU (gloo) and what each stage holds and sends.

A stack of an input Linear(64, 64) (``stem``), ``BLOCKS`` identical blocks
``LayerNorm(64), Linear(64, 256), GELU(), Linear(256, 64)`` and an output Linear(64, 32)
(``head``), float32, seeded, cut by hand into one ``PipelineStage`` per rank (stage 0 the
stem and the first ``BLOCKS / S`` blocks, the last stage the last blocks and the head),
trained three AdamW steps by ``torch.distributed.pipelining``'s ``ScheduleGPipe``,
``Schedule1F1B`` and ``ScheduleInterleaved1F1B`` (each rank holding ``VIRTUAL`` stages of
``S x VIRTUAL`` cut alike), and ``ScheduleInterleavedZeroBubble`` (``zb``: one stage a
rank, ``zb2``: ``VIRTUAL``, both with ``return_outputs=False``; ``zbk``: one stage a rank,
the outputs returned), and ``ScheduleZBVZeroBubble`` (``zbv``: stages ``r`` and ``2 S - 1
- r`` on rank ``r``, the first and the last on rank 0; outputs not returned), the
zero-bubble runs' blocks ``Residual`` (an output that is not a view), with 4 and 8
microbatches of ``[ROWS, SEQ, WIDTH]`` on one seeded batch, mean squared error against a
fixed random target. The third step is measured.

Each rank's ``rank{r}.json``: ``{"gpipe-4": facts, "gpipe-8": ..., "1f1b-4": ...,
"1f1b-8": ..., "alone": {...}}``. ``facts``:

- ``params``, ``grads`` (after the step's backward), ``states`` (AdamW's two moments),
  ``steps`` (its ``step`` tensors): bytes of this stage's tensors;
- ``p2p[phase][direction] = {"calls", "bytes", "shapes"}``: every point-to-point op of
  the step seen by a dispatch mode (``c10d::send``/``recv_``), phase ``forward`` (an
  activation: sent to the next stage, received from the previous) or ``backward`` (a
  gradient: sent to the previous, received from the next), direction ``sent`` or
  ``received``; ``wrapped``: the same counted by wrapping ``dist.isend``/``irecv``;
- ``baseline``: bytes of the distinct storages of every tensor alive before the step
  (found by ``gc``), ``known``: those of this stage's parameters, AdamW's states, the
  batch and the stage's receive buffers, by name;
- ``peak``: live bytes above the baseline at the step's peak (forward, backward and the
  optimizer), ``pipeline_peak``: the same up to the end of the schedule's ``step``;
- ``actions``: ``[kind, microbatch, live bytes above the baseline before and after it,
  the peak while it ran]`` for each forward (``F``), backward (``B``), input half
  (``I``) and weight half (``W``) the schedule ran, in order;
- ``losses``: the last stage's microbatch losses of each step (``[]`` elsewhere);
  ``reference``: the unsplit model's loss on the whole batch over the same steps.

``alone`` (this rank's stage, of ``world``): one microbatch run through the stage's
module outside the pipeline, twice: ``held``, the live bytes its forward leaves for its
backward (the output and what autograd saved); ``loss_held``, what the last stage's loss
adds (the other stages: the output's gradient, as received); ``first`` and ``later``,
the first and the second backward's peak above its start.
"""

from __future__ import annotations

import gc
import warnings
from collections import OrderedDict
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch import nn

from helpers.distributed import rank_output
from helpers.records import StorageTracker

WIDTH, HIDDEN, OUT, BLOCKS = 64, 256, 32, 8
ROWS, SEQ = 2, 16  # a microbatch: [2, 16, 64]
STEPS = 3  # the last measured
SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb", "zb2", "zbk")
#: ``step(return_outputs=)``: the zero-bubble runs as torchtitan's (False), but ``zbk``
RETURN_OUTPUTS = {"gpipe": True, "1f1b": True, "interleaved": True, "zb": False,
                  "zb2": False, "zbk": True, "zbv": False}  # fmt: skip
MICROBATCHES = (4, 8)
#: and two with gradient accumulation: the measured step runs after one whose gradients
#: it adds into (``+accum``: both steps observed, the second's peak the higher)
CONFIGS = (*(f"{s}-{m}" for s in SCHEDULES for m in MICROBATCHES), "gpipe-4+accum",
           "1f1b-4+accum")  # fmt: skip
#: interleaved 1F1B: the stages a rank holds
VIRTUAL = 2
LR = 0.01


class Residual(nn.Sequential):
    """A block with its input added to its output: ``x + block(x)``, an output that is not
    a view (torch's zero-bubble schedules detach a stage's output in place, which a view
    refuses)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = x + super().forward(x)  # type: ignore[no-untyped-call]
        return out


def stack(residual: bool = False) -> nn.Sequential:
    """The whole model, seeded: the same weights on every rank; ``residual``: the blocks
    are ``Residual``."""
    torch.manual_seed(0)
    parts: OrderedDict[str, nn.Module] = OrderedDict(stem=nn.Linear(WIDTH, WIDTH))
    kind = Residual if residual else nn.Sequential
    for i in range(BLOCKS):
        parts[f"block{i}"] = kind(
            nn.LayerNorm(WIDTH), nn.Linear(WIDTH, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, WIDTH)
        )
    parts["head"] = nn.Linear(WIDTH, OUT)
    return nn.Sequential(parts)


def stage_module(model: nn.Sequential, stage: int, stages: int) -> nn.Sequential:
    """Stage ``stage`` of ``stages``: its ``BLOCKS / stages`` blocks, the stem first on
    stage 0 and the head last on the last stage (the whole model's own modules)."""
    per = BLOCKS // stages
    names = [f"block{i}" for i in range(stage * per, (stage + 1) * per)]
    if stage == 0:
        names.insert(0, "stem")
    if stage == stages - 1:
        names.append("head")
    return nn.Sequential(OrderedDict((n, getattr(model, n)) for n in names))


def data(microbatches: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(the batch [M x ROWS, SEQ, WIDTH], the target [M x ROWS, SEQ, OUT]), seeded."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(microbatches * ROWS, SEQ, WIDTH, generator=gen)
    return x, torch.randn(microbatches * ROWS, SEQ, OUT, generator=gen)


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error: the mean of the microbatches' is the whole batch's."""
    return nn.functional.mse_loss(output, target)


def storage_bytes(tensors: list[torch.Tensor]) -> int:
    """Bytes of the distinct storages under ``tensors``."""
    seen = {id(t.untyped_storage()): t.untyped_storage().nbytes() for t in tensors}
    return sum(seen.values())


def live_tensors() -> list[torch.Tensor]:
    """Every tensor Python can reach (``gc``), the leaves' gradients among them."""
    with warnings.catch_warnings():  # isinstance on deprecated torch.distributed objects
        warnings.simplefilter("ignore")
        found = [o for o in gc.get_objects() if isinstance(o, torch.Tensor)]
    return found + [t.grad for t in found if t.is_leaf and t.grad is not None]


def state_bytes(module: nn.Module, opt: torch.optim.Optimizer) -> dict[str, int]:
    """Bytes of the stage's parameters, gradients, AdamW's moments and its ``step``s."""
    params = list(module.parameters())
    moments = [s[k] for s in opt.state.values() for k in ("exp_avg", "exp_avg_sq")]
    return {
        "params": sum(p.nbytes for p in params),
        "grads": sum(p.grad.nbytes for p in params if p.grad is not None),
        "states": sum(t.nbytes for t in moments),
        "steps": sum(s["step"].nbytes for s in opt.state.values()),
    }


def recv_buffers(stages: list[Any]) -> list[torch.Tensor]:
    """The stages' persistent receive buffers: an activation's per microbatch (not on
    stage 0) and a gradient's per microbatch (not on the last stage)."""
    infos = [i for stage in stages for recv in stage.args_recv_info.values() for i in recv]
    infos += [i for stage in stages for recv in stage.grad_recv_info.values() for i in recv]
    return [i.buffer for i in infos if i.buffer is not None and not i.is_root_arg]


def known_bytes(
    module: nn.Module, opt: torch.optim.Optimizer, stage: list[Any], batch: list[torch.Tensor]
) -> dict[str, int]:
    """The baseline's parts by name: parameters, AdamW's states, the stage's receive
    buffers and the batch and target this rank holds."""
    return {
        "params": storage_bytes(list(module.parameters())),
        "optimizer": storage_bytes([t for s in opt.state.values() for t in s.values()]),
        "recv_buffers": storage_bytes(recv_buffers(stage)),
        "batch": storage_bytes(batch),
    }


def other_shapes(
    alive: list[torch.Tensor], module: nn.Module, opt: torch.optim.Optimizer,
    stage: list[Any], batch: list[torch.Tensor],
) -> list[list[int]]:  # fmt: skip
    """Shapes of the live storages the baseline holds beyond ``known_bytes``' parts."""
    known = list(module.parameters()) + recv_buffers(stage) + batch
    known += [t for s in opt.state.values() for t in s.values()]
    mine = {id(t.untyped_storage()) for t in known}
    other = {id(t.untyped_storage()): list(t.shape) for t in alive}
    return [shape for key, shape in other.items() if key not in mine]


class P2PObserver(StorageTracker):  # type: ignore[no-untyped-call]
    """The storages a step allocates (``StorageTracker``) and its point-to-point ops:
    ``p2p[phase][direction] = {"calls", "bytes", "shapes"}``, the phase told by the
    peer (the next stage's rank: a forward send or a backward receive)."""

    def __init__(self, rank: int) -> None:
        super().__init__([])
        self.rank = rank
        self.p2p: dict[str, dict[str, dict[str, Any]]] = {}

    def record(self, direction: str, peer: int, tensors: list[torch.Tensor]) -> None:
        downstream = peer > self.rank
        phase = "forward" if downstream == (direction == "sent") else "backward"
        row = self.p2p.setdefault(phase, {}).setdefault(
            direction, {"calls": 0, "bytes": 0, "shapes": []}
        )
        row["calls"] += 1
        row["bytes"] += sum(t.nbytes for t in tensors)
        for t in tensors:
            if list(t.shape) not in row["shapes"]:
                row["shapes"].append(list(t.shape))

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        namespace, _, name = func._schema.name.partition("::")
        if namespace == "c10d" and name in ("send", "recv_"):
            names = [a.name for a in func._schema.arguments]
            values = dict(zip(names, args, strict=False)) | kwargs
            peer = values["dst" if name == "send" else "src"]  # the group's rank: the world's here
            self.record("sent" if name == "send" else "received", int(peer), values["tensors"])
        return super().__torch_dispatch__(func, types, args, kwargs)


class Wrapped:
    """``dist.isend``/``dist.irecv`` wrapped while in use: their calls and bytes, a
    count that owes nothing to dispatch."""

    def __init__(self) -> None:
        self.counts: dict[str, dict[str, int]] = {}
        self._saved = (dist.isend, dist.irecv)

    def _wrap(self, fn: Any, direction: str) -> Any:
        def call(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            row = self.counts.setdefault(direction, {"calls": 0, "bytes": 0})
            row["calls"] += 1
            row["bytes"] += tensor.nbytes
            return fn(tensor, *args, **kwargs)

        return call

    def __enter__(self) -> Wrapped:
        # both names: ``P2POp`` and ``batch_isend_irecv`` compare ``op`` with c10d's own
        wrapped = (self._wrap(self._saved[0], "sent"), self._wrap(self._saved[1], "received"))
        dist.isend, dist.irecv = c10d.isend, c10d.irecv = wrapped
        return self

    def __exit__(self, *exc: object) -> None:
        dist.isend, dist.irecv = c10d.isend, c10d.irecv = self._saved


def watch_actions(stages: list[Any], seen: P2PObserver, actions: list[list[Any]]) -> None:
    """Record, for each of the stages' forwards and backwards, the live bytes before and
    after it and their peak while it ran."""

    def watched(kind: str, fn: Any) -> Any:
        def call(chunk: int, *args: Any, **kwargs: Any) -> Any:
            before, overall = seen.level, seen.peak
            seen.peak = before
            out = fn(chunk, *args, **kwargs)
            actions.append([kind, chunk, before, seen.level, seen.peak])
            seen.peak = max(overall, seen.peak)
            return out

        return call

    def backward(stage: Any) -> Any:
        full, partial = (
            watched("B", stage.backward_one_chunk),
            watched("I", stage.backward_one_chunk),
        )

        def call(chunk: int, *args: Any, **kwargs: Any) -> Any:
            return (full if kwargs.get("full_backward", True) else partial)(chunk, *args, **kwargs)

        return call

    for stage in stages:
        stage.forward_one_chunk = watched("F", stage.forward_one_chunk)
        stage.backward_one_chunk = backward(stage)
        stage.backward_weight_one_chunk = watched("W", stage.backward_weight_one_chunk)


def build(schedule: str, microbatches: int, rank: int, world: int) -> tuple[Any, ...]:
    """(the rank's module, its ``PipelineStage``s, the schedule, AdamW): one stage, or
    under interleaved 1F1B ``VIRTUAL`` (the stages ``rank``, ``rank + world``, ... of
    ``world x VIRTUAL``), their modules in one ``ModuleList``."""
    from torch.distributed.pipelining import (
        PipelineStage,
        Schedule1F1B,
        ScheduleGPipe,
        ScheduleInterleaved1F1B,
        ScheduleInterleavedZeroBubble,
        ScheduleZBVZeroBubble,
    )

    MULTI = {
        "interleaved": (ScheduleInterleaved1F1B, VIRTUAL),
        "zb": (ScheduleInterleavedZeroBubble, 1),
        "zb2": (ScheduleInterleavedZeroBubble, VIRTUAL),
        "zbk": (ScheduleInterleavedZeroBubble, 1),
        "zbv": (ScheduleZBVZeroBubble, 2),
    }

    model, cpu = stack(schedule.startswith("zb")), torch.device("cpu")
    if schedule in MULTI:
        virtual = MULTI[schedule][1]
        count = world * virtual
        # ZBV: stages rank and 2 world - 1 - rank (a V); the others rank, rank + world, ...
        mine = [rank, count - 1 - rank] if schedule == "zbv" else range(rank, count, world)
        chunks = [stage_module(model, s, count) for s in mine]
        stages: list[Any] = [
            PipelineStage(c, s, count, cpu) for s, c in zip(mine, chunks, strict=True)
        ]
        runner: Any = MULTI[schedule][0](stages, n_microbatches=microbatches, loss_fn=loss_fn)
        module: nn.Module = nn.ModuleList(chunks)
    else:
        module = stage_module(model, rank, world)
        stages = [PipelineStage(module, rank, world, cpu)]
        kind = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule]
        runner = kind(stages[0], n_microbatches=microbatches, loss_fn=loss_fn)
    return module, stages, runner, torch.optim.AdamW(module.parameters(), lr=LR)


def step_once(
    runner: Any, rank: int, world: int, batch: tuple[torch.Tensor, ...], schedule: str
) -> list[float]:
    """One schedule step (forward and backward of every microbatch): the last stage's
    microbatch losses (under ZBV rank 0 holds the first and the last stage)."""
    losses: list[torch.Tensor] = []
    keep = RETURN_OUTPUTS[schedule]
    if schedule == "zbv" and rank == 0:
        runner.step(batch[0], target=batch[1], losses=losses, return_outputs=keep)
    elif rank == 0:
        runner.step(batch[0])
    elif rank == world - 1 and schedule != "zbv":
        runner.step(target=batch[1], losses=losses, return_outputs=keep)
    else:
        runner.step()
    return [loss.item() for loss in losses]


def measured_step(
    parts: tuple[Any, ...],
    rank: int,
    world: int,
    batch: tuple[torch.Tensor, ...],
    schedule: str,
    accumulate: bool = False,
) -> tuple[list[float], dict[str, Any]]:
    """One observed step: its losses and its figures (``accumulate``: after another
    step, observed too, whose gradients it adds into)."""
    module, stage, runner, opt = parts
    for one in stage:  # as ``step`` does first: the last step's outputs go
        one.clear_runtime_states()
    gc.collect()
    alive = live_tensors()
    facts: dict[str, Any] = {"baseline": storage_bytes(alive)}
    facts["known"] = known_bytes(module, opt, stage, list(batch))
    facts["other"] = other_shapes(alive, module, opt, stage, list(batch))
    seen, actions = P2PObserver(rank), list[list[Any]]()
    watch_actions(stage, seen, actions)
    with Wrapped() as wrapped, seen:
        if accumulate:
            step_once(runner, rank, world, batch, schedule)
            for one in stage:
                one.clear_runtime_states()
        losses = step_once(runner, rank, world, batch, schedule)
        facts.update(state_bytes(module, opt))
        facts["pipeline_peak"] = seen.peak
        opt.step()
    for one in stage:
        del one.forward_one_chunk, one.backward_one_chunk, one.backward_weight_one_chunk
    facts.update(p2p=seen.p2p, wrapped=wrapped.counts, peak=seen.peak, actions=actions)
    return losses, facts


def reference_losses(microbatches: int, residual: bool) -> list[float]:
    """The unsplit model's loss on the whole batch over ``STEPS`` steps."""
    model = stack(residual)
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    x, target = data(microbatches)
    out = []
    for _ in range(STEPS):
        loss = loss_fn(model(x), target)
        out.append(loss.item())
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        opt.zero_grad(set_to_none=True)
    return out


def run(config: str, rank: int, world: int) -> dict[str, Any]:
    """``STEPS`` steps of one schedule and microbatch count, the last observed."""
    schedule, _, count = config.partition("-")
    count, _, extra = count.partition("+")
    parts = build(schedule, int(count), rank, world)
    batch = data(int(count))
    losses: list[list[float]] = []
    for step in range(STEPS):
        if step < STEPS - 1:
            losses.append(step_once(parts[2], rank, world, batch, schedule))
            parts[3].step()
        else:
            last, facts = measured_step(parts, rank, world, batch, schedule, extra == "accum")
            losses.append(last)
        parts[3].zero_grad(set_to_none=True)
    facts["losses"] = losses
    facts["reference"] = reference_losses(int(count), schedule.startswith("zb"))
    dist.barrier()
    return facts


def alone(rank: int, world: int) -> dict[str, int]:
    """One microbatch through this stage's module outside the pipeline, twice (its input
    a leaf that requires a gradient, as a received activation is): ``held``, the bytes
    the forward leaves for its backward; ``loss_held``, the loss's (last stage) or the
    output gradient's (the others: allocated before the backward, as a received one
    is); ``first``, the first backward's peak above its start (the gradients allocated
    in it) and ``later``, the second's (adding into them)."""
    module = stage_module(stack(), rank, world)
    x, target = data(1)
    if rank > 0:
        x = torch.randn(ROWS, SEQ, WIDTH).requires_grad_(True)
    seen, facts = StorageTracker([]), dict[str, int]()
    with seen:
        for key in ("first", "later"):
            out = module(x)  # kept to the backward's end, as the pipeline keeps it
            facts.setdefault("held", seen.level)
            grad = torch.ones_like(out) if rank < world - 1 else None  # received, held
            loss = loss_fn(out, target) if grad is None else out
            facts.setdefault("loss_held", seen.level - facts["held"])
            start = seen.peak = seen.level
            loss.backward(grad)
            facts[key] = seen.peak - start
            del out, grad, loss
            x.grad = None
    return facts


def worker(rank: int, store: str, out: str, world: int) -> None:
    """One rank, one stage: every configuration, its facts to ``rank{r}.json``."""
    facts: dict[str, Any] = {}
    with rank_output(rank, out, facts):
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
        for config in CONFIGS:
            facts[config] = run(config, rank, world)
        facts["alone"] = alone(rank, world)
