"""Share a sweep's groups among several workers of this host, one per slot (GPU), and merge what they give.

A group is one (op, size, dtype) of the sweep: its jobs run on one worker, one after another, so the impls and
baselines it times side by side stay on one GPU and their comparison stays fair. Groups wait in one queue,
costliest first (their ``cost`` estimate), and each slot's thread takes the next one when it is free: the
longest-first greedy order that keeps the slots' finishing times close.

Every result goes back to the calling thread (``emit``), which alone touches the store and the callbacks.
A worker that dies or hangs loses its in-flight job (runner.Worker reports it CRASHED or TIMEOUT) and is
replaced. After a crash or a hang the slot proves its device still works with a fresh worker (``ProbeJob``); when
that fails, the slot stops, the rest of its group goes back to the front of the queue, and the other slots take it.
"""

from __future__ import annotations

import collections
import os
import queue
import signal
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from math import prod
from pathlib import Path
from typing import Any, Protocol

from kernelkit import runner, wire
from kernelkit.errors import describe_exception
from kernelkit.jobs import Job, JobResult
from kernelkit.jobs.check import CheckJob
from kernelkit.jobs.evidence import CheckOptions
from kernelkit.results import Status
from kernelkit.scale.slots import Slot
from kernelkit.spec import Case, Size

PROBE_TIMEOUT = 60.0
POLL_SECONDS = 0.2  # how often the calling thread looks up from the results queue (Ctrl-C is handled there)

Emit = Callable[[int | None, Any], None]  # (slot index, result)
OnSlotPhase = Callable[[int, str], None]  # (slot index, what its worker does now)


@dataclass(frozen=True)
class _Phase:
    """A lane's worker said what it does now: passed through the results queue to the calling thread."""

    text: str


class GroupRun(Protocol):
    """The jobs of one (op, size, dtype) group, handed out one at a time: a result may decide the next job (the
    benchmark times only the impls whose check passed). A run moved to another worker goes on where it stopped."""

    source: str
    cost: float  # an estimate, to start the costliest groups first; only the order matters

    def next_job(self) -> tuple[Job, float] | None:
        """The next job and its timeout in seconds; None when the group is done."""
        ...

    def take(self, job: Job, result: JobResult) -> list[Any]:
        """Record ``job``'s result; the results to emit (CaseResult or BenchResult), in order."""
        ...

    def moved(self, source: str) -> GroupRun:
        """This run with its op loaded from ``source`` instead (the op file's copy on another machine)."""
        ...


@dataclass
class CheckGroupRun:
    """The check cases of one (op, size, dtype), one CheckJob each (with the run's ``options``)."""

    cases: list[Case]
    timeout: float
    options: CheckOptions = CheckOptions()

    @property
    def source(self) -> str:
        return self.cases[0].source

    @property
    def cost(self) -> float:
        return len(self.cases) * prod(self.cases[0].size or (1,))

    def next_job(self) -> tuple[Job, float] | None:
        return (CheckJob(self.cases[0], self.options), self.timeout) if self.cases else None

    def take(self, job: Job, result: JobResult) -> list[Any]:
        self.cases.pop(0)
        return [result]

    def moved(self, source: str) -> CheckGroupRun:
        return CheckGroupRun([replace(c, source=source) for c in self.cases], self.timeout, self.options)


def check_runs(cases: Sequence[Case], timeout: float, options: CheckOptions | None = None) -> list[CheckGroupRun]:
    """The cases grouped by (op, size, dtype), in the order each group first appears."""
    groups: dict[tuple[str, str, Size, str], list[Case]] = {}
    for case in cases:
        groups.setdefault((case.source, case.op, case.size, case.dtype), []).append(case)
    return [CheckGroupRun(list(group), timeout, options or CheckOptions()) for group in groups.values()]


def drain(run: GroupRun, device: str, status: Status, message: str) -> list[Any]:
    """Results for every job ``run`` has left, each failed with ``status`` and ``message`` (no worker can run
    them)."""
    out: list[Any] = []
    while (step := run.next_job()) is not None:
        job, _ = step
        out.extend(run.take(job, job.failed(device, status, message)))
    return out


@wire.register
@dataclass
class ProbeResult:
    status: Status
    message: str = ""
    log: str = ""
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ProbeJob:
    """Can a worker use its device: allocate, compute, read the result back."""

    def execute(self, device: str, on_built: Callable[[], None] | None = None) -> ProbeResult:
        import torch

        if on_built is not None:
            on_built()
        try:
            x = torch.arange(16, dtype=torch.float32, device=device)
            if float((x * 2).sum()) != 240.0:
                return ProbeResult(Status.CRASHED, "the device computed 2 * sum(0..15) wrongly")
        except Exception as exc:  # noqa: BLE001 - any failure means the slot cannot be used
            return ProbeResult(Status.CRASHED, describe_exception(exc))
        return ProbeResult(Status.PASSED)

    def failed(self, device: str, status: Status, message: str, log: str = "") -> ProbeResult:
        return ProbeResult(status, message, log)


class _Queue:
    """The groups still to run, costliest first. A group given back goes to the front; a slot asking for work
    waits while another slot is busy, since that one may yet give its group back."""

    def __init__(self, runs: Sequence[GroupRun]) -> None:
        self._runs = collections.deque(sorted(runs, key=lambda r: -r.cost))
        self._busy = 0
        self._changed = threading.Condition()

    def take(self, stop: threading.Event) -> GroupRun | None:
        with self._changed:
            while not self._runs and self._busy and not stop.is_set():
                self._changed.wait(POLL_SECONDS)
            if not self._runs or stop.is_set():
                return None
            self._busy += 1
            return self._runs.popleft()

    def done(self, given_back: GroupRun | None) -> None:
        with self._changed:
            self._busy -= 1
            if given_back is not None:
                self._runs.appendleft(given_back)
            self._changed.notify_all()

    def rest(self) -> list[GroupRun]:
        with self._changed:
            runs, self._runs = list(self._runs), collections.deque()
            return runs


class _Lane:
    """One slot's thread: takes groups from the queue and runs their jobs on the slot's worker."""

    def __init__(self, slot: Slot, device: str, log_dir: Path, todo: _Queue, results: queue.Queue,
                 stop: threading.Event, phases: bool = False) -> None:
        self.slot = slot
        self.device = device
        self.worker = runner.Worker(device, log_dir / f"worker-{slot.index}.log", env=slot.env,
                                    on_phase=(lambda text: results.put((slot.index, _Phase(text)))) if phases else None)
        self.todo, self.results, self.stop = todo, results, stop
        self.failure = ""  # why the slot stopped taking groups, when it did
        self.thread = threading.Thread(target=self._loop, name=f"kernelkit-slot-{slot.index}", daemon=True)

    def _loop(self) -> None:
        try:
            while not self.failure and (run := self.todo.take(self.stop)) is not None:
                self.todo.done(self._work(run))
        finally:
            self.worker.stop()

    def _work(self, run: GroupRun) -> GroupRun | None:
        """Run the group's jobs; the group, when this slot must give the rest of it back."""
        while (step := run.next_job()) is not None:
            if self.stop.is_set():
                return run
            job, seconds = step
            result = self._run(job, seconds)
            for item in run.take(job, result):
                self.results.put((self.slot.index, item))
            if result.status in (Status.CRASHED, Status.TIMEOUT) and not self._healthy():
                return run  # the rest of the group goes to another slot
        return None

    def _run(self, job: Job, seconds: float) -> JobResult:
        try:
            return self.worker.run(job, seconds)
        except (OSError, EOFError) as exc:  # the worker died between two jobs: the pipe broke on sending
            self.worker.stop()
            return job.failed(self.device, Status.CRASHED, f"the worker was gone before the job started ({exc})")

    def _healthy(self) -> bool:
        """After a crash or a hang (the worker was replaced): does a fresh worker still get a working device here?
        If not, the slot stops. A device that hangs fails the probe by its timeout."""
        if self.stop.is_set():
            return False
        probe = self._run(ProbeJob(), PROBE_TIMEOUT)
        if probe.status is not Status.PASSED:
            message = getattr(probe, "message", "")
            self.failure = f"slot {self.slot.index} stopped: its device failed a check after a crash: {message}"
        return not self.failure

    def kill(self) -> None:
        """End the worker's process now (Ctrl-C): the thread's pending wait returns at once."""
        process = self.worker.process
        if process is not None and process.pid is not None:
            try:
                os.kill(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def run_groups(runs: Sequence[GroupRun], slots: Sequence[Slot], device: str, emit: Emit,
               on_phase: OnSlotPhase | None = None) -> list[str]:
    """Run every group on one of ``slots``' workers; ``emit(slot index, result)`` in this thread as results come,
    and ``on_phase(slot index, text)`` there as a slot's worker says what it does now (starting, building, timing).

    Returns why any slot stopped early. Groups no slot could finish get failed results (CRASHED). Ctrl-C kills
    the workers and is raised again once the threads are done.
    """
    if not slots:
        raise ValueError("run_groups needs at least one slot")
    todo, results, stop = _Queue(runs), queue.Queue(), threading.Event()
    with tempfile.TemporaryDirectory(prefix="kernelkit-slots-") as tmp:
        lanes = [_Lane(slot, device, Path(tmp), todo, results, stop, on_phase is not None) for slot in slots]
        for lane in lanes:
            lane.thread.start()
        try:
            while any(lane.thread.is_alive() for lane in lanes) or not results.empty():
                try:
                    index, item = results.get(timeout=POLL_SECONDS)
                except queue.Empty:
                    continue
                if isinstance(item, _Phase):
                    if on_phase is not None:
                        on_phase(index, item.text)
                else:
                    emit(index, item)
        except KeyboardInterrupt:
            stop.set()
            for lane in lanes:
                lane.kill()
            for lane in lanes:
                lane.thread.join()
            raise
        failures = [lane.failure for lane in lanes if lane.failure]
        why = "; ".join(failures) or "no slot was left to run it"
        for run in todo.rest():
            for item in drain(run, device, Status.CRASHED, f"not run: {why}"):
                emit(None, item)
    return failures
