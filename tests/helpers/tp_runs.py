"""Real tensor-parallel training steps on CPU (gloo) and what each rank holds and sends.

A Llama-shaped ``LlamaForCausalLM`` (``CONFIG``) trained five AdamW steps in float32 on
one seeded batch, parallelized four ways (``CONFIGS``): torch's ``parallelize_module``
with colwise/rowwise linears (``llama_tp``), the same with sequence parallelism as
torchtitan's ``apply_tp`` does it (``llama_sp``), transformers' own ``apply_tensor_parallelism``
with the model's ``_tp_plan`` (``hf_plan``) and, on 4 ranks, ``llama_tp`` on the ``tp``
axis of a 2 x 2 mesh under FSDP2 on the ``dp_shard`` axis (``fsdp_tp``); on 2 ranks also
``llama_sp`` with every decoder layer under non-reentrant checkpoint (``llama_sp_ckpt``).
The third step is measured: the bytes of the local parameters, gradients and optimizer states, every
collective by phase, kind and module, and the live tensor storage over the step.

Each rank's ``rank{r}.json``: ``{configuration: facts, "commdebug": ...}``, facts holding
``params``, ``grads``, ``states`` (AdamW's two moments), ``steps`` (its ``step``
tensors): bytes of ``to_local()``; ``comm[module][phase][kind] = {"calls", "bytes"}``
(phases forward, backward, optimizer; module ``""`` outside the forward, or the root);
``issued``: each mesh axis's count of collectives from its process group; ``baseline``:
bytes alive before the step; ``peak``, ``trained_peak`` and ``forward_held``: live bytes
above it at the step's peak (``opt.step()`` included: on the CPU, AdamW's single-tensor
update allocates its temporaries beside every gradient), at the peak of the forward and
backward alone, and at the forward's end; ``unsettled``: collectives gloo's thread
held on to (none: the step frees every tensor itself, in its own order,
``StepObserver._settle``); ``late``: each observed step's storages that a thread other
than the step's freed (bytes, phase, module and op that made them: rarely one, a few
hundred bytes in ``opt.step()``), ``clean``: the observed steps without, whose facts
these are; ``unrepeated``: what of them the clean steps disagree in (nothing);
``losses`` and the plain model's ``reference``.
"""

from __future__ import annotations

import fnmatch
import threading
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from helpers.distributed import rank_output
from helpers.records import StorageTracker

#: the model's shape. 8 heads of 16 and 4 key/value heads keep the projections' shapes
#: of 4 heads of 16 and 2 key/value heads (q 64 x 64, k and v 32 x 64) while every tensor
#: -parallel rank of 4 still holds whole heads (2 query heads, 1 key/value head): with 2
#: key/value heads of 16, k_proj's 32 rows split 8 per rank, half a head, and the
#: attention's ``view(..., -1, head_dim)`` fails
CONFIG: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "vocab_size": 128,
}
BATCH, SEQ = 2, 16
#: steps run, the last ``MEASURED`` of them observed (the third, and two more that show
#: it repeats: peaks too, ``StepObserver._settle``)
STEPS, MEASURED = 5, 3
CONFIGS = ("llama_tp", "llama_sp", "hf_plan")
#: collective op names (without namespace) -> kind; layerscope's payload convention
KINDS = {
    "all_reduce": "all_reduce",
    "allreduce": "all_reduce",
    "all_gather": "all_gather",
    "allgather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "all_to_all": "all_to_all",
    "alltoall": "all_to_all",
    "broadcast": "broadcast",
}
#: ops of the collective namespaces that move no data (waits, autograd wrappers)
_NO_PAYLOAD = ("wait_tensor", "_wrap_tensor_autograd", "barrier")
#: the longest ``StepObserver`` waits for gloo's thread to let go of a collective's
#: tensors (microseconds, unloaded)
SETTLE_S = 5.0
#: how long it hands the GIL to gloo's thread after a c10d op's work is done
GRACE_S = 0.002
_PAYLOAD = ("input_tensors", "input_tensor", "input", "inputs", "tensors", "tensor")


def llama() -> nn.Module:
    """The model, seeded: the same weights on every rank."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    options: dict[str, Any] = {**CONFIG, "attn_implementation": "sdpa", "use_cache": False}
    model: nn.Module = LlamaForCausalLM(LlamaConfig(**options))  # float32, torch's default
    return model


def batch(seed: int, rows: int = BATCH) -> tuple[torch.Tensor, torch.Tensor]:
    """(input ids, labels) of ``rows`` sequences of ``SEQ`` tokens."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, CONFIG["vocab_size"], (rows, SEQ), generator=gen)
    return ids, torch.randint(0, CONFIG["vocab_size"], (rows, SEQ), generator=gen)


def outputs(model: nn.Module, ids: torch.Tensor) -> Any:
    """The model's output. The positions are passed: under sequence parallelism the
    embedding's output is this rank's slice of the sequence, and the model would number
    its positions from that shorter length."""
    positions = torch.arange(ids.shape[1]).unsqueeze(0)
    return model(input_ids=ids, position_ids=positions)


def loss_from(out: Any, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the logits."""
    logits = out.logits
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def loss_of(model: nn.Module, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return loss_from(outputs(model, ids), labels)


def layer_styles(sequence: bool) -> dict[str, Any]:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
    )

    out = Shard(1) if sequence else Replicate()
    styles: dict[str, Any] = {
        "self_attn.q_proj": ColwiseParallel(),
        "self_attn.k_proj": ColwiseParallel(),
        "self_attn.v_proj": ColwiseParallel(),
        "self_attn.o_proj": RowwiseParallel(output_layouts=out),
        "mlp.gate_proj": ColwiseParallel(),
        "mlp.up_proj": ColwiseParallel(),
        "mlp.down_proj": RowwiseParallel(output_layouts=out),
    }
    if sequence:  # LlamaDecoderLayer calls self_attn(hidden_states=...), mlp(hidden_states)
        styles["input_layernorm"] = SequenceParallel()
        styles["post_attention_layernorm"] = SequenceParallel()
        styles["self_attn"] = PrepareModuleInput(
            input_kwarg_layouts={"hidden_states": Shard(1)},
            desired_input_kwarg_layouts={"hidden_states": Replicate()},
        )
        styles["mlp"] = PrepareModuleInput(
            input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
        )
    return styles


def torch_tp(model: nn.Module, mesh: Any, sequence: bool) -> None:
    """torch's styles: colwise q/k/v/gate/up, rowwise o/down; with ``sequence`` also
    torchtitan's sequence parallelism (embedding, norms and lm_head)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    plan: dict[str, Any] = {}
    if sequence:
        plan["model.embed_tokens"] = RowwiseParallel(
            input_layouts=Replicate(), output_layouts=Shard(1)
        )
        plan["model.norm"] = SequenceParallel()
        plan["lm_head"] = ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())
    for i in range(CONFIG["num_hidden_layers"]):
        for path, style in layer_styles(sequence).items():
            plan[f"model.layers.{i}.{path}"] = style
    parallelize_module(model, mesh, plan)


def hf_plan(model: Any) -> dict[str, str]:
    """The model's own ``_tp_plan`` with its ``*`` patterns expanded: an entry per
    parameter of a matched module (sharded first) and one per matched module."""
    params = [n for n, _ in model.named_parameters()]
    modules = [n for n, _ in model.named_modules()]
    plan: dict[str, str] = {}
    for pattern, style in model._tp_plan.items():
        for name in params:
            if fnmatch.fnmatchcase(name.rpartition(".")[0], pattern):
                plan[name] = style
    for pattern, style in model._tp_plan.items():
        plan.update({m: style for m in modules if fnmatch.fnmatchcase(m, pattern)})
    return plan


def build(config: str, world: int) -> tuple[nn.Module, dict[str, Any], int]:
    """(the parallelized model, the process group of each mesh axis, the seed of this
    rank's batch: its data-parallel coordinate)."""
    from torch.distributed.device_mesh import init_device_mesh

    model = llama()
    if config == "fsdp_tp":
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp_shard", "tp"))
        torch_tp(model, mesh["tp"], sequence=False)
        for layer in model.model.layers:  # type: ignore[union-attr]
            fully_shard(layer, mesh=mesh["dp_shard"])
        fully_shard(model, mesh=mesh["dp_shard"])
        groups = {axis: mesh[axis].get_group() for axis in ("dp_shard", "tp")}
        return model, groups, mesh["dp_shard"].get_local_rank()
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
    if config == "hf_plan":
        from transformers.distributed.tensor_parallel import apply_tensor_parallelism

        apply_tensor_parallelism(model, mesh, hf_plan(model))
    else:
        torch_tp(model, mesh, sequence=config in ("llama_sp", "llama_sp_ckpt"))
    if config == "llama_sp_ckpt":  # every decoder layer under non-reentrant checkpoint
        _checkpointed(model.model.layers)  # type: ignore[union-attr]
    return model, {"tp": mesh.get_group()}, 0


def _checkpointed(layers: Any) -> None:
    """Each of ``layers`` run under non-reentrant ``torch.utils.checkpoint``, in place."""
    from torch.utils.checkpoint import checkpoint

    for layer in layers:

        def run(*args: Any, _forward: Any = layer.forward, **kwargs: Any) -> Any:
            return checkpoint(_forward, *args, use_reentrant=False, **kwargs)

        layer.forward = run


def local(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's local tensor (a plain tensor whole)."""
    return t.to_local() if hasattr(t, "to_local") else t


def state_bytes(model: nn.Module, opt: torch.optim.Optimizer) -> dict[str, int]:
    """Bytes of the local parameters, gradients, AdamW's moments and its ``step``s."""
    params = list(model.parameters())
    moments = [local(s[k]) for s in opt.state.values() for k in ("exp_avg", "exp_avg_sq")]
    return {
        "params": sum(local(p).nbytes for p in params),
        "grads": sum(local(p.grad).nbytes for p in params if p.grad is not None),
        "states": sum(t.nbytes for t in moments),
        "steps": sum(local(s["step"]).nbytes for s in opt.state.values()),
    }


def _is_dtensor(types: Any) -> bool:
    from torch.distributed.tensor import DTensor

    return any(isinstance(t, type) and issubclass(t, DTensor) for t in types)


def _fake(out: Any) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return any(isinstance(t, FakeTensor) for t in (out if isinstance(out, list | tuple) else [out]))


def _payload(func: Any, args: Any, kwargs: dict[str, Any]) -> int:
    """Bytes of the op's input (layerscope's payload: an all-reduce's tensor, an
    all-gather's shard, a reduce-scatter's whole input)."""
    names = [a.name for a in func._schema.arguments]
    for want in _PAYLOAD:
        if want in names:
            i = names.index(want)
            value = args[i] if i < len(args) else kwargs.get(want)
            flat = value if isinstance(value, list | tuple) else [value]
            return sum(t.nbytes for t in flat if isinstance(t, torch.Tensor))
    raise AssertionError(f"no input tensor named in {func._schema}")


class StepObserver(StorageTracker):  # type: ignore[no-untyped-call]
    """The storages a step allocates (``StorageTracker``) and its collectives by phase,
    module and kind: ``comm[module][phase][kind] = {"calls", "bytes"}``. Ops on DTensors
    are handed back (``NotImplemented``), so DTensor runs its local ops and functional
    collectives with this mode active; ops on its sharding propagation's FakeTensors
    are skipped, and so are the wrappers of collectives' outputs (``_holds_bytes``)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__([])
        self.phase = "forward"
        self.stack: list[str] = []
        self.comm: dict[str, dict[str, dict[str, dict[str, int]]]] = {}
        self.handles: list[Any] = []
        #: the storages another thread (gloo's) freed, at a moment the step did not
        #: choose: bytes, phase, module and op that made them (``made``); collectives
        #: whose work ``_settle`` did not see let go within ``SETTLE_S``
        self.late: list[str] = []
        self.made: dict[int, str] = {}
        self.unsettled = 0
        for name, module in model.named_modules():
            self.handles.append(module.register_forward_pre_hook(self._push(name), prepend=True))
            self.handles.append(module.register_forward_hook(self._pop(name), always_call=True))

    def _push(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any) -> None:
            self.stack.append(name)

        return hook

    def _pop(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, out: Any) -> None:
            assert self.stack.pop() == name

        return hook

    def remove(self) -> None:
        for h in self.handles:
            h.remove()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if _is_dtensor(types):
            return NotImplemented
        namespace, _, name = func._schema.name.partition("::")
        issues = "c10d" in namespace and name not in _NO_PAYLOAD
        inputs = _tensors((args, kwargs)) if issues else []
        counts = [_references(t) for t in inputs]  # the step's own, before the op
        out = func(*args, **(kwargs or {}))
        if _fake(out):
            return out
        if issues:
            kind = next((k for key, k in KINDS.items() if key in name), "other")
            module = module_of(self) if self.phase == "forward" else ""
            kinds = self.comm.setdefault(module, {}).setdefault(self.phase, {})
            row = kinds.setdefault(kind, {"calls": 0, "bytes": 0})
            row["calls"] += 1
            row["bytes"] += _payload(func, args, kwargs or {})
        if not any(r.alias_info is not None for r in func._schema.returns):
            for t in out if isinstance(out, tuple | list) else (out,):
                if _holds_bytes(t) and id(t.untyped_storage()) not in self.sizes:
                    self._count(t.untyped_storage(), t.untyped_storage().nbytes())
                    self.made[id(t.untyped_storage())] = f"{self.phase} {module_of(self)} {func}"
        if issues:
            want = {id(t): (t, n) for t, n in zip(inputs, counts, strict=True)}
            self._settle(out, want, functional=namespace == "_c10d_functional")
        return out

    def _settle(self, out: Any, want: dict[int, Any], functional: bool) -> None:
        """Wait for the collective just issued, then until gloo's worker thread has let
        go of its tensors (``want``: the inputs' references as before the op; an output's
        its own, ``(1, 2)``), while the step still holds them, so that the step frees them
        itself, in its own order. Otherwise the thread lets go after the step's wait, and
        a free by that thread needs the GIL, which the step's Python code keeps up to the
        interpreter's 5-ms switch interval or its next collective: if the step let go of
        them first, they outlive their op by a varying stretch of the step (the local
        logits and their all-gather, 8,192 + 16,384 B, through the loss's backward, once
        in three steps of ``llama_sp`` on 2 ranks; FSDP2's 74,240-B reduce-scatter input
        of a layer's gradients). Waiting early changes no tensor's life: the step's own
        wait, later, finds the work done."""
        from torch.utils._pytree import tree_leaves

        if not functional:  # a c10d op (FSDP2's): its ``Work``, which the caller holds,
            for item in tree_leaves(out):  # holds its tensors; the thread lets go of
                if not isinstance(item, torch.Tensor):  # the work within microseconds
                    item.wait()
            time.sleep(GRACE_S)
            return
        for item in tree_leaves(out):
            torch.ops._c10d_functional.wait_tensor(item)
            want.setdefault(id(item), (item, (1, 2)))
        deadline = time.monotonic() + SETTLE_S
        while any(_held_elsewhere(t, n) for t, n in want.values()):
            if time.monotonic() > deadline:
                self.unsettled += 1
                return
            time.sleep(1e-4)

    def _died(self, key: int) -> None:
        if threading.current_thread() is not threading.main_thread():
            self.late.append(f"{self.sizes.get(key, 0)} B, {self.made.get(key)}")
        self.made.pop(key, None)
        super()._died(key)


def _references(t: torch.Tensor) -> tuple[int, int]:
    """References to ``t`` (its ``TensorImpl``) and to its storage (one per tensor on
    it, and one for its Python object): the step's own, and any collective work's (an
    all-gather's work holds views of its output, other tensors on its storage)."""
    mine: int = t._use_count()  # type: ignore[attr-defined]
    return mine, int(torch._C._storage_Use_Count(t.untyped_storage()._cdata))


def _held_elsewhere(t: torch.Tensor, own: tuple[int, int]) -> bool:
    mine, its = _references(t)
    return mine > own[0] or its > own[1]


def module_of(seen: StepObserver) -> str:
    """The innermost module whose forward runs (``""`` outside one)."""
    return seen.stack[-1] if seen.stack else ""


def _tensors(tree: Any) -> list[torch.Tensor]:
    """The tensors of nested tuples, lists and dicts, each once."""
    from torch.utils._pytree import tree_leaves

    found = {id(t): t for t in tree_leaves(tree) if isinstance(t, torch.Tensor)}
    return list(found.values())


def _holds_bytes(t: Any) -> bool:
    """Whether ``t`` is a tensor with bytes of its own: not the ``AsyncCollectiveTensor``
    that ``_c10d_functional._wrap_tensor_autograd`` wraps a collective's output in (a
    wrapper subclass: its storage has a size and no data; the output it wraps was
    counted when the collective returned it)."""
    from torch.distributed._functional_collectives import AsyncCollectiveTensor

    return isinstance(t, torch.Tensor) and not isinstance(t, AsyncCollectiveTensor)


def storage_bytes(tensors: list[torch.Tensor]) -> int:
    """Bytes of the distinct storages under ``tensors``."""
    seen = {id(t.untyped_storage()): t.untyped_storage().nbytes() for t in tensors}
    return sum(seen.values())


def _alive(model: nn.Module, opt: torch.optim.Optimizer, held: list[torch.Tensor]) -> int:
    tensors = [local(p) for p in model.parameters()] + held
    tensors += [local(t) for s in opt.state.values() for t in s.values()]
    tensors += [local(b) for b in model.buffers()]
    return storage_bytes(tensors)


def issued(groups: dict[str, Any]) -> dict[str, int]:
    """Each group's count of the collectives it has issued (its sequence number): a
    count of every collective no dispatch mode has to see."""
    return {axis: int(g._get_sequence_number_for_group()) for axis, g in groups.items()}


def measured_step(
    model: nn.Module, opt: torch.optim.Optimizer, batch: tuple[torch.Tensor, torch.Tensor],
    groups: dict[str, Any],
) -> tuple[float, dict[str, Any]]:  # fmt: skip
    """One observed step: its loss and its figures."""
    baseline = _alive(model, opt, list(batch))
    before = issued(groups)
    seen = StepObserver(model)
    try:
        with seen:
            # the output dropped once the loss is made, as a training loop drops it
            out = outputs(model, batch[0])
            loss = loss_from(out, batch[1])
            del out
            held = seen.level
            seen.phase = "backward"
            loss.backward()  # type: ignore[no-untyped-call]
            trained = seen.peak  # the forward's and backward's, before ``opt.step()``
            states = state_bytes(model, opt)
            seen.phase = "optimizer"
            opt.step()
    finally:
        seen.remove()
    after = issued(groups)
    facts = {**states, "comm": seen.comm, "baseline": baseline, "peak": seen.peak}
    facts["forward_held"], facts["trained_peak"] = held, trained
    facts["late"], facts["unsettled"] = seen.late, seen.unsettled
    facts["issued"] = {axis: after[axis] - before[axis] for axis in groups}
    return loss.item(), facts


def reference_losses(fsdp: bool, dp: int) -> list[float]:
    """The unparallelized model's losses over ``STEPS`` steps: on this rank's batch, or
    under FSDP on both data-parallel batches at once (the mean of their two losses, as
    FSDP averages their gradients), this rank's half reported."""
    model = llama()
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    halves = [batch(d) for d in ((0, 1) if fsdp else (dp,))]
    out = []
    for _ in range(STEPS):
        losses = [loss_of(model, ids, labels) for ids, labels in halves]
        out.append(losses[dp if fsdp else 0].item())
        (sum(losses) / len(losses)).backward()  # type: ignore[union-attr]
        opt.step()
        opt.zero_grad()
    return out


def run(config: str, world: int) -> dict[str, Any]:
    """``STEPS`` steps of one configuration, the last ``MEASURED`` observed: the facts
    of the first of those that no other thread freed a tensor in (``clean`` of them:
    the third step, as a rule), each observed step's ``late`` frees, and what the clean
    steps disagree in (``unrepeated``: nothing, their peaks included)."""
    model, groups, dp = build(config, world)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    data = batch(dp)
    losses: list[float] = []
    observed: list[dict[str, Any]] = []
    for step in range(STEPS):
        if step < STEPS - MEASURED:
            loss = loss_of(model, *data)
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            losses.append(loss.item())
        else:
            last, facts = measured_step(model, opt, data, groups)
            observed.append(facts)
            losses.append(last)
        opt.zero_grad()
    late = [f.pop("late") for f in observed]
    clean = [f for f, freed in zip(observed, late, strict=True) if not freed]
    facts = clean[0] if clean else observed[0]
    facts["unrepeated"] = {  # what the clean steps disagree in, step by step
        key: [f[key] if key != "comm" else sorted(f[key]) for f in clean]
        for key in facts
        if any(f[key] != facts[key] for f in clean)
    }
    facts["late"], facts["clean"] = late, len(clean)
    facts["losses"] = losses
    facts["reference"] = reference_losses(config == "fsdp_tp", dp)
    return facts


def commdebug_counts(config: str, world: int) -> dict[str, Any]:
    """The collectives of one more step as torch's ``CommDebugMode`` counts them, beside
    this module's observer's, in the same step."""
    from torch.distributed.tensor.debug import CommDebugMode

    model, _, dp = build(config, world)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    ids, labels = batch(dp)
    theirs = CommDebugMode()  # type: ignore[no-untyped-call]
    ours = StepObserver(model)
    with theirs, ours:
        loss_of(model, ids, labels).backward()  # type: ignore[no-untyped-call]
        opt.step()
    ours.remove()
    counts: dict[str, int] = {}
    for phases in ours.comm.values():
        for kinds in phases.values():
            for kind, row in kinds.items():
                counts[kind] = counts.get(kind, 0) + row["calls"]
    return {"ours": counts, "theirs": {str(k): v for k, v in theirs.get_comm_counts().items()}}


def profiled(config: str, world: int) -> dict[str, Any]:
    """One forward and backward of the parallelized model under ``ls.profile(...,
    dtensor="local")``: this rank's FLOPs and collectives as layerscope observes them."""
    import layerscope as ls

    model, _, dp = build(config, world)
    ids, labels = batch(dp)
    prof = ls.profile(
        model, kwargs={"input_ids": ids, "position_ids": torch.arange(SEQ).unsqueeze(0)},
        backward=True, loss_fn=lambda out: loss_from(out, labels), dtensor="local",
    )  # fmt: skip
    return {
        "flops": {n.path: n.metrics.get("flops") for n in prof.nodes()},
        "backward_flops": {n.path: n.metrics.get("backward_flops") for n in prof.nodes()},
        "comm": prof.comm,
    }


def worker(rank: int, store: str, out: str, world: int) -> None:
    """One rank: every configuration, its facts to ``rank{r}.json``."""
    facts: dict[str, Any] = {}
    with rank_output(rank, out, facts):
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
        extra = ("fsdp_tp",) if world == 4 else ("llama_sp_ckpt",)
        for config in CONFIGS + extra:
            facts[config] = run(config, world)
        facts["commdebug"] = {c: commdebug_counts(c, world) for c in ("llama_tp", "llama_sp")}
        facts["profiled"] = {c: profiled(c, world) for c in ("llama_tp", "llama_sp")}
        dist.barrier()
