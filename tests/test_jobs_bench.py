"""bench_op on the CPU: the correctness gate, baselines, speedups, the store, and failures that keep the rest."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelkit.jobs import bench as jobs_bench
from kernelkit.results import Status
from kernelkit.runs import bench as sweep
from kernelkit.store import Store

OPS = str(Path(__file__).parent / "planted" / "bench_ops.py")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    store = Store.open(tmp_path_factory.mktemp("store") / "results.sqlite")
    got = sweep.bench_op(OPS, impls=["eager_add", "eager_wrong", "eager_flaky", "eager_warns", "eager", "compile"],
                         device="cpu", mode="hot", budget=0.3, store=store, command="kernelkit bench bench_ops.py",
                         strict=False)  # the plain path (a stored run is strict by default: tests/test_strict.py)
    yield got, store
    store.close()


def _by_impl(report, size=(64, 64)):
    return {r.impl: r for r in report.results if r.size == size}


def test_every_impl_and_baseline_gets_a_result_per_size(report):
    got, _ = report
    sizes = {r.size for r in got.results}
    assert sizes == {(64, 64), (128, 128)}
    assert set(_by_impl(got)) == {"eager_add", "eager_wrong", "eager_flaky", "eager_warns", "eager", "compile"}


def test_the_gate_keeps_wrong_impls_from_being_timed(report):
    wrong = _by_impl(report[0])["eager_wrong"]
    assert wrong.status is Status.INCORRECT_NUMERICS and wrong.measurement is None
    assert wrong.message.startswith("not timed: check gave INCORRECT_NUMERICS")


def test_the_last_timed_output_is_checked_again(report):
    flaky = _by_impl(report[0])["eager_flaky"]
    assert flaky.status is Status.INCORRECT_NUMERICS
    assert "last timed call" in flaky.message


def test_passing_impls_are_timed_with_speedups_against_both_baselines(report):
    add = _by_impl(report[0])["eager_add"]
    assert add.status is Status.PASSED and add.role == "impl"
    m = add.measurement
    assert m.device == "cpu" and m.stats.n >= 1 and m.first_call > 0 and m.bytes == 2 * 64 * 64 * 4
    assert set(add.speedups) == {"eager", "compile"}
    for ratio in add.speedups.values():
        assert ratio.low <= ratio.value <= ratio.high
    compiled = _by_impl(report[0])["compile"]
    assert compiled.role == "baseline" and set(compiled.speedups) == {"eager"}
    eager = _by_impl(report[0])["eager"]
    assert eager.role == "baseline" and eager.speedups == {}


def test_results_carry_the_ceiling_percentages(report):
    m = _by_impl(report[0])["eager_add"].measurement
    assert m.ceiling is not None and m.ceiling.bandwidth_gbps > 0
    assert m.ceiling.pct_bandwidth == pytest.approx(m.gbps / m.ceiling.bandwidth_gbps * 100)


def test_warnings_raised_in_the_worker_come_back_in_the_results(report):
    got, store = report
    timed = _by_impl(got)
    warned = [w for w in timed["eager_warns"].warnings if "eager_warns: this impl is deprecated" in w]
    assert warned and warned[0].startswith("DeprecationWarning")
    assert warned[0] in timed["eager_add"].warnings  # one worker timed the group: its warnings are the group's
    (run,) = store.runs()
    stored = {r.case_id: r for r in store.results(run.id)}
    assert warned[0] in stored["double/eager_warns/64x64/float32"].warnings


def test_a_failed_calibration_is_a_warning_in_every_result_not_a_lost_print(monkeypatch):
    from kernelkit import target
    from kernelkit.measure import ceilings
    from kernelkit.measure.timer import Settings

    def broken(device):
        raise RuntimeError("no ceilings today")

    monkeypatch.setattr(ceilings, "calibrate", broken)
    job = jobs_bench.BenchJob(target.resolve(OPS), "double", (64, 64), "float32", 0,
                         (("eager_add", "impl"), ("eager", "baseline")), Settings(mode="hot", budget=0.05))
    outcome = job.execute("cpu")
    assert all(r.status is Status.PASSED for r in outcome.results)
    (notice,) = [w for w in outcome.warnings if w.startswith("no % of ceiling")]
    assert "no ceilings today" in notice
    assert all(notice in r.warnings and r.measurement.ceiling is None for r in outcome.results)
    quiet = jobs_bench.BenchJob(target.resolve(OPS), "double", (64, 64), "float32", 0, (("eager_add", "impl"),),
                           Settings(mode="hot", budget=0.05, calibrate=False)).execute("cpu")  # --no-calibrate
    assert quiet.results[0].status is Status.PASSED and not quiet.warnings
    assert quiet.results[0].measurement.ceiling is None


def test_each_timed_contender_gets_its_peak_memory_from_one_more_call(monkeypatch):
    from kernelkit import target
    from kernelkit.measure import memory
    from kernelkit.measure.timer import Settings

    contenders = (("eager_add", "impl"), ("eager", "baseline"))
    job = jobs_bench.BenchJob(target.resolve(OPS), "double", (64, 64), "float32", 0, contenders,
                         Settings(mode="hot", budget=0.05))
    outcome = job.execute("cpu")  # the real thing: not measured on the CPU
    assert [r.measurement.peak_bytes for r in outcome.results] == [None, None]

    calls = []

    def fake_peak(call, device):  # as on a GPU: the call is made, its output's size is the peak
        out = call()
        calls.append(device)
        if len(calls) == 2:
            raise RuntimeError("CUDA out of memory")
        return out.numel() * out.element_size()

    monkeypatch.setattr(memory, "peak_bytes", fake_peak)
    outcome = job.execute("cpu")
    first, second = outcome.results
    assert calls == ["cpu", "cpu"] and first.measurement.peak_bytes == 64 * 64 * 4
    assert second.status is Status.PASSED and second.measurement.peak_bytes is None  # the timing stands
    assert any("peak memory not measured: RuntimeError: CUDA out of memory" in w for w in second.measurement.warnings)


def test_cold_mode_on_a_huge_last_level_cache_finishes_well_inside_the_job_timeout(monkeypatch):
    from kernelkit import target
    from kernelkit.measure import host
    from kernelkit.measure.timer import Settings

    monkeypatch.setattr(host, "cpu_caches", lambda: [(3, "Unified", 480 << 20)])
    contenders = (("eager_add", "impl"), ("eager_warns", "impl"), ("eager", "baseline"))
    job = jobs_bench.BenchJob(target.resolve(OPS), "double", (64, 64), "float32", 0, contenders,
                         Settings(mode="cold", budget=0.2))
    began = time.perf_counter()
    outcome = job.execute("cpu")
    assert time.perf_counter() - began < job.timeout / 4
    assert [r.status for r in outcome.results] == [Status.PASSED] * 3
    assert all(any("not 2x the 480 MiB" in w for w in r.measurement.warnings) for r in outcome.results)


def test_the_run_is_stored_with_its_fingerprint_and_command(report):
    got, store = report
    (run,) = store.runs()
    assert run.id == got.run_id and run.status == "finished" and run.command == "kernelkit bench bench_ops.py"
    assert run.n_results == len(got.results)
    assert run.env["device_name"].startswith("CPU")
    stored = {r.case_id: r for r in store.results(run.id)}
    assert stored["double/eager_add/64x64/float32"].measurement.samples == \
        _by_impl(got)["eager_add"].measurement.samples


def test_a_crash_while_timed_is_that_impls_alone_and_the_sweep_goes_on(tmp_path):
    got = sweep.bench_op(OPS, impls=["eager_dies", "eager_add"], device="cpu", mode="hot", budget=0.3,
                         baselines=False)
    first = {r.impl: r for r in got.results if r.size == (64, 64)}
    assert first["eager_dies"].status is Status.CRASHED and "exited with code 3" in first["eager_dies"].message
    assert first["eager_add"].status is Status.PASSED  # timed again alone, in a fresh worker
    assert "timed alone in a fresh worker" in " ".join(first["eager_add"].warnings)
    second = {r.impl: r for r in got.results if r.size == (128, 128)}
    assert second["eager_add"].status is Status.PASSED and second["eager_add"].measurement is not None


def test_a_sweep_killed_midway_keeps_every_finished_case(tmp_path):
    db = tmp_path / "results.sqlite"
    code = (
        "import sys; from kernelkit.runs import bench as sweep; from kernelkit.store import Store\n"
        f"s = Store.open({str(db)!r})\n"
        f"sweep.bench_op({OPS!r}, impls=['eager_add'], device='cpu', mode='hot', budget=0.3, store=s,\n"
        "               baselines=False, on_result=lambda r: print('RESULT', flush=True))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    assert proc.stdout.readline().strip() == "RESULT"  # the first size is done and stored
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    time.sleep(0.1)
    with Store.open(db) as store:
        (run,) = store.runs()
        assert run.status == "incomplete"
        kept = store.results(run.id)
    assert [r.case_id for r in kept] == ["double/eager_add/64x64/float32"]
    assert kept[0].measurement is not None


def test_planning_names_baselines_and_keeps_registered_eager_as_the_baseline():
    from kernelkit import target
    from kernelkit.ops import square

    groups = sweep.plan_groups("kernelkit.ops.square", [square.square], "cpu", [], [], [], True)
    first = groups[0]
    assert [c.impl for c in first.cases][-2:] == ["compile", "eager"]  # square registers its own eager impl
    assert not first.eager
    only = sweep.plan_groups(target.resolve(OPS), list(target.load(target.resolve(OPS)).values()), "cpu",
                             ["eager"], [], [], False)
    assert only[0].eager and only[0].cases == []


@pytest.mark.gpu
@pytest.mark.parametrize(("op", "strict"), [("square", True), ("softmax", False)])
def test_a_default_gpu_bench_replaces_no_worker(op, strict, tmp_path):
    # Every impl and both baselines in every dtype, at the op's smallest and a larger default size (softmax's keeps
    # 1 GiB of references), timed briefly; square stored and strict, softmax plain. kernelkit's own threads and
    # pools (the profiler, inductor's compile pool, its ptxas variable) must leave each worker reusable: before,
    # every bench group of the demo paid a new worker, CUDA start-up, references and compiles.
    from kernelkit.target import open_target

    sizes = open_target(op, "cuda").op().bench_sizes_for("cuda")
    sizes = [sizes[0], sizes[1 if strict else 2]]  # strict mode ships outputs as bytes: a mid size keeps it short
    began = time.monotonic()
    with Store.open(tmp_path / "results.sqlite") as store:
        got = sweep.bench_op(op, device="cuda", sizes=sizes, budget=0.05, store=store, strict=strict,
                             on_phase=lambda text: print(f"{time.monotonic() - began:7.1f} s  {text}", flush=True))
    assert got.results and not any(r.status.failed for r in got.results), [
        (r.case_id, r.status.value, r.message) for r in got.results if r.status.failed]
    left = [w for r in got.results for w in r.warnings if "the worker was replaced" in w]
    assert not left, left[:2]
