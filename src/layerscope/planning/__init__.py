"""Planning a training run that cannot run here, by arithmetic over one analysis
(``docs/plan.md``): ``ls.plan`` (``run``) answers with a ``Plan`` (``plan``): one GPU's
memory timeline (``timeline``) and step time (``timemodel``); ``ls.plan_sweep``
(``sweep``) tabulates plans; ``Options`` (``options``) holds every option of a plan.
Their pieces: ``states``, the model states each GPU holds at rest; ``comm``, the
collectives of a step; ``checkpointing``, which modules to checkpoint."""

from __future__ import annotations

from typing import TYPE_CHECKING

from layerscope.lazy import lazy_attributes

if TYPE_CHECKING:
    from layerscope.planning.options import Options
    from layerscope.planning.result import Plan, load_plan
    from layerscope.planning.run import plan
    from layerscope.planning.sweep import Sweep, load_sweep, plan_sweep

#: Each public name's module, imported on first use: importing one module of the
#: package (``tests/test_layering.py`` counts what a package ``__init__`` imports) loads
#: nothing else of it.
_LAZY: dict[str, str] = {
    "Options": "layerscope.planning.options",
    "Plan": "layerscope.planning.result",
    "load_plan": "layerscope.planning.result",
    "plan": "layerscope.planning.run",
    "Sweep": "layerscope.planning.sweep",
    "plan_sweep": "layerscope.planning.sweep",
    "load_sweep": "layerscope.planning.sweep",
}


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())

__all__ = ["Options", "Plan", "Sweep", "load_plan", "load_sweep", "plan", "plan_sweep"]
