"""Spreading a run over several workers of one host (kernelkit.scale): on the CPU, two slots with made-up GPU
indices stand in for two GPUs. The merged run must hold exactly a one-worker run's cases, keep each (op, size,
dtype) group on one slot, and lose no more than the in-flight case when a worker dies."""

from __future__ import annotations

import inspect
import multiprocessing
import os
import signal
import sys
import threading
from pathlib import Path

import pytest

import kernelkit as kk
from kernelkit.errors import SpecError
from kernelkit.results import Status
from kernelkit.scale import Slot, Spread, gpu_slots, shard
from kernelkit.store import Store
from kernelkit.target import open_target

OPS = str(Path(__file__).parent / "planted" / "spread_ops.py")
# Strict mode (on by default for a stored run, where bench_op has it) times on one worker: off here.
NOT_STRICT = {"strict": False} if "strict" in inspect.signature(kk.bench_op).parameters else {}
TWO = [Slot(0), Slot(1)]


def _cases(results):
    return sorted((r.case_id, r.status) for r in results)


def _groups(results):
    """(op, size, dtype) -> the set of slots that ran it."""
    seen: dict[tuple, set] = {}
    for r in results:
        seen.setdefault((r.op, r.size, r.dtype), set()).add(r.gpu)
    return seen


# ---- choosing slots -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["all", "2", 2, "0,1", [0]])
def test_gpus_on_a_machine_without_one_is_a_clear_error(spec):
    with pytest.raises(SpecError, match="no GPUs here"):
        gpu_slots(spec, "cpu")


def test_slots_given_as_slots_are_used_as_they_are_on_any_device():
    assert gpu_slots(TWO, "cpu") == TWO
    assert Spread.of(None, None, "cpu") is None


def test_bad_gpu_specs_say_what_is_accepted(monkeypatch):
    monkeypatch.setattr("kernelkit.scale.slots._visible_gpus", lambda: 2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert [s.index for s in gpu_slots("all", "cuda")] == [0, 1]
    assert gpu_slots("0,1", "cuda")[1].env == {"CUDA_VISIBLE_DEVICES": "1"}
    with pytest.raises(SpecError, match="give 'all', a count"):
        gpu_slots("two", "cuda")
    with pytest.raises(SpecError, match="no GPU 3 here"):
        gpu_slots("0,3", "cuda")
    with pytest.raises(SpecError, match="twice"):
        gpu_slots("1,1", "cuda")


def test_a_worker_is_pinned_through_this_process_s_own_visible_devices(monkeypatch):
    monkeypatch.setattr("kernelkit.scale.slots._visible_gpus", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in gpu_slots("all", "cuda")] == ["4", "6"]


@pytest.mark.parametrize("command", ["check", "bench"])
def test_the_command_line_refuses_gpus_without_gpus(command):
    from typer.testing import CliRunner

    from kernelkit.cli import app

    store = ["--no-store"] if command == "bench" else []
    result = CliRunner().invoke(app, [command, OPS, "--device", "cpu", "--gpus", "all", *store])
    assert result.exit_code == 2 and "no GPUs here" in result.output


def test_ray_without_ray_installed_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray then raises ImportError
    with pytest.raises(SpecError, match="needs Ray.*kernelkit\\[ray\\]"):
        Spread.of(None, "auto", "cpu")


def test_gpus_and_ray_together_are_refused():
    with pytest.raises(SpecError, match="choose one"):
        Spread.of("all", "auto", "cpu")


# ---- the scheduler, with workers that run jobs in this process ----------------------------------------------


class InProcessWorker:
    """runner.Worker's interface, running each job here: the scheduler's logic without process start-ups.
    ``crash_on`` (slot index -> job number) makes that job CRASHED; ``sick`` slots then fail the probe;
    ``wait_for`` (a slot index) holds every other slot's first job until that slot has taken one, and with
    ``wait_jobs`` = n every other slot's second job until it has taken n (a crash, its probe, then work), so a test
    that needs a slot to work does not depend on how the threads happen to be scheduled."""

    crash_on: dict[int, int] = {}
    sick: set[int] = set()
    wait_for: int | None = None
    wait_jobs: int = 0
    started: threading.Event = threading.Event()
    resumed: threading.Event = threading.Event()

    def __init__(self, device, log_path, env=None, on_phase=None):
        self.device, self.env, self.process, self.jobs = device, dict(env or {}), None, 0
        self.slot = int(Path(log_path).stem.split("-")[1])

    def run(self, job, timeout, limit=""):
        self.jobs += 1
        if self.slot == self.wait_for:
            self.started.set()
            if self.jobs >= self.wait_jobs:
                self.resumed.set()
        elif self.wait_for is not None and self.jobs == 1:
            assert self.started.wait(30), f"slot {self.wait_for} never took a job"
        elif self.wait_for is not None and self.wait_jobs and self.jobs == 2:
            assert self.resumed.wait(30), f"slot {self.wait_for} never took {self.wait_jobs} jobs"
        if isinstance(job, shard.ProbeJob) and self.slot in self.sick:
            return job.failed(self.device, Status.CRASHED, "the device is gone")
        if self.crash_on.get(self.slot) == self.jobs:
            return job.failed(self.device, Status.CRASHED, "the worker died")
        return job.execute(self.device)

    def stop(self):
        pass


@pytest.fixture
def in_process(monkeypatch, cpu_process):
    monkeypatch.setattr(shard.runner, "Worker", InProcessWorker)
    monkeypatch.setattr(InProcessWorker, "crash_on", {})
    monkeypatch.setattr(InProcessWorker, "sick", set())
    monkeypatch.setattr(InProcessWorker, "wait_for", None)
    monkeypatch.setattr(InProcessWorker, "wait_jobs", 0)
    monkeypatch.setattr(InProcessWorker, "started", threading.Event())
    monkeypatch.setattr(InProcessWorker, "resumed", threading.Event())
    target = open_target(OPS, "cpu")
    return target.cases(impls=["eager_add"])


def _spread(cases, slots):
    got = []
    failures = shard.run_groups(shard.check_runs(cases, 10.0), slots, "cpu",
                                lambda index, r: (setattr(r, "gpu", index), got.append(r)))
    return got, failures


def test_the_costliest_group_starts_first():
    small, big = shard.CheckGroupRun([], 1.0), shard.CheckGroupRun([], 1.0)
    small.cases = [kk.Case(OPS, "twice", "eager_add", (8, 8), "float32", 0)]
    big.cases = [kk.Case(OPS, "twice", "eager_add", (32, 32), "float32", 0)]
    queue = shard._Queue([small, big])
    assert queue.take(threading.Event()) is big


def test_merged_results_equal_one_slot_s_and_groups_stay_on_one_slot(in_process):
    one, _ = _spread(in_process, [Slot(0)])
    InProcessWorker.wait_for = 1  # slot 0 waits for slot 1's first job: both take work, however threads are scheduled
    two, failures = _spread(in_process, TWO)
    assert not failures and _cases(two) == _cases(one)
    assert all(r.status is Status.PASSED for r in two)
    assert all(len(slots) == 1 for slots in _groups(two).values())
    assert {r.gpu for r in two} == {0, 1}  # both slots worked


def test_a_crash_costs_its_case_only_and_a_healthy_slot_goes_on(in_process):
    # Slot 1's first job crashes, its second is the probe of a fresh worker, its third is work: slot 0 holds its
    # second job until then, so slot 1 finds work left whatever the load.
    InProcessWorker.crash_on, InProcessWorker.wait_for, InProcessWorker.wait_jobs = {1: 1}, 1, 3
    two, failures = _spread(in_process, TWO)
    assert not failures and len(two) == len(in_process)
    crashed = [r for r in two if r.status is Status.CRASHED]
    assert len(crashed) == 1 and crashed[0].gpu == 1
    assert any(r.gpu == 1 and r.status is Status.PASSED for r in two)  # slot 1 kept working


def test_a_slot_whose_device_fails_gives_its_groups_to_the_others(in_process):
    cases = open_target(OPS, "cpu").cases(impls=["eager_add", "eager_slow"])  # two cases per group
    InProcessWorker.crash_on, InProcessWorker.sick = {1: 1}, {1}
    two, failures = _spread(cases, TWO)
    assert len(failures) == 1 and "slot 1 stopped" in failures[0]
    assert _cases(r for r in two if r.status is not Status.CRASHED) == \
        _cases(r for r in _spread(cases, [Slot(0)])[0] if r.case_id != next(
            c.case_id for c in two if c.status is Status.CRASHED))
    crashed = [r for r in two if r.status is Status.CRASHED]
    assert len(crashed) == 1 and crashed[0].gpu == 1
    assert [r.gpu for r in two if r is not crashed[0]] == [0] * (len(cases) - 1)  # the rest, the other GPU's
    assert len(two) == len(cases)


def test_when_every_slot_fails_the_rest_is_reported_not_dropped(in_process):
    InProcessWorker.crash_on, InProcessWorker.sick = {0: 1}, {0}
    got, failures = _spread(in_process, [Slot(0)])
    assert len(got) == len(in_process) and len(failures) == 1
    assert all(r.status is Status.CRASHED for r in got)
    assert sum("not run: slot 0 stopped" in r.message for r in got) == len(in_process) - 1


def test_a_probe_reports_a_working_device():
    job = shard.ProbeJob()
    assert job.execute("cpu").status is Status.PASSED
    assert job.failed("cpu", Status.TIMEOUT, "slow").status is Status.TIMEOUT


# ---- real worker processes ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_check_over_two_slots_equals_a_one_worker_check():
    one = kk.check(OPS, device="cpu", impls=["eager_add"])
    phases: list[str] = []
    two = kk.check(OPS, device="cpu", impls=["eager_add"], gpus=TWO, on_phase=phases.append)
    assert two.ok and _cases(two.results) == _cases(one.results)
    assert any(p.startswith(("GPU 0: starting a worker", "GPU 1: starting a worker")) for p in phases), phases
    assert [r.case_id for r in two.results] == [r.case_id for r in one.results]  # the plan's order
    assert {r.gpu for r in two.results} <= {0, 1} and None not in {r.gpu for r in two.results}


@pytest.mark.slow
def test_killing_a_worker_mid_run_loses_at_most_its_in_flight_case():
    killed: list[int] = []

    def kill_one(result):
        if killed:
            return
        for child in multiprocessing.active_children():
            if child.pid and child.is_alive():
                os.kill(child.pid, signal.SIGKILL)
                killed.append(child.pid)
                return

    report = kk.check(OPS, device="cpu", impls=["eager_slow"], gpus=TWO, on_result=kill_one)
    assert killed
    assert len(report.results) == report.planned == 4
    lost = [r for r in report.results if r.status is not Status.PASSED]
    assert len(lost) <= 1 and all(r.status is Status.CRASHED for r in lost)


@pytest.mark.slow
def test_bench_over_two_slots_stores_one_run_with_each_result_s_gpu(tmp_path):
    store = Store.open(tmp_path / "results.sqlite")
    sizes = [(8, 8), (16, 16)]
    two = kk.bench_op(OPS, impls=["eager_add", "eager"], sizes=sizes, device="cpu", mode="hot", budget=0.05,
                      gpus=TWO, store=store, command="kernelkit bench spread_ops.py", **NOT_STRICT)
    expected = sorted((f"twice/{impl}/{m}x{n}/float32", Status.PASSED) for impl in ("eager_add", "eager")
                      for m, n in sizes)
    assert two.ok and _cases(two.results) == expected  # what one worker's sweep gives (tests/test_jobs_bench.py)
    assert all(len(slots) == 1 for slots in _groups(two.results).values())
    stored = store.results(two.run_id)
    assert _cases(stored) == expected and {r.gpu for r in stored} <= {0, 1}
    rows = store._conn.execute("SELECT gpu FROM results WHERE run_id = ?", (two.run_id,)).fetchall()
    assert {g for (g,) in rows} == {r.gpu for r in stored} and None not in {g for (g,) in rows}
    env = store.run(two.run_id).env
    assert set(env["gpus"]) == {"0", "1"} and env["gpus"]["1"]["device_name"].startswith("CPU")
    store.close()


def test_strict_check_refuses_to_spread_instead_of_dropping_strict():
    import kernelkit as kk
    from kernelkit.errors import SpecError

    with pytest.raises(SpecError, match="strict mode judges on one worker"):
        kk.check("square", device="cpu", sizes=[(4,)], strict=True, ray="local")
