"""Isolated worker processes: a crash, hang or poisoned CUDA context ends one job, not the run.

Workers are spawned (never forked: a forked CUDA context is unusable), each in a session of its own. A worker is
reused for the next job only while the last one left it clean: after every job the worker compares its process
state with the one before (hygiene.py: cwd, environment, threads, torch's switches, memory, processes it started,
the CUDA context) and is replaced when anything changed, when it dies, hangs or its CUDA context is poisoned
(jobs.poisoned: one rule for every job); the run goes on. A replaced worker is killed with its whole process group
and what it adopted (it is a child subreaper: hygiene.py). A dead worker is told by its exit (its process
sentinel), not by its pipe, which a process it started may still hold. What a worker sends back is data only
(kernelkit.wire). The drivers in kernelkit.runs send it their jobs (jobs/); ``reuse_workers`` keeps a run's
workers for the next run of the same process.
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from kernelkit import backends, channel, hygiene, pool, wire
from kernelkit.deadline import BUILD_TIMEOUT_ENV, build_timeout
from kernelkit.errors import describe_exception
from kernelkit.jobs import Job, JobResult, poisoned, progress, warn
from kernelkit.jobs.check import kept_bytes
from kernelkit.measure import bound
from kernelkit.measure.host import cpu_threads
from kernelkit.pool import reuse_workers as reuse_workers  # the demo and tests ask the runner for it
from kernelkit.results import Status

DEFAULT_TIMEOUT = 60.0
STARTUP_TIMEOUT = 300.0  # importing torch, triton and numba on a slow, busy machine
LOG_TAIL_CHARS = pool.LOG_TAIL_CHARS
LEFT_TIMEOUT = 60.0  # for the worker's word on what a job left (a snapshot, maybe a garbage collection)
DEATH_POLL_S = 0.25  # how often a busy worker's exit status is looked at
MAX_MEMORY_ENV = "KERNELKIT_MAX_MEMORY"  # bytes a worker may hold (--max-memory); workers read it when they start

OnPhase = Callable[[str], None]
_BUILT = "built"  # the worker's message between a case's build and its run
_PHASE = "phase:"  # the worker's news of what the job does now (jobs.progress), never a result


class Worker:
    """One spawned worker process at a time (in its own session), replaced whenever it dies, hangs, loses its CUDA
    context or is left changed by a job (``replaced`` counts the replacements)."""

    def __init__(self, device: str, log_path: Path, env: Mapping[str, str] | None = None,
                 on_phase: OnPhase | None = None) -> None:
        self.device = device
        self.log_path = log_path
        self.env = dict(env or {})  # set in the worker before it touches the device (CUDA_VISIBLE_DEVICES)
        self.on_phase = on_phase  # told what the worker does now: starting, building, timing (jobs.progress)
        self.process: multiprocessing.process.BaseProcess | None = None
        self.conn: multiprocessing.connection.Connection | None = None

    replaced = 0
    busy = False
    received_s = 0.0
    received_at = 0.0

    def run(self, job: Job, timeout: float, limit: str = "") -> JobResult:
        """``job`` run in the worker; ``timeout`` seconds for the job once it is built (``on_built``). ``limit``
        names that limit and the flag that moves it, for a TIMEOUT's message (default: the case's --timeout)."""
        if self.process is None:
            problem = self._start()
            if problem:
                return job.failed(self.device, Status.CRASHED, f"the worker failed to start: {problem}")
        assert self.conn is not None and self.process is not None
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        sent = bound.perf_counter()
        channel.send_job(self.conn, job)
        self.busy = True  # until the job's answer is in: a stop meanwhile (Ctrl-C) kills the worker at once
        # Two clocks: loading the op and building its kernels, then the job itself (see Job.execute's on_built). A
        # job of several calls (a format's verdict: five trials) says "built" again before each: each gets the limit.
        building = build_timeout()
        reply = self._await(job, building, f" while loading the op and building its kernels (the build limit; set "
                            f"{BUILD_TIMEOUT_ENV}=SECONDS to move it, if the build is only slow)")
        limit = limit or getattr(job, "limit", "") or f"the case limit, --timeout {timeout:g}"
        while reply == _BUILT:
            reply = self._await(job, timeout, f" ({limit}; raise it if the case is only slow)")
        if not hasattr(reply, "status"):  # not a result: the worker's protocol is broken, the worker is suspect
            self._discard()
            reply = job.failed(self.device, Status.CRASHED, f"the worker sent {reply!r} instead of a result")
        result: JobResult = reply
        # its reading began (a large result is still being sent then) and ended (decoding is this process's time)
        received = (self.received_at, self.received_at + self.received_s)
        self.busy = False
        changed, took, stamps = self._left() if self.process is not None else ([], {}, None)
        behind = bound.clock_behind(sent, received, stamps) if stamps is not None else ""
        if behind and not result.status.failed:
            self._discard()
            self.replaced += 1
            return job.failed(self.device, Status.CHEATED, behind)
        spent = getattr(result, "details", {}).get("strict_s")
        if isinstance(spent, dict):  # where a strict job's time went around the job, in the worker and here
            spent.update({f"loop_{k}": v for k, v in took.items()}, receive=self.received_s)
        if result.status.failed or getattr(result, "raised", False):  # a strict call's error: judged later
            result.log = self._log_since(offset)
        if changed:
            warn(result, f"it left its worker changed ({'; '.join(changed)}); the worker was replaced, so the next "
                  "case starts from a clean process")
        if poisoned(result) and not result.details.get("context_lost"):
            warn(result, "a sticky CUDA error poisons its worker's CUDA context: the worker was replaced")
        if changed or poisoned(result):  # one rule for every job: a check, a strict call, a benchmark
            self._discard()
            self.replaced += 1
        return result

    def _left(self) -> tuple[list[str], dict[str, float], tuple[float, float] | None]:
        """What the last job left changed in the worker, sent after its result (the result's memory is freed
        first: a strict check's reply holds its outputs as bytes), and its loop's seconds; a worker that does not
        say is not reused."""
        assert self.conn is not None
        if self._wait(LEFT_TIMEOUT) and self.conn.poll():
            try:
                message = _receive(self.conn)
            except (EOFError, OSError, wire.WireError):
                message = None
            if isinstance(message, _Left):
                seconds = message.seconds if isinstance(message.seconds, dict) else {}  # the worker's word: numbers
                stamps = message.stamps if isinstance(message.stamps, tuple) and len(message.stamps) == 2 and all(
                    type(v) is float for v in message.stamps) else None
                return (message.changed, {str(k): float(v) for k, v in seconds.items() if type(v) in (int, float)},
                        stamps)
        return ["it did not say what the job left behind"], {}, None

    def _await(self, job: Job, seconds: float, which: str) -> object:
        """The worker's next message; a TIMEOUT or CRASHED result when none comes (the worker is discarded).

        The worker's death is told by its exit status (waitpid), looked at every DEATH_POLL_S: a process it forked
        holds its pipe and its sentinel open after it died.
        """
        assert self.conn is not None and self.process is not None
        deadline = time.monotonic() + seconds
        while True:
            ready = self._wait(deadline - time.monotonic())
            if not (ready and self.conn.poll()):
                break
            try:
                clock = self.received_at = bound.perf_counter()
                message = _receive(self.conn)
                self.received_s = bound.perf_counter() - clock  # reading and decoding the last message
            except (EOFError, OSError):
                break
            except wire.WireError as exc:  # not a kernelkit message: the worker is not to be trusted any more
                return f"a message that is not kernelkit's ({exc})"
            if not (isinstance(message, str) and message.startswith(_PHASE)):
                return message
            self._phase(message[len(_PHASE):])
        if ready:
            message = self._death_message()
            self._discard()
            self.replaced += 1
            return job.failed(self.device, Status.CRASHED, message)
        self._discard()
        self.replaced += 1
        return job.failed(self.device, Status.TIMEOUT, f"no result after {seconds:g} s{which}; the worker was killed "
                          "with every process it started")

    def _wait(self, seconds: float) -> bool:
        """True as soon as the worker sent a message or exited; False after ``seconds`` with neither."""
        assert self.conn is not None and self.process is not None
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if multiprocessing.connection.wait([self.conn, self.process.sentinel], min(max(left, 0), DEATH_POLL_S)):
                return True
            if self.process.exitcode is not None:
                return True
            if left <= 0:
                return False

    def _phase(self, text: str) -> None:
        if self.on_phase is not None:
            self.on_phase(text)

    def _start(self) -> str:
        """Take a held worker (pool.py: parked, or started early) or spawn one; wait for its word that it is
        ready. The reason it failed to start, or ''."""
        held = pool.take(pool.key_of(self.device, self.env))
        if held is None:
            self.process, self.conn = spawn(self.device, self.env, str(self.log_path))
            log, ready = str(self.log_path), False
        else:
            self.process, self.conn, log, ready = held.process, held.conn, held.log_path, held.ready
        if not ready:
            self._phase("starting a worker (importing torch" + (", starting CUDA)" if self.device == "cuda" else ")"))
        if not ready and not (self._wait(STARTUP_TIMEOUT) and self._ready()):
            problem = self._death_message() + pool.log_tail(log, 0)
            self._discard()
            return problem
        if log != str(self.log_path):
            try:
                channel.send_job(self.conn, pool.Relog(str(self.log_path)))  # its output: this run's log from now
            except OSError:
                self._discard()
                return self._start()
        return ""

    def _ready(self) -> bool:
        assert self.conn is not None
        if not self.conn.poll():
            return False
        try:
            _receive(self.conn)
            return True
        except (EOFError, OSError, wire.WireError):
            return False

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
        return (f"the worker exited with code {code} in the middle of the job: the code it ran ended the process "
                "itself (os._exit, or exit() in a thread or at interpreter level); see the log below")

    def _log_since(self, offset: int) -> str:
        return pool.log_tail(str(self.log_path), offset)

    def _discard(self) -> None:
        """Kill the worker and every process it started (its process group, what it adopted), and forget it."""
        if self.process is not None and self.process.pid is not None:
            hygiene.kill_tree(self.process.pid)  # the worker leads its own group (hygiene.own_session)
        if self.process is not None and self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=10)
        if self.conn is not None:
            self.conn.close()
        self.process = self.conn = None

    def stop(self) -> None:
        """End the worker; inside ``reuse_workers()`` a live one is kept for this process's next run instead. A
        worker stopped in the middle of a job (Ctrl-C while it ran) is killed with all it started, never kept."""
        if self.busy:
            self.busy = False
            self._discard()
            return
        if self.conn is not None and self.process is not None and self.process.is_alive() and pool.park(
                pool.Held(pool.key_of(self.device, self.env), self.process, self.conn, str(self.log_path), True)):
            self.process = self.conn = None
            return
        if self.conn is not None and self.process is not None and self.process.is_alive():
            try:
                channel.send_job(self.conn, None)
                self.process.join(timeout=5)
            except (OSError, BrokenPipeError):
                pass
        self._discard()


def _send(conn: multiprocessing.connection.Connection, message: object) -> None:
    """A worker's message to its runner, as data only (kernelkit.wire): the runner unpickles nothing it sends."""
    channel.send_bytes(conn, wire.encode(message))


def _receive(conn: multiprocessing.connection.Connection) -> object:
    """The worker's next message, decoded as data (kernelkit.wire): tensors, plain values, kernelkit's result types."""
    return wire.decode(channel.recv_bytes(conn), own=True)  # a fresh buffer: host tensors read it in place


@wire.register
@dataclass(frozen=True)
class _Left:
    """The worker's word after each result: what the job left changed (empty: the worker is reusable), and the
    seconds its loop spent on the job's steps (the snapshot before, the job, the CUDA check, encoding and sending
    the result, the snapshot after)."""

    changed: list[str]
    seconds: dict[str, float] = field(default_factory=dict)
    stamps: tuple[float, float] = (0.0, 0.0)  # the worker's clock when it got the job and when it sent the result


def spawn(device: str, env: Mapping[str, str], log_path: str) -> tuple[
        multiprocessing.process.BaseProcess, multiprocessing.connection.Connection]:
    """A new worker process (not waited for: it says "ready" once started) and the runner's end of its pipe."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    process = ctx.Process(target=_worker_main, args=(child, device, log_path, dict(env)), daemon=True)
    with hygiene.spawn_without_main():  # a user's script without a __main__ guard is not run again there
        process.start()
    child.close()
    return process, parent


def started_early(device: str, envs: Sequence[Mapping[str, str]] = ({},)) -> contextlib.AbstractContextManager[None]:
    """Workers for ``envs`` on ``device`` started now, for the block's runs to take (pool.started_early)."""
    return pool.started_early(spawn, device, envs)


def _worker_main(conn: multiprocessing.connection.Connection, device: str, log_path: str,
                 env: Mapping[str, str] | None = None) -> None:
    """The worker loop (``_serve``); whatever ends it, what the worker started or adopted ends with it. A worker
    that leaves its loop exits at once: tearing down the interpreter's modules (torch, triton, a CUDA context)
    took ~0.4-1 s that every run's end and every replaced worker waited for, and nothing of a worker's is saved at
    exit (its caches are written as they are made)."""
    hygiene.own_session()  # first: the runner kills this process with all it starts, as one group
    hygiene.become_subreaper()  # a process that leaves the group (setsid) is adopted here when orphaned
    hygiene.exit_with_parent()  # a runner killed outright takes its worker with it
    code = 1  # an error that escaped the loop: its traceback goes to the log
    try:
        _serve(conn, device, log_path, env)
        code = 0
    except SystemExit as exc:  # a job's sys.exit(n): the runner reports the code
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        hygiene.kill_descendants()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _serve(conn: multiprocessing.connection.Connection, device: str, log_path: str,
           env: Mapping[str, str] | None) -> None:
    """Receive a job, send back its result and what it left changed; None means stop."""
    os.environ.update(env or {})  # before CUDA starts: it reads CUDA_VISIBLE_DEVICES once, at its first call
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    hygiene.redirect_output(log_path)
    faulthandler.enable()  # a segfault prints the Python stack (the user's line) into the log
    progress.install(lambda text: _send(conn, _PHASE + text))
    backends.prepare_process(device)
    if device == "cuda":
        torch.cuda.init()  # once, before the first job: each job's before and after snapshots then see CUDA alike
    else:
        torch.set_num_threads(cpu_threads())  # CPU timings: one thread unless --threads (measure/host.py says why)
    hygiene.limit_memory(device, os.environ.get(MAX_MEMORY_ENV, ""))
    now = bound.clock_ns()  # the clock, taken before any job's code: its stamps are read against the judge's
    _send(conn, "ready")
    backends.warm_up(device)  # while the first job is not here yet
    while True:
        try:
            job: Job | None = channel.recv_job(conn)
        except (EOFError, OSError):
            return
        if job is None:
            return
        if isinstance(job, pool.Relog):  # adopted by another run: its log from now on
            hygiene.redirect_output(job.path)
            continue
        clock = [now() / 1e9]  # the loop's own seconds around the job, sent with _Left (and its stamps)
        before = hygiene.snapshot(device, kept_bytes(device))
        clock.append(now() / 1e9)
        try:
            result = job.execute(device, lambda: _send(conn, _BUILT))
        except Exception as exc:  # noqa: BLE001 - a job's own failure is its result, the worker lives on
            result = job.failed(device, Status.RUNTIME_ERROR, f"kernelkit's worker failed: {describe_exception(exc)}")
        except SystemExit as exc:  # the job's code called exit(): its failure, never the worker's own exit
            result = job.failed(device, Status.RUNTIME_ERROR, f"the code this job ran called exit({exc.code!r})")
        sys.stdout.flush()
        sys.stderr.flush()
        clock.append(now() / 1e9)
        lost = poisoned(result, backends.cuda_context_lost if device == "cuda" else None)
        clock.append(now() / 1e9)
        message = wire.encode_parts(result)  # outputs on the host are sent from their own memory
        clock.append(now() / 1e9)
        channel.send_parts(conn, message)
        clock.append(now() / 1e9)
        del result, message  # before the snapshot: a result may be large (a strict check's outputs)
        hygiene.restore_emptied(before)
        changed = hygiene.changes(before, hygiene.snapshot(device, kept_bytes(device)))
        if any("memory held" in change for change in changed):  # maybe only garbage in a reference cycle
            gc.collect()
            changed = hygiene.changes(before, hygiene.snapshot(device, kept_bytes(device)))
        clock.append(now() / 1e9)
        names = ("before", "job", "poisoned", "encode", "send", "after")
        _send(conn, _Left(changed, {name: b - a for name, a, b in zip(names, clock[:-1], clock[1:], strict=True)},
                          stamps=(clock[0], clock[5])))  # got the job, sent its result: read against the judge's clock
        if lost or changed:
            return
