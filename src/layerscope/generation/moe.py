"""Mixture of experts in ``ls.estimate_generate``: a step reads the experts its tokens
are routed to, not every expert (``docs/generate.md`` "Mixture of experts").

A step of ``T`` tokens (batch x tokens fed) in a layer of ``E`` experts, top ``k`` per
token, touches under uniform routing ``E·(1 − (1 − k/E)^T)`` distinct experts on average
(each expert is missed by one token with probability ``1 − k/E``); at worst all ``E``.
The FLOPs are already the routed ones (``T·k`` token-expert products, as transformers'
grouped and batched expert kernels compute them); the bytes are set to the expected
experts' weights, and the worst case (all ``E``) is kept beside them.

The families whose routing the config states (``FAMILIES``) are read; another model with
transformers' fused experts is refused. transformers 5 runs the experts through
``torch._grouped_mm`` (``config._experts_implementation="grouped_mm"``), which accepts
bfloat16 only, also on meta; any other dtype is analysed with its ``"batched_mm"``
kernel (every dtype), switched on for the analysis only and put back after. What each
kernel is charged for the weights, as layerscope counts its ops: grouped reads every
expert once, ``E·w``; batched gathers a copy of a token's experts (reads ``min(S, E)·w``,
the whole tensor at most, writes ``S·w``) and its matmul reads the copy (``S·w``), for
``S = T·k``. That is replaced by the expected experts' ``w`` each.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from layerscope.errors import InvalidInputError
from layerscope.generation.narrowing import read_less
from layerscope.metrics.params import local
from layerscope.planning.expertparallel import GROUPED_DTYPE, experts_modules
from layerscope.profile import Profile
from layerscope.render.units import seconds

#: The families whose routing layerscope reads: model_type -> the config keys of the
#: routed experts' count and of the shared experts (None: none), with top-k always
#: ``num_experts_per_tok`` (transformers' configs).
FAMILIES: dict[str, tuple[str, str | None]] = {
    "mixtral": ("num_local_experts", None),
    "qwen2_moe": ("num_experts", "shared_expert_intermediate_size"),
    "qwen3_moe": ("num_experts", None),
    "olmoe": ("num_experts", None),
    "deepseek_v2": ("n_routed_experts", "n_shared_experts"),
    "deepseek_v3": ("n_routed_experts", "n_shared_experts"),
}


def expected_experts(experts: int, top_k: int, tokens: int) -> float:
    """Distinct experts ``tokens`` tokens touch on average, each routed to ``top_k`` of
    ``experts`` uniformly: ``E·(1 − (1 − k/E)^T)``."""
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


@dataclass(frozen=True)
class Routing:
    """A model's experts: the family, ``E`` and ``k``, the layers' experts modules and
    each one's bytes per expert, and the kernel analysed."""

    family: str
    experts: int
    top_k: int
    #: what the config says of shared experts (they run on every token, counted whole)
    shared: Any
    #: the experts modules' paths and bytes per expert (their parameters / E), as the
    #: model holds them and as stored (``weights=``: ``generation.weights``)
    layers: tuple[tuple[str, float, float], ...]
    implementation: str

    def expected(self, tokens: int) -> float:
        return expected_experts(self.experts, self.top_k, tokens)

    def counted(self, tokens: int) -> float:
        """Experts' weights the kernel is charged for in a call of ``tokens`` tokens (in
        units of one expert's bytes; module doc)."""
        if self.implementation == "grouped_mm":
            return float(self.experts)
        routed = tokens * self.top_k
        return float(min(routed, self.experts) + 2 * routed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "experts": self.experts,
            "top_k": self.top_k,
            "shared": self.shared,
            "layers": len(self.layers),
            "implementation": self.implementation,
        }


def routing_of(
    model: nn.Module, dtype: torch.dtype, narrowed: Mapping[str, int] | None = None
) -> Routing | None:
    """The model's routing (None: no experts), or ``InvalidInputError`` for a model with
    experts whose routing layerscope does not read; ``narrowed``: by experts module, the
    bytes its weights take less as stored."""
    found = experts_modules(model)
    config = getattr(model, "config", None)
    kind = getattr(config, "model_type", None)
    if not found:
        return None
    keys = FAMILIES.get(str(kind))
    top_k = getattr(config, "num_experts_per_tok", None)
    count = getattr(config, keys[0], None) if keys else None
    if keys is None or not isinstance(top_k, int) or not isinstance(count, int):
        raise InvalidInputError(
            f"{type(model).__name__} ({kind}) has mixture-of-experts layers whose routing "
            f"layerscope does not read: estimate_generate reads "
            f"{', '.join(sorted(FAMILIES))} (experts and num_experts_per_tok from the config)"
        )
    less = narrowed or {}
    layers = []
    for name, m in found:
        held = sum(local(p).nbytes for p in m.parameters())
        e = int(getattr(m, "num_experts", 1))
        layers.append((name, held / e, (held - less.get(name, 0)) / e))
    shared = getattr(config, keys[1], None) if keys[1] else None
    impl = "grouped_mm" if dtype == GROUPED_DTYPE else "batched_mm"
    return Routing(str(kind), count, top_k, shared, tuple(layers), impl)


@contextmanager
def experts_kernel(model: nn.Module, routing: Routing | None) -> Iterator[None]:
    """The experts run with ``routing.implementation`` inside the block, as before after."""
    configs = {id(c): c for _, m in experts_modules(model) if (c := getattr(m, "config", None))}
    saved = {k: getattr(c, "_experts_implementation", None) for k, c in configs.items()}
    try:
        if routing is not None:
            for c in configs.values():
                c._experts_implementation = routing.implementation
        yield
    finally:
        for k, c in configs.items():
            c._experts_implementation = saved[k]


def route(
    prof: Profile, routing: Routing, charged: float, experts: float, *, stored: bool = False
) -> None:
    """Make ``prof`` read ``experts`` experts' weights as stored in every experts module
    call where it reads ``charged`` experts' weights, as the model holds them
    (``Routing.counted``; module doc) or, with ``stored``, as stored."""
    for path, held, kept in routing.layers:
        try:
            calls = prof.node(path).calls
        except KeyError:
            continue
        read_less(prof, path, (charged * (kept if stored else held) - experts * kept) * calls)


def moe_note(routing: Routing, rows: list[Any]) -> str:
    """The experts read per step, expected and at worst, and what the worst case costs."""
    e, k = routing.experts, routing.top_k
    at = "; ".join(
        f"batch {r.batch}: {r.experts_per_layer:.2f} per layer, decode "
        f"{seconds(r.decode_time_per_token)} per token (all {e}: "
        f"{seconds(r.decode_time_all_experts)})"
        for r in rows
    )
    return (
        f"Mixture of experts ({routing.family}, {len(routing.layers)} layer(s) of {e} "
        f"experts, top {k}): a step of T tokens reads the distinct experts they are routed "
        f"to, E·(1 − (1 − k/E)^T) expected under uniform routing, and at worst all {e} "
        f"(the bound's other side); the FLOPs are the routed tokens' ({k} experts each). "
        f"Decode: {at}."
    )


__all__ = [
    "FAMILIES",
    "Routing",
    "expected_experts",
    "experts_kernel",
    "experts_modules",
    "moe_note",
    "route",
    "routing_of",
]
