"""Planning a training run that cannot run here, by arithmetic over one analysis
(``docs/plan.md``): ``ls.plan`` (``run``) answers with a ``Plan`` (``plan``): one GPU's
memory timeline (``timeline``) and step time (``timemodel``); ``ls.plan_sweep``
(``sweep``) tabulates plans; ``Options`` (``options``) holds every option of a plan.
Their pieces: ``states``, the model states each GPU holds at rest; ``comm``, the
collectives of a step; ``checkpointing``, which modules to checkpoint."""

from layerscope.planning.options import Options
from layerscope.planning.result import Plan, load_plan
from layerscope.planning.run import plan
from layerscope.planning.sweep import Sweep, plan_sweep

__all__ = ["Options", "Plan", "Sweep", "load_plan", "plan", "plan_sweep"]
