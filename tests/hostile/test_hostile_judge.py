"""Submissions that aim at the judge itself: rewriting its comparisons in place, forging the command's exit code,
hiding their time behind a clock that puts itself back, and the signals a CI runner sends.

Each runs the real command (``python -m kernelkit``: the supervised process and its child), as a CI job would.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).parent
OPS = HERE / "ops"
SUBMISSIONS = HERE / "formats"
FIXTURES = HERE.parent / "fixtures" / "formats"
RELU = FIXTURES / "kernelbench" / "relu.py"
VECTORADD = FIXTURES / "gpumode" / "vectoradd_py"
pytestmark = pytest.mark.slow


def _kernelkit(*args: str, timeout: float = 240, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernelkit", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def _results(source: Path | str) -> dict[str, list[dict]]:
    """Rows by impl, from bench's --json file or check's --json stdout."""
    text = source.read_text() if isinstance(source, Path) else source
    got: dict[str, list[dict]] = {}
    for row in json.loads(text)["results"]:
        got.setdefault(row["impl"], []).append(row)
    return got


@pytest.mark.parametrize(("target", "solution", "impl"), [
    (RELU, SUBMISSIONS / "codeswap_solution.py", "solution"),
    (VECTORADD, SUBMISSIONS / "codeswap_submission.py", "submission"),
])
def test_a_submission_that_rewrites_the_judges_code_at_import_does_not_pass(fresh_cache, tmp_path, target,
                                                                            solution, impl):
    proc = _kernelkit("check", str(target), "--solution", str(solution), "--device", "cpu", "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = _results(proc.stdout)
    assert rows[impl] and all(r["status"] != "PASSED" for r in rows[impl]), rows[impl]
    assert all(r["status"] == "PASSED" for r in rows["reference"])  # the reference's verdict is untouched
    assert "Traceback" not in proc.stderr


def test_an_op_file_that_rewrites_the_judges_code_is_cheated(fresh_cache, tmp_path):
    proc = _kernelkit("check", str(OPS / "codeswap.py"), "--device", "cpu", "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (row,) = _results(proc.stdout)["eager_zeros"]
    assert row["status"] == "CHEATED" and "kernelkit.verify.compare" in row["message"]


def test_a_stored_strict_bench_does_not_store_a_codeswapped_solution_as_passed(fresh_cache, tmp_path):
    out = tmp_path / "bench.json"
    proc = _kernelkit("bench", str(RELU), "--solution", str(SUBMISSIONS / "codeswap_solution.py"), "--device", "cpu",
                      "--store", str(tmp_path / "results.sqlite"), "--no-compile", "--json", str(out))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = _results(out)
    assert all(r["status"] != "PASSED" for r in rows["solution"]), rows["solution"]


@pytest.mark.parametrize(("args", "said"), [
    (["check", str(RELU), "--solution", str(SUBMISSIONS / "exits_solution.py")], "exited with code 0"),
    (["check", str(VECTORADD), "--solution", str(SUBMISSIONS / "exits_solution.py")], "exited with code 0"),
    (["check", str(OPS / "exits_at_import.py")], "ended before kernelkit finished it"),
    (["check", str(OPS / "exits_at_import.py"), "--json"], "ended before kernelkit finished it"),
    (["bench", str(OPS / "exits_at_import.py"), "--no-compile"], "ended before kernelkit finished it"),
    (["check", str(OPS / "sys_exit_op.py")], "called exit(5)"),
])
def test_code_that_exits_cannot_forge_the_commands_exit(fresh_cache, tmp_path, args, said):
    proc = _kernelkit(*args, "--device", "cpu", env={"KERNELKIT_STORE": str(tmp_path / "results.sqlite")})
    assert proc.returncode not in (0, 5), (proc.returncode, proc.stdout, proc.stderr)
    assert said in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_impl_that_exits_during_its_call_fails_alone(fresh_cache, tmp_path):
    proc = _kernelkit("check", str(OPS / "exits_in_call.py"), "--device", "cpu", "--json")
    assert proc.returncode == 1
    rows = {impl: r[0] for impl, r in _results(proc.stdout).items()}
    exited = rows["eager_os_exit"]
    assert exited["status"] == "CRASHED" and "ended the process itself" in exited["message"]
    assert rows["eager_sys_exit"]["status"] == "RUNTIME_ERROR" and "exit(3)" in rows["eager_sys_exit"]["message"]
    assert rows["eager_ok"]["status"] == "PASSED"


def test_a_clock_patch_that_restores_itself_hides_no_time(fresh_cache, tmp_path):
    # Before the clocks were bound, eager_patches_time came out at a negative median (its hidden time subtracted).
    out = tmp_path / "bench.json"
    proc = _kernelkit("bench", str(OPS / "clock_patchers.py"), "--device", "cpu", "--no-store", "--no-compile",
                      "--json", str(out))
    rows = {impl: r[0] for impl, r in _results(out).items()}

    def median(row: dict) -> float:
        return row["measurement"]["stats"]["median"]

    honest = median(rows["eager_honest"])
    assert honest > 0, proc.stdout + proc.stderr
    for cheat in ("eager_patches_time", "eager_patches_kernelkit"):  # caught, or timed as what it did
        assert rows[cheat]["status"] == "CHEATED" or median(rows[cheat]) > 0.3 * honest, rows[cheat]


def test_a_stored_bench_calls_a_clock_patch_cheated(fresh_cache, tmp_path):
    out = tmp_path / "bench.json"
    proc = _kernelkit("bench", str(OPS / "clock_patchers.py"), "--device", "cpu", "--store",
                      str(tmp_path / "results.sqlite"), "--no-compile", "--json", str(out))
    rows = {impl: r[0] for impl, r in _results(out).items()}
    assert rows["eager_patches_time"]["status"] == "CHEATED", proc.stdout + proc.stderr
    assert rows["eager_honest"]["status"] == "PASSED"


def test_sigterm_is_a_ctrl_c_that_exits_143(fresh_cache, tmp_path):
    marker = tmp_path / "slow_case_started"
    proc = subprocess.Popen([sys.executable, "-m", "kernelkit", "check", str(OPS / "slow_second.py"), "--device",
                             "cpu"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "KK_TEST_MARKER": str(marker)}, preexec_fn=_sigint_default)
    deadline = time.monotonic() + 120
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert marker.exists(), "the slow case never started"
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr
    assert "eager_fast" in stdout and "interrupted" in stdout + stderr
    assert "Traceback" not in stderr


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_a_solution_that_hangs_at_import_costs_only_its_own_verdict(fresh_cache):
    proc = _kernelkit("check", str(RELU), "--solution", str(SUBMISSIONS / "hangs_at_import_solution.py"), "--device",
                      "cpu", "--json", env={"KERNELKIT_BUILD_TIMEOUT": "3"})
    rows = _results(proc.stdout)
    assert [r["status"] for r in rows["reference"]] == ["PASSED"], rows["reference"]
    assert all(r["status"] in ("TIMEOUT", "COMPILE_ERROR") for r in rows["solution"]), rows["solution"]
    assert proc.returncode == 1


@pytest.mark.parametrize(("stamps", "said"), [
    ((10.001, 10.900), ""),  # honest: got the job after it was sent, sent the result as it was being read
    ((10.001, 11.010), ""),  # a large result: the worker's send ends while the judge reads
    ((10.001, 10.300), "fell 0.600 s behind"),  # a clock patched to hide 0.6 s of a 1 s job
    ((9.000, 10.900), "disagrees"),  # it got the job before it was sent
    ((10.001, 11.500), "disagrees"),  # it sent the result after the judge had read it
])
def test_the_judge_holds_the_workers_clock_against_its_own(stamps, said):
    from kernelkit.measure.bound import clock_behind

    got = clock_behind(10.0, (10.9, 11.02), stamps)
    assert (said in got) if said else got == "", got
