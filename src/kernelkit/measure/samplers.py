"""How one timing sample is taken in cold and hot mode. The timer (timer.py) decides how many and when to stop.

A sampler has ``calls_per_sample`` and ``batch(k, deadline)``: up to k samples, each the seconds per call of one
sample, fewer once the host clock passes ``deadline`` (the budget holds within a batch, not only between
batches). ``one()`` times a single call alone (warm-up). GPU samplers queue a whole batch before synchronizing
once, so host-side syncs never fall inside a timed window; nothing but the calls themselves runs between a
sample's two timestamps. Python's garbage collector is paused while a batch is queued, as timeit (and so
torch.utils.benchmark's Timer) pauses it: a collection inside a timed window is the host's cost, not the call's.

- cold: one call per sample; before every sample an eviction buffer is read, outside the timed window, so each
  sample starts with the call's data out of cache. A read, not a write: a written buffer leaves dirty lines that
  the timed call would then pay to write back (measured: +7% on a 2^26-float kernel on an H100). Its size is
  ``eviction_bytes``: 2x the GPU's L2; on the CPU 2x the last-level cache but at most CPU_EVICTION_CAP. On a GPU,
  persisting L2 lines are turned back to normal before the read (measure/l2.py): lines pinned by an access-policy
  window would stay in the L2 through it.
- hot: n back-to-back calls between one pair of timestamps (one CUDA event pair on a GPU, perf_counter_ns on the
  CPU), no eviction; a sample is their mean, n chosen so a sample lasts about HOT_SAMPLE_SECONDS. Between the
  timestamps is a bare ``for _ in range(n): fn()``: ``fn`` is the user's function with its arguments bound by
  functools.partial (timer.bench), which costs ~20 ns a call over calling it directly (a lambda around
  ``fn(*args)``: ~40 ns), measured on the CPU; outputs are dropped as they come, as Timer drops them.
- graph and kernel mode: graph.py and kernel_time.py.
"""

from __future__ import annotations

import contextlib
import gc
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch

from kernelkit.errors import KernelkitError
from kernelkit.measure import bound

FLUSH_FACTOR = 2  # the eviction buffer is this many times the cache size (capped on the CPU)
# A CPU's last-level cache can be huge (a 480 MiB L3 on some servers): reading 2x that before every sample takes
# about a second, so the CPU eviction is capped. 64 MiB evicts a 32 MiB L3 entirely; on a larger cache the call's
# data may stay partly cached, and the result says so (see eviction_note).
CPU_EVICTION_CAP = 64 << 20
HOT_SAMPLE_SECONDS = 1e-3  # hot mode: calls per sample so that one sample lasts about this long
HOT_MAX_CALLS = 1000
Sample = tuple[float, float | None]  # (seconds per call, SM clock in MHz read during the batch, if known)


class MeasureError(KernelkitError):
    """A callable cannot be timed the way asked (a mode the device lacks, a graph that cannot be captured)."""


def eviction_bytes(cache_bytes: int, device: str) -> int:
    """Bytes cold mode reads before each sample: FLUSH_FACTOR x the cache, at most CPU_EVICTION_CAP on the CPU."""
    wanted = FLUSH_FACTOR * cache_bytes
    return min(wanted, CPU_EVICTION_CAP) if device == "cpu" else wanted


def eviction_note(cache_bytes: int, device: str) -> str:
    """The warning a cold CPU result carries when the eviction is capped below FLUSH_FACTOR x the cache; else ''."""
    read = eviction_bytes(cache_bytes, device)
    if read >= FLUSH_FACTOR * cache_bytes:
        return ""
    return (f"cold mode on the CPU reads {read >> 20} MiB before each sample, not {FLUSH_FACTOR}x the "
            f"{cache_bytes >> 20} MiB last-level cache (too slow to read before every sample): data that fits "
            "in the cache may still be partly cached")


def eviction_buffer(nbytes: int, device: str) -> torch.Tensor:
    """A buffer of ``nbytes``, filled once (pages touched, so reads really go to memory), for ``evict`` to read.

    int32 on a GPU; float32 on the CPU, where torch's integer sum is not vectorized (0.6 GB/s against 8 GB/s for
    a float sum, measured on a 2-core EPYC): the eviction would cost more than the samples it precedes.
    """
    dtype = torch.float32 if device == "cpu" else torch.int32
    return torch.ones(max(1, nbytes // 4), dtype=dtype, device=device)


def evict(buffer: torch.Tensor) -> None:
    """Read every byte of ``buffer`` (a sum: one pass, a tiny output), pushing the previous call's lines out."""
    if buffer.dtype == torch.int32:
        torch.sum(buffer, dtype=torch.int64)
    else:
        torch.sum(buffer)


def hot_calls(estimate: float) -> int:
    """Calls per hot sample: enough for about HOT_SAMPLE_SECONDS, between 1 and HOT_MAX_CALLS."""
    if estimate <= 0:
        return HOT_MAX_CALLS
    return max(1, min(HOT_MAX_CALLS, math.ceil(HOT_SAMPLE_SECONDS / estimate)))


def past(deadline: float | None) -> bool:
    return deadline is not None and bound.perf_counter() >= deadline


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Python's garbage collector off for the block (as timeit does), back on after it if it was on."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class CpuSampler:
    """Synchronous CPU work timed with perf_counter_ns: CPU timings, never GPU performance.

    ``calls_per_sample`` calls per sample (cold: 1; hot: ``hot_calls(estimate)``), each sample after reading
    ``flush`` when one is given (cold); the mode decides both (measure/modes.py).
    """

    device = "cpu"
    method = ""

    def __init__(self, fn: Callable[[], Any], calls_per_sample: int, flush: torch.Tensor | None) -> None:
        self.fn = fn
        self.flush = flush
        self.calls_per_sample = max(1, int(calls_per_sample))

    def one(self) -> float:
        now = bound.clock_ns()  # the clock itself, taken before the call (bound.py says why)
        start = now()
        self.fn()
        return (now() - start) / 1e9

    def batch(self, k: int, deadline: float | None = None) -> list[Sample]:
        fn, n, flush = self.fn, self.calls_per_sample, self.flush
        now = bound.clock_ns()
        out: list[Sample] = []
        with paused_gc():
            for i in range(k):
                if i and past(deadline):
                    break
                if flush is not None:
                    evict(flush)
                start = now()
                for _ in range(n):
                    fn()
                out.append(((now() - start) / 1e9 / n, None))
        return out


def cold_before(flush: torch.Tensor, l2: Any = None, stream: int = 0) -> Callable[[], None]:
    """What runs before each cold sample, outside its timed window: the reset of persisting L2 lines on ``stream``
    (``l2``, a measure.l2.PersistingL2; skipped where it has no runtime), then the eviction read."""
    if l2 is None or l2.runtime is None:
        return lambda: evict(flush)

    def before() -> None:
        l2.reset(stream)
        evict(flush)

    return before


class EventSampler:
    """cold on a GPU (and warm-up in every mode): a CUDA event pair around each call, on the current stream; with
    ``flush``, each sample's persisting L2 lines reset (``l2``) and the buffer read before its first event."""

    device = "cuda"

    def __init__(self, fn: Callable[[], Any], flush: torch.Tensor | None, clock: Any = None, l2: Any = None) -> None:
        self.fn = fn
        self.clock = clock
        self.flush = flush
        self.l2 = l2
        self.calls_per_sample = 1

    def one(self) -> float:
        return self.batch(1)[0][0]

    def batch(self, k: int, deadline: float | None = None) -> list[Sample]:
        flush = self.flush
        before = None if flush is None else cold_before(flush, self.l2, torch.cuda.current_stream().cuda_stream)
        return event_samples(self.fn, k, deadline, self.clock, before=before)


def event_samples(call: Callable[[], Any], k: int, deadline: float | None, clock: Any = None, *,
                  before: Callable[[], Any] | None = None, calls_per_sample: int = 1) -> list[Sample]:
    """Up to ``k`` samples, each ``call`` between its own CUDA event pair on the current stream (``before`` runs
    outside the pair: a cache flush); ``call`` makes ``calls_per_sample`` calls. At least one sample is taken,
    then no more once ``deadline`` is past. The clock is read while the batch runs, before the synchronize."""
    record, elapsed = bound.event_methods()
    pairs = [(bound.Event(enable_timing=True), bound.Event(enable_timing=True)) for _ in range(k)]
    stream = torch.cuda.current_stream()
    taken = 0
    with paused_gc():
        for start, end in pairs:
            if taken and past(deadline):
                break
            if before is not None:
                before()
            record(start, stream)
            call()
            record(end, stream)
            taken += 1
    mhz = clock.sm_clock_mhz() if clock is not None else None
    torch.cuda.synchronize()
    return [(elapsed(s, e) / 1e3 / calls_per_sample, mhz) for s, e in pairs[:taken]]


class HotSampler:
    """hot on a GPU: ``calls_per_sample`` back-to-back calls between one CUDA event pair; a sample is their mean.

    Inside the pair there is only a bare loop of calls: no per-call event, clock read or bookkeeping, so a
    launch-bound call is timed at the rate the host can issue it, as torch.utils.benchmark's Timer times it.
    """

    device = "cuda"

    def __init__(self, fn: Callable[[], Any], estimate: float, clock: Any = None) -> None:
        self.fn = fn
        self.clock = clock
        self.calls_per_sample = hot_calls(estimate)

    def one(self) -> float:
        return self.batch(1)[0][0]

    def batch(self, k: int, deadline: float | None = None) -> list[Sample]:
        fn, n = self.fn, self.calls_per_sample
        record, elapsed = bound.event_methods()
        pairs = [(bound.Event(enable_timing=True), bound.Event(enable_timing=True)) for _ in range(k)]
        stream = torch.cuda.current_stream()  # looked up once: end.record() would look it up inside the window
        taken = 0
        with paused_gc():
            for start, end in pairs:
                if taken and past(deadline):
                    break
                record(start, stream)
                for _ in range(n):
                    fn()
                record(end, stream)
                taken += 1
        mhz = self.clock.sm_clock_mhz() if self.clock is not None else None
        torch.cuda.synchronize()
        return [(elapsed(s, e) / 1e3 / n, mhz) for s, e in pairs[:taken]]
