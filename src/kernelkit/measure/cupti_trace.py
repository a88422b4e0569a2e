"""Device activity from CUPTI's activity API through cupti-python (``from cupti import cupti``), where it imports.

CUPTI records every kernel, memcpy and memset the process runs, whichever API launched it (torch, Triton, CUDA
C++ through cuda.core, Numba), with start and end in CUPTI's own clock, the one ``cupti.get_timestamp()`` reads.
So a call's range is two readings around it (the second after a device synchronize), and the call's device work
is every record that starts inside that range. torch.profiler reads the same records through Kineto, which
misses launches it does not intercept (cuda.core, Numba): kernel_time.py prefers this and falls back to it.

CUPTI's clock is not always nanoseconds. torch.profiler (Kineto) registers a timestamp callback that returns the
CPU's TSC ticks and never unregisters it, so once a torch.profiler session has run in the process, every later
CUPTI record and ``get_timestamp()`` counts TSC ticks (2.1 per ns on the Xeon of an H100 host: kernel mode read
366 us for a 175 us kernel after a profiler session, 174 us without one). Each session therefore measures the
rate of CUPTI's clock against ``time.perf_counter_ns`` over the session itself and converts every timestamp.

Records are also kept from counting twice: buffers left over from an earlier session (ours or the profiler's) are
flushed and discarded before the kinds are enabled; records outside the session are dropped; a record delivered
twice (same kind, correlation id, device, stream, start and end) counts once. One session runs at a time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

from kernelkit.measure import bound

BUFFER_BYTES = 8 << 20  # per activity buffer CUPTI asks for; records are ~100-200 bytes each
CALIBRATION_NS = 2_000_000  # the clock-rate baseline lasts at least this long: ~200 ns of read jitter is 1e-4
NS_CLOCK_SLACK = 0.01  # a rate within 1% of one tick per ns is CUPTI's own nanosecond clock: taken as exactly 1
Span = tuple[int, int]

_SESSION = threading.Lock()  # CUPTI's activity API is process-wide: two sessions at once would share records


@dataclass(frozen=True)
class Trace:
    """One tracing session: each call's range and every device span, in nanoseconds of one clock; and each call's
    wall time on the host (perf_counter_ns, its synchronize included), the yardstick no call's work may exceed."""

    ranges: list[Span]
    spans: list[Span]
    walls: list[int]
    ticks_per_ns: float = 1.0  # the rate of the tracer's raw clock (1 when it counted nanoseconds)


class CuptiTracer:
    """Kernel, memcpy and memset records of a list of calls, from one CUPTI activity session per list."""

    source = "CUPTI activity records (cupti-python)"

    def __init__(self, cupti: ModuleType) -> None:
        self._cupti = cupti
        self.ticks_per_ns = 1.0  # the last session's clock rate

    @classmethod
    def open(cls) -> CuptiTracer | None:
        """A tracer when cupti-python imports (it needs a CUDA driver and CUPTI's library); else None."""
        try:
            from cupti import cupti  # type: ignore[import-not-found]
        except Exception:  # noqa: BLE001 - not installed, or its CUPTI library is missing: use torch.profiler
            return None
        return cls(cupti)

    def trace(self, fns: Sequence[Callable[[], Any]], before: Callable[[], None]) -> Trace:
        """Each call's range and every device span, in ns. ``before`` runs ahead of each call's range (the
        eviction, then a synchronize), so its own kernels start outside every range."""
        if not _SESSION.acquire(blocking=False):
            raise RuntimeError("a CUPTI session is already running in this process (a timed call timing itself?)")
        try:
            return self._trace(fns, before)
        finally:
            _SESSION.release()

    def _trace(self, fns: Sequence[Callable[[], Any]], before: Callable[[], None]) -> Trace:
        c = self._cupti
        kinds = {int(c.ActivityKind.CONCURRENT_KERNEL), int(c.ActivityKind.MEMCPY), int(c.ActivityKind.MEMSET)}
        seen: set[tuple[Any, ...]] = set()
        lock = threading.Lock()  # CUPTI may deliver buffers from its own thread
        keep = [False]  # records delivered before the session starts are stale: dropped

        def requested() -> tuple[int, int]:
            return BUFFER_BYTES, 0  # 0: as many records as fit

        def completed(activities: list[Any]) -> None:
            with lock:
                if keep[0]:
                    seen.update(record_identity(a) for a in activities if int(a.kind) in kinds)

        # Registered for every session: another CUPTI client (torch.profiler) may have registered its own since.
        c.activity_register_callbacks(requested, completed)
        c.activity_flush_all(1)  # what an earlier session left in CUPTI's buffers arrives now, and is dropped
        enabled: list[int] = []
        ranges: list[Span] = []
        walls: list[int] = []
        try:
            first = clock_pair(c)
            keep[0] = True
            for kind in sorted(kinds):
                c.activity_enable(kind)
                enabled.append(kind)
            for fn in fns:
                before()
                host = bound.perf_counter_ns()
                start = int(c.get_timestamp())
                fn()
                torch.cuda.synchronize()
                ranges.append((start, int(c.get_timestamp())))
                walls.append(bound.perf_counter_ns() - host)
            c.activity_flush_all(1)  # forced: every buffer is delivered, even one partly filled
        finally:
            for kind in enabled:
                c.activity_disable(kind)
            keep[0] = False
        remaining = CALIBRATION_NS - (bound.perf_counter_ns() - first[1])
        if remaining > 0:
            time.sleep(remaining / 1e9)
        last = clock_pair(c)
        rate = ticks_per_ns(first, last)
        self.ticks_per_ns = rate
        with lock:
            records = sorted((r[4], r[5]) for r in seen)
        lo, hi = first[0], last[0]
        spans = [(s, e) for s, e in records if lo <= s and e <= hi]  # records from outside the session: dropped
        return Trace([_to_ns(r, lo, rate) for r in ranges], [_to_ns(s, lo, rate) for s in spans], walls, rate)


def record_identity(activity: Any) -> tuple[Any, ...]:
    """What makes a record one piece of device work: a second delivery of it is the same tuple."""
    return (int(activity.kind), getattr(activity, "correlation_id", None), getattr(activity, "device_id", None),
            getattr(activity, "stream_id", None), int(activity.start), int(activity.end))


def clock_pair(cupti: Any, tries: int = 3) -> tuple[int, int]:
    """(CUPTI timestamp, perf_counter_ns at the same moment): the tightest of ``tries`` brackets of the reading."""
    best: tuple[int, int, int] | None = None
    for _ in range(tries):
        before = bound.perf_counter_ns()
        stamp = int(cupti.get_timestamp())
        after = bound.perf_counter_ns()
        if best is None or after - before < best[0]:
            best = (after - before, stamp, (before + after) // 2)
    assert best is not None
    return best[1], best[2]


def ticks_per_ns(first: tuple[int, int], last: tuple[int, int]) -> float:
    """The rate of CUPTI's clock from two (timestamp, host ns) pairs; exactly 1 when within NS_CLOCK_SLACK of it."""
    host = last[1] - first[1]
    if host <= 0:
        return 1.0
    rate = (last[0] - first[0]) / host
    if rate <= 0:
        raise RuntimeError(f"CUPTI's clock did not advance over {host} ns: its timestamps cannot be used")
    return 1.0 if abs(rate - 1) <= NS_CLOCK_SLACK else rate


def _to_ns(span: Span, origin: int, rate: float) -> Span:
    if rate == 1.0:
        return span
    return round((span[0] - origin) / rate), round((span[1] - origin) / rate)
