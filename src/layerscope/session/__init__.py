"""The entry points: ``profile``, ``Profiler``, schedules, ``max_batch_size``.

This layer sits above ``collect/`` (instrumentation) and ``metrics/`` (what things cost)
and joins them; nothing below it imports it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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


def __getattr__(name: str) -> Any:
    source = _LAZY.get(name)
    if source is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(source), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = ["Profiler", "Schedule", "max_batch_size", "profile", "profile_fx", "schedule"]
