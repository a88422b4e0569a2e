"""Samplers and their sizing on the CPU: cold mode's cost and budget on any cache size, hot mode's batched calls,
graph mode's rotation of input copies (its capture replaced by a fake: no GPU here)."""

from __future__ import annotations

import time

import pytest
import torch

from kernelkit.measure import bound, graph, host, samplers, timer
from kernelkit.measure.graph import GraphSampler, copies_needed, graph_calls
from kernelkit.measure.samplers import CPU_EVICTION_CAP, FLUSH_FACTOR

HUGE_L3 = 480 << 20  # the last-level cache of the CI machine that timed out: 2x of it is ~1 GB per sample


@pytest.fixture
def cache_of(monkeypatch):
    """cache_of(nbytes): the CPU's last-level cache reads as ``nbytes`` for the rest of the test."""
    def set_size(nbytes):
        monkeypatch.setattr(host, "cpu_caches", lambda: [(1, "Data", 32 << 10), (3, "Unified", nbytes)])
    return set_size


@pytest.fixture
def batches(monkeypatch):
    """The k of every CpuSampler.batch call, in order."""
    asked: list[int] = []
    real = samplers.CpuSampler.batch

    def spy(self, k, deadline=None):
        asked.append(k)
        return real(self, k, deadline)

    monkeypatch.setattr(samplers.CpuSampler, "batch", spy)
    return asked


def test_cold_batches_are_sized_from_the_cold_cost_and_keep_the_budget(monkeypatch, cache_of, batches):
    cache_of(1 << 20)
    monkeypatch.setattr(samplers, "evict", lambda buffer: time.sleep(0.03))  # a slow eviction, 30 ms
    x = torch.ones(256)
    began = time.perf_counter()
    m = timer.bench(torch.square, x, mode="cold", budget=0.3)
    took = time.perf_counter() - began
    assert batches and max(batches) == 1  # 20 ms batches at >= 30 ms a sample: one each, not the hot estimate's 200
    assert m.stop_reason == "budget" and 3 <= m.stats.n <= 12
    assert took < timer.WARMUP_MAX_SECONDS + 0.3 + 0.2  # warm-up, the budget, one sample past it at most


def test_the_budget_holds_within_a_batch_when_samples_slow_down(monkeypatch, cache_of, batches):
    cache_of(1 << 20)
    calls = {"n": 0}

    def evict(buffer):  # cheap while the environment measures it, slow once sampling starts
        calls["n"] += 1
        if calls["n"] > 2:
            time.sleep(0.02)

    monkeypatch.setattr(samplers, "evict", evict)
    began = time.perf_counter()
    m = timer.bench(torch.square, torch.ones(16), mode="cold", budget=0.2)
    took = time.perf_counter() - began
    assert batches[0] > 10  # sized from the cheap eviction measured first...
    assert m.stop_reason == "budget" and took < timer.WARMUP_MAX_SECONDS + 0.2 + 0.1  # ...yet stopped on time


def test_a_huge_last_level_cache_is_evicted_with_a_capped_buffer_and_says_so(monkeypatch, cache_of):
    cache_of(HUGE_L3)
    sizes = []
    real = samplers.eviction_buffer
    monkeypatch.setattr(samplers, "eviction_buffer", lambda n, device: sizes.append(n) or real(n, device))
    began = time.perf_counter()
    m = timer.bench(torch.square, torch.ones(4096), mode="cold", budget=0.3)
    assert time.perf_counter() - began < 3.0
    assert sizes == [CPU_EVICTION_CAP]  # one buffer, capped: not 2 x 480 MiB
    assert any("reads 64 MiB before each sample, not 2x the 480 MiB" in w for w in m.warnings)
    assert "after reading 64 MiB" in m.method
    assert samplers.eviction_bytes(HUGE_L3, "cuda") == FLUSH_FACTOR * HUGE_L3  # a GPU's L2 is never capped


def test_a_cache_that_fits_twice_under_the_cap_is_evicted_whole_without_a_warning(cache_of):
    cache_of(16 << 20)
    m = timer.bench(torch.square, torch.ones(4096), mode="cold", budget=0.1)
    assert not any("last-level cache" in w for w in m.warnings)
    assert samplers.eviction_bytes(16 << 20, "cpu") == 32 << 20


def test_one_eviction_buffer_serves_every_contender(monkeypatch, cache_of):
    cache_of(1 << 20)
    made = []
    real = samplers.eviction_buffer
    monkeypatch.setattr(samplers, "eviction_buffer", lambda n, device: made.append(n) or real(n, device))
    contenders = [timer.Contender(f"c{i}", lambda: torch.ones(8) * 2) for i in range(4)]
    results = timer.bench_many(contenders, timer.Settings(mode="cold", budget=0.05), "cpu")
    assert len(results) == 4 and all(r.stats.n >= 1 for r in results)
    assert len(made) == 1  # was one ~2x-LLC buffer per contender: 6 of them took 8 GB on a 480 MiB L3


def test_cpu_eviction_reads_a_float_buffer_and_the_gpu_one_stays_int32():
    cpu = samplers.eviction_buffer(1 << 20, "cpu")
    assert cpu.dtype == torch.float32 and cpu.numel() * 4 == 1 << 20  # torch's int sum is not vectorized on CPU
    samplers.evict(cpu)


def test_hot_mode_times_many_calls_between_two_timestamps():
    calls = {"n": 0}

    def fn():
        calls["n"] += 1

    sampler = samplers.CpuSampler(fn, samplers.hot_calls(1e-6), None)  # hot: as measure.modes builds it
    assert sampler.calls_per_sample == samplers.hot_calls(1e-6) == samplers.HOT_MAX_CALLS
    out = sampler.batch(3)
    assert len(out) == 3 and calls["n"] == 3 * sampler.calls_per_sample
    assert samplers.hot_calls(1e-4) == 10 and samplers.hot_calls(1.0) == 1


def test_hot_mode_samples_are_means_of_many_calls():
    m = timer.bench(torch.square, torch.ones(1000), mode="hot", budget=0.5)
    assert m.calls_per_sample > 1 and "back-to-back calls per sample" in m.method
    assert m.stats.n >= 1 and 0 < m.median < 1e-3


def test_copies_rotate_until_twice_the_l2_streams_between_two_uses():
    l2 = 50 << 20
    assert copies_needed(32 << 10, l2) == 1 + 3200  # 4096 floats in and out: 3200 others between two uses
    assert copies_needed(8 << 20, l2) == 1 + 13
    assert copies_needed(2 * l2, l2) == 1  # one call alone streams past the L2
    assert copies_needed(0, l2) == 1
    assert graph_calls(2e-6, 1) == 2500 and graph_calls(1e-4, 1) == 50 and graph_calls(1.0, 1) == 1
    assert graph_calls(2e-6, 3201) == 3201  # one use of every copy, at least
    assert graph_calls(1e-4, 14) == 56  # a whole number of rotations
    assert graph_calls(1e-9, 1) == graph.GRAPH_MAX_CALLS


@pytest.fixture
def captured(monkeypatch):
    """What GraphSampler would capture: (the calls, unrolled count), with no GPU."""
    seen = {}
    monkeypatch.setattr(graph, "_capture", lambda calls, unrolled: seen.update(calls=calls, unrolled=unrolled))
    return seen


def test_graph_mode_rotates_copies_of_the_inputs_by_default(captured):
    x = torch.arange(4096, dtype=torch.float32)[1:]  # a view one element into its buffer
    made = []

    def make_call(args):
        made.append(args)
        return lambda: torch.square(*args)

    sampler = GraphSampler(lambda: torch.square(x), 2e-6, 1 << 20, args=(x,), make_call=make_call,
                           per_call_bytes=2 * x.numel() * 4)
    assert len(captured["calls"]) == copies_needed(2 * x.numel() * 4, 1 << 20) == len(made) + 1
    assert captured["unrolled"] % len(captured["calls"]) == 0
    copy = made[0][0]
    assert copy.data_ptr() != x.data_ptr() and torch.equal(copy, x)
    assert copy.storage_offset() == x.storage_offset() and copy.stride() == x.stride()  # same alignment
    assert "cold" in sampler.method and not sampler.warnings


def test_graph_mode_counts_the_outputs_when_the_caller_does_not(captured):
    x = torch.ones(1024)
    GraphSampler(lambda: torch.cat([x, x]), 2e-6, 1 << 20, args=(x,), make_call=lambda a: lambda: torch.cat([*a, *a]))
    per_call = 4096 + 8192  # 4 KiB in, 8 KiB out
    assert len(captured["calls"]) == copies_needed(per_call, 1 << 20)


def test_graph_warm_and_closures_replay_the_same_inputs(captured):
    x = torch.ones(64)
    sampler = GraphSampler(lambda: torch.square(x), 2e-6, 1 << 20, args=(x,),
                           make_call=lambda a: lambda: torch.square(*a), warm=True)
    assert len(captured["calls"]) == 1 and "warm" in sampler.method and not sampler.warnings
    sampler = GraphSampler(lambda: torch.square(x), 2e-6, 1 << 20)  # a closure: its tensors are unknown
    assert len(captured["calls"]) == 1 and any("replays warm" in w for w in sampler.warnings)


def test_kk_bench_gives_graph_mode_the_arguments_to_copy(monkeypatch):
    seen = {}

    def fake_bench_many(contenders, settings, device):
        seen["contender"], seen["settings"] = contenders[0], settings
        return [timer.MeasureFailure("x", RuntimeError("stop here"))]

    monkeypatch.setattr(timer, "bench_many", fake_bench_many)
    x = torch.ones(4)
    with pytest.raises(RuntimeError, match="stop here"):
        timer.bench(torch.add, x, x, mode="hot", graph_warm=True)
    c = seen["contender"]
    assert c.args == (x, x) and c.working_set is None and seen["settings"].graph_warm  # outputs: measured later
    assert torch.equal(c.make_call((torch.ones(4), torch.ones(4)))(), torch.full((4,), 2.0))
    assert seen["settings"].budget == timer.DEFAULT_CPU_BUDGET


# ---- hot mode's timed loop: nothing of ours between the user's calls --------------------------------------------

class _HostEvent:
    """torch.cuda.Event on the host clock, so HotSampler's own loop can be timed on the CPU."""

    def __init__(self, enable_timing=False):
        self.ns = None

    def record(self, stream=None):
        self.ns = time.perf_counter_ns()

    def elapsed_time(self, end):
        return (end.ns - self.ns) / 1e6  # milliseconds, as CUDA events report


@pytest.fixture
def host_events(monkeypatch):
    monkeypatch.setattr(bound, "Event", _HostEvent)  # the samplers' own binding (measure/bound.py)
    monkeypatch.setattr(bound, "event_methods", lambda: (_HostEvent.record, _HostEvent.elapsed_time))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)


def _work(x):
    return x  # a no-op-ish call: what is left of its time is the loop's own cost


def _bare_loop_seconds(fn, x, n, repeats=15):
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for _ in range(n):
            fn(x)
        best = min(best, (time.perf_counter_ns() - start) / 1e9 / n)
    return best


@pytest.mark.parametrize("sampler_kind", ["perf_counter", "event_pair"])
def test_the_hot_loop_adds_under_a_third_of_a_microsecond_a_call_to_a_bare_loop(monkeypatch, host_events,
                                                                               sampler_kind):
    seen = {}
    monkeypatch.setattr(timer, "bench_many", lambda cs, settings, device: seen.update(c=cs[0]) or [
        timer.MeasureFailure("x", RuntimeError("stop"))])
    x = object()
    with pytest.raises(RuntimeError):
        timer.bench(_work, x, mode="hot", device="cpu")
    call = seen["c"].fn  # what every sampler loops over: the user's function with its argument bound
    if sampler_kind == "perf_counter":
        sampler = samplers.CpuSampler(call, samplers.hot_calls(1e-9), None)
    else:
        sampler = samplers.HotSampler(call, estimate=1e-9)
    n = sampler.calls_per_sample
    assert n == samplers.HOT_MAX_CALLS
    ours = min(min(s for s, _ in sampler.batch(5)) for _ in range(5))
    bare = _bare_loop_seconds(_work, x, n)
    assert ours - bare < 0.3e-6, (ours, bare)  # ~20 ns measured here; a lambda or bookkeeping would show


def test_bench_binds_the_arguments_with_partial_not_a_wrapper(monkeypatch):
    import functools

    seen = {}
    monkeypatch.setattr(timer, "bench_many", lambda cs, settings, device: seen.update(c=cs[0]) or [
        timer.MeasureFailure("x", RuntimeError("stop"))])
    x = torch.ones(3)
    with pytest.raises(RuntimeError):
        timer.bench(torch.square, x, mode="hot")
    c = seen["c"]
    assert isinstance(c.fn, functools.partial) and c.fn.func is torch.square and c.fn.args == (x,)
    copy = torch.full((3,), 2.0)
    rotated = c.make_call((copy,))
    assert isinstance(rotated, functools.partial) and torch.equal(rotated(), torch.full((3,), 4.0))


def test_the_garbage_collector_is_paused_while_a_batch_is_timed(host_events):
    import gc

    states = []
    assert gc.isenabled()
    samplers.CpuSampler(lambda: states.append(gc.isenabled()), samplers.hot_calls(1e-4), None).batch(2)
    samplers.HotSampler(lambda: states.append(gc.isenabled()), estimate=1e-4).batch(2)
    samplers.EventSampler(lambda: states.append(gc.isenabled()), None).batch(2)
    assert states and not any(states)
    assert gc.isenabled()  # back on after every batch
    gc.disable()
    try:
        samplers.CpuSampler(lambda: None, 1, None).batch(1)
        assert not gc.isenabled()  # left off when it was off
    finally:
        gc.enable()
