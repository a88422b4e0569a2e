"""Peak device memory of one call (measure.memory): the arithmetic on a fake allocator, the real thing on a GPU."""

from __future__ import annotations

import pytest
import torch

from kernelkit.measure import memory


class FakeAllocator:
    """torch.cuda's counters over a list of live allocations: reset_peak_memory_stats, memory_allocated, ..."""

    def __init__(self, resident: int) -> None:
        self.live, self.peak, self.events = resident, resident, []

    def alloc(self, n: int) -> None:
        self.live += n
        self.peak = max(self.peak, self.live)

    def free(self, n: int) -> None:
        self.live -= n

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def reset() -> None:
            self.events.append("reset")
            self.peak = self.live

        monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: self.events.append("sync"))
        monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *a, **k: reset())
        monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *a, **k: self.live)
        monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a, **k: self.peak)


def test_peak_is_the_calls_high_water_mark_above_what_was_allocated_before(monkeypatch):
    fake = FakeAllocator(resident=1000)  # the inputs and other contenders' copies: not the call's
    fake.peak = 5000  # an earlier call's peak: reset before this one
    fake.install(monkeypatch)

    def naive_attention() -> str:
        fake.alloc(400)  # scores
        fake.alloc(400)  # probabilities
        fake.free(800)
        fake.alloc(100)  # the output, alive when the peak is read
        return "output"

    assert memory.peak_bytes(naive_attention, "cuda") == 800
    assert fake.events[:2] == ["sync", "reset"] and fake.events[-1] == "sync"  # queued work ends before each read


def test_a_call_that_allocates_nothing_needs_zero_bytes(monkeypatch):
    FakeAllocator(resident=64).install(monkeypatch)
    assert memory.peak_bytes(lambda: None, "cuda") == 0


def test_nothing_is_measured_on_the_cpu():
    called = []
    assert memory.peak_bytes(lambda: called.append(1), "cpu") is None
    assert called == []  # not even called: no extra work where nothing is measured


@pytest.mark.gpu
def test_peak_of_a_real_allocation_on_the_gpu():
    x = torch.ones(1 << 20, device="cuda")  # 4 MiB resident: not counted

    def twice() -> torch.Tensor:
        tmp = torch.empty(1 << 22, device="cuda")  # 16 MiB temporary
        del tmp
        return x * 2  # 4 MiB output

    peak = memory.peak_bytes(twice, "cuda")
    assert 16 << 20 <= peak < 24 << 20


@pytest.mark.gpu
def test_bench_op_records_each_impls_peak_memory_on_the_gpu():
    import kernelkit as kk

    report = kk.bench_op("square", impls=["triton_flat", "eager"], sizes=[(1 << 22,)], dtypes=[torch.float32],
                         device="cuda", budget=0.2)
    assert {r.impl for r in report.results} == {"triton_flat", "eager"}
    for r in report.results:
        assert r.status.value == "PASSED", r.message
        assert 16 << 20 <= r.measurement.peak_bytes < 20 << 20, r.impl  # its 16 MiB output, nothing more
