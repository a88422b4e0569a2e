"""Verdicts that survive a second run: compare's noise floor (default, given, measured by bench --repeat), the A/A
case, the regression gate (--fail-if-slower, --json) and the comparison table that says "same (within noise)"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelkit.cli import app
from kernelkit.measure.measurement import BenchResult
from kernelkit.measure.stats import Ratio
from kernelkit.results import Status
from kernelkit.store import DEFAULT_MIN_EFFECT, Store, compare, regressions
from kernelkit.store.compare import SPREAD_KEY, judge
from resultkit import assert_fits, bench_result, measurement, noisy_samples, render


def result(impl: str, times: list[float] | None, *, device: str = "cuda", spread: float | None = None,
           status: Status = Status.PASSED, backend: str = "eager") -> BenchResult:
    m = None if times is None else measurement(impl, times, device=device, device_name="test")
    return bench_result(impl, (64, 64), m=m, backend=backend, device=device, status=status,
                        details={} if spread is None else {SPREAD_KEY: spread})


def two_runs(store: Store, pairs: dict[str, tuple[list[float] | None, list[float] | None]], *, device: str = "cuda",
             spread: float | None = None, backend: str = "eager") -> tuple[int, int]:
    runs = []
    for side in (0, 1):
        run = store.begin_run("kernelkit bench square", {"device_name": "test"}, device=device)
        for impl, times in pairs.items():
            store.add_result(run, result(impl, times[side], device=device, spread=spread, backend=backend))
        store.finish_run(run)
        runs.append(run)
    return runs[0], runs[1]


@pytest.fixture
def store(tmp_path: Path):
    with Store.open(tmp_path / "results.sqlite") as s:
        yield s


def test_judge_needs_both_the_interval_and_the_floor():
    assert judge(Ratio(1 / 1.05, 0.94, 0.96), 0.02) == "slower"  # 5% slower, interval clear of 1, floor 2%
    assert judge(Ratio(1 / 1.05, 0.94, 0.96), 0.10) == "same"  # the same change under a 10% floor
    assert judge(Ratio(1 / 1.05, 0.90, 1.01), 0.02) == "same"  # beyond the floor but the interval holds 1.0
    assert judge(Ratio(1.08, 1.07, 1.09), 0.05) == "faster"
    assert judge(Ratio(1.04, 1.03, 1.05), 0.05) == "same"


def test_a_a_comparison_with_drift_is_same_on_cpu_and_gpu(store: Store):
    """The same samples, the second run drifted by 0.8-4% (as two back-to-back runs of unchanged code): each
    interval excludes 1.0, so the old rule said faster/slower; the floor says same."""
    drifts = {"a": 1.008, "b": 1.02, "c": 1.04, "d": 0.97}
    for device, allowed in (("cpu", drifts), ("cuda", {"a": 1.008, "b": 1.015, "d": 0.985})):
        pairs = {impl: (noisy_samples(1e-4, 0.002, seed=i), [t * drift for t in noisy_samples(1e-4, 0.002, seed=i)])
                 for i, (impl, drift) in enumerate(allowed.items())}
        a, b = two_runs(store, pairs, device=device)
        cmp = compare(store, a, b)
        assert all(c.ratio.low > 1 or c.ratio.high < 1 for c in cmp.changes)  # the interval alone would call them
        assert [c.verdict for c in cmp.changes] == ["same"] * len(allowed), device
        assert {c.floor for c in cmp.changes} == {DEFAULT_MIN_EFFECT[device]}
        assert {c.floor_from for c in cmp.changes} == {f"default ({device})"}


def test_a_planted_slowdown_beyond_the_floor_is_slower(store: Store):
    base = noisy_samples(1e-4, 0.01, seed=3)
    a, b = two_runs(store, {"extra_pass": (base, [1.10 * t for t in noisy_samples(1e-4, 0.01, seed=4)])})
    (change,) = compare(store, a, b).changes
    assert change.verdict == "slower" and change.change == pytest.approx(0.10, abs=0.01)


def test_the_floor_given_or_measured_replaces_the_default(store: Store):
    times = (noisy_samples(1e-4, 0.002, seed=1), noisy_samples(1.05e-4, 0.002, seed=2))  # 5% slower
    a, b = two_runs(store, {"x": times})
    assert compare(store, a, b).changes[0].verdict == "slower"  # the GPU default floor is 2%
    given = compare(store, a, b, min_effect=0.08).changes[0]
    assert (given.verdict, given.floor, given.floor_from) == ("same", 0.08, "given")
    a, b = two_runs(store, {"x": times}, spread=0.07)  # bench --repeat measured 7% between runs
    measured = compare(store, a, b).changes[0]
    assert (measured.verdict, measured.floor, measured.floor_from) == ("same", 0.07, "measured")
    with pytest.raises(ValueError, match="fraction"):
        compare(store, a, b, min_effect=3)


def test_the_gate_catches_slowdowns_beyond_the_threshold_and_broken_cases(store: Store):
    a_run = store.begin_run("kk", {}, device="cuda")
    b_run = store.begin_run("kk", {}, device="cuda")
    for impl, scale in (("five_pct", 1.05), ("one_pct", 1.01), ("faster", 0.8)):
        store.add_result(a_run, result(impl, noisy_samples(1e-4, 0.002, seed=1)))
        store.add_result(b_run, result(impl, [scale * t for t in noisy_samples(1e-4, 0.002, seed=2)]))
    store.add_result(a_run, result("broke", noisy_samples(1e-4, 0.002)))
    store.add_result(b_run, result("broke", None, status=Status.INCORRECT_NUMERICS))
    cmp = compare(store, a_run, b_run, min_effect=0.5)  # the display floor does not change the gate
    assert [c.impl for c in regressions(cmp, 0.03)] == ["five_pct", "broke"]
    assert [c.impl for c in regressions(cmp, 0.06)] == ["broke"]


def test_a_wide_spread_raises_the_floor_so_an_a_a_compare_of_tiny_cpu_cases_says_same(store: Store):
    # Two runs of unchanged code, a tiny CPU case at load 2: each run's samples spread by ~30%, the medians of the
    # two runs 40% apart (as measured on the 2-core machine). The default 25% floor would call it slower.
    noisy_a, noisy_b = noisy_samples(1e-5, 0.25, seed=5), [1.4 * t for t in noisy_samples(1e-5, 0.25, seed=6)]
    a, b = two_runs(store, {"tiny": (noisy_a, noisy_b)}, device="cpu")
    (change,) = compare(store, a, b).changes
    assert change.ratio.high < 1  # the interval alone says slower
    assert change.verdict == "same" and change.floor > 0.4 and change.floor_from.startswith("spread (3 x IQR")
    quiet_a, quiet_b = noisy_samples(1e-3, 0.01, seed=7), [1.4 * t for t in noisy_samples(1e-3, 0.01, seed=8)]
    a, b = two_runs(store, {"steady": (quiet_a, quiet_b)}, device="cpu")
    (change,) = compare(store, a, b).changes  # a steady case keeps the default floor: 40% is slower
    assert change.verdict == "slower" and change.floor_from == "default (cpu)"


def test_a_kernel_timed_in_a_cpu_stand_in_is_never_faster_or_slower(store: Store):
    # Triton's interpreter on a 2-core machine at load 6: unchanged code read 1.5-4x faster in an A/A compare, its
    # samples steady within each run. Its time follows the machine's load, not the kernel: same, and why.
    steady_a, steady_b = noisy_samples(1e-2, 0.03, seed=9), [0.3 * t for t in noisy_samples(1e-2, 0.03, seed=10)]
    for backend in ("triton", "numba"):
        a, b = two_runs(store, {"interp": (steady_a, steady_b)}, device="cpu", backend=backend)
        comparison = compare(store, a, b)
        (change,) = comparison.changes
        assert change.verdict == "same" and change.floor_from.startswith("not a speed")
        assert "on the CPU" in change.floor_from and not regressions(comparison, 0.03)
    a, b = two_runs(store, {"real": (steady_b, steady_a)}, device="cuda", backend="triton")
    (change,) = compare(store, a, b).changes  # on a GPU the same kernel's time is a speed
    assert change.verdict == "slower"
    a, b = two_runs(store, {"eager": (steady_b, steady_a)}, device="cpu", backend="eager")
    assert compare(store, a, b).changes[0].verdict == "slower"  # eager PyTorch on the CPU is real CPU work


def test_the_gate_judges_impls_not_baselines_unless_asked_and_counts_lost_cases(store: Store):
    a_run = store.begin_run("kk", {}, device="cuda")
    b_run = store.begin_run("kk", {}, device="cuda")
    for impl, role in (("triton_flat", "impl"), ("compile", "baseline")):
        for run, scale, seed in ((a_run, 1.0, 1), (b_run, 1.2, 2)):
            r = result(impl, [scale * t for t in noisy_samples(1e-4, 0.002, seed=seed)])
            r.role = role
            store.add_result(run, r)
    store.add_result(a_run, result("lost_in_b", noisy_samples(1e-4, 0.002)))  # B never ran it (killed, or removed)
    cmp = compare(store, a_run, b_run)
    assert [c.impl for c in regressions(cmp, 0.03)] == ["triton_flat", "lost_in_b"]
    assert [c.impl for c in regressions(cmp, 0.03, baselines=True)] == ["triton_flat", "compile", "lost_in_b"]


def test_a_run_b_that_lost_every_case_fails_the_gate(store: Store):
    a_run = store.begin_run("kk", {}, device="cuda")
    store.add_result(a_run, result("triton_flat", noisy_samples(1e-4, 0.002)))
    store.finish_run(a_run)
    b_run = store.begin_run("kk", {}, device="cuda")
    store.finish_run(b_run, "interrupted")
    assert [c.impl for c in regressions(compare(store, a_run, b_run), 0.03)] == ["triton_flat"]


@pytest.fixture
def gated_store(tmp_path: Path) -> Path:
    path = tmp_path / "gate.sqlite"
    with Store.open(path) as store:
        two_runs(store, {
            "square_triton_flat": (noisy_samples(1e-4, 0.002, seed=1), noisy_samples(1.05e-4, 0.002, seed=2)),
            "square_cuda_vec4": (noisy_samples(1e-4, 0.002, seed=3), noisy_samples(1e-4, 0.002, seed=4)),
        })
    return path


def test_fail_if_slower_exits_1_on_a_regression_and_0_under_the_threshold(gated_store: Path):
    base = ["compare", "latest-1", "latest", "--store", str(gated_store)]
    failed = CliRunner().invoke(app, [*base, "--fail-if-slower", "3%"])
    assert failed.exit_code == 1, failed.output
    assert "regression: 1 case slower by more than 3.0%" in failed.output and "square_triton_flat" in failed.output
    passed = CliRunner().invoke(app, [*base, "--fail-if-slower", "8"])
    assert passed.exit_code == 0, passed.output
    assert "no regression beyond 8.0%" in passed.output
    bad = CliRunner().invoke(app, [*base, "--fail-if-slower", "fast"])
    assert bad.exit_code == 2 and "give a percentage" in bad.output


def test_compare_json_gives_the_comparison_and_the_gate(gated_store: Path):
    out = CliRunner().invoke(app, ["compare", "latest-1", "latest", "--store", str(gated_store), "--json",
                                   "--fail-if-slower", "3%"])
    assert out.exit_code == 1
    doc = json.loads(out.stdout)
    rows = {c["impl"]: c for c in doc["changes"]}
    assert rows["square_triton_flat"]["verdict"] == "slower" and rows["square_cuda_vec4"]["verdict"] == "same"
    assert rows["square_triton_flat"]["change"] == pytest.approx(0.05, abs=0.005)
    assert rows["square_triton_flat"]["floor"] == 0.02 and rows["square_triton_flat"]["ratio"]["high"] < 1
    assert doc["gate"] == {"fail_if_slower": 0.03, "regressions": ["square/square_triton_flat/64x64/float32"],
                           "passed": False}


def test_the_table_says_same_within_noise_shows_the_floor_and_fits_120_columns(gated_store: Path):
    out = CliRunner().invoke(app, ["compare", "latest-1", "latest", "--store", str(gated_store)])
    assert out.exit_code == 0, out.output
    assert "same (within noise)" in out.output and "noise floor (2.0% default (cuda)" in out.output
    assert_fits(out.output)




def test_runs_say_what_a_run_came_to(tmp_path: Path):
    from kernelkit.report.runs_table import runs_table

    with Store.open(tmp_path / "r.sqlite") as store:
        for statuses, finish in (([Status.PASSED] * 3, "finished"), ([Status.PASSED, Status.TIMEOUT,
                                 Status.SKIPPED], "finished"), ([Status.TIMEOUT] * 2, "finished"),
                                 ([Status.PASSED], None), ([Status.PASSED], "interrupted")):
            run = store.begin_run("kk", {}, device="cpu")
            for i, status in enumerate(statuses):
                times = None if status.failed else noisy_samples(1e-4, 0.01)
                store.add_result(run, result(f"i{i}", times, status=status))
            if finish:
                store.finish_run(run, finish)
        text = render(runs_table(list(reversed(store.runs())), store.path))
    order = ["finished ", "finished with failures", "(1 of 3)", "failed (all 2)", "incomplete", "interrupted"]
    positions = [text.find(word) for word in order]
    assert all(p >= 0 for p in positions) and positions == sorted(positions), text


def test_bench_repeat_runs_the_sweep_n_times_and_stores_the_spread_with_the_last(monkeypatch, tmp_path: Path):
    from kernelkit.runs import repeat
    from kernelkit.runs.bench import SweepReport

    medians = iter([1.00e-4, 1.06e-4, 1.03e-4])
    calls = []

    def fake_bench_op(target, *, store=None, on_result=None, **options):
        calls.append(store)
        report = SweepReport(device="cpu", mode="hot")
        run = store.begin_run("kk bench", {}, device="cpu") if store is not None else None
        for r in (result("timed", [next(medians)] * 5, device="cpu"), result("broken", None, device="cpu",
                                                                               status=Status.RUNTIME_ERROR)):
            report.results.append(r)
            if store is not None:
                store.add_result(run, r)
            if on_result is not None:
                on_result(r)
        if store is not None:
            store.finish_run(run)
        return report

    monkeypatch.setattr(repeat, "bench_op", fake_bench_op)
    with Store.open(tmp_path / "r.sqlite") as store:
        report = repeat.bench_repeated("square", 3, store=store, mode="hot")
        stored = store.results("latest")
        assert len(store.runs()) == 1  # only the last run is stored
    assert calls[:2] == [None, None] and calls[2] is not None
    timed = report.results[0]
    assert timed.details["run_medians"] == [1.00e-4, 1.06e-4, 1.03e-4]
    assert timed.details[SPREAD_KEY] == pytest.approx(0.06 / 1.03)
    assert stored[0].details[SPREAD_KEY] == pytest.approx(0.06 / 1.03)
    assert SPREAD_KEY not in report.results[1].details  # not timed: no spread
    with pytest.raises(Exception, match="--repeat must be at least 1"):
        repeat.bench_repeated("square", 0)


def test_a_case_timed_too_few_times_is_same_and_never_fails_the_gate(store: Store):
    # A simulated Numba kernel is timed once or twice in a CPU budget: its interval is a point, which excludes 1.0
    # whatever the medians. An A/A compare at load 3 called such cases 8x faster and 5.8x slower.
    a, b = two_runs(store, {"simulated": ([1.0], [8.0]), "timed": (noisy_samples(1e-4, 0.002, seed=1),
                                                                    noisy_samples(1e-4, 0.002, seed=2))}, device="cpu")
    cmp = compare(store, a, b)
    simulated = next(c for c in cmp.changes if c.impl == "simulated")
    assert simulated.verdict == "same" and simulated.floor_from == "too few samples to tell (n=1 and 1)"
    assert regressions(cmp, 0.03) == []
