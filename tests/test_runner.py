"""The runner: statuses for every way a case can go wrong, in one invocation, and a clean Ctrl-C."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

import kernelkit as kk
from kernelkit import pool, runner
from kernelkit.errors import SpecError
from kernelkit.results import Status
from kernelkit.runs import check as runs
from kernelkit.target import resolve_device

PLANTED = str(Path(__file__).parent / "planted" / "planted_ops.py")

EXPECTED = {
    "eager_correct": Status.PASSED,
    "eager_zeros": Status.INCORRECT_NUMERICS,
    "eager_echo": Status.INCORRECT_NUMERICS,
    "eager_mutates_input": Status.INPUT_MUTATED,
    "eager_wrong_shape": Status.INCORRECT_SHAPE,
    "eager_wrong_dtype": Status.INCORRECT_DTYPE,
    "eager_off_by_one_row": Status.INCORRECT_NUMERICS,
    "eager_stale_output": Status.CHEATED,  # strict mode, the default: call 0's answer for call 1's inputs
    "eager_raises": Status.RUNTIME_ERROR,
    "eager_segfault": Status.CRASHED,
    "eager_hangs": Status.TIMEOUT,
    "eager_out_of_memory": Status.RUNTIME_ERROR,
    "triton_syntax_error": Status.COMPILE_ERROR,
    "cuda_syntax_error": Status.COMPILE_ERROR,
    "cuda_illegal_address": Status.SKIPPED,  # compiles; needs a GPU to crash (scripts/device-check)
    "eager_weakly_tested": Status.WEAK,
}


@pytest.fixture(scope="module")
def planted_run():
    """One CLI invocation over every planted impl, strict by default: the run must survive all of them."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "kernelkit", "check", PLANTED, "--device", "cpu", "--timeout", "6", "--json"],
        capture_output=True, text=True, timeout=240, env=env,
    )
    return proc


@pytest.mark.slow
def test_every_planted_impl_earns_its_status_in_one_run(planted_run):
    assert planted_run.returncode == 1, planted_run.stderr
    data = json.loads(planted_run.stdout)
    got = {r["impl"]: r["status"] for r in data["results"]}
    assert got == {k: v.value for k, v in EXPECTED.items()}
    assert data["planned"] == len(EXPECTED) and not data["interrupted"]
    assert data["strict"] and data["path"].startswith("strict mode (the default)")


@pytest.mark.slow
def test_planted_failures_explain_themselves(planted_run):
    by_impl = {r["impl"]: r for r in json.loads(planted_run.stdout)["results"]}
    assert "got 0, expected" in by_impl["eager_zeros"]["message"]
    assert "[63, 0]" in by_impl["eager_off_by_one_row"]["message"]  # the first wrong element is in the last row
    assert "call 0's answer for different inputs" in by_impl["eager_stale_output"]["message"]
    assert "argument 0" in by_impl["eager_mutates_input"]["message"]
    assert "SIGSEGV" in by_impl["eager_segfault"]["message"]
    assert "planted_ops.py" in by_impl["eager_segfault"]["log"]  # faulthandler names the user's line
    assert "after 6 s" in by_impl["eager_hangs"]["message"]
    assert "allocate" in by_impl["eager_out_of_memory"]["message"]
    assert "planted_triton_syntax.py:9" in by_impl["triton_syntax_error"]["message"]
    assert "planted_ops.py" in by_impl["cuda_syntax_error"]["message"]
    assert "no GPU" in by_impl["cuda_illegal_address"]["message"]
    assert "would also pass" in by_impl["eager_weakly_tested"]["message"]
    assert "planted_ops.py:70" in by_impl["eager_raises"]["message"]


def test_the_fast_path_tells_a_stale_output_by_a_second_input():
    report = kk.check(PLANTED, impls=["eager_stale_output"], device="cpu", isolate=False, strict=False)
    (result,) = report.results
    assert result.status is Status.INCORRECT_NUMERICS and "did not follow a second input" in result.message
    assert not report.strict and report.path.startswith("fast path (--no-strict)")


def test_one_worker_serves_a_whole_strict_check_and_reports_its_loop_s_seconds():
    # Every case of a clean run in one worker, each told where the round trip went (scripts/gpu-strict's
    # breakdown); and the cases run set by set (every impl of one input set in a row), results in plan order.
    started = []
    report = kk.check("square", impls=["eager", "triton_flat"], device="cpu", sizes=[(7, 5), (3, 4)],
                      dtypes=["float32"], on_phase=lambda text: started.append(text) if "starting" in text else None)
    assert report.ok and len(started) == 1, started
    assert [(r.impl, r.size) for r in report.results] == [("eager", (7, 5)), ("eager", (3, 4)),
                                                          ("triton_flat", (7, 5)), ("triton_flat", (3, 4))]
    for r in report.results:
        spent = r.details["strict_s"]
        assert {"worker_loop_before", "worker_loop_encode", "worker_loop_send", "worker_loop_after",
                "worker_receive"} <= set(spent), spent
        assert spent["worker"] >= spent["worker_job"] >= 0 and not r.warnings, (spent, r.warnings)


def test_in_process_check_of_square_eager():
    report = kk.check("square", impls=["eager"], device="cpu", isolate=False, sizes=[(7, 5)])
    assert report.ok and [r.status for r in report.results] == [Status.PASSED] * 3
    r = report.results[0]
    assert r.bytes == 2 * 35 * 4 and r.flops == 35 and r.max_abs_err is not None


def test_device_and_timeout_are_validated():
    with pytest.raises(SpecError, match="unknown device 'tpu'"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(SpecError, match="use --device cpu"):
            resolve_device("cuda")
    with pytest.raises(SpecError, match="--timeout must be positive"):
        runs.run_cases([], "cpu", timeout=0)


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_and_prints_what_finished(tmp_path):
    ops_file = tmp_path / "slow_ops.py"
    ops_file.write_text(
        "import os, time, torch\nimport kernelkit as kk\n\n"
        "@kk.op(sizes=[(4, 4)], dtypes=[torch.float32, torch.float16])\n"
        "def ident(x):\n    return x + 0\n\n"
        "@ident.impl('eager_fast')\ndef fast(x):\n    return x + 0\n\n"
        "@ident.impl('eager_slow')\ndef slow(x):\n"
        "    open(os.environ['KK_TEST_MARKER'], 'w').close()\n    time.sleep(60)\n    return x + 0\n"
    )
    marker = tmp_path / "slow_case_started"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kernelkit", "check", str(ops_file), "--device", "cpu"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "KK_TEST_MARKER": str(marker)},
    )
    deadline = time.monotonic() + 120
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert marker.exists(), "the slow case never started"
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "eager_fast" in stdout and "interrupted" in stdout
    assert "Traceback" not in stderr


@pytest.mark.slow
def test_a_worker_ends_when_its_runner_is_killed_outright(tmp_path):
    # SIGKILL leaves the runner no moment to stop its worker: the worker, in the middle of a case that would sleep a
    # minute, sees its parent gone and ends itself with what it started.
    ops_file = tmp_path / "sleepy_ops.py"
    ops_file.write_text(
        "import os, subprocess, time, torch\nimport kernelkit as kk\n\n"
        "@kk.op(sizes=[(4, 4)], dtypes=[torch.float32])\n"
        "def ident(x):\n    return x + 0\n\n"
        "@ident.impl('eager_sleepy')\ndef sleepy(x):\n"
        "    child = subprocess.Popen(['sleep', '120'])\n"
        "    with open(os.environ['KK_TEST_MARKER'], 'w') as f:\n"
        "        f.write(f'{os.getpid()} {child.pid}')\n"
        "    time.sleep(60)\n    return x + 0\n"
    )
    marker = tmp_path / "sleepy_case_started"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kernelkit", "check", str(ops_file), "--device", "cpu", "--no-strict"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "KK_TEST_MARKER": str(marker)},
    )
    deadline = time.monotonic() + 120
    while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert marker.exists(), "the sleepy case never started"
    worker, child = map(int, marker.read_text().split())
    proc.kill()
    proc.communicate(timeout=30)
    gone = time.monotonic() + 15
    alive = [pid for pid in (worker, child) if _running(pid)]
    while alive and time.monotonic() < gone:
        time.sleep(0.2)
        alive = [pid for pid in alive if _running(pid)]
    for pid in alive:  # the test leaves nothing behind, whatever it found
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    assert not alive, f"still running after their runner was killed: {alive} (worker {worker}, its child {child})"


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_runs_inside_reuse_workers_share_one_worker_and_nothing_is_left_after():
    from kernelkit.runs.bench import bench_op

    started = []

    def on_phase(text):
        if "starting a worker" in text:
            started.append(text)

    with runner.reuse_workers():
        first = runs.check(PLANTED, impls=["eager_correct"], device="cpu", on_phase=on_phase)
        second = bench_op(PLANTED, impls=["eager_correct"], device="cpu", budget=0.05, baselines=False,
                          on_phase=on_phase)
        parked = [held.process.pid for held in pool._parked]
    assert first.ok and second.ok and len(started) == 1, started
    assert pool._parked is None and parked
    for pid in parked:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_sticky_cuda_error_poisons_its_worker_whatever_the_job():
    from kernelkit.jobs import poisoned
    from kernelkit.jobs.bench import BenchOutcome
    from kernelkit.jobs.strict_worker import CallRecord, StrictReply
    from kernelkit.measure.measurement import BenchResult
    from kernelkit.results import CaseResult

    def case(message: str) -> CaseResult:
        return CaseResult("op", "impl", "eager", (4,), "float32", 0, "cuda", Status.RUNTIME_ERROR, message=message)

    sticky = "RuntimeError: CUDA error: an illegal memory access was encountered"
    for text in (sticky, "CUDA error: an illegal instruction was encountered", "CUDA error: misaligned address",
                 "CUDA error: unspecified launch failure"):
        assert poisoned(case(text))
    assert not poisoned(case("RuntimeError: shapes do not match")) and not poisoned(case("CUDA out of memory"))
    lost = case("")
    lost.details["context_lost"] = True
    assert poisoned(lost)
    contender = BenchResult("op", "impl", "eager", (4,), "float32", "cuda", "cold", Status.RUNTIME_ERROR,
                            message=sticky)
    assert poisoned(BenchOutcome([contender]))
    assert poisoned(StrictReply(Status.PASSED, calls=[CallRecord(error=sticky)]))
    assert not poisoned(StrictReply(Status.PASSED, calls=[CallRecord()]))
    # Another CUDA error poisons only when it persists: the worker's probe says, and the runner reads its mark.
    other = case("torch.AcceleratorError: CUDA error: invalid argument")
    assert not poisoned(other, probe=lambda: False) and not other.details
    assert poisoned(other, probe=lambda: True) and other.details["context_lost"] and poisoned(other)


def _workers(folder: Path, impl: str) -> set[str]:
    return {p.name.rsplit("-", 1)[1] for p in folder.glob(f"{impl}-*")}


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["check", "strict check", "bench", "strict bench"])
def test_after_a_sticky_cuda_error_the_next_case_runs_in_a_fresh_worker(tmp_path, monkeypatch, mode):
    from kernelkit.runs.bench import bench_op

    monkeypatch.setenv("KK_PIDS_DIR", str(tmp_path))
    target = str(Path(__file__).parent / "planted" / "planted_sticky.py")
    impls = ["eager_illegal_access", "eager_after"]
    strict = mode.startswith("strict")
    if mode.endswith("check"):
        results = runs.check(target, impls=impls, device="cpu", strict=strict).results
    else:
        results = bench_op(target, impls=impls, device="cpu", budget=0.05, baselines=False, strict=strict).results
    got = {r.impl: r for r in results}
    assert got["eager_illegal_access"].status is Status.RUNTIME_ERROR
    assert got["eager_after"].status is Status.PASSED, got["eager_after"].message
    if mode.endswith("check"):  # a bench's gate keeps the failed check's status and message
        assert "the worker was replaced" in " ".join(got["eager_illegal_access"].warnings)
    poisoned_in, after_in = _workers(tmp_path, "eager_illegal_access"), _workers(tmp_path, "eager_after")
    assert poisoned_in and after_in and not poisoned_in & after_in


def test_a_script_without_a_main_guard_runs_once_and_its_check_passes(tmp_path):
    # multiprocessing's spawn would import the script again in each worker, where its kk.check fails.
    script = tmp_path / "no_guard.py"
    script.write_text("import kernelkit as kk\nreport = kk.check('square', impls=['eager'], device='cpu', "
                      "strict=False)\nprint('ran', len(report.results), report.ok)\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("ran ") == 1 and "True" in done.stdout, done.stdout
    assert "bootstrapping" not in done.stderr, done.stderr[-2000:]


def test_a_gpu_worker_s_warm_up_never_raises_and_makes_the_dynamo_import(monkeypatch):
    # backends.warm_up runs in a GPU worker between "ready" and its first job; where it cannot reach a GPU (here)
    # it is still quiet, having made the import the first FLOP count on the meta device would wait for. A fresh
    # process, so that the import is the warm-up's own.
    from kernelkit import backends

    monkeypatch.setattr(torch, "ones", lambda *a, **k: pytest.fail("a CPU worker warms nothing up"))
    backends.warm_up("cpu")
    probe = ("import sys; from kernelkit import backends; before = 'torch._dynamo' in sys.modules; "
             "backends.warm_up('cuda'); print(before, 'torch._dynamo' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"], done.stdout
