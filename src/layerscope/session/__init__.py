"""The entry points: ``profile``, ``Profiler``, schedules, ``max_batch_size``.

This layer sits above ``collect/`` (instrumentation) and ``metrics/`` (what things cost)
and joins them; nothing below it imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from layerscope.lazy import lazy_attributes

if TYPE_CHECKING:
    from layerscope.session.batch import max_batch_size
    from layerscope.session.fx import profile_fx
    from layerscope.session.profiler import Profiler
    from layerscope.session.run import profile

# ``schedule`` is a function and the submodule that defines it: imported here, the
# function is the package's attribute, not the submodule (which imports nothing else).
from layerscope.session.schedule import Schedule, schedule

#: Each public name's module, imported on first use: importing one module of the
#: package (``tests/test_layering.py`` counts what a package ``__init__`` imports) loads
#: nothing else of it.
_LAZY: dict[str, str] = {
    "max_batch_size": "layerscope.session.batch",
    "profile_fx": "layerscope.session.fx",
    "Profiler": "layerscope.session.profiler",
    "profile": "layerscope.session.run",
}


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())

__all__ = ["Profiler", "Schedule", "max_batch_size", "profile", "profile_fx", "schedule"]
