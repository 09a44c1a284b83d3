"""``LayerscopeCallback``: profile a Hugging Face ``Trainer``'s own training steps.

    from layerscope.integrations.huggingface import LayerscopeCallback

    cb = LayerscopeCallback(schedule=ls.schedule(wait=1, warmup=1, active=3), timing=True)
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[cb])
    trainer.train()
    cb.profile.show()

At train begin the callback starts an ``ls.Profiler`` on the model the Trainer trains;
each optimizer step (the Trainer's ``on_step_end``: with gradient accumulation, a step
holds several forward and backward calls) is one profiler step; at train end it stops.
Each cycle's Profile goes to ``on_ready`` (if given), to ``profiles``, and, with
``save_to``, to a JSON file (cycle ``i`` > 0 to ``NAME.i.json``). Every process profiles
its own work; gather them with ``prof.gather()`` under ``torch.distributed``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import nn

from layerscope.errors import InvalidInputError, LayerscopeError, MissingDependencyError
from layerscope.profile import Profile
from layerscope.session.profiler import Profiler
from layerscope.session.schedule import Schedule

_HAVE_TRANSFORMERS: bool
if TYPE_CHECKING:
    from transformers import TrainerCallback as _Base
else:
    try:
        from transformers import TrainerCallback as _Base
    except ImportError:  # layerscope does not need transformers; the callback does
        _Base = object
        _HAVE_TRANSFORMERS = False
    else:
        _HAVE_TRANSFORMERS = True


class LayerscopeCallback(_Base):
    """A ``transformers.TrainerCallback`` that runs an ``ls.Profiler`` over training.

    ``schedule``, ``timing``, ``memory`` and ``on_ready`` are ``ls.Profiler``'s options;
    ``save_to`` a JSON path for each ready profile. ``profile`` is the last ready one,
    ``profiles`` all of them in order.
    """

    def __init__(
        self,
        *,
        schedule: Schedule | None = None,
        timing: bool | Mapping[str, Any] = False,
        memory: bool = False,
        on_ready: Callable[[Profile], Any] | None = None,
        save_to: str | os.PathLike[str] | None = None,
    ) -> None:
        if not _HAVE_TRANSFORMERS:
            raise MissingDependencyError(
                "LayerscopeCallback needs transformers: pip install transformers"
            )
        if schedule is not None and not isinstance(schedule, Schedule):
            raise InvalidInputError(f"schedule must be ls.schedule(...) or None, got {schedule!r}")
        if on_ready is not None and not callable(on_ready):
            raise InvalidInputError(f"on_ready must be a callable(profile), got {on_ready!r}")
        if save_to is not None and not isinstance(save_to, str | os.PathLike):
            raise InvalidInputError(f"save_to must be a path, got {save_to!r}")
        self.schedule = schedule
        self.timing = timing
        self.memory = memory
        self.on_ready = on_ready
        self.save_to = None if save_to is None else Path(save_to)
        self.profiles: list[Profile] = []
        self.profiler: Profiler | None = None

    @property
    def profile(self) -> Profile | None:
        """The last profile made (None before the first is ready)."""
        return self.profiles[-1] if self.profiles else None

    def _ready(self, prof: Profile) -> None:
        self.profiles.append(prof)
        if self.save_to is not None:
            n = len(self.profiles) - 1
            path = self.save_to if n == 0 else self.save_to.with_suffix(f".{n}.json")
            prof.save(path)
        if self.on_ready is not None:
            self.on_ready(prof)

    # ---- TrainerCallback events ------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        model = kwargs.get("model")
        if not isinstance(model, nn.Module):
            raise InvalidInputError("the Trainer passed no model to LayerscopeCallback")
        self.profiler = Profiler(
            model,
            schedule=self.schedule,
            timing=self.timing,
            memory=self.memory,
            on_ready=self._ready,
        )
        self.profiler.start()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.profiler is not None:
            self.profiler.step()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        profiler, self.profiler = self.profiler, None
        if profiler is None:
            return
        profiler.stop()  # builds a cycle cut short, handing it to on_ready
        try:
            prof = profiler.profile
        except LayerscopeError:  # nothing measured (training shorter than wait + warmup)
            return
        if not any(p is prof for p in self.profiles):
            self._ready(prof)


__all__ = ["LayerscopeCallback"]
