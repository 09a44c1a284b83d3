"""A model call of an estimate predicted, not bounded: its analysis, with its kernels
recorded (``planning.kernels``), priced at the target's achievable rates, with the
host's launches (``docs/generate.md``, "Serving a model").

Each module's own work is priced at the large-matmul share of the peak and the
achievable share of the bandwidth (``kernels.predict`` on a profile without kernel
records), on the bytes the estimate's options leave (quantized weights, the KV cache's
width, the experts reached). The host launches the kernels: ``mode="eager"`` costs the
rates' launch time per kernel; ``mode="graphs"`` (CUDA graphs of a compiled call,
``torch.compile(mode="reduce-overhead")``) one launch per call, with the call's
pointwise kernels fused as a compiled plan's are (``kernels.fused``), which also takes
their bytes off the call's bound. The GPU waits when launching is slower than running,
so a call takes the larger of the two.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from layerscope.analysis.rates import rates_of
from layerscope.planning.kernels import Kernels, fused, predict

if TYPE_CHECKING:
    from layerscope.analysis.roofline import Roof
    from layerscope.hardware import DeviceSpec
    from layerscope.profile import Profile

#: How the host issues a call's kernels: one launch each, or one CUDA graph.
MODES = ("eager", "graphs")


@dataclass(frozen=True)
class Step:
    """One call as the target would run it: its kernels, their predicted time on the
    achievable rates (no launches), and the host's time to launch them."""

    kernels: int
    run: float
    launch: float
    #: what fusing the step's pointwise kernels (graphs) takes off its roofline bound
    fused_off: float = 0.0

    @property
    def time(self) -> float:
        """The call: the GPU's work, or the host's launching when that is slower."""
        return max(self.run, self.launch)


def priced(
    prof: Profile,
    kernels: Kernels,
    mode: str,
    spec: DeviceSpec,
    roof: Roof,
    faster: dict[int, float] | None,
    comm: float,
) -> Step:
    """One call of the estimate's (``prof``, analysed with its ``kernels`` recorded, its
    weights, KV cache and experts as the options say) priced as the module doc says, on
    ``spec`` with its ``roof``: ``faster`` the nodes above the compute dtype's peak (FP8
    linears), ``comm`` the seconds of its collectives (tensor parallelism's)."""
    # each module's own work at the achievable rates (``kernels.predict`` on a profile
    # without records: it reads the metrics the options narrowed)
    rates = rates_of(spec)
    run = predict(prof, replace(rates, launch=0.0), roof.peak, roof.bandwidth, faster=faster)
    time = run.forward[id(prof.root)] + comm
    if mode == "graphs":  # CUDA graphs of a compiled call: its pointwise kernels fused
        together = fused(kernels)
        saved = _memory_bytes(kernels) - _memory_bytes(together)
        time -= saved / (roof.bandwidth * min(1.0, rates.bandwidth))
        return Step(together.count(), max(time, 0.0), rates.launch, saved / roof.bandwidth)
    return Step(kernels.count(), time, kernels.count() * rates.launch)


def _memory_bytes(kernels: Kernels) -> int:
    return sum(row[2] for key, row in kernels.rows.items() if key[2] == "memory")


__all__ = ["MODES", "Step", "priced"]
