"""The runner: statuses for every way a case can go wrong, in one invocation, and a clean Ctrl-C."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import kernelkit as kk
from kernelkit import runner
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
    "eager_stale_output": Status.INCORRECT_NUMERICS,
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
    """One CLI invocation over every planted impl: the run must survive all of them."""
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


@pytest.mark.slow
def test_planted_failures_explain_themselves(planted_run):
    by_impl = {r["impl"]: r for r in json.loads(planted_run.stdout)["results"]}
    assert "got 0, expected" in by_impl["eager_zeros"]["message"]
    assert "[63, 0]" in by_impl["eager_off_by_one_row"]["message"]  # the first wrong element is in the last row
    assert "did not follow a second input" in by_impl["eager_stale_output"]["message"]
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
        parked = [pid for _, _, process, _ in runner._parked for pid in [process.pid]]
    assert first.ok and second.ok and len(started) == 1, started
    assert runner._parked is None and parked
    for pid in parked:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
