"""layerscope: what happens inside every layer of a PyTorch model.

>>> import layerscope as ls                       # doctest: +SKIP
>>> prof = ls.profile(model, x)                   # doctest: +SKIP
>>> print(prof)                                   # doctest: +SKIP

``import layerscope`` loads only the errors and the data model; every other public
name loads its module on first use (``__getattr__`` below), so the import stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from layerscope.errors import (
    ConfigError,
    ExportError,
    FlopFormulaError,
    InvalidInputError,
    LayerscopeError,
    MissingDependencyError,
    ModelError,
    ObserverError,
    ProfileCheckError,
    SchemaError,
)
from layerscope.profile import SCHEMA, Node, Profile, TensorSpec, ValueSpec
from layerscope.version import __version__

# Loading the data model above made ``profile`` name that submodule here; the public
# ``profile`` is the function, which ``__getattr__`` finds (the submodule, loaded first,
# cannot shadow it later).
del globals()["profile"]

if TYPE_CHECKING:
    from layerscope.analysis.diff import ProfileDiff, diff
    from layerscope.analysis.roofline import Estimate, estimate
    from layerscope.collect.meta import to_meta
    from layerscope.collect.regions import region
    from layerscope.export.json import SCHEMA_PATH, load
    from layerscope.generation import (
        GenerateEstimate,
        Generation,
        estimate_generate,
        load_estimate,
        load_generation,
        profile_generate,
    )
    from layerscope.generation.serving import plan_serving
    from layerscope.generation.serving_result import ServingPlan, load_serving
    from layerscope.generation.stages import cache_stage
    from layerscope.hardware import DeviceSpec, device_spec, register_device
    from layerscope.metrics.flops import Cost, register_flop_formula
    from layerscope.metrics.memory import MemoryObserver
    from layerscope.metrics.numerics import NonFiniteError, NonFiniteWarning, NumericsObserver
    from layerscope.planning import Plan, load_plan, load_sweep, plan, plan_sweep
    from layerscope.planning.calibrate import calibrate
    from layerscope.planning.footprint import record_training_footprint, training_footprint
    from layerscope.render import config
    from layerscope.render.options import ViewOptions, view_options
    from layerscope.render.ranks import rank_table
    from layerscope.session.batch import max_batch_size
    from layerscope.session.profiler import Profiler
    from layerscope.session.run import profile
    from layerscope.session.schedule import Schedule, schedule

#: The module each lazily loaded public name comes from (``config`` is a submodule).
_LAZY: dict[str, str] = {
    "ProfileDiff": "layerscope.analysis.diff",
    "diff": "layerscope.analysis.diff",
    "Estimate": "layerscope.analysis.roofline",
    "estimate": "layerscope.analysis.roofline",
    "to_meta": "layerscope.collect.meta",
    "region": "layerscope.collect.regions",
    "SCHEMA_PATH": "layerscope.export.json",
    "load": "layerscope.export.json",
    "DeviceSpec": "layerscope.hardware",
    "device_spec": "layerscope.hardware",
    "register_device": "layerscope.hardware",
    "Cost": "layerscope.metrics.flops",
    "register_flop_formula": "layerscope.metrics.flops",
    "MemoryObserver": "layerscope.metrics.memory",
    "record_training_footprint": "layerscope.planning.footprint",
    "training_footprint": "layerscope.planning.footprint",
    "NonFiniteError": "layerscope.metrics.numerics",
    "NonFiniteWarning": "layerscope.metrics.numerics",
    "NumericsObserver": "layerscope.metrics.numerics",
    "GenerateEstimate": "layerscope.generation.estimate_result",
    "Generation": "layerscope.generation.result",
    "estimate_generate": "layerscope.generation.estimate",
    "load_generation": "layerscope.generation.result",
    "load_estimate": "layerscope.generation.estimate_result",
    "profile_generate": "layerscope.generation.run",
    "plan_serving": "layerscope.generation.serving",
    "ServingPlan": "layerscope.generation.serving_result",
    "load_serving": "layerscope.generation.serving_result",
    "cache_stage": "layerscope.generation.stages",
    "Plan": "layerscope.planning.result",
    "load_plan": "layerscope.planning.result",
    "load_sweep": "layerscope.planning.sweep",
    "plan": "layerscope.planning.run",
    "plan_sweep": "layerscope.planning.sweep",
    "calibrate": "layerscope.planning.calibrate",
    "config": "layerscope.render",
    "ViewOptions": "layerscope.render.options",
    "view_options": "layerscope.render.options",
    "rank_table": "layerscope.render.ranks",
    "Profiler": "layerscope.session.profiler",
    "Schedule": "layerscope.session.schedule",
    "max_batch_size": "layerscope.session.batch",
    "profile": "layerscope.session.run",
    "schedule": "layerscope.session.schedule",
}


def __getattr__(name: str) -> Any:
    """A public name's value, loaded on first use and kept (PEP 562); a subpackage such
    as ``layerscope.analysis`` loads on first use too."""
    source = _LAZY.get(name)
    if source is not None:
        package = importlib.import_module(source)
        if hasattr(package, name):
            value = getattr(package, name)
        else:  # a submodule (``config``)
            value = importlib.import_module(f"{source}.{name}")
    elif name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    else:
        try:
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "SCHEMA",
    "SCHEMA_PATH",
    "ConfigError",
    "Cost",
    "DeviceSpec",
    "Estimate",
    "ExportError",
    "FlopFormulaError",
    "GenerateEstimate",
    "Generation",
    "InvalidInputError",
    "LayerscopeError",
    "MemoryObserver",
    "MissingDependencyError",
    "ModelError",
    "Node",
    "NonFiniteError",
    "NonFiniteWarning",
    "NumericsObserver",
    "ObserverError",
    "Plan",
    "Profile",
    "ProfileCheckError",
    "ProfileDiff",
    "Profiler",
    "Schedule",
    "SchemaError",
    "ServingPlan",
    "TensorSpec",
    "ValueSpec",
    "ViewOptions",
    "__version__",
    "cache_stage",
    "calibrate",
    "config",
    "device_spec",
    "diff",
    "estimate",
    "estimate_generate",
    "load",
    "load_estimate",
    "load_generation",
    "load_plan",
    "load_serving",
    "load_sweep",
    "max_batch_size",
    "plan",
    "plan_serving",
    "plan_sweep",
    "profile",
    "profile_generate",
    "rank_table",
    "record_training_footprint",
    "region",
    "register_device",
    "register_flop_formula",
    "schedule",
    "to_meta",
    "training_footprint",
    "view_options",
]
