"""The timer's logic on the CPU: warm-up, the stopping rule, clock filtering, interleaving, per-mode rules.

GPU samplers are replaced by fakes that return chosen samples; the CPU sampler runs for real.
"""

from __future__ import annotations

import itertools
import random
import time

import pytest
import torch

from kernelkit.measure import modes, timer
from kernelkit.measure.samplers import MeasureError
from kernelkit.measure.timer import Contender, MeasureFailure, Settings


class FakeSampler:
    """Returns samples from ``draw()``; each batch logs (label, k) to ``log``; clocks from ``clocks`` if given."""

    def __init__(self, label, draw, log, clocks=None, calls_per_sample=1):
        self.label, self.draw, self.log, self.clocks = label, draw, log, clocks
        self.calls_per_sample = calls_per_sample

    def one(self):
        return self.draw()

    def batch(self, k, deadline=None):
        self.log.append((self.label, k))
        return [(self.draw(), next(self.clocks) if self.clocks else None) for _ in range(k)]


class FakeEnv:
    def __init__(self, samplers_by_label, mode="cold", device="cuda", max_clock=None, cache_bytes=50 * 2**20):
        self.by_label = samplers_by_label
        self.device, self.mode, self.device_name = device, modes.get(mode), "Fake GPU"
        self.cache_bytes, self.clock, self.max_clock = cache_bytes, None, max_clock
        self.kernel_seconds = None
        self.probed: list[int] = []

    def sampler(self, contender, estimate):
        return self.by_label[contender.fn.__name__]

    def warmup_sampler(self, fn):
        return self.by_label[fn.__name__]

    def eviction_seconds(self):
        return 0.0

    def notes(self):
        return []

    def kernel_times(self, fns, calls):
        self.probed.extend(calls)
        return [self.kernel_seconds] * len(fns)

    def close(self):
        pass


def _contender(label, **kw):
    def fn():
        return None

    fn.__name__ = label
    return Contender(label, fn, first_call=kw.pop("first_call", 0.5), **kw)


def _run(monkeypatch, env, contenders, **settings):
    monkeypatch.setattr(timer.Environment, "open", classmethod(lambda cls, device, mode, graph_warm=False: env))
    return timer.bench_many(contenders, Settings(mode=env.mode.name, **settings), env.device)


def _gauss(mean, rel, seed=0):
    rng = random.Random(seed)
    return lambda: max(1e-9, rng.gauss(mean, mean * rel))


def test_quiet_samples_converge_after_the_minimums(monkeypatch):
    log = []
    env = FakeEnv({"a": FakeSampler("a", _gauss(1e-3, 0.001), log)})
    (m,) = _run(monkeypatch, env, [_contender("a")])
    assert m.stop_reason == "converged"
    assert m.stats.n >= timer.MIN_SAMPLES and sum(m.samples) >= timer.MIN_TIME
    assert m.stats.rse <= timer.DEFAULT_RSE
    assert m.first_call == 0.5  # the first call is reported apart, not among the samples
    assert 1e-3 * 0.99 < m.median < 1e-3 * 1.01


def test_noisy_samples_stop_at_the_budget(monkeypatch):
    rng = random.Random(1)

    def draw():
        time.sleep(1e-4)  # the budget is wall clock
        return rng.lognormvariate(-9, 1.0)

    env = FakeEnv({"a": FakeSampler("a", draw, [])})
    (m,) = _run(monkeypatch, env, [_contender("a")], budget=0.05)
    assert m.stop_reason == "budget"
    assert m.stats.rse > timer.DEFAULT_RSE
    assert any("noisy" in w for w in m.warnings)


def test_max_samples_stops_sampling(monkeypatch):
    rng = random.Random(2)
    env = FakeEnv({"a": FakeSampler("a", lambda: rng.lognormvariate(-12, 1.0), [])})
    (m,) = _run(monkeypatch, env, [_contender("a")], max_samples=300, budget=60)
    assert m.stop_reason == "max_samples"
    assert 300 <= m.stats.n < 300 + timer.MAX_BATCH


def test_tiny_calls_need_the_minimum_timed_work_not_just_ten_samples(monkeypatch):
    env = FakeEnv({"a": FakeSampler("a", _gauss(1e-6, 0.0001), [])})
    (m,) = _run(monkeypatch, env, [_contender("a")])
    assert m.stop_reason == "converged"
    assert sum(m.samples) >= timer.MIN_TIME  # 10 samples of 1 us would be 10 us of work: far too little


def test_samples_under_the_clock_floor_are_dropped_and_counted(monkeypatch):
    values = itertools.cycle([(1e-3, 1980.0), (2e-3, 1000.0)])  # slow samples come with a low clock
    pairs = []

    def draw():
        pairs.append(next(values))
        return pairs[-1][0]

    clocks = (p[1] for p in iter(lambda: pairs[-1], None))
    env = FakeEnv({"a": FakeSampler("a", draw, [], clocks=clocks)}, max_clock=1980.0)
    (m,) = _run(monkeypatch, env, [_contender("a")], budget=0.5)
    assert m.dropped > 0
    assert all(s == 1e-3 for s in m.samples)
    assert all(c == 1980.0 for c in m.clocks_mhz)
    assert m.clock_scaling == pytest.approx(1.0)
    assert any("dropped" in w for w in m.warnings)


def test_every_sample_throttled_is_an_error_that_says_so(monkeypatch):
    env = FakeEnv({"a": FakeSampler("a", lambda: 1e-3, [], clocks=itertools.repeat(500.0))}, max_clock=1980.0)
    (result,) = _run(monkeypatch, env, [_contender("a")], budget=0.05)
    assert isinstance(result, MeasureFailure)
    assert "75% of the maximum SM clock" in str(result.error)


def test_contenders_are_interleaved_batch_by_batch(monkeypatch):
    log = []
    env = FakeEnv({"a": FakeSampler("a", _gauss(1e-3, 0.3, 1), log), "b": FakeSampler("b", _gauss(1e-3, 0.3, 2), log)})
    _run(monkeypatch, env, [_contender("a"), _contender("b")], budget=0.05)
    labels = [label for label, _ in log]
    assert labels[:4] == ["a", "b", "a", "b"]


def test_one_failing_contender_does_not_stop_the_others(monkeypatch):
    def boom():
        raise RuntimeError("kernel exploded")

    env = FakeEnv({"a": FakeSampler("a", boom, []), "b": FakeSampler("b", _gauss(1e-3, 0.001), [])})
    a, b = _run(monkeypatch, env, [_contender("a"), _contender("b")])
    assert isinstance(a, MeasureFailure) and "kernel exploded" in str(a.error)
    assert b.stop_reason == "converged"


def test_warm_up_runs_until_calls_settle(monkeypatch):
    times = iter([5e-3, 3e-3, 2e-3, 1.5e-3, 1.2e-3] + [1e-3] * 10_000)
    env = FakeEnv({"a": FakeSampler("a", lambda: next(times), [])})
    (m,) = _run(monkeypatch, env, [_contender("a")])
    assert m.warmup_calls == 8  # five settling calls, then three that agree within 5%
    assert m.median == pytest.approx(1e-3)


def test_warm_graph_mode_warns_when_the_inputs_fit_in_l2():
    env = FakeEnv({}, mode="graph")
    env.graph_warm = True
    assert "fit in L2" in modes.warm_graph_note(env, _contender("a", working_set=32 * 1024), 200)
    assert not modes.warm_graph_note(env, _contender("b", working_set=2**30), 5)
    env.graph_warm = False  # cold (rotating copies): no warning
    assert not modes.warm_graph_note(env, _contender("a", working_set=32 * 1024), 200)


def test_event_modes_warn_when_launch_bound(monkeypatch):
    env = FakeEnv({"a": FakeSampler("a", _gauss(48e-6, 0.001), [])}, mode="hot")
    env.kernel_seconds = 2e-6
    (m,) = _run(monkeypatch, env, [_contender("a")])
    assert m.kernel_seconds == 2e-6
    assert any("launch-bound" in w for w in m.warnings)


def test_batches_hold_about_twenty_milliseconds_of_work():
    assert timer.batch_size(1e-6) == timer.MAX_BATCH
    assert timer.batch_size(1e-3) == 20
    assert timer.batch_size(1.0) == 1


def test_launch_bound_warning_needs_both_ratio_and_gap():
    assert "launch-bound" in timer.launch_bound_warning(48e-6, 2e-6)
    assert "48.0 us" in timer.launch_bound_warning(48e-6, 2e-6)
    assert timer.launch_bound_warning(10e-6, 8e-6) == ""  # under 1.5x
    assert timer.launch_bound_warning(4e-6, 2e-6) == ""  # 2x, but only 2 us apart
    assert timer.launch_bound_warning(4e-6, None) == ""


def spin(seconds: float) -> None:
    """Busy-wait ``seconds`` of wall clock: a call of known, steady length."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_cpu_bench_runs_for_real_and_says_cpu():
    """Real calls timed with the host clock: a call that spins 200 us reads 200 us (not 0, not the batch), the
    stopping rule converges on such a steady call, and the result says it is a CPU timing."""
    m = timer.bench(spin, 200e-6, mode="hot", budget=1.0, bytes=1000, device="cpu")
    assert m.device == "cpu" and m.device_name.startswith("CPU")
    assert 195e-6 <= m.median <= 300e-6, m.median
    assert m.stop_reason == "converged" and m.stats.n >= timer.MIN_SAMPLES
    assert m.gbps == pytest.approx(1000 / m.median / 1e9)
    assert m.first_call >= 195e-6


def test_cpu_cold_mode_evicts_and_still_times(monkeypatch):
    """Every cold sample is preceded by an eviction, the eviction stays outside the timed window, and a slow
    eviction counts against the budget (the sweep stops on time)."""
    from kernelkit.measure import samplers

    evictions = []

    def slow_evict(buffer):
        evictions.append(time.perf_counter())
        spin(10e-3)

    monkeypatch.setattr(samplers, "evict", slow_evict)
    start = time.perf_counter()
    m = timer.bench(spin, 100e-6, mode="cold", budget=0.5, device="cpu")
    wall = time.perf_counter() - start
    assert m.mode == "cold" and m.stats.n >= timer.MIN_SAMPLES
    assert 95e-6 <= m.median <= 1e-3, m.median  # 100 us of work per call, none of the 10 ms eviction
    samples_taken = len(m.samples) + m.dropped
    assert len(evictions) >= samples_taken  # one before every sample (and one to time the eviction itself)
    assert len(evictions) <= samples_taken + 3
    assert wall < 0.5 + timer.WARMUP_MAX_SECONDS / 2 + 0.5, wall  # budget, warm-up (half the budget), slack
    assert m.stop_reason in ("budget", "converged") and len(evictions) * 10e-3 < 1.0


@pytest.mark.parametrize("mode", ["graph", "kernel"])
def test_gpu_only_modes_on_the_cpu_say_so(mode):
    with pytest.raises(MeasureError, match="needs a CUDA GPU"):
        timer.bench(torch.square, torch.ones(4), mode=mode, budget=0.1)


def test_unknown_mode_and_bad_budget_are_errors():
    with pytest.raises(MeasureError, match="unknown mode 'warm'"):
        Settings(mode="warm")
    with pytest.raises(MeasureError, match="positive"):
        Settings(budget=0)


def test_cuda_asked_without_a_gpu_is_an_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(MeasureError, match="no GPU"):
        timer.bench(torch.square, torch.ones(4), device="cuda")


def test_a_closure_without_tensor_arguments_is_timed_where_the_gpu_is(monkeypatch):
    assert timer._device_of((torch.ones(1),)) == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert timer._device_of(()) == "cuda"
    assert timer._device_of((3, "x")) == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert timer._device_of(()) == "cpu"


def test_a_timing_mode_is_one_mode_and_one_registration(monkeypatch):
    # A planted mode: the median of three back-to-back calls per sample. Registered, it is timed by the same engine,
    # listed where the command line lists modes, and its flags (not its name) decide what the timer does.
    from kernelkit.measure import samplers

    def triple(env, contender, estimate):
        sampler = samplers.CpuSampler(contender.fn, 3, None)
        sampler.method = "triple: three back-to-back calls per sample"
        return sampler

    monkeypatch.setattr(modes, "_MODES", dict(modes._MODES))  # the registry as it was, after the test
    modes.register(modes.Mode("triple", "three calls per sample", triple))
    assert "triple" in modes.names("cpu")
    m = timer.bench(torch.square, torch.ones(64), mode="triple", budget=0.05, device="cpu")
    assert m.mode == "triple" and m.calls_per_sample == 3 and m.method.startswith("triple:") and m.stats.n >= 1
