"""A format's own verdicts (KernelBench's, GPU MODE's) on a target's problems, reached in worker processes and
put beside kernelkit's results for the same impl; ``kernelkit check`` prints them under its table.

A level's verdicts run on several workers at once. KernelBench draws each trial's inputs on the CPU with one
thread (a level-1 problem's 8 GiB input takes ~9 s per trial), so the draws of different problems overlap on the
machine's cores, and a problem whose draws dominate (formats.footprint) has its trials spread over workers and put
together again as one verdict (formats.verdicts.merge_kernelbench), the verdict one worker running every trial in
order would give. Verdicts are packed by what they hold (read on the meta device): one starts only when its
drawn inputs and models fit beside those running in host memory and its weights on the GPU; the biggest go
first. Each trial's GPU work (its inputs moved there, both models run, allclose) takes one of a few turns with
the other workers' (formats.footprint.gpu_turn), so the memory it needs is there. A verdict that still runs out of GPU
memory is reached again alone at the end.
"""

from __future__ import annotations

import math
import os
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import psutil

from kernelkit import hygiene
from kernelkit.formats.footprint import GPU_TURN_ENV, UNKNOWN, Footprint, footprint
from kernelkit.formats.jobs import MemoryProbe, PlannedVerdict, VerdictJob, VerdictOutcome, VerdictRow
from kernelkit.formats.kernelbench import KERNELBENCH_TRIALS
from kernelkit.formats.verdicts import Judged, KernelBenchVerdict, merge_kernelbench, side_by_side
from kernelkit.results import Status
from kernelkit.runner import Worker
from kernelkit.spec import parse_dtype

MAX_PARALLEL = 4  # CPU device: workers at once (each draw uses one core; the models share the rest)
MAX_PARALLEL_GPU = 12  # one GPU: its memory, not this, is what usually bounds them (see _Packer)
MIN_PER_WORKER = 3  # verdicts per worker before another is worth its start-up (importing torch, starting CUDA)
CONTEXT_BYTES = 640 * 2**20  # GPU memory each further worker's CUDA context takes
DEVICE_SHARE = 0.85  # of the GPU memory free once the first worker is up
HOST_SHARE = 0.7  # of the host memory available when the verdicts start
MAX_TURNS = 4  # trials whose GPU work runs at once (formats.footprint.gpu_turn)


def parallel_workers(planned: int, device: str = "cpu") -> int:
    """How many workers reach ``planned`` verdict parts: one per MIN_PER_WORKER, at most MAX_PARALLEL and half the
    cores on a CPU device; on a GPU at most MAX_PARALLEL_GPU and all cores but two."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if device.startswith("cuda"):
        return max(1, min(MAX_PARALLEL_GPU, cores - 2, math.ceil(planned / MIN_PER_WORKER)))
    return max(1, min(MAX_PARALLEL, cores // 2, planned // MIN_PER_WORKER))


@dataclass(frozen=True)
class _Part:
    """One worker's share of a planned verdict: all of it, or some of its trials."""

    index: int  # into the planned verdicts
    job: VerdictJob
    need: Footprint
    seconds: float


def run_verdicts(
    planned: Sequence[PlannedVerdict], results: Sequence[Judged], device: str, *, timeout: float = 300.0,
    isolate: bool = True, workers: int | None = None, on_row: Callable[[VerdictRow], None] | None = None,
) -> list[VerdictRow]:
    """Each planned verdict, reached in worker processes (``workers`` of them; default parallel_workers; in this
    process with ``isolate=False``), beside kernelkit's result for the same op and impl (``results``: CaseResults
    or BenchResults; the first of them that did not pass stands for the impl, else its first). Rows in plan
    order; ``on_row`` gets each as soon as it is complete. ``timeout``: for each call of the problem's code a
    verdict makes (a trial, a spec); an impl whose own check by kernelkit ran past its limit is not run again."""
    standings = [_standing(plan, results) for plan in planned]
    outcomes: dict[int, list[tuple[_Part, VerdictOutcome]]] = {}
    rows: dict[int, VerdictRow] = {}
    parts: list[_Part] = []
    for i, (plan, standing) in enumerate(zip(planned, standings, strict=True)):
        if standing is not None and standing.status is Status.TIMEOUT:
            rows[i] = VerdictRow(plan.op, plan.impl, VerdictOutcome(
                Status.TIMEOUT, message=f"not run: kernelkit's own check of {plan.impl} ran past its limit"))
        else:
            parts.extend(_parts(i, plan.job, isolate))
    expected = {i: sum(1 for p in parts if p.index == i) for i in range(len(planned))}
    lock = threading.Lock()

    def done(part: _Part, outcome: VerdictOutcome) -> None:
        with lock:
            got = outcomes.setdefault(part.index, [])
            got.append((part, outcome))
            if len(got) < expected[part.index] or _out_of_memory(outcome):
                return
            if any(_out_of_memory(o) for _, o in got):
                return  # reached again alone below
            plan = planned[part.index]
            rows[part.index] = _row(plan, _merge(got), standings[part.index])
        if on_row is not None:
            on_row(rows[part.index])

    if not isolate:
        for part in parts:
            done(part, part.job.execute(device))
    else:
        count = workers if workers is not None else parallel_workers(len(parts), device)
        _reach(parts, done, device, timeout, count)
        again = [p for i, got in outcomes.items() if i not in rows for p, o in got if _out_of_memory(o)]
        if count > 1:  # alone: the memory the others held is free
            for i in {p.index for p in again}:
                outcomes[i] = [(q, o) for q, o in outcomes[i] if not _out_of_memory(o)]
            _reach(again, done, device, timeout, 1, packed=False)
    for i, plan in enumerate(planned):
        if i not in rows:  # every part ran out of memory even alone
            rows[i] = _row(plan, _merge(outcomes.get(i, [])), standings[i])
    return [rows[i] for i in range(len(planned))]


def _parts(index: int, job: VerdictJob, isolate: bool) -> list[_Part]:
    """A planned verdict as the parts workers take: KernelBench's split by trial where its draws dominate."""
    if job.kind != "kernelbench" or not isolate:
        return [_Part(index, job, UNKNOWN, 1.0)]
    need = footprint(job.target, parse_dtype(job.precision))
    trials = KERNELBENCH_TRIALS
    if not need.split(trials):
        return [_Part(index, job, need, need.seconds(trials))]
    return [_Part(index, replace(job, trials=(t,)), need, need.seconds(1)) for t in range(trials)]


def _merge(got: list[tuple[_Part, VerdictOutcome]]) -> VerdictOutcome:
    """One outcome from a verdict's parts: the verdict of the whole run, or the first part (by trial) that was
    not reached, when no earlier part's verdict had already ended the run."""
    if not got:
        return VerdictOutcome(Status.RUNTIME_ERROR, message="out of memory on this GPU, even alone")
    if len(got) == 1:
        return got[0][1]
    ordered = sorted(got, key=lambda item: item[0].job.trials or ())
    reached: list[KernelBenchVerdict] = []
    for _, outcome in ordered:
        verdict = outcome.verdict
        if outcome.status is not Status.PASSED or not isinstance(verdict, KernelBenchVerdict):
            return outcome
        reached.append(verdict)
        if verdict.stopped or not verdict.compiled:
            break
    logs = "".join(o.log for _, o in ordered)
    return VerdictOutcome(Status.PASSED, merge_kernelbench(reached), log=logs)


def _row(plan: PlannedVerdict, outcome: VerdictOutcome, standing: Judged | None) -> VerdictRow:
    side = side_by_side(outcome.verdict, standing) if outcome.verdict is not None and standing else None
    return VerdictRow(plan.op, plan.impl, outcome, side)


def _standing(plan: PlannedVerdict, results: Sequence[Judged]) -> Judged | None:
    """kernelkit's result that stands for the planned impl: its first that did not pass, else its first."""
    mine = [r for r in results if (getattr(r, "op", ""), getattr(r, "impl", "")) == (plan.op, plan.impl)]
    return next((r for r in mine if r.status is not Status.PASSED), mine[0] if mine else None)


class _Packer:
    """Hands out parts, biggest first, each only when what it holds fits beside the parts running (GPU memory:
    read by the first worker; host memory: read here). One part runs whatever it needs when it would run alone."""

    def __init__(self, parts: Sequence[_Part], device: str, packed: bool) -> None:
        self.pending = sorted(parts, key=lambda p: -p.seconds)
        self.cond = threading.Condition()
        self.running = 0
        self.held = [0, 0]  # host, device bytes of the parts running
        on_gpu = device.startswith("cuda")
        self.host = HOST_SHARE * psutil.virtual_memory().available if packed else math.inf
        self.device: float | None = None if packed and on_gpu else math.inf
        self.cpu = not on_gpu

    def set_device_memory(self, free: float | None, workers: int) -> int:
        """The GPU memory the parts may hold: a share of what is free, less the other workers' contexts and the
        turns' (trials whose GPU work runs at once, each holding up to the biggest turn's memory beside what every
        part holds): as many turns as fit in half of it, 1 to MAX_TURNS. Returns the number of turns."""
        turn = max((p.need.turn for p in self.pending), default=0)
        slots = 1
        with self.cond:
            if free is None:
                self.device = math.inf
            else:
                room = DEVICE_SHARE * free - (workers - 1) * CONTEXT_BYTES
                slots = max(1, min(MAX_TURNS, int(room / 2 // turn) if turn else MAX_TURNS))
                self.device = room - slots * turn
            self.cond.notify_all()
        return slots

    def _needs(self, part: _Part) -> tuple[int, int]:
        if self.cpu:  # everything a verdict holds is in host memory
            return part.need.host + part.need.device, 0
        return part.need.host, part.need.device

    def take(self) -> _Part | None:
        with self.cond:
            while True:
                if not self.pending:
                    return None
                if self.device is not None:
                    chosen = next((p for p in self.pending if self._fits(p)), None)
                    if chosen is None and self.running == 0:
                        chosen = self.pending[0]
                    if chosen is not None:
                        self.pending.remove(chosen)
                        host, dev = self._needs(chosen)
                        self.held[0] += host
                        self.held[1] += dev
                        self.running += 1
                        return chosen
                self.cond.wait(timeout=1.0)

    def _fits(self, part: _Part) -> bool:
        host, dev = self._needs(part)
        assert self.device is not None
        return self.held[0] + host <= self.host and self.held[1] + dev <= self.device

    def release(self, part: _Part) -> None:
        with self.cond:
            host, dev = self._needs(part)
            self.held[0] -= host
            self.held[1] -= dev
            self.running -= 1
            self.cond.notify_all()


def _reach(parts: Sequence[_Part], done: Callable[[_Part, VerdictOutcome], None], device: str, timeout: float,
           count: int, packed: bool = True) -> None:
    """``parts`` on ``count`` workers, each taking the next part that fits as it frees; ``done`` gets each."""
    if not parts:
        return
    packer = _Packer(parts, device, packed)
    with tempfile.TemporaryDirectory(prefix="kernelkit-verdicts-") as tmp:
        turns = {GPU_TURN_ENV: tmp} if device.startswith("cuda") else {}
        workers = [Worker(device, Path(tmp) / f"worker{slot}.log", env=turns)
                   for slot in range(min(count, len(parts)))]

        def serve(worker: Worker, first: bool) -> None:
            try:
                if first and packer.device is None:
                    free = None
                    try:
                        probe = worker.run(MemoryProbe(), timeout)
                        free = probe.details.get("free") if probe.status is Status.PASSED else None
                    finally:  # the others wait for this reading: they get one, if only "unbounded"
                        slots = packer.set_device_memory(free, len(workers))
                        (Path(tmp) / "slots").write_text(str(slots))
                while (part := packer.take()) is not None:
                    try:
                        done(part, worker.run(part.job, timeout))
                    finally:
                        packer.release(part)
            finally:
                worker.stop()

        threads = [threading.Thread(target=serve, args=(w, n == 0), name=f"kernelkit-verdicts-{n}", daemon=True)
                   for n, w in enumerate(workers)]
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                thread.join()
        except KeyboardInterrupt:
            for worker in workers:  # Ctrl-C: no verdict goes on running behind the caller's back
                if worker.process is not None and worker.process.pid is not None:
                    hygiene.kill_group(worker.process.pid)
            raise


def _out_of_memory(outcome: VerdictOutcome) -> bool:
    text = f"{outcome.message} {getattr(outcome.verdict, 'message', '')}".lower()
    return "out of memory" in text
