"""ZeRO-1 and ZeRO-2 (``"zero1"``, ``"zero2"``): DDP's bucket all-reduces, optimizer
states (ZeRO-2: and gradients) and master weights split evenly over the GPUs as one
flat buffer (ceil(elements / n) each), the updated parameters all-gathered after the
step. Only trainable parameters are partitioned: ``DeepSpeedZeroOptimizer.__init__``
takes ``[param for param in param_group['params'] if param.requires_grad]`` as each
group's ``bit16_groups`` entry, so frozen parameters keep no gradient, master weight or
state and stay whole on every GPU, in the weights' dtype. Under mixed precision the
optimizer step also holds the partition's gradients in
float32 (ceil(elements / n) x 4 B), as DeepSpeed does: ``DeepSpeedZeroOptimizer.step``
in deepspeed/runtime/zero/stage_1_and_2.py (deepspeedai/DeepSpeed) flattens the
partition's averaged gradients ``.to(self.single_partition_of_fp32_groups[i].dtype)``
as ``single_grad_partition``, the float32 master's ``.grad``, and frees it after the
step (stage 1 and 2 alike). A formula only: no run here checks it."""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import TYPE_CHECKING

from layerscope.planning.states import ModelStates
from layerscope.planning.strategies.replicated import Replicated
from layerscope.planning.strategy import Prepared, Step, Times, link, master_states
from layerscope.planning.timeline import Events, Replay
from layerscope.planning.timemodel import link_time

if TYPE_CHECKING:
    from layerscope.planning.options import Options


class ZeRO(Replicated):
    """ZeRO at ``stage`` 1 or 2; module doc."""

    updates_partition = True

    def __init__(self, stage: int) -> None:
        self.stage = stage
        self.name = f"zero{stage}"
        self.shards_grads = stage == 2

    def notes(self, opts: Options) -> list[str]:
        return [f"{self.name} is a formula only: no run here checks it"]

    def states(
        self,
        shapes: Sequence[Sequence[int]],
        *,
        world_size: int,
        precision: str,
        optimizer: str,
        rank: int,
        frozen: Sequence[Sequence[int]] = (),
    ) -> ModelStates:
        elements = sum(prod(s) for s in shapes)
        part = -(-elements // world_size)
        grads = part if self.stage == 2 else elements
        return master_states(shapes, precision, optimizer, part, grads, frozen)

    def prepare(self, step: Step) -> Prepared:
        prepared = super().prepare(step)
        part = -(-sum(prod(p.shape) for p in step.params) // step.opts.dp_size)
        if step.opts.mixed:  # DeepSpeed's float32 gradient partition, for the step only
            step.setup.optimizer_temp = 4 * part
        if self.stage == 2:  # each GPU keeps its partition, reduced module by module
            elements = sum(prod(p.shape) for p in step.params)
            partition = -(-elements // step.opts.dp_size) * step.grad_size
            step.setup.final_grads = partition
            step.setup.events.append(PartitionEvents(partition))
        return prepared

    def comm_time(self, step: Step, times: Times) -> tuple[float, float]:
        total, exposed = super().comm_time(step, times)
        n = step.opts.dp_size
        if n < 2:
            return total, exposed
        # the updated parameters, gathered after the step
        gather = link_time("all_gather", sum(self.buckets(step)) // n, link(step.opts, n))
        return total + gather, exposed + gather


class PartitionEvents(Events):
    """ZeRO-2 in the replay: the gradient partition each GPU keeps, allocated when the
    backward starts; a module's gradients reduced (freed) once its backward is done."""

    reduces_grads = True

    def __init__(self, partition: int) -> None:
        self.partition = partition

    def backward(self, replay: Replay, k: int, event: str, path: str) -> None:
        # accumulating, the partition is the gradients accumulated, held already
        if event != "end" and "partition" not in replay.buffers and not replay.accumulating:
            replay.alloc("partition", "grad_bytes", self.partition)

    def before_point(self, replay: Replay, k: int, path: str) -> None:
        replay.grads_reduced = replay.counted(k) - replay.just_made(k)

    def end(self, replay: Replay, path: str) -> None:
        replay.free("partition")


__all__ = ["PartitionEvents", "ZeRO"]
