"""The clocks and CUDA event methods kernelkit times with, bound when kernelkit is imported, before any user code.

An impl can replace ``time.perf_counter_ns`` or ``torch.cuda.Event.elapsed_time`` for a moment and put it back
before anything looks (a patch that restores itself at its first use). kernelkit never looks a clock up there
while it times: the samplers, the timer and the worker's own stamps read these names, bound here. A worker's
stamps go to the judging process with each job's result, and the judge holds them against its own clock
(clock_behind): code that patched these names too is caught by the time its clock lost.
"""

from __future__ import annotations

import time
import types
from collections.abc import Callable
from typing import Any

import torch

from kernelkit.errors import KernelkitError

perf_counter_ns = time.perf_counter_ns
perf_counter = time.perf_counter
monotonic = time.monotonic
Event = torch.cuda.Event
_EVENT_BASE = torch.cuda.Event.__mro__[1]  # torch._C._CudaEventBase on a CUDA build: a C type, its methods C code
event_record = getattr(_EVENT_BASE, "record", torch.cuda.Event.record)  # a CPU build: a stand-in
event_elapsed_ms = getattr(_EVENT_BASE, "elapsed_time", torch.cuda.Event.elapsed_time)
_TIME = time
# How far a worker's clock may trail the judge's at a job's end: the pipe, and a judge thread kept off the CPU.
CLOCK_SLACK_S, CLOCK_SLACK_SHARE, CLOCK_AHEAD_S = 0.25, 0.25, 0.005
_GENUINE_NS = time.perf_counter_ns  # kept apart from the public name


class ClockTampered(KernelkitError):
    """A clock kernelkit times with is not the one it bound: code that ran patched it."""


def clock_ns() -> Callable[[], int]:
    """``time.perf_counter_ns`` itself, checked to be the builtin of the time module: where this module's name
    was replaced, the builtin bound at import instead (the replacement is left where it is, for the seal to name:
    jobs/guards.py). A sampler takes it once per batch, before the batch's first call, and reads only that."""
    for now in (perf_counter_ns, _GENUINE_NS):
        if (isinstance(now, types.BuiltinFunctionType) and getattr(now, "__self__", None) is _TIME
                and now.__name__ == "perf_counter_ns"):
            return now
    raise ClockTampered(f"the clock kernelkit times with was replaced by {perf_counter_ns!r}: the code it ran "
                        "patched it")


def event_methods() -> tuple[Callable[..., Any], Callable[..., float]]:
    """(record, elapsed_time) of CUDA events, checked to be the C methods of torch's event type, taken once per
    batch as ``clock_ns`` is."""
    record, elapsed = event_record, event_elapsed_ms
    if torch.version.cuda is not None:
        for method, name in ((record, "record"), (elapsed, "elapsed_time")):
            if not (isinstance(method, types.MethodDescriptorType) and method.__objclass__ is _EVENT_BASE
                    and method.__name__ == name):
                raise ClockTampered(f"CUDA's event {name} kernelkit times with was replaced by {method!r}: the "
                                    "code it ran patched it")
    return record, elapsed


def clock_behind(sent: float, received: tuple[float, float], stamps: tuple[float, float]) -> str:
    """Why the worker's clock cannot be believed over one job, or '': it said it got the job at ``stamps[0]`` and
    sent the result at ``stamps[1]``; this process sent the job at ``sent`` and read the result from
    ``received[0]`` to ``received[1]``, on the same monotonic clock. A clock that falls behind (code that patched
    it to hide the time its calls took) ends the job further before the reading began than a pipe and a busy host
    explain (CLOCK_SLACK_S, or a CLOCK_SLACK_SHARE of the job). A clock ahead of this one is as wrong."""
    got, done = stamps
    start, end = received
    span = end - sent
    slack = max(CLOCK_SLACK_S, CLOCK_SLACK_SHARE * span)
    if got < sent - CLOCK_AHEAD_S or done > end + CLOCK_AHEAD_S or done < got:
        return (f"the worker's clock disagrees with the judge's (it got the job {got - sent:+.3f} s after the judge "
                f"sent it and sent its result {done - end:+.3f} s after the judge had read it): the code it ran "
                "patched the clock the times are read from; its times are not kept")
    if start - done > slack:
        return (f"the worker's clock fell {start - done:.3f} s behind the judge's over a {span:.3f} s job (more "
                f"than the {slack:.3f} s a pipe and a busy host explain): the code it ran patched the clock the times "
                "are read from, hiding the time its calls took; its times are not kept")
    return ""
