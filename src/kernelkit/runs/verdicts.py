"""A format's own verdicts (KernelBench's, GPU MODE's) on a target's problems, reached in worker processes and
put beside kernelkit's results for the same impl; ``kernelkit check`` prints them under its table.

A level's verdicts run on a few workers at once: KernelBench draws each trial's inputs on the CPU with one thread
(a level-1 problem's 6 GiB input takes ~6 s per trial), so the problems' draws overlap on the machine's other
cores. A verdict that runs out of GPU memory beside the others is reached again alone at the end.
"""

from __future__ import annotations

import os
import queue
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

from kernelkit import hygiene
from kernelkit.formats.jobs import PlannedVerdict, VerdictOutcome, VerdictRow
from kernelkit.formats.verdicts import Judged, side_by_side
from kernelkit.results import Status
from kernelkit.runner import Worker

MAX_PARALLEL = 4  # workers at once on one device: each holds a problem's inputs and two models
MIN_PER_WORKER = 3  # verdicts per worker before another is worth its start-up (importing torch, starting CUDA)


def parallel_workers(planned: int) -> int:
    """How many workers reach ``planned`` verdicts: one per MIN_PER_WORKER, at most MAX_PARALLEL and half the
    cores (the draws themselves use one core each)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(MAX_PARALLEL, cores // 2, planned // MIN_PER_WORKER))


def run_verdicts(
    planned: Sequence[PlannedVerdict], results: Sequence[Judged], device: str, *, timeout: float = 300.0,
    isolate: bool = True, workers: int | None = None,
) -> list[VerdictRow]:
    """Each planned verdict, reached in worker processes (``workers`` of them; default parallel_workers; in this
    process with ``isolate=False``), beside kernelkit's result for the same op and impl (``results``: CaseResults
    or BenchResults; the first of them that did not pass stands for the impl, else its first). Rows in plan
    order. ``timeout``: for each call of the problem's code a verdict makes (a trial, a spec); an impl whose own
    check by kernelkit ran past its limit is not run again."""
    standings = [_standing(plan, results) for plan in planned]
    outcomes: list[VerdictOutcome | None] = [
        VerdictOutcome(Status.TIMEOUT, message=f"not run: kernelkit's own check of {plan.impl} ran past its limit")
        if standing is not None and standing.status is Status.TIMEOUT else None
        for plan, standing in zip(planned, standings, strict=True)]
    left = [i for i, outcome in enumerate(outcomes) if outcome is None]
    if not isolate:
        for i in left:
            outcomes[i] = planned[i].job.execute(device)
    else:
        count = workers if workers is not None else parallel_workers(len(left))
        _reach(planned, left, outcomes, device, timeout, count)
        again = [i for i, o in enumerate(outcomes) if o is not None and _out_of_memory(o) and count > 1]
        _reach(planned, again, outcomes, device, timeout, 1)  # alone: the memory the others held is free
    rows = []
    for plan, outcome, standing in zip(planned, outcomes, standings, strict=True):
        assert outcome is not None
        side = side_by_side(outcome.verdict, standing) if outcome.verdict is not None and standing else None
        rows.append(VerdictRow(plan.op, plan.impl, outcome, side))
    return rows


def _standing(plan: PlannedVerdict, results: Sequence[Judged]) -> Judged | None:
    """kernelkit's result that stands for the planned impl: its first that did not pass, else its first."""
    mine = [r for r in results if (getattr(r, "op", ""), getattr(r, "impl", "")) == (plan.op, plan.impl)]
    return next((r for r in mine if r.status is not Status.PASSED), mine[0] if mine else None)


def _reach(planned: Sequence[PlannedVerdict], which: list[int], outcomes: list[VerdictOutcome | None], device: str,
           timeout: float, count: int) -> None:
    """Verdicts ``which`` of ``planned`` into ``outcomes``, on ``count`` workers taking the next one as they free."""
    if not which:
        return
    todo: queue.Queue[int] = queue.Queue()
    for i in which:
        todo.put(i)
    with tempfile.TemporaryDirectory(prefix="kernelkit-verdicts-") as tmp:
        workers = [Worker(device, Path(tmp) / f"worker{slot}.log") for slot in range(min(count, len(which)))]

        def serve(worker: Worker) -> None:
            try:
                while True:
                    try:
                        i = todo.get_nowait()
                    except queue.Empty:
                        return
                    outcomes[i] = worker.run(planned[i].job, timeout)
            finally:
                worker.stop()

        threads = [threading.Thread(target=serve, args=(w,), name=f"kernelkit-verdicts-{n}", daemon=True)
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
