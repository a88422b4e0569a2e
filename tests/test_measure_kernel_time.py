"""Kernel mode's device times on the CPU: fake torch.profiler records and a fake cupti-python, no GPU.

The fake profiler trace has what recent PyTorch records for a ``record_function`` range: the host range and a
device-side "gpu_user_annotation" of the same name. Counting both as call ranges gave half the calls no work
and the median half the true time; these tests pin that each call's kernels are summed once, not halved.

The fake cupti-python runs on the host's real clock, optionally counted in TSC ticks as it is once torch.profiler
has registered its timestamp callback in the process: that made kernel mode read 366 us for a 175 us kernel when
it ran after a profiler session. These tests pin that every session converts CUPTI's clock, that records
delivered twice or left over from an earlier session count for nothing, and that a call's device time never
exceeds its wall time.
"""

from __future__ import annotations

import itertools
import time

import pytest
import torch

from kernelkit.measure import cupti_trace, kernel_time
from kernelkit.measure.cupti_trace import CuptiTracer, Trace, ticks_per_ns
from kernelkit.measure.kernel_time import (
    CALL_RANGE,
    KernelSampler,
    KernelTimer,
    call_ranges,
    device_spans,
    group_by_call,
)
from kernelkit.measure.samplers import MeasureError
from kernelkit.measure.stats import quantile

CPU, CUDA = torch.autograd.DeviceType.CPU, torch.autograd.DeviceType.CUDA
US = 1000  # ns


class Event:
    """A stand-in for torch's _KinetoEvent: the methods kernel_time reads."""

    def __init__(self, name, device, start, duration, activity=None):
        self._name, self._device, self._start, self._duration, self._activity = name, device, start, duration, activity

    def name(self):
        return self._name

    def device_type(self):
        return self._device

    def start_ns(self):
        return self._start

    def duration_ns(self):
        return self._duration

    def activity_type(self):
        return self._activity

    def is_user_annotation(self):
        return self._activity in ("user_annotation", "gpu_user_annotation")


class OldEvent(Event):
    """An event of a torch without activity_type(): kernel_time must still tell ranges from device work."""

    activity_type = None


def _trace(calls=4, kernel_us=(120,), event=Event):
    """The records of ``calls`` timed calls, each launching kernels of ``kernel_us`` back to back, as torch
    records them: the eviction kernel before each range, the host range, a runtime call, the device-side
    annotation of the range, the kernels, and a memset."""
    events, t = [], 0
    for _ in range(calls):
        events.append(event("reduce_kernel", CUDA, t, 30 * US, "kernel"))  # the eviction: outside every range
        t += 40 * US
        work = sum(kernel_us) + 2
        events.append(event(CALL_RANGE, CPU, t, (work + 20) * US, "user_annotation"))
        events.append(event("cudaLaunchKernel", CPU, t + 1 * US, 4 * US, "cuda_runtime"))
        events.append(event(CALL_RANGE, CUDA, t + 5 * US, work * US, "gpu_user_annotation"))
        at = t + 5 * US
        for us in kernel_us:
            events.append(event("square_kernel", CUDA, at, us * US, "kernel"))
            at += us * US
        events.append(event("Memset (Device)", CUDA, at, 2 * US, "gpu_memset"))
        t += (work + 30) * US
    return events


def test_each_calls_kernels_are_summed_once_not_halved():
    events = _trace(calls=4, kernel_us=(120,))
    ranges = call_ranges(events)
    assert len(ranges) == 4  # host ranges only: the device-side annotation is not a second call
    times = group_by_call(ranges, device_spans(events))
    assert times == [pytest.approx(122e-6)] * 4  # the kernel and the memset, not the annotation, not the eviction
    assert quantile(sorted(times), 0.5) == pytest.approx(122e-6)  # the median is the whole time, not half


def test_the_annotation_is_not_device_work_and_several_kernels_add_up():
    events = _trace(calls=3, kernel_us=(50, 60, 70))
    spans = device_spans(events)
    assert all(end - start != 182 * US for start, end in spans)  # no span as long as the annotation
    assert group_by_call(call_ranges(events), spans) == [pytest.approx(182e-6)] * 3


def test_a_torch_without_activity_types_gives_the_same_times():
    events = _trace(calls=3, kernel_us=(80,), event=OldEvent)
    assert group_by_call(call_ranges(events), device_spans(events)) == [pytest.approx(82e-6)] * 3


def test_kernel_time_is_grouped_per_call_and_overlap_counts_once():
    ranges = [(0, 90), (100, 195), (200, 300)]
    spans = [(10, 30), (20, 40), (50, 60),  # call 0: union of [10,40) and [50,60) = 40 ns
             (92, 99),                      # between ranges (the eviction): nobody's
             (150, 190),                    # call 1: 40 ns
             ]                              # call 2: no device work
    assert group_by_call(ranges, spans) == [40e-9, 40e-9, 0.0]


@pytest.fixture
def no_cuda_sync(monkeypatch):
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)


def _walls(n, ns=10**9):
    return [ns] * n  # wall times far above any device time: only the ranges and spans are under test


def test_the_profiler_path_asserts_one_range_per_call(monkeypatch, no_cuda_sync):
    events = _trace(calls=3)
    monkeypatch.setattr(kernel_time, "kineto_trace",
                        lambda fns, before: Trace(call_ranges(events)[:2], device_spans(events), _walls(2)))
    with pytest.raises(MeasureError, match="2 call ranges recorded for 3 calls"):
        KernelTimer(None).times([lambda: None] * 3)


def test_the_profiler_path_without_device_work_is_an_error(monkeypatch, no_cuda_sync):
    monkeypatch.setattr(kernel_time, "kineto_trace", lambda fns, before: Trace([(0, 10)], [], _walls(1)))
    with pytest.raises(MeasureError, match="no GPU activity"):
        KernelTimer(None).times([lambda: None])


class FakeCupti:
    """A stand-in for ``cupti.cupti`` on the host's real clock, counted in ``ticks_per_ns`` ticks a nanosecond
    (2.1: TSC ticks, as after torch.profiler registered its timestamp callback). A fake call 'runs' device work
    for a given time; the flush delivers its records, each ``deliveries`` times."""

    class ActivityKind:
        CONCURRENT_KERNEL, MEMCPY, MEMSET, RUNTIME = 10, 1, 2, 5

    class Record:
        def __init__(self, kind, start, end, correlation_id=None):
            self.kind, self.start, self.end, self.correlation_id = kind, start, end, correlation_id
            self.device_id, self.stream_id = 0, 7

    def __init__(self, ticks_per_ns=1.0, deliveries=1):
        self.ticks_per_ns, self.deliveries = ticks_per_ns, deliveries
        self.correlation = itertools.count(1)
        self.pending, self.enabled, self.callbacks, self.flushes, self.delivered = [], set(), None, 0, 0

    def get_timestamp(self):
        return 10**12 + int(time.perf_counter_ns() * self.ticks_per_ns)

    def activity_register_callbacks(self, requested, completed):
        self.callbacks = (requested, completed)

    def activity_enable(self, kind):
        self.enabled.add(kind)

    def activity_disable(self, kind):
        self.enabled.discard(kind)

    def activity_flush_all(self, flag):
        self.flushes += 1
        requested, completed = self.callbacks
        assert requested()[0] > 0
        for _ in range(self.deliveries):
            completed(list(self.pending))
            self.delivered += len(self.pending)
        self.pending = []

    def launch(self, kind, ns):
        """Device work of ``ns`` real nanoseconds, started now; recorded when its kind is enabled (RUNTIME: a
        host API record another client enabled, never device work)."""
        start = self.get_timestamp()
        end = start + int(ns * self.ticks_per_ns)  # exact: a preempted test process lengthens the wait, not the work
        while self.get_timestamp() < end:
            pass
        if kind in self.enabled or kind == self.ActivityKind.RUNTIME:
            self.pending.append(self.Record(kind, start, end, next(self.correlation)))

    def leave_stale(self, ns=50_000):
        """A record an earlier session left in CUPTI's buffers, timed now (as if the session had just ended)."""
        start = self.get_timestamp()
        end = start + int(ns * self.ticks_per_ns)
        self.pending.append(self.Record(self.ActivityKind.CONCURRENT_KERNEL, start, end))


def _calls(cupti, kernel_ns=70_000, memcpy_ns=20_000):
    def call():
        cupti.launch(cupti.ActivityKind.CONCURRENT_KERNEL, kernel_ns)
        cupti.launch(cupti.ActivityKind.MEMCPY, memcpy_ns)
        cupti.launch(cupti.ActivityKind.RUNTIME, 5_000)  # a host API record: not device work

    def before():
        cupti.launch(cupti.ActivityKind.CONCURRENT_KERNEL, 30_000)  # the eviction, before the range

    return call, before


def test_cupti_records_give_each_calls_own_device_time(no_cuda_sync):
    cupti = FakeCupti()
    call, before = _calls(cupti)
    trace = CuptiTracer(cupti).trace([call] * 3, before)
    assert len(trace.ranges) == 3 and len(trace.walls) == 3 and trace.ticks_per_ns == 1.0
    assert group_by_call(trace.ranges, trace.spans) == [pytest.approx(90e-6, rel=0.01)] * 3
    assert cupti.enabled == set() and cupti.flushes == 2  # stale buffers out first, then the session's; all disabled


@pytest.mark.parametrize("ticks_per_ns", [1.0, 2.1, 0.5])
def test_cupti_timestamps_in_tsc_ticks_are_converted_to_nanoseconds(no_cuda_sync, ticks_per_ns):
    # After a torch.profiler session every CUPTI timestamp counts TSC ticks: read as ns, a 175 us kernel was 366 us.
    cupti = FakeCupti(ticks_per_ns)
    call, before = _calls(cupti, kernel_ns=150_000, memcpy_ns=0)
    timer = KernelTimer(CuptiTracer(cupti))
    times = timer.times([call] * 4)
    assert times == [pytest.approx(150e-6, rel=0.01)] * 4
    assert timer.cupti.ticks_per_ns == (1.0 if ticks_per_ns == 1.0 else pytest.approx(ticks_per_ns, rel=0.02))


def test_a_profiler_session_between_two_cupti_sessions_changes_nothing(no_cuda_sync):
    # The order of the failing GPU run: CUPTI, then torch.profiler (which switches CUPTI to TSC ticks), then CUPTI.
    cupti = FakeCupti()
    call, before = _calls(cupti, kernel_ns=120_000, memcpy_ns=0)
    timer = KernelTimer(CuptiTracer(cupti))
    first = timer.times([call] * 3)
    cupti.ticks_per_ns = 2.1
    second = timer.times([call] * 3)
    assert second == [pytest.approx(t, rel=0.01) for t in first]
    assert second == [pytest.approx(120e-6, rel=0.01)] * 3


def test_records_delivered_twice_or_left_from_an_earlier_session_count_for_nothing(no_cuda_sync):
    cupti = FakeCupti(deliveries=2)  # every buffer delivered twice
    call, before = _calls(cupti, kernel_ns=100_000, memcpy_ns=10_000)
    cupti.enabled.add(cupti.ActivityKind.CONCURRENT_KERNEL)
    cupti.leave_stale(ns=10**9)  # an earlier session's record, pending when this one starts, spanning all of it
    cupti.enabled.clear()
    trace = CuptiTracer(cupti).trace([call] * 3, before)
    assert cupti.delivered > len(trace.spans)
    assert len(trace.spans) == 9  # 3 evictions, 3 kernels, 3 memcpys, once each: no duplicate, no stale record
    assert all(end - start < 10**8 for start, end in trace.spans)
    assert group_by_call(trace.ranges, trace.spans) == [pytest.approx(110e-6, rel=0.01)] * 3


def test_a_call_whose_device_time_exceeds_its_wall_time_is_an_error(no_cuda_sync):
    class Doubling:  # what a tracer that counts each kernel twice, in sequence, would return
        source = "fake tracer"

        def trace(self, fns, before):
            for fn in fns:
                before()
                fn()
            return Trace([(0, 500_000)], [(1_000, 176_000), (180_000, 355_000)], [200_000])

    with pytest.raises(MeasureError, match=r"call 0 has 350.0 us of device work recorded but lasted 200.0 us"):
        KernelTimer(Doubling()).times([lambda: None])


def test_one_cupti_session_at_a_time(no_cuda_sync):
    cupti = FakeCupti()
    tracer = CuptiTracer(cupti)
    call, before = _calls(cupti, kernel_ns=1_000, memcpy_ns=0)

    def nested():
        tracer.trace([call], before)

    with pytest.raises(RuntimeError, match="already running"):
        tracer.trace([nested], before)
    assert tracer.trace([call], before).ranges  # the lock is released after the failure


def test_the_clock_rate_is_exactly_one_for_cuptis_nanoseconds():
    assert ticks_per_ns((0, 0), (1_000_300, 1_000_000)) == 1.0  # 0.03% off: read jitter, not another clock
    assert ticks_per_ns((0, 0), (2_100_000, 1_000_000)) == pytest.approx(2.1)
    assert ticks_per_ns((5, 10), (5, 10)) == 1.0
    with pytest.raises(RuntimeError, match="did not advance"):
        ticks_per_ns((100, 0), (50, 1_000_000))
    assert cupti_trace.CALIBRATION_NS >= 1_000_000  # a baseline long enough that read jitter is under 1e-3


def test_the_kernel_timer_prefers_cupti_and_falls_back_to_the_profiler(monkeypatch, no_cuda_sync):
    class Works:
        source = "CUPTI activity records (cupti-python)"

        def trace(self, fns, before):
            for fn in fns:
                before()
                fn()
            return Trace([(0, 100), (200, 300)], [(10, 60), (210, 230)], _walls(2))

    class Broken:
        source = Works.source

        def trace(self, fns, before):
            raise RuntimeError("CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED")

    timer = KernelTimer(Works())
    assert timer.times([lambda: None] * 2) == [pytest.approx(50e-9), pytest.approx(20e-9)]
    assert "CUPTI" in timer.source and timer.last_cost is not None
    monkeypatch.setattr(kernel_time, "kineto_trace", lambda fns, before: Trace([(0, 100)], [(10, 40)], _walls(1)))
    timer = KernelTimer(Broken())
    assert timer.times([lambda: None]) == [pytest.approx(30e-9)]
    assert timer.source == kernel_time.KINETO_SOURCE and timer.cupti is None  # for good


def test_kernel_mode_reads_the_sm_clock_once_per_batch_while_a_call_runs(no_cuda_sync):
    events = []

    class Clock:
        def sm_clock_mhz(self):
            events.append("clock")
            return 1500.0

    class Timer:
        source, last_cost = "fake", None

        def times(self, fns, flush=None, reset=None):
            for fn in fns:
                fn()
                events.append("sync")
            return [1e-4 + i * 1e-6 for i, _ in enumerate(fns)]

    sampler = KernelSampler(lambda: events.append("launch"), Timer(), clock=Clock())
    samples = sampler.batch(5)
    assert [mhz for _, mhz in samples] == [1500.0] * 5 and events.count("clock") == 1
    at = events.index("clock")
    assert events[at - 1] == "launch" and events[at + 1] == "sync"  # after a launch, before its synchronize
    assert "SM clock read once per batch" in sampler.method
    assert [mhz for _, mhz in KernelSampler(lambda: None, Timer()).batch(3)] == [None] * 3  # no NVML: no reading


def test_cupti_python_missing_means_the_profiler():
    pytest.importorskip("torch")
    try:
        import cupti  # noqa: F401
    except ImportError:
        assert CuptiTracer.open() is None
        assert KernelTimer.open().source == kernel_time.KINETO_SOURCE
    else:
        pytest.skip("cupti-python is installed here")
