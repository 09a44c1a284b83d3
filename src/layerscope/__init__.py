"""layerscope: what happens inside every layer of a PyTorch model.

>>> import layerscope as ls                       # doctest: +SKIP
>>> prof = ls.profile(model, x)                   # doctest: +SKIP
>>> print(prof)                                   # doctest: +SKIP
"""

from __future__ import annotations

from layerscope.analysis.diff import ProfileDiff, diff
from layerscope.analysis.roofline import Estimate, estimate
from layerscope.collect.meta import to_meta
from layerscope.collect.regions import region
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
from layerscope.export.json import SCHEMA_PATH, load
from layerscope.hardware import DeviceSpec, device_spec
from layerscope.metrics.flops import Cost, register_flop_formula
from layerscope.metrics.memory import (
    MemoryObserver,
    record_training_footprint,
    training_footprint,
)
from layerscope.metrics.numerics import NonFiniteError, NonFiniteWarning, NumericsObserver
from layerscope.profile import SCHEMA, Node, Profile, TensorSpec, ValueSpec
from layerscope.render import config
from layerscope.render.options import ViewOptions, view_options
from layerscope.render.ranks import rank_table
from layerscope.session import Profiler, Schedule, max_batch_size, profile, schedule
from layerscope.version import __version__

__all__ = [
    "SCHEMA",
    "SCHEMA_PATH",
    "ConfigError",
    "Cost",
    "DeviceSpec",
    "Estimate",
    "ExportError",
    "FlopFormulaError",
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
    "Profile",
    "ProfileCheckError",
    "ProfileDiff",
    "Profiler",
    "Schedule",
    "SchemaError",
    "TensorSpec",
    "ValueSpec",
    "ViewOptions",
    "__version__",
    "config",
    "device_spec",
    "diff",
    "estimate",
    "load",
    "max_batch_size",
    "profile",
    "rank_table",
    "record_training_footprint",
    "region",
    "register_flop_formula",
    "schedule",
    "to_meta",
    "training_footprint",
    "view_options",
]
