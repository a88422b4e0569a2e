"""How one timing sample is taken, per mode and device. The timer (timer.py) decides how many and when to stop.

A sampler times ``calls`` of one callable: ``one()`` times a single call alone (the first call, warm-up) and
``batch(k)`` returns k samples of seconds per call. GPU samplers queue a whole batch before synchronizing once, so
host-side syncs never fall inside a timed window.

- cold: before every sample a buffer of 2x the last-level cache (size read from the device) is read, outside the
  timed window, so each sample starts with the call's data out of cache. A read, not a write: a written buffer
  leaves dirty lines that the timed call would then pay to write back (measured: +7% on a 2^26-float kernel).
- hot: back-to-back calls, no eviction.
- graph: N unrolled calls captured in a CUDA graph; each replay is one sample of replay time / N (no launch
  overhead, warm cache when the working set fits in L2).
- kernel: the device time of the kernels each call launched, from torch.profiler (CUPTI) records, with the cache
  evicted before each call as in cold mode (and as Nsight Compute does by default).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from kernelkit.errors import KernelkitError

FLUSH_FACTOR = 2  # the eviction buffer is at least this many times the cache size
GRAPH_TARGET_SECONDS = 1e-3  # unroll graph captures until one replay takes about this long
GRAPH_MAX_CALLS = 200
Sample = tuple[float, float | None]  # (seconds per call, SM clock in MHz read during the batch, if known)


class MeasureError(KernelkitError):
    """A callable cannot be timed the way asked (a mode the device lacks, a graph that cannot be captured)."""


class CpuSampler:
    """Synchronous CPU work timed with perf_counter_ns: CPU timings, never GPU performance."""

    device = "cpu"

    def __init__(self, fn: Callable[[], Any], mode: str, cache_bytes: int) -> None:
        if mode not in ("cold", "hot"):
            raise MeasureError(f"mode {mode!r} needs a CUDA GPU (none here); on the CPU use --mode cold or hot")
        self.fn = fn
        self.flush = eviction_buffer(cache_bytes, "cpu") if mode == "cold" else None
        self.calls_per_sample = 1

    def one(self) -> float:
        start = time.perf_counter_ns()
        self.fn()
        return (time.perf_counter_ns() - start) / 1e9

    def batch(self, k: int) -> list[Sample]:
        out: list[Sample] = []
        for _ in range(k):
            if self.flush is not None:
                evict(self.flush)
            out.append((self.one(), None))
        return out


def eviction_buffer(cache_bytes: int, device: str) -> torch.Tensor:
    """A buffer of FLUSH_FACTOR x the cache, filled once (pages touched), for ``evict`` to read."""
    return torch.ones(FLUSH_FACTOR * cache_bytes // 4, dtype=torch.int32, device=device)


def evict(buffer: torch.Tensor) -> None:
    """Read every byte of ``buffer`` (a sum: one pass, a tiny output), pushing the previous call's lines out."""
    torch.sum(buffer, dtype=torch.int64)


class EventSampler:
    """cold and hot on a GPU: a CUDA event pair around each call, on the current stream."""

    device = "cuda"

    def __init__(self, fn: Callable[[], Any], mode: str, cache_bytes: int, clock: Any = None) -> None:
        self.fn = fn
        self.clock = clock
        self.calls_per_sample = 1
        self.flush = eviction_buffer(cache_bytes, "cuda") if mode == "cold" else None

    def one(self) -> float:
        return self.batch(1)[0][0]

    def batch(self, k: int) -> list[Sample]:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(k)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(k)]
        for i in range(k):
            if self.flush is not None:
                evict(self.flush)
            starts[i].record()
            self.fn()
            ends[i].record()
        mhz = self.clock.sm_clock_mhz() if self.clock is not None else None  # read while the batch runs
        torch.cuda.synchronize()
        return [(s.elapsed_time(e) / 1e3, mhz) for s, e in zip(starts, ends, strict=True)]


class GraphSampler:
    """graph: replays of a CUDA graph of ``calls_per_sample`` unrolled calls, timed with an event pair each."""

    device = "cuda"

    def __init__(self, fn: Callable[[], Any], estimate: float, clock: Any = None) -> None:
        self.fn = fn
        self.clock = clock
        self.calls_per_sample = graph_calls(estimate)
        self.graph = _capture(fn, self.calls_per_sample)

    def one(self) -> float:
        return self.batch(1)[0][0]

    def batch(self, k: int) -> list[Sample]:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(k)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(k)]
        for i in range(k):
            starts[i].record()
            self.graph.replay()
            ends[i].record()
        mhz = self.clock.sm_clock_mhz() if self.clock is not None else None
        torch.cuda.synchronize()
        return [(s.elapsed_time(e) / 1e3 / self.calls_per_sample, mhz) for s, e in zip(starts, ends, strict=True)]


def graph_calls(estimate: float) -> int:
    """How many calls to unroll in one graph: enough for a replay of about a millisecond, at most 200."""
    if estimate <= 0:
        return GRAPH_MAX_CALLS
    return max(1, min(GRAPH_MAX_CALLS, math.ceil(GRAPH_TARGET_SECONDS / estimate)))


def _capture(fn: Callable[[], Any], calls: int) -> torch.cuda.CUDAGraph:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    try:
        with torch.cuda.stream(side):  # warm up on the capture stream, as CUDA graphs require
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
    except Exception as exc:  # noqa: BLE001 - any capture failure has the same remedy
        torch.cuda.synchronize()
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MeasureError(
            f"mode graph: the call cannot be captured in a CUDA graph ({type(exc).__name__}: {first}); it may "
            "synchronize, copy to the host or allocate outside torch's allocator. Use --mode cold or kernel"
        ) from None
    torch.cuda.synchronize()
    return graph


class KernelSampler:
    """kernel: each call's kernels' device time, summed, from one torch.profiler session per batch."""

    device = "cuda"

    def __init__(self, fn: Callable[[], Any], cache_bytes: int = 0) -> None:
        self.fn = fn
        self.calls_per_sample = 1
        self.flush = eviction_buffer(cache_bytes, "cuda") if cache_bytes else None

    def one(self) -> float:
        return self.batch(1)[0][0]

    def batch(self, k: int) -> list[Sample]:
        return [(t, None) for t in profile_calls([self.fn] * k, self.flush)]


CALL_RANGE = "kernelkit::timed_call"


def profile_calls(fns: Sequence[Callable[[], Any]], flush: torch.Tensor | None = None) -> list[float]:
    """Device seconds of each call's kernels, in one profiler session; each call ends in a synchronize.

    The eviction (when ``flush`` is given) runs before each call's range, so its kernel is not counted.
    """
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for fn in fns:
            if flush is not None:
                evict(flush)
                torch.cuda.synchronize()
            with record_function(CALL_RANGE):  # the range lasts until the call's device work is done
                fn()
                torch.cuda.synchronize()
    ranges, spans = call_ranges(prof), device_spans(prof)
    if not spans:
        raise MeasureError("mode kernel: the profiler recorded no GPU activity for the call (CPU-only work?)")
    return group_by_call(ranges, spans)


def call_ranges(prof: Any) -> list[tuple[int, int]]:
    """(start_ns, end_ns) of each timed call's range, in order. Host ranges and device activity share one clock
    in the profiler's records (Kineto aligns them)."""
    return sorted(
        (e.start_ns(), e.start_ns() + e.duration_ns())
        for e in prof.profiler.kineto_results.events() if e.name() == CALL_RANGE
    )


def device_spans(prof: Any) -> list[tuple[int, int]]:
    """(start_ns, end_ns) of every GPU activity (kernels, memcpy, memset) the profiler recorded."""
    spans = []
    for event in prof.profiler.kineto_results.events():
        if event.device_type() == torch.autograd.DeviceType.CUDA:
            spans.append((event.start_ns(), event.start_ns() + event.duration_ns()))
    return spans


def group_by_call(ranges: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]) -> list[float]:
    """Seconds of device activity per call: call i owns the spans that start inside its range.

    Each range ends with a device synchronize, so every span of call i starts within it; spans outside every
    range (the eviction) belong to no call. Overlapping spans (concurrent kernels) count once: their union.
    """
    per_call: list[list[tuple[int, int]]] = [[] for _ in ranges]
    for start, end in spans:
        for i, (lo, hi) in enumerate(ranges):
            if lo <= start < hi:
                per_call[i].append((start, end))
                break
    return [_union_ns(group) / 1e9 for group in per_call]


def _union_ns(spans: list[tuple[int, int]]) -> int:
    total, reach = 0, None
    for start, end in sorted(spans):
        if reach is None or start >= reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total
