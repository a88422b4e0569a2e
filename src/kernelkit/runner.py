"""Run jobs in isolated worker processes: a crash, hang or poisoned CUDA context ends one job, not the run.

Workers are spawned (never forked: a forked CUDA context is unusable) and reused from job to job until one dies,
hangs or loses its CUDA context; then it is replaced and the run goes on. ``check`` and ``run_cases`` run one
CheckJob per case; the benchmark (jobs/bench.py) sends its own jobs to a Worker.
"""

from __future__ import annotations

import faulthandler
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from kernelkit import backends
from kernelkit.errors import SpecError
from kernelkit.jobs import Job, JobResult
from kernelkit.jobs.check import CheckJob
from kernelkit.results import CaseResult, Status
from kernelkit.spec import Case, Size
from kernelkit.target import open_target

DEFAULT_TIMEOUT = 60.0
BUILD_TIMEOUT = 900.0  # loading the op and building its kernels (a cold load_inline build takes a minute)
STARTUP_TIMEOUT = 300.0  # importing torch, triton and numba on a slow, busy machine
LOG_TAIL_CHARS = 4000

OnResult = Callable[[CaseResult], None]
_BUILT = "built"  # the worker's message between a case's build and its run


@dataclass
class RunReport:
    """Every finished case, in order; ``interrupted`` when Ctrl-C stopped the run early."""

    device: str
    results: list[CaseResult] = field(default_factory=list)
    interrupted: bool = False
    planned: int = 0

    @property
    def ok(self) -> bool:
        return not self.interrupted and bool(self.results) and all(r.status.ok for r in self.results)


def plan(target: str, *, impls: Sequence[str] = (), device: str | None = None, sizes: Sequence[Size] = (),
         dtypes: Sequence[torch.dtype] = (), seeds: int = 1) -> tuple[str, list[Case]]:
    """The device and the cases of ``target`` (a built-in op name or a .py file), without running them."""
    opened = open_target(target, device)
    return opened.device, opened.cases(impls, sizes, dtypes, seeds)


def check(
    target: str,
    *,
    impls: Sequence[str] = (),
    device: str | None = None,
    sizes: Sequence[Size] = (),
    dtypes: Sequence[torch.dtype] = (),
    seeds: int = 1,
    timeout: float = DEFAULT_TIMEOUT,
    isolate: bool = True,
    on_result: OnResult | None = None,
) -> RunReport:
    """Check every case of ``target`` (a built-in op name or a .py file) against its reference.

    Each case runs in a worker process with a per-case ``timeout`` in seconds; see README for the tolerance rule.
    """
    dev, cases = plan(target, impls=impls, device=device, sizes=sizes, dtypes=dtypes, seeds=seeds)
    return run_cases(cases, dev, timeout=timeout, isolate=isolate, on_result=on_result)


def run_cases(
    cases: Sequence[Case],
    device: str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    isolate: bool = True,
    on_result: OnResult | None = None,
) -> RunReport:
    """Run ``cases`` one after another; Ctrl-C stops cleanly and returns what finished."""
    if timeout <= 0:
        raise SpecError(f"--timeout must be positive, got {timeout}")
    report = RunReport(device=device, planned=len(cases))
    with tempfile.TemporaryDirectory(prefix="kernelkit-") as tmp:
        worker = Worker(device, Path(tmp) / "worker.log") if isolate else None
        try:
            for case in cases:
                job = CheckJob(case)
                result = worker.run(job, timeout) if worker else job.execute(device)
                report.results.append(result)
                if on_result is not None:
                    on_result(result)
        except KeyboardInterrupt:
            report.interrupted = True
        finally:
            if worker:
                worker.stop()
    return report


class Worker:
    """One spawned worker process at a time, replaced whenever it dies, hangs or loses its CUDA context."""

    def __init__(self, device: str, log_path: Path) -> None:
        self.device = device
        self.log_path = log_path
        self.process: multiprocessing.process.BaseProcess | None = None
        self.conn: multiprocessing.connection.Connection | None = None

    def run(self, job: Job, timeout: float) -> JobResult:
        """``job`` run in the worker; ``timeout`` seconds for the job once it is built (``on_built``)."""
        if self.process is None:
            problem = self._start()
            if problem:
                return job.failed(self.device, Status.CRASHED, f"the worker failed to start: {problem}")
        assert self.conn is not None and self.process is not None
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self.conn.send(job)
        # Two clocks: loading the op and building its kernels, then the job itself (see Job.execute's on_built).
        reply = self._await(job, BUILD_TIMEOUT, "while loading the op and building its kernels")
        if reply == _BUILT:
            reply = self._await(job, timeout, "")
        if not hasattr(reply, "status"):  # not a result: the worker's protocol is broken, the worker is suspect
            self._discard()
            reply = job.failed(self.device, Status.CRASHED, f"the worker sent {reply!r} instead of a result")
        result: JobResult = reply
        if result.status.failed:
            result.log = self._log_since(offset)
        if result.details.get("context_lost"):
            self._discard()
        return result

    def _await(self, job: Job, seconds: float, phase: str) -> object:
        """The worker's next message; a TIMEOUT or CRASHED result when none comes (the worker is discarded)."""
        assert self.conn is not None
        if self.conn.poll(seconds):
            try:
                return self.conn.recv()
            except (EOFError, OSError):
                message = self._death_message()
                self._discard()
                return job.failed(self.device, Status.CRASHED, message)
        self._discard()
        hint = "raise --timeout if the case is only slow" if not phase else "a build that never ends?"
        during = f" {phase}" if phase else ""
        return job.failed(self.device, Status.TIMEOUT, f"no result after {seconds:g} s{during}; the worker was killed "
                          f"({hint})")

    def _start(self) -> str:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child, self.device, str(self.log_path)), daemon=True)
        self.process.start()
        child.close()
        self.conn = parent
        if parent.poll(STARTUP_TIMEOUT):
            try:
                parent.recv()
                return ""
            except (EOFError, OSError):
                pass
        problem = self._death_message() + self._log_since(0)
        self._discard()
        return problem

    def _death_message(self) -> str:
        assert self.process is not None
        self.process.join(timeout=5)
        code = self.process.exitcode
        if code is None:
            return "the worker stopped answering"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"the worker died with {name} (a segfault or abort in native code?); see the log below"
        return f"the worker exited with code {code}; see the log below"

    def _log_since(self, offset: int) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                text = f.read().decode(errors="replace")
        except OSError:
            return ""
        return text[-LOG_TAIL_CHARS:]

    def _discard(self) -> None:
        if self.process is not None and self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=10)
        if self.conn is not None:
            self.conn.close()
        self.process = self.conn = None

    def stop(self) -> None:
        if self.conn is not None and self.process is not None and self.process.is_alive():
            try:
                self.conn.send(None)
                self.process.join(timeout=5)
            except (OSError, BrokenPipeError):
                pass
        self._discard()


def _worker_main(conn: multiprocessing.connection.Connection, device: str, log_path: str) -> None:
    """The worker loop: receive a job, send back its result; None means stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    _redirect_output(log_path)
    faulthandler.enable()  # a segfault prints the Python stack (the user's line) into the log
    backends.prepare_process(device)
    conn.send("ready")
    while True:
        try:
            job: Job | None = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        result = job.execute(device, lambda: conn.send(_BUILT))
        sys.stdout.flush()
        sys.stderr.flush()
        conn.send(result)
        if result.details.get("context_lost"):
            return


def _redirect_output(log_path: str) -> None:
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(line_buffering=True)
