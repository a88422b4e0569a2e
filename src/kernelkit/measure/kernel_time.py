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

Whatever the source, no call's device work may exceed its own wall time on the host (measured with
perf_counter_ns around the call and its synchronize): work counted twice, or timestamps in another unit than the
nanoseconds they are read as, would; such a session is an error, never a result (``check_within_walls``).
The SM clock is read once per batch in kernel mode, after one call's launch (while it runs), and samples under
75% of the maximum clock are dropped as in the other modes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from kernelkit.measure import bound
from kernelkit.measure.cupti_trace import CuptiTracer, Trace
from kernelkit.measure.samplers import MeasureError, Sample, evict

CALL_RANGE = "kernelkit::timed_call"
DEVICE_WORK = ("kernel", "gpu_memcpy", "gpu_memset")  # Kineto activity types that are device work
DEVICE_ANNOTATION = "gpu_user_annotation"
KINETO_SOURCE = "torch.profiler (Kineto/CUPTI) records"
WALL_SLACK = 0.02  # a call's device work may exceed its host wall time by this fraction (clock interpolation)...
WALL_SLACK_NS = 2_000  # ...plus this much, before the session is not trusted
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

    def times(self, fns: Sequence[Callable[[], Any]], flush: torch.Tensor | None = None,
              reset: Callable[[], None] | None = None) -> list[float]:
        """Device seconds of each call's own work; MeasureError when no call ran any device work. ``reset`` runs
        before each eviction (persisting L2 lines: measure/l2.py)."""
        marks: list[float] = []

        def before() -> None:
            marks.append(bound.perf_counter())
            if reset is not None:
                reset()
            if flush is not None:
                evict(flush)
            torch.cuda.synchronize()

        trace: Trace | None = None
        if self.cupti is not None:
            try:
                trace = self.cupti.trace(fns, before)
            except Exception:  # noqa: BLE001 - any CUPTI failure: torch.profiler reads the same records
                self.cupti, self.source = None, KINETO_SOURCE
        if trace is None:
            marks.clear()
            trace = kineto_trace(fns, before)
        self.last_cost = (marks[-1] - marks[0]) / (len(marks) - 1) if len(marks) > 1 else None
        if len(trace.ranges) != len(fns):
            raise MeasureError(f"mode kernel: {len(trace.ranges)} call ranges recorded for {len(fns)} calls; the "
                               "device times cannot be told apart")
        if not trace.spans:
            raise MeasureError("mode kernel: the profiler recorded no GPU activity for the call (CPU-only work?)")
        times = group_by_call(trace.ranges, trace.spans)
        check_within_walls(times, trace.walls, self.source)
        return times


def check_within_walls(times: Sequence[float], walls_ns: Sequence[int], source: str) -> None:
    """MeasureError when a call's device seconds exceed its wall time on the host (WALL_SLACK and WALL_SLACK_NS
    allowed): its records were counted twice, or read in the wrong unit."""
    for i, (seconds, wall) in enumerate(zip(times, walls_ns, strict=True)):
        if seconds * 1e9 > wall * (1 + WALL_SLACK) + WALL_SLACK_NS:
            raise MeasureError(
                f"mode kernel: call {i} has {seconds * 1e6:.1f} us of device work recorded but lasted "
                f"{wall / 1e3:.1f} us on the host, synchronize included; the {source} counted work twice or in "
                "another clock, so these device times are not trusted")


def kineto_trace(fns: Sequence[Callable[[], Any]], before: Callable[[], None]) -> Trace:
    """(host range of each call, every device span, each call's wall ns) from one torch.profiler session."""
    from torch.profiler import ProfilerActivity, profile, record_function

    walls: list[int] = []
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for fn in fns:
            before()
            host = bound.perf_counter_ns()
            with record_function(CALL_RANGE):  # the range lasts until the call's device work is done
                fn()
                torch.cuda.synchronize()
            walls.append(bound.perf_counter_ns() - host)
    events = list(prof.profiler.kineto_results.events())
    return Trace(call_ranges(events), device_spans(events), walls)


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
    as Nsight Compute does by default); one tracing session per batch.

    Each call runs alone: the eviction, a synchronize, the call, a synchronize; the GPU idles between calls at
    least as much as in cold mode (which queues eviction and call back to back), never more busy. ``clock``
    (measure.clocks.ClockReader) is read once per batch, after the middle call's launch, so each sample carries
    the SM clock it ran at and the timer drops those under 75% of the maximum, as it does in cold mode.
    """

    device = "cuda"

    def __init__(self, fn: Callable[[], Any], timer: KernelTimer, flush: torch.Tensor | None = None,
                 clock: Any = None, l2: Any = None) -> None:
        self.fn = fn
        self.timer = timer
        self.flush = flush
        self.clock = clock
        self.l2 = l2  # measure.l2.PersistingL2: persisting lines reset before each eviction
        self.calls_per_sample = 1

    @property
    def last_cost(self) -> float | None:
        return self.timer.last_cost

    @property
    def method(self) -> str:
        clock = "; SM clock read once per batch" if self.clock is not None else ""
        rate = getattr(getattr(self.timer, "cupti", None), "ticks_per_ns", 1.0)
        ticks = f" (its clock counted {rate:.3f} ticks per ns: converted)" if rate != 1.0 else ""
        return (f"kernel: device time of each call's kernels, memcpys and memsets, from {self.timer.source}"
                f"{ticks}{clock}")

    def one(self) -> float:
        return self.batch(1)[0][0]

    def batch(self, k: int, deadline: float | None = None) -> list[Sample]:
        # A batch is one tracing session, sized by the timer from the cost of a traced call (last_cost); two calls
        # at least, so that cost is measured apart from the session's own start-up.
        del deadline
        fns = [self.fn] * max(k, 2)
        readings: list[float] = []
        if self.clock is not None:
            fns[len(fns) // 2] = self._call_and_read_clock(readings)
        reset = None
        if self.flush is not None and self.l2 is not None and self.l2.runtime is not None:
            reset = functools.partial(self.l2.reset, torch.cuda.current_stream().cuda_stream)
        times = self.timer.times(fns, self.flush, reset)
        mhz = readings[0] if readings else None
        return [(t, mhz) for t in times]

    def _call_and_read_clock(self, readings: list[float]) -> Callable[[], Any]:
        fn, clock = self.fn, self.clock

        def call() -> Any:
            out = fn()
            readings.append(clock.sm_clock_mhz())  # launched, not yet synchronized: the clock it runs at
            return out

        return call
