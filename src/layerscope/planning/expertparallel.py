"""Expert parallelism in plans (``mesh={"dp_shard": D, "ep": E}``), as torchtitan runs a
mixture of experts: the experts of each MoE layer split over ``E`` of the data-parallel
ranks (``ep`` borrows its ranks from ``dp_shard``: no GPUs of its own), each rank
running its ``experts / E`` experts on the tokens routed to them from every rank of its
group, the tokens sent there and their outputs back by two all-to-alls a layer
(``docs/plan.md``, "Expert parallelism").

A rule, not the real path: transformers' expert-parallel styles (``grouped_gemm``,
``ep_dispatch_experts``) split the all-to-all by the routed tokens' counts, which a meta
analysis cannot read. So the analysis runs the whole model, and the plan derives from it:

- **routing balanced** (capacity factor 1): each expert gets ``T k / experts`` of the
  group's tokens, so a rank's experts get ``T k`` token-expert pairs, as many as its
  own tokens make without expert parallelism: the FLOPs and activations per rank are
  the analysis's;
- **the experts' states**: each experts module is an FSDP2 unit of its own
  (torchtitan's ``fully_shard(moe.experts)``), its ``experts / E`` experts sharded over
  the ``D / E`` ranks left: per rank the same elements as FSDP2 over ``D`` gives, but a
  gather holds ``1 / E`` of the experts, and its collectives run over ``D / E`` ranks;
- **the all-to-alls**: per MoE layer and micro-batch, dispatch and combine in the
  forward and again in the backward (their gradients), each ``T k H`` elements of the
  experts' input dtype (``T`` tokens, ``k`` experts each, hidden size ``H``, read from
  the experts module's recorded input), on the expert-parallel group's link, on the
  critical path; a checkpointed module's recompute runs the forward's again.

Not modelled: the all-to-alls' own buffers, uneven routing, token dropping.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from math import prod
from typing import Any

import torch
from torch import nn

from layerscope.errors import InvalidInputError
from layerscope.metrics.commkinds import wire_bytes
from layerscope.planning.tensorparallel import path_pattern, under_base
from layerscope.profile import Profile, TensorSpec


def expert_paths(model: nn.Module) -> list[str]:
    """The experts modules of ``model``: its config's ``base_model_ep_plan`` entries
    that name modules (``layers.*.mlp.experts``), under the base model; refused, with
    the fix, for a model without."""
    config = getattr(model, "config", None)
    plan = getattr(config, "base_model_ep_plan", None)
    if not isinstance(plan, Mapping) or not plan:
        raise InvalidInputError(
            f"mesh ep: {type(model).__name__} has no expert-parallel plan (a transformers "
            "MoE config's base_model_ep_plan); expert parallelism needs a mixture of "
            "experts: drop ep from the mesh"
        )
    under = under_base(model)
    modules = [n for n, _ in model.named_modules() if n]
    out: list[str] = []
    for pattern in plan:
        rx = path_pattern(under + pattern)
        out += [n for n in modules if rx.fullmatch(n) and n not in out]
    if not out:
        raise InvalidInputError(
            f"mesh ep: {type(model).__name__}'s base_model_ep_plan names no module of the model"
        )
    return out


def check_split(model: nn.Module, paths: list[str], ep: int) -> None:
    """Refuse an ``ep`` that does not divide every experts module's experts (transformers
    refuses to shard them unevenly too), naming the sizes that do."""
    modules = dict(model.named_modules())
    for path in paths:
        experts = getattr(modules.get(path), "num_experts", None)
        if isinstance(experts, int) and experts > 0 and experts % ep:
            fits = [d for d in range(2, experts + 1) if experts % d == 0]
            raise InvalidInputError(
                f"mesh ep={ep}: {path} has {experts} experts, which {ep} expert-parallel "
                f"ranks cannot split evenly; give an ep that divides {experts}: "
                f"{', '.join(map(str, fits))}"
            )


def experts_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """transformers' fused experts modules (``use_experts_implementation``: an int
    ``num_experts`` and a gate), by path."""
    return [
        (name, m)
        for name, m in model.named_modules()
        if isinstance(getattr(m, "num_experts", None), int) and hasattr(m, "has_gate")
    ]


#: The only dtype transformers' grouped experts kernel (``torch._grouped_mm``) takes, on
#: CUDA as on meta (its meta kernel repeats the CUDA kernel's checks).
GROUPED_DTYPE = torch.bfloat16


def check_kernel(model: nn.Module, dtype: torch.dtype, autocast: bool = False) -> None:
    """Refuse a model whose experts run transformers' ``grouped_mm`` kernel in a dtype it
    does not take (it would raise in the run as in the analysis), naming the fixes. Under
    ``autocast`` (DDP's mixed precision: float32 weights) the kernel gets float32, since
    autocast does not cast ``_grouped_mm``'s inputs (not among its lower-precision ops)."""
    found = experts_modules(model)
    impls = {getattr(getattr(m, "config", None), "_experts_implementation", None) for _, m in found}
    ran = torch.float32 if autocast else dtype
    if ran == GROUPED_DTYPE or "grouped_mm" not in impls:
        return
    how = (
        f"this plan computes in {str(dtype).removeprefix('torch.')} under autocast, with "
        "float32 weights, and autocast does not cast _grouped_mm's inputs: plan "
        "precision='bf16', or a sharding whose mixed precision casts the weights (fsdp)"
        if autocast
        else f"this plan computes in {str(dtype).removeprefix('torch.')}: plan "
        "precision='bf16' or 'bf16-mixed'"
    )
    raise InvalidInputError(
        f"{found[0][0]} runs transformers' grouped_mm experts kernel (torch._grouped_mm), "
        f"which takes bfloat16 only, on a GPU as on meta, and {how}, or set the model's "
        "config._experts_implementation = 'batched_mm' (every dtype; it gathers each routed "
        "token's expert weights) as your run would have to"
    )


def routed_experts(model: nn.Module) -> dict[str, float]:
    """The routed experts modules of a transformers mixture of experts
    (``experts_modules``), each with the share of its experts a token runs:
    ``num_experts_per_tok / num_experts`` from the config ({} for a dense model, or a
    config without ``num_experts_per_tok``)."""
    top_k = getattr(getattr(model, "config", None), "num_experts_per_tok", None)
    if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1:
        return {}
    counts = {name: int(getattr(m, "num_experts", 0)) for name, m in experts_modules(model)}
    return {name: top_k / n for name, n in counts.items() if n >= top_k}


#: A transformers experts module's weights used before its activation (``act_fn``): the
#: up projection, gated (``gate_up_proj``) or not (``up_proj``), and its bias.
BEFORE_ACTIVATION = ("gate_up_proj", "up_proj", "gate_up_proj_bias", "up_proj_bias")


def late_grads(prof: Profile, params: Sequence[Any]) -> dict[str, tuple[str, int]]:
    """The gradients each routed experts module (``profile.model["routed"]``) makes only
    after its ``act_fn``'s backward, as ``timeline.Setup.grads_after`` takes them: its
    forward runs the up projection, then ``act_fn``, then the down projection, so its
    backward makes the down projection's gradient, runs ``act_fn``'s backward, then makes
    the up projection's (``BEFORE_ACTIVATION``). ``params``: ``facts.Param``s."""
    names = {n.path for n in prof.nodes()}
    out: dict[str, tuple[str, int]] = {}
    for path in prof.model.get("routed") or {}:
        child = f"{path}.act_fn"
        late = sum(
            p.nbytes for p in params
            if p.module == path and p.name.rpartition(".")[2] in BEFORE_ACTIVATION
        )  # fmt: skip
        if late and child in names:
            out[path] = (child, late)
    return out


def a2a_comm(prof: Profile, paths: list[str], ep: int) -> dict[str, Any]:
    """The all-to-alls of each experts module per micro-batch, in ``profile.comm``'s
    form: dispatch and combine in the forward and in the backward (module doc)."""
    out: dict[str, Any] = {}
    for path in paths:
        node = prof.node(path)
        specs = [s for call in node.inputs[:1] for s in call if isinstance(s, TensorSpec)]
        if len(specs) < 2:
            continue
        hidden, index = specs[0], specs[1]  # (hidden states, top-k expert indices)
        dtype = getattr(torch, hidden.dtype, torch.float32)
        tokens = prod(hidden.shape[:-1])
        pairs = tokens * (index.shape[-1] if index.shape else 1)
        payload = pairs * hidden.shape[-1] * dtype.itemsize
        row = {"calls": 2, "bytes": 2 * payload,
               "wire_bytes": 2 * wire_bytes("all_to_all", payload, ep)}  # fmt: skip
        out[path] = {"forward": {"all_to_all": dict(row)}, "backward": {"all_to_all": row}}
    return out


def ep_notes(ep: int, dp_shard: int, experts: int) -> list[str]:
    """What an expert-parallel plan assumes, beside its figures."""
    return [
        f"expert parallel {ep}: each of {experts} experts modules split over {ep} of the "
        f"{dp_shard} dp_shard ranks, an FSDP2 unit sharded over the other "
        f"{dp_shard // ep}; routing balanced (capacity factor 1), so each rank's experts "
        "see as many token-expert pairs as its own tokens make; two all-to-alls a layer "
        "forward and backward, on the critical path, their buffers not counted"
    ]


__all__ = [
    "BEFORE_ACTIVATION",
    "GROUPED_DTYPE",
    "a2a_comm",
    "check_kernel",
    "check_split",
    "ep_notes",
    "expert_paths",
    "experts_modules",
    "late_grads",
    "routed_experts",
]
