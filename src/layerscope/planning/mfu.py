"""MFU's FLOPs in the convention published runs use (PaLM, Chowdhery et al. 2022,
Appendix B): ``6 N`` per token plus attention, with what a plan knows of which
parameters run: frozen ones count 4, a mixture of experts' routed experts at the share
of their experts a token runs (``docs/plan.md``, "The time model")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from layerscope.planning import timeline as tl
from layerscope.planning.facts import Param
from layerscope.planning.kernels import Kernels


def published_flops(
    params: list[Param],
    kept: list[Param] | None,
    tokens: int | None,
    attention: int,
    accum: int,
    tp: int = 1,
    routed: Mapping[str, float] | None = None,
) -> int | None:
    """FLOPs per step and GPU in the published convention (PaLM, Appendix B): 6 N per
    token plus attention; a frozen parameter's weight gradient never runs, so it counts 4
    (forward, input gradient), not 6; a routed experts module's parameters count at the
    share of its experts a token runs (``routed``: top-k / experts, the active
    parameters MoE runs publish); a tensor-parallel group's ``tp`` GPUs share the
    model's N (the attention FLOPs are this GPU's already). None without token ids."""
    if not tokens:
        return None
    shares = routed or {}

    def n(group: Sequence[Param]) -> float:
        return sum(p.elements * active_share(p.module, shares) for p in group)

    per_token = 6 * n(params) + 4 * n(kept or ())
    return (round(per_token * tokens) // tp + attention) * accum


#: the softmax kernels of attention that ran unfused
SOFTMAXES = (("_softmax",), ("_safe_softmax",))


def unfused_attention_note(kernels: Kernels | None, published: int | None) -> list[str]:
    """Where mfu's attention term is 0 but the analysis ran softmax kernels (attention
    outside SDPA's fused kernels: eager, or SDPA's math path), a note that mfu leaves that
    attention out."""
    if kernels is None or not published:
        return []
    rows = kernels.rows
    fused = any(k[2] == "attention" for k in rows)
    # eager's softmax; SDPA's math path runs ``_safe_softmax`` (torch 2.5 on)
    softmax = any(k[2] == "memory" and k[3][:1] in SOFTMAXES for k in rows)
    if fused or not softmax:
        return []
    return [
        "mfu counts attention from SDPA's fused kernels only (12 B H Sq Sk D each, PaLM), "
        "and this model's attention ran none (eager, or SDPA's math path): its matmuls "
        "and softmax are in mfu_counted, not in mfu"
    ]


def routed_note(routed: Mapping[str, float] | None) -> list[str]:
    """What mfu counts of a mixture of experts' routed experts."""
    if not routed:
        return []
    shares = ", ".join(sorted({f"{share:g}" for share in routed.values()}))
    return [
        f"mfu: the {len(routed)} routed experts modules' parameters count at the share of "
        f"their experts a token runs (top-k / experts: {shares}), the active parameters "
        "MoE runs publish; mfu_counted counts the FLOPs the analysis ran"
    ]


def active_share(module: str, routed: Mapping[str, float]) -> float:
    """The share of ``module``'s parameters a token runs: its routed experts module's."""
    for path, share in routed.items():
        if tl.inside(module, path):
            return share
    return 1.0


__all__ = ["active_share", "published_flops", "routed_note", "unfused_attention_note"]
