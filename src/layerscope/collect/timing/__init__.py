"""The timing pass: per-module forward/backward time and whole-model latency and throughput.

Separate from the analysis pass, so its numbers carry none of that pass's cost:
``time_profile`` runs the model again, ``warmup`` times and then ``repeats`` times, with
nothing but light timers installed, and writes the results into an existing Profile
(nodes matched by path). Three timers:

- ``"hooks"`` (default, here): a forward pre/post hook pair per module that only appends
  ``(module, timestamp)`` to a list: ``time.perf_counter_ns`` on CPU, a recorded
  ``torch.cuda.Event`` on CUDA (one synchronize per repeat; per-module with ``sync=True``).
  The log is replayed after each repeat into inclusive and self times per call.
  Each timed repeat is a bare run then an instrumented run (hooks installed only around
  it), so machine-load drift hits the whole-model latency and module times alike.
- ``"kineto"`` (``kineto.py``): a ``record_function`` range per module under
  ``torch.profiler``; CPU and device time, optionally the aten ops under each module.
- ``"fx"`` (``fx.py``): a ``torch.fx`` trace run by a timing interpreter; every
  graph node timed, functional calls (``add``, ``flatten``) included.

Backward (``backward=True``): autograd numbers every node it creates; the forward hooks
record which module was running from which sequence number on, so each autograd node of
the graph gets an owner. A pre-hook on each node stamps the time it starts; the interval
until the next node starts is that node's (the engine runs CPU nodes one at a time).

Every timer also keeps the timeline of each timed repeat (``spans.py``): the start and
end of every module call, backward span and op; the repeat with the median whole-run time
goes into ``Profile.timing["trace"]``, which ``layerscope.export.trace`` draws.

The instrumentation's own cost is calibrated on empty modules and subtracted (see
``docs/timing.md``). The model is left as found: ``ModelState`` is captured before and
restored after the whole pass (BatchNorm running stats, RNG, grads), hooks are removed in
``finally``.
"""

from __future__ import annotations

from layerscope.collect.timing.backward import BackwardTimer as BackwardTimer
from layerscope.collect.timing.backward import grad_steps as grad_steps
from layerscope.collect.timing.backward import owner_of as owner_of
from layerscope.collect.timing.backward import replay_backward as replay_backward
from layerscope.collect.timing.backward import replay_backward_log as replay_backward_log
from layerscope.collect.timing.calibrate import calibrate_backward as calibrate_backward
from layerscope.collect.timing.calibrate import calibrate_clock as calibrate_clock
from layerscope.collect.timing.calibrate import calibrate_forward as calibrate_forward
from layerscope.collect.timing.clock import Stamper as Stamper
from layerscope.collect.timing.compiled import time_compiled as time_compiled
from layerscope.collect.timing.context import PassContext as PassContext
from layerscope.collect.timing.forward import Entry as Entry
from layerscope.collect.timing.forward import ForwardHooks as ForwardHooks
from layerscope.collect.timing.forward import ForwardRepeat as ForwardRepeat
from layerscope.collect.timing.forward import replay_forward as replay_forward
from layerscope.collect.timing.index import ModuleIndex as ModuleIndex
from layerscope.collect.timing.loop import LoopTimer as LoopTimer
from layerscope.collect.timing.options import Clock, GradMode, Timer, TimingOptions
from layerscope.collect.timing.options import ProgressArg as ProgressArg
from layerscope.collect.timing.progress import Progress as Progress
from layerscope.collect.timing.result import IQR_SUFFIX as IQR_SUFFIX
from layerscope.collect.timing.result import MIN_SUFFIX as MIN_SUFFIX
from layerscope.collect.timing.result import (
    TIME_METRICS,
    OpSamples,
    RowSamples,
    Series,
    TimingResult,
    is_op_row,
)
from layerscope.collect.timing.result import add_repeat as add_repeat
from layerscope.collect.timing.runner import measure as measure
from layerscope.collect.timing.runner import region_paths as region_paths
from layerscope.collect.timing.runner import time_profile
from layerscope.collect.timing.spans import RepeatSpans as RepeatSpans
from layerscope.collect.timing.spans import build_trace as build_trace
from layerscope.collect.timing.stats import summarize
from layerscope.metricspec import BACKWARD_DEVICE_TIME as BACKWARD_DEVICE_TIME
from layerscope.metricspec import BACKWARD_TIME as BACKWARD_TIME
from layerscope.metricspec import DEVICE_TIME as DEVICE_TIME
from layerscope.metricspec import FORWARD_TIME as FORWARD_TIME

__all__ = [
    "BACKWARD_DEVICE_TIME",
    "BACKWARD_TIME",
    "DEVICE_TIME",
    "FORWARD_TIME",
    "TIME_METRICS",
    "Clock",
    "GradMode",
    "OpSamples",
    "RowSamples",
    "Series",
    "Timer",
    "TimingOptions",
    "TimingResult",
    "is_op_row",
    "summarize",
    "time_profile",
]
