"""The timing engine on a GPU: each mode against another or against a peer, on kernels large and tiny.

All carry the gpu marker (skipped without a GPU). Targets, on an H100: kernel and cold mode agree within 3% on a
kernel of >= 100 us; a Python loop of 200 tiny launches is launch-bound and one 50+ us kernel never is; hot mode
over 4096 floats is within 1.2x of torch.utils.benchmark's Timer; graph mode (cold, rotating input copies) is
within 5% of cold on a large kernel and no slower than do_bench_cudagraph + 10% on a tiny one. Comparisons with a
peer on a tiny kernel take the best of three alternating measurements of each (the host's launch rate drifts).
A torch.profiler session in the process must not change what kernel mode reads afterwards.
"""

from __future__ import annotations

import pytest
import torch

import kernelkit as kk

pytestmark = pytest.mark.gpu
BUDGET = 2.0


@pytest.fixture(scope="module")
def large() -> torch.Tensor:
    return torch.randn(1 << 26, device="cuda")  # square reads and writes 256 MiB: ~175 us on an H100


@pytest.fixture(scope="module")
def tiny() -> torch.Tensor:
    return torch.randn(4096, device="cuda")


def _launch_bound(m: kk.Measurement) -> bool:
    return any("launch-bound" in w for w in m.warnings)


def test_kernel_mode_agrees_with_cold_mode_on_a_large_kernel(large):
    cold = kk.bench(torch.square, large, mode="cold", budget=BUDGET)
    kernel = kk.bench(torch.square, large, mode="kernel", budget=BUDGET)
    assert cold.median > 100e-6
    assert kernel.median == pytest.approx(cold.median, rel=0.03), (kernel.method, kernel.median, cold.median)
    assert cold.kernel_seconds == pytest.approx(cold.median, rel=0.03)  # the launch-bound probe's kernel time too


def test_cupti_and_the_profiler_give_the_same_device_time(large):
    from kernelkit.measure.cupti_trace import CuptiTracer
    from kernelkit.measure.kernel_time import KernelTimer

    cupti = CuptiTracer.open()
    if cupti is None:
        pytest.skip("cupti-python is not installed here")
    calls = [lambda: torch.square(large)] * 10
    by_cupti = sorted(KernelTimer(cupti).times(calls))
    by_profiler = sorted(KernelTimer(None).times(calls))
    assert by_cupti[5] == pytest.approx(by_profiler[5], rel=0.03)
    # torch.profiler has now switched CUPTI's clock to TSC ticks for the rest of the process: a new CUPTI session
    # must still read nanoseconds (it read 2.09x, 366 us for 175, before each session measured the clock's rate)
    fresh = KernelTimer(CuptiTracer.open())
    after = sorted(fresh.times(calls))
    assert after[5] == pytest.approx(by_cupti[5], rel=0.03), (after[5], by_cupti[5], fresh.source,
                                                             getattr(fresh.cupti, "ticks_per_ns", None))
    assert "CUPTI" in fresh.source  # the CUPTI session itself worked, with no fallback to the profiler


def test_kernel_mode_after_a_profiler_session_reads_the_same_and_reports_the_clock(large):
    from torch.profiler import ProfilerActivity, profile

    before = kk.bench(torch.square, large, mode="kernel", budget=BUDGET)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
        torch.square(large)
        torch.cuda.synchronize()
    after = kk.bench(torch.square, large, mode="kernel", budget=BUDGET)
    assert after.median == pytest.approx(before.median, rel=0.03), (after.median, before.median, after.method)
    if after.max_clock_mhz:  # NVML here: each batch's SM clock is in the result
        assert after.clocks_mhz and after.clock_scaling is not None and "SM clock" in after.method


def test_a_python_loop_of_200_tiny_launches_is_launch_bound(tiny):
    def many_tiny_kernels(x: torch.Tensor) -> torch.Tensor:
        y = x
        for _ in range(200):
            y = torch.square(x)
        return y

    m = kk.bench(many_tiny_kernels, tiny, mode="cold", budget=BUDGET)
    assert _launch_bound(m), (m.median, m.kernel_seconds, m.warnings)
    assert m.kernel_seconds is not None and m.kernel_seconds < m.median / 1.5


@pytest.mark.parametrize("mode", ["cold", "hot"])
def test_one_large_kernel_is_never_launch_bound(mode):
    x = torch.randn(1 << 24, device="cuda")  # 64 MiB each way: ~50 us on an H100
    m = kk.bench(torch.square, x, mode=mode, budget=BUDGET)
    assert m.median > 40e-6 and m.kernel_seconds is not None
    assert not _launch_bound(m), (m.median, m.kernel_seconds, m.warnings)


def _best_of_alternating(ours, peer, rounds=3):
    """(best of ours, best of peer) over ``rounds`` alternating measurements in this process: a host or GPU that
    slows down for a while (clocks, a neighbour's load) then falls on both, not on whichever ran at that time."""
    mine, theirs = [], []
    for _ in range(rounds):
        theirs.append(peer())
        mine.append(ours())
    return min(mine), min(theirs)


def test_hot_mode_costs_no_more_than_torch_timer_on_a_launch_bound_call(tiny):
    import torch.utils.benchmark as benchmark

    timer = benchmark.Timer(stmt="torch.square(x)", globals={"torch": torch, "x": tiny})
    results = []

    def ours():
        results.append(kk.bench(torch.square, tiny, mode="hot", budget=BUDGET / 2))
        return results[-1].median

    mine, peer = _best_of_alternating(ours, lambda: timer.blocked_autorange(min_run_time=0.5).median)
    assert all(m.calls_per_sample > 1 for m in results)
    assert mine <= 1.2 * peer, (mine, peer, [m.median for m in results])


def test_graph_mode_is_cold_by_default_and_agrees_with_cold_mode_on_a_large_kernel(large):
    cold = kk.bench(torch.square, large, mode="cold", budget=BUDGET)
    graph = kk.bench(torch.square, large, mode="graph", budget=BUDGET)
    assert "cold" in graph.method and not any("fit in L2" in w for w in graph.warnings)
    assert graph.median == pytest.approx(cold.median, rel=0.05)


@pytest.mark.parametrize("warm", [False, True])
def test_graph_mode_on_a_tiny_kernel_is_as_fast_as_do_bench_cudagraph(tiny, warm):
    # The target: graph mode over 4096 floats no slower than do_bench_cudagraph + 10%. do_bench_cudagraph replays
    # warm; graph mode is cold by default, and the two differ by ~0.2 us a call either way from one run to the
    # next (1.73 vs 1.55, then 1.36 vs 1.60 us on an H100), so each is taken at its best of three, alternating.
    testing = pytest.importorskip("triton.testing")
    results = []

    def ours():
        results.append(kk.bench(torch.square, tiny, mode="graph", graph_warm=warm, budget=BUDGET / 2))
        return results[-1].median

    def peer():
        return testing.do_bench_cudagraph(lambda: torch.square(tiny), return_mode="median") / 1e3

    mine, theirs = _best_of_alternating(ours, peer)
    assert all(("warm" in m.method) == warm for m in results)
    assert mine <= 1.1 * theirs, (results[0].method, [m.median for m in results], theirs)


def test_graph_mode_rotates_outputs_as_well_as_inputs(tiny):
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    m = kk.bench(torch.square, tiny, mode="graph", budget=0.5)
    copies = int(m.method.split(" copies")[0].rsplit(" ", 1)[1])
    assert copies * 2 * tiny.numel() * 4 >= 2 * l2  # inputs and outputs of every copy stream 2x the L2
    assert m.calls_per_sample % copies == 0


def test_doctor_on_a_gpu_passes_in_under_a_minute():
    report = kk.doctor("cuda")
    failed = [c for c in report.checks if c.status == "fail"]
    assert report.ok, failed
    assert report.seconds < 60
    topics = {c.topic for c in report.checks}
    assert {"GPU", "large: cold", "large: kernel", "large: graph", "tiny: kernel", "tiny: hot"} <= topics
