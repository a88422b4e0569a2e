"""Hangs are bounded everywhere a problem's own code runs: a KernelBench forward, a GPU MODE custom_kernel or
generate_input that never returns ends as TIMEOUT at the limit, in check and bench, and the next problem still runs;
a format's own verdict is bounded per call; strict mode's inputs, made in the judging process, and a file's
top-level code are stopped there (deadline.py); Ctrl-C prints the problems that finished and exits 130.

These spawn real workers (the limit is theirs to keep), so each takes seconds: a hang costs the limit, 6 s."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import kernelkit
from kernelkit import formats
from kernelkit.deadline import BUILD_TIMEOUT_ENV, Expired, deadline
from kernelkit.errors import LoadError
from kernelkit.formats import gpumode
from kernelkit.formats.jobs import verdict_jobs
from kernelkit.loading import load
from kernelkit.results import CaseResult, Status
from kernelkit.runs import bench as bench_run
from kernelkit.runs import check as check_run
from kernelkit.runs.strict import strict_case
from kernelkit.runs.verdicts import run_verdicts
from kernelkit.spec import Case
from taskkit import write_level, write_task

LIMIT = 6.0  # a case that does not hang takes ~1 s in a fresh worker (its first calls); several times that under load
OK = """
class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(4, 6)]

def get_init_inputs():
    return []
"""
HANGS = """
import os
import time

class Model(nn.Module):
    def forward(self, x):
        if os.environ.get("HANG_MARKER"):
            open(os.environ["HANG_MARKER"], "w").close()
        while True:
            time.sleep(0.05)

def get_inputs():
    return [torch.randn(4, 6)]

def get_init_inputs():
    return []
"""
# generate_input hangs at size 5, custom_kernel at size 6; size 4 runs
TASK_REFERENCE = """
import time

def ref_kernel(data):
    x, y = data
    return x + y

def generate_input(size, seed):
    while size == 5:
        time.sleep(0.05)
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(size, generator=gen), torch.randn(size, generator=gen)
"""
TASK_SUBMISSION = """
import time

def custom_kernel(data):
    x, y = data
    while x.numel() == 6:
        time.sleep(0.05)
    return x + y
"""
SPECS = [{"size": 4, "seed": 1}, {"size": 5, "seed": 2}, {"size": 6, "seed": 3}]


def test_a_deadline_stops_python_code_that_swallows_exceptions():
    began = time.monotonic()
    with pytest.raises(Expired), deadline(0.2):
        while True:
            try:
                time.sleep(1)
            except Exception:  # noqa: BLE001 - what a careless input factory does
                pass
    assert time.monotonic() - began < 2
    with deadline(0.5):  # an inner limit that ends in time leaves the outer one running
        with deadline(5):
            pass
        with pytest.raises(Expired) as outer:
            time.sleep(3)
    assert outer.value.seconds == 0.5
    done: list[bool] = []

    def elsewhere() -> None:  # another thread: no limit (signals reach the main thread only), and no error either
        with deadline(0.01):
            time.sleep(0.1)
        done.append(True)

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    assert done == [True]


def test_a_file_whose_top_level_hangs_fails_to_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    task = write_task(tmp_path / "slow_import_py", TASK_REFERENCE, "import time\ntime.sleep(60)\n", SPECS[:1])
    monkeypatch.setenv(BUILD_TIMEOUT_ENV, "1")
    began = time.monotonic()
    loaded = gpumode.load_task(task)
    assert loaded.submission is None and not loaded.submission_error  # imported where it runs, not here
    assert loaded.load_submission() is None and time.monotonic() - began < 10
    assert "submission.py ran past 1 s (the build limit; set KERNELKIT_BUILD_TIMEOUT" in loaded.submission_error
    with pytest.raises(LoadError, match="reference.py ran past 1 s"):
        (task / "reference.py").write_text("import time\nwhile True:\n    time.sleep(0.05)\n")
        gpumode.load_task(task)


def test_strict_mode_stops_a_hanging_generate_input_in_the_judging_process(tmp_path: Path, cpu_process: None):
    task = write_task(tmp_path / "hang_py", TASK_REFERENCE, TASK_SUBMISSION, SPECS)
    source = formats.source_file(task)
    op = load(source)["hang_py"]
    case = Case(source, "hang_py", "submission", (5, 2), "float32", 0)
    began = time.monotonic()
    result = strict_case(case, op, "cpu", lambda job: job.execute("cpu"), timeout=1.0)
    assert result.status is Status.TIMEOUT and "made in this process for strict mode" in result.message
    assert time.monotonic() - began < 10


def test_a_hanging_forward_is_a_timeout_and_the_level_goes_on(tmp_path: Path, cpu_process: None):
    level = write_level(tmp_path / "level", {"1_hangs": HANGS, "2_relu": OK})
    report = check_run.check(str(level), device="cpu", timeout=LIMIT)
    assert [(r.op, r.status) for r in report.results] == [("1_hangs", Status.TIMEOUT), ("2_relu", Status.PASSED)]
    assert f"no result after {LIMIT:g} s (the case limit, --timeout {LIMIT:g}" in report.results[0].message


def test_a_hanging_custom_kernel_or_generate_input_is_a_timeout_in_check(tmp_path: Path, cpu_process: None):
    task = write_task(tmp_path / "hang_py", TASK_REFERENCE, TASK_SUBMISSION, SPECS)
    report = check_run.check(formats.source_file(task), device="cpu", timeout=LIMIT, impls=["submission"])
    assert [(size_of(r), r.status) for r in report.results] == [
        (4, Status.PASSED), (5, Status.TIMEOUT), (6, Status.TIMEOUT)]


def test_a_hanging_custom_kernel_is_a_timeout_in_bench(tmp_path: Path, cpu_process: None):
    task = write_task(tmp_path / "hang_py", TASK_REFERENCE, TASK_SUBMISSION, [SPECS[0], SPECS[2]])
    report = bench_run.bench_op(formats.source_file(task), impls=["submission"], device="cpu", timeout=LIMIT,
                                budget=0.02, baselines=False, calibrate=False, strict=False)
    assert [(size_of(r), r.status) for r in report.results] == [(4, Status.PASSED), (6, Status.TIMEOUT)]
    assert report.results[0].measurement is not None and report.results[0].measurement.samples


def test_a_formats_own_verdict_is_bounded_per_call(tmp_path: Path, cpu_process: None):
    task = write_task(tmp_path / "hang_py", TASK_REFERENCE, TASK_SUBMISSION, SPECS)
    planned = verdict_jobs(task)
    passed = CaseResult("hang_py", "submission", "eager", (4, 1), "float32", 0, "cpu", Status.PASSED)
    began = time.monotonic()
    (row,) = run_verdicts(planned, [passed], "cpu", timeout=LIMIT)  # kernelkit's check passed: the verdict runs
    assert row.outcome.status is Status.TIMEOUT and f"no result after {LIMIT:g} s" in row.outcome.message
    assert time.monotonic() - began < 60
    timed_out = CaseResult("hang_py", "submission", "eager", (5, 2), "float32", 0, "cpu", Status.TIMEOUT)
    (row,) = run_verdicts(planned, [timed_out], "cpu", timeout=LIMIT)
    assert row.outcome.status is Status.TIMEOUT and "not run" in row.outcome.message  # no second hang


def test_ctrl_c_prints_the_problems_that_finished(tmp_path: Path, cpu_process: None):
    level = write_level(tmp_path / "level", {"1_relu": OK, "2_hangs": HANGS})
    marker = tmp_path / "hanging"
    env = {**os.environ, "HANG_MARKER": str(marker),
           "PYTHONPATH": os.pathsep.join([str(Path(kernelkit.__file__).parents[1]), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "kernelkit", "check", str(level), "--device", "cpu"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        waited = time.monotonic()
        while not marker.exists() and proc.poll() is None and time.monotonic() - waited < 120:
            time.sleep(0.1)  # problem 2's forward started: problem 1 finished
        assert marker.exists(), proc.communicate(timeout=30)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out + err
    assert "1_relu" in out and "PASSED" in out and "1 of 2 cases on cpu: 1 passed (interrupted" in out
    assert "2_hangs" not in out and "Traceback" not in out + err


def size_of(result: CaseResult) -> int:
    return result.size[0]
