"""The entry points: ``profile``, ``Profiler``, schedules, ``max_batch_size``.

This layer sits above ``collect/`` (instrumentation) and ``metrics/`` (what things cost)
and joins them; nothing below it imports it.
"""

from __future__ import annotations

from layerscope.session.batch import max_batch_size
from layerscope.session.fx import profile_fx
from layerscope.session.profiler import Profiler
from layerscope.session.run import profile
from layerscope.session.schedule import Schedule, schedule

__all__ = ["Profiler", "Schedule", "max_batch_size", "profile", "profile_fx", "schedule"]
