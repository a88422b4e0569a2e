"""Hostile op files against the worker: state left behind, forks, output floods, crashes while timed.

Each case must start from a clean process, every process an impl starts must die with its worker, a dead worker
is told by its exit, and in a benchmark one contender's crash is that contender's status alone.
"""

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

import kernelkit as kk
from kernelkit.results import Status

OPS = Path(__file__).parent / "ops"
pytestmark = pytest.mark.slow


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie waiting for its parent is dead for our purpose
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_case_never_sees_what_the_one_before_left_in_its_worker(fresh_cache):
    # One impl changes the cwd, the environment, PATH, torch's threads and default dtype; the probe after it
    # returns a wrong answer if it sees any of that (scripts/hostile-probes tries each change alone, and a leak).
    impls = ["eager_everything", "eager_probe_after_everything"]
    report = kk.check(str(OPS / "polluters.py"), device="cpu", impls=impls, timeout=30)
    got = {r.impl: r for r in report.results}
    assert all(r.status is Status.PASSED for r in report.results), {k: r.message for k, r in got.items()}
    changed = " ".join(got["eager_everything"].warnings)
    assert "left its worker changed" in changed and "worker was replaced" in changed
    for what in ("cwd=", "KK_POLLUTED=yes", "PATH=/nonexistent", "torch threads=7", "default dtype=torch.float64"):
        assert what in changed
    assert not got["eager_probe_after_everything"].warnings


def test_processes_an_impl_starts_die_with_its_worker(fresh_cache, tmp_path, monkeypatch):
    monkeypatch.setenv("KK_PIDS_DIR", str(tmp_path))
    impls = ["eager_fork_then_segfault", "eager_leaves_a_child", "eager_hangs_with_a_child"]
    report = kk.check(str(OPS / "forkers.py"), device="cpu", impls=impls, timeout=8)
    got = {r.impl: r for r in report.results}
    # A fork holding the pipe does not turn a segfault into a TIMEOUT: the worker's exit is seen at once.
    assert got["eager_fork_then_segfault"].status is Status.CRASHED
    assert "SIGSEGV" in got["eager_fork_then_segfault"].message
    assert got["eager_leaves_a_child"].status is Status.PASSED
    assert "process(es) it started still running" in " ".join(got["eager_leaves_a_child"].warnings)
    hung = got["eager_hangs_with_a_child"]
    assert hung.status is Status.TIMEOUT and "--timeout 8" in hung.message
    pids = [int(p.stem) for p in tmp_path.glob("*.pid")]
    assert len(pids) >= 3  # a fork, the child left (once per call), the hung one's child
    time.sleep(0.5)
    assert not [p for p in pids if _alive(p)], "a process started by an impl outlived its worker"


def _tagged(tag: str) -> list[int]:
    """The live processes whose command line holds ``tag``."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if tag in (p.info["cmdline"] or []) and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p.pid)
        except psutil.Error:
            continue
    return found


@pytest.mark.parametrize("strict", [False, True])
def test_a_process_that_leaves_its_session_is_adopted_and_killed_with_its_worker(fresh_cache, monkeypatch, strict):
    # `setsid -f sleep`: outside the worker's process group, and orphaned at once. The worker, a child subreaper,
    # adopts it: the case's snapshot sees it, and the worker kills it with itself.
    tag = f"0.{uuid.uuid4().int % 10**12:012d}"  # a second duration for sleep: adds under a millisecond
    monkeypatch.setenv("KK_ESCAPE_TAG", tag)
    impls = ["eager_escapes_its_session", "eager_correct"]
    try:
        report = kk.check(str(OPS / "escapers.py"), device="cpu", impls=impls, timeout=30, strict=strict)
        got = {r.impl: r for r in report.results}
        assert all(r.status is Status.PASSED for r in report.results), {k: r.message for k, r in got.items()}
        assert "process(es) it started still running" in " ".join(got["eager_escapes_its_session"].warnings)
        assert not got["eager_correct"].warnings
        deadline = time.monotonic() + 5
        while _tagged(tag) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _tagged(tag), "a process that left its worker's session outlived the worker"
    finally:
        for pid in _tagged(tag):
            os.kill(pid, 9)


def test_a_flood_of_output_is_read_by_its_tail_and_json_stays_pure(fresh_cache):
    env = {**os.environ, "KK_FLOOD_MB": "64", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, "-m", "kernelkit", "check", str(OPS / "flooders.py"), "--device", "cpu",
                           "--json"], capture_output=True, text=True, timeout=240, env=env)
    data = json.loads(proc.stdout)  # the op file's module-level print went to stderr, not before the document
    got = {r["impl"]: r for r in data["results"]}
    assert got["eager_prints"]["status"] == "PASSED", (got["eager_prints"]["message"], got["eager_prints"]["log"])
    flood = got["eager_floods"]
    assert flood["status"] == "RUNTIME_ERROR" and "failed after flooding" in flood["message"]
    assert 0 < len(flood["log"]) <= 4000  # the tail, not 64 MB
    assert "hello from the op file's import" in proc.stderr


def test_log_tail_reads_a_bounded_amount(tmp_path):
    import tracemalloc

    from kernelkit import runner

    log = tmp_path / "worker.log"
    with open(log, "wb") as f:
        f.write(b"x" * (64 << 20) + b"\nthe end\n")
    worker = runner.Worker("cpu", log)
    tracemalloc.start()
    tail = worker._log_since(0)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert tail.endswith("the end\n") and len(tail) <= runner.LOG_TAIL_CHARS
    assert peak < 1 << 20


def test_in_bench_a_crash_or_a_hang_while_timed_is_that_contenders_alone(fresh_cache, monkeypatch):
    monkeypatch.setenv("KK_BENCH_HOSTILE", "both")  # one contender aborts, another hangs, once timed
    monkeypatch.setattr("kernelkit.jobs.bench.JOB_SLACK", 2.0)
    monkeypatch.setattr("kernelkit.jobs.bench.PER_CONTENDER_SLACK", 1.0)
    report = kk.bench_op(str(OPS / "bench_crashers.py"), device="cpu", budget=0.05, baselines=False)
    got = {r.impl: r for r in report.results}
    crashed, hung, good = (got[f"eager_{n}"] for n in ("crashes_when_timed", "hangs_when_timed", "good"))
    assert crashed.status is Status.CRASHED and "SIGABRT" in crashed.message and crashed.details.get("log")
    assert hung.status is Status.TIMEOUT, hung.message
    assert "--budget" in hung.message and "not --timeout" in hung.message  # the limit that fired, and its flag
    assert good.status is Status.PASSED and good.measurement is not None
    assert "timed alone in a fresh worker" in " ".join(good.warnings)
