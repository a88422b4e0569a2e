"""kernel mode and the launch-bound probe: the device time of the work each call itself enqueued.

Each call runs alone in a range that ends with a device synchronize; the eviction (cold) runs before the range,
outside it. A call's device time is the union of the kernels, memcpys and memsets that start inside its range
(overlapping, concurrent work counts once). The records come from CUPTI through cupti-python where it imports
(cupti_trace.py), else from torch.profiler.

With torch.profiler, a ``record_function`` range appears twice in the records: once on the host (the range this
module opens) and once on the device as a "gpu_user_annotation" spanning the kernels it saw. Only host ranges
are call ranges, and only kernels, memcpys and memsets are device work: counting the annotation as a second
range gave every call a twin with no work (a median of half the true time), and counting it as device work
would double a call's time where the annotation is not nested in its range.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from kernelkit.measure.cupti_trace import CuptiTracer
from kernelkit.measure.samplers import MeasureError, Sample, evict

CALL_RANGE = "kernelkit::timed_call"
DEVICE_WORK = ("kernel", "gpu_memcpy", "gpu_memset")  # Kineto activity types that are device work
DEVICE_ANNOTATION = "gpu_user_annotation"
KINETO_SOURCE = "torch.profiler (Kineto/CUPTI) records"
Span = tuple[int, int]


class KernelTimer:
    """Device seconds per call from CUPTI (cupti-python) when it works here, else from torch.profiler.

    ``source`` names where the last times came from. A CUPTI session that fails (another CUPTI client holds the
    activity API, a driver too old for its library) switches this timer to torch.profiler for good.
    """

    def __init__(self, cupti: CuptiTracer | None = None) -> None:
        self.cupti = cupti
        self.source = cupti.source if cupti is not None else KINETO_SOURCE
        self.last_cost: float | None = None  # wall seconds per call in the last session, its start-up left out

    @classmethod
    def open(cls) -> KernelTimer:
        return cls(CuptiTracer.open())

    def times(self, fns: Sequence[Callable[[], Any]], flush: torch.Tensor | None = None) -> list[float]:
        """Device seconds of each call's own work; MeasureError when no call ran any device work."""
        marks: list[float] = []

        def before() -> None:
            marks.append(time.perf_counter())
            if flush is not None:
                evict(flush)
            torch.cuda.synchronize()

        ranges: list[Span] | None = None
        if self.cupti is not None:
            try:
                ranges, spans = self.cupti.trace(fns, before)
            except Exception:  # noqa: BLE001 - any CUPTI failure: torch.profiler reads the same records
                self.cupti, self.source = None, KINETO_SOURCE
        if ranges is None:
            marks.clear()
            ranges, spans = kineto_trace(fns, before)
        self.last_cost = (marks[-1] - marks[0]) / (len(marks) - 1) if len(marks) > 1 else None
        if len(ranges) != len(fns):
            raise MeasureError(f"mode kernel: {len(ranges)} call ranges recorded for {len(fns)} calls; the device "
                               "times cannot be told apart")
        if not spans:
            raise MeasureError("mode kernel: the profiler recorded no GPU activity for the call (CPU-only work?)")
        return group_by_call(ranges, spans)


def kineto_trace(fns: Sequence[Callable[[], Any]], before: Callable[[], None]) -> tuple[list[Span], list[Span]]:
    """(host range of each call, every device span) from one torch.profiler session."""
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for fn in fns:
            before()
            with record_function(CALL_RANGE):  # the range lasts until the call's device work is done
                fn()
                torch.cuda.synchronize()
    events = list(prof.profiler.kineto_results.events())
    return call_ranges(events), device_spans(events)


def _activity(event: Any) -> str | None:
    """Kineto's activity type ('kernel', 'gpu_memcpy', 'gpu_user_annotation', ...), None where torch lacks it."""
    get = getattr(event, "activity_type", None)
    return str(get()) if callable(get) else None


def call_ranges(events: Iterable[Any]) -> list[Span]:
    """(start_ns, end_ns) of each timed call's host range, in order; the device-side annotation of the same name
    is not a range. Host ranges and device activity share one clock in the records (Kineto aligns them)."""
    return sorted(
        (e.start_ns(), e.start_ns() + e.duration_ns()) for e in events
        if e.name() == CALL_RANGE and e.device_type() == torch.autograd.DeviceType.CPU
        and _activity(e) != DEVICE_ANNOTATION
    )


def device_spans(events: Iterable[Any]) -> list[Span]:
    """(start_ns, end_ns) of every kernel, memcpy and memset; annotations and sync records are not device work."""
    spans = []
    for e in events:
        if e.device_type() != torch.autograd.DeviceType.CUDA:
            continue
        kind = _activity(e)
        if kind is None:  # an older torch: no activity types; leave out what is known not to be device work
            user = getattr(e, "is_user_annotation", None)
            work = e.name() != CALL_RANGE and not (callable(user) and user()) and "Sync" not in e.name()
        else:
            work = kind in DEVICE_WORK
        if work:
            spans.append((e.start_ns(), e.start_ns() + e.duration_ns()))
    return spans


def group_by_call(ranges: Sequence[Span], spans: Sequence[Span]) -> list[float]:
    """Seconds of device activity per call: call i owns the spans that start inside its range.

    Each range ends with a device synchronize, so every span of call i starts within it; spans outside every
    range (the eviction) belong to no call. Overlapping spans (concurrent kernels) count once: their union.
    """
    per_call: list[list[Span]] = [[] for _ in ranges]
    for start, end in spans:
        for i, (lo, hi) in enumerate(ranges):
            if lo <= start < hi:
                per_call[i].append((start, end))
                break
    return [_union_ns(group) / 1e9 for group in per_call]


def _union_ns(spans: list[Span]) -> int:
    total, reach = 0, None
    for start, end in sorted(spans):
        if reach is None or start >= reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


class KernelSampler:
    """kernel: each call's device time (see KernelTimer), cache evicted before each call as cold mode does (and
    as Nsight Compute does by default); one tracing session per batch."""

    device = "cuda"

    def __init__(self, fn: Callable[[], Any], timer: KernelTimer, flush: torch.Tensor | None = None) -> None:
        self.fn = fn
        self.timer = timer
        self.flush = flush
        self.calls_per_sample = 1

    @property
    def last_cost(self) -> float | None:
        return self.timer.last_cost

    @property
    def method(self) -> str:
        return f"kernel: device time of each call's kernels, memcpys and memsets, from {self.timer.source}"

    def one(self) -> float:
        return self.batch(1)[0][0]

    def batch(self, k: int, deadline: float | None = None) -> list[Sample]:
        # A batch is one tracing session, sized by the timer from the cost of a traced call (last_cost); two calls
        # at least, so that cost is measured apart from the session's own start-up.
        del deadline
        return [(t, None) for t in self.timer.times([self.fn] * max(k, 2), self.flush)]
