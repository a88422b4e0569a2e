"""Kernel mode's device times on the CPU: fake torch.profiler records and a fake cupti-python, no GPU.

The fake profiler trace has what recent PyTorch records for a ``record_function`` range: the host range and a
device-side "gpu_user_annotation" of the same name. Counting both as call ranges gave half the calls no work
and the median half the true time; these tests pin that each call's kernels are summed once, not halved.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from kernelkit.measure import kernel_time
from kernelkit.measure.cupti_trace import CuptiTracer
from kernelkit.measure.kernel_time import CALL_RANGE, KernelTimer, call_ranges, device_spans, group_by_call
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


def test_the_profiler_path_asserts_one_range_per_call(monkeypatch, no_cuda_sync):
    events = _trace(calls=3)
    monkeypatch.setattr(kernel_time, "kineto_trace",
                        lambda fns, before: (call_ranges(events)[:2], device_spans(events)))
    with pytest.raises(MeasureError, match="2 call ranges recorded for 3 calls"):
        KernelTimer(None).times([lambda: None] * 3)


def test_the_profiler_path_without_device_work_is_an_error(monkeypatch, no_cuda_sync):
    monkeypatch.setattr(kernel_time, "kineto_trace", lambda fns, before: ([(0, 10)], []))
    with pytest.raises(MeasureError, match="no GPU activity"):
        KernelTimer(None).times([lambda: None])


class FakeCupti:
    """A stand-in for ``cupti.cupti``: each fake call 'runs' kernels that the flush then delivers as records."""

    class ActivityKind:
        CONCURRENT_KERNEL, MEMCPY, MEMSET, RUNTIME = 10, 1, 2, 5

    class Record:
        def __init__(self, kind, start, end):
            self.kind, self.start, self.end = kind, start, end

    def __init__(self):
        self.clock = itertools.count(1_000, 1_000)
        self.pending, self.enabled, self.callbacks, self.flushes = [], set(), None, 0

    def get_timestamp(self):
        return next(self.clock)

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
        completed([r for r in self.pending if r.kind in self.enabled or r.kind == self.ActivityKind.RUNTIME])
        self.pending = []

    def launch(self, kind, duration):
        start = next(self.clock)
        self.pending.append(self.Record(kind, start, start + duration))


def test_cupti_records_give_each_calls_own_device_time(no_cuda_sync):
    cupti = FakeCupti()
    evictions = []

    def call():
        cupti.launch(cupti.ActivityKind.CONCURRENT_KERNEL, 700)
        cupti.launch(cupti.ActivityKind.MEMCPY, 200)
        cupti.launch(cupti.ActivityKind.RUNTIME, 5_000)  # a host API record: not device work

    def before():
        evictions.append(1)
        cupti.launch(cupti.ActivityKind.CONCURRENT_KERNEL, 300)  # the eviction, before the range

    ranges, spans = CuptiTracer(cupti).trace([call] * 3, before)
    assert len(ranges) == 3 and len(evictions) == 3
    assert group_by_call(ranges, spans) == [pytest.approx(900e-9)] * 3
    assert cupti.enabled == set() and cupti.flushes == 1  # every kind it enabled is disabled again


def test_the_kernel_timer_prefers_cupti_and_falls_back_to_the_profiler(monkeypatch, no_cuda_sync):
    class Works:
        source = "CUPTI activity records (cupti-python)"

        def trace(self, fns, before):
            for fn in fns:
                before()
                fn()
            return [(0, 100), (200, 300)], [(10, 60), (210, 230)]

    class Broken:
        source = Works.source

        def trace(self, fns, before):
            raise RuntimeError("CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED")

    timer = KernelTimer(Works())
    assert timer.times([lambda: None] * 2) == [pytest.approx(50e-9), pytest.approx(20e-9)]
    assert "CUPTI" in timer.source and timer.last_cost is not None
    monkeypatch.setattr(kernel_time, "kineto_trace", lambda fns, before: ([(0, 100)], [(10, 40)]))
    timer = KernelTimer(Broken())
    assert timer.times([lambda: None]) == [pytest.approx(30e-9)]
    assert timer.source == kernel_time.KINETO_SOURCE and timer.cupti is None  # for good


def test_cupti_python_missing_means_the_profiler():
    pytest.importorskip("torch")
    try:
        import cupti  # noqa: F401
    except ImportError:
        assert CuptiTracer.open() is None
        assert KernelTimer.open().source == kernel_time.KINETO_SOURCE
    else:
        pytest.skip("cupti-python is installed here")
