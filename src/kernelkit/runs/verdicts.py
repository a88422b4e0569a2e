"""A format's own verdicts (KernelBench's, GPU MODE's) on a target's problems, reached in one worker process and
put beside kernelkit's results for the same impl; ``kernelkit check`` prints them under its table."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

from kernelkit.formats.jobs import PlannedVerdict, VerdictRow
from kernelkit.formats.verdicts import Judged, side_by_side
from kernelkit.results import Status
from kernelkit.runner import Worker


def run_verdicts(
    planned: Sequence[PlannedVerdict], results: Sequence[Judged], device: str, *, timeout: float = 300.0,
    isolate: bool = True,
) -> list[VerdictRow]:
    """Each planned verdict, reached in one worker process (in this one with ``isolate=False``), beside kernelkit's
    result for the same op and impl (``results``: CaseResults or BenchResults; the first of them that did not
    pass stands for the impl, else its first)."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="kernelkit-verdicts-") as tmp:
        worker = Worker(device, Path(tmp) / "worker.log") if isolate else None
        try:
            for plan in planned:
                outcome = worker.run(plan.job, timeout) if worker else plan.job.execute(device)
                mine = [r for r in results if (getattr(r, "op", ""), getattr(r, "impl", "")) == (plan.op, plan.impl)]
                standing = next((r for r in mine if r.status is not Status.PASSED), mine[0] if mine else None)
                side = None
                if outcome.verdict is not None and standing is not None:
                    side = side_by_side(outcome.verdict, standing)
                rows.append(VerdictRow(plan.op, plan.impl, outcome, side))
        finally:
            if worker is not None:
                worker.stop()
    return rows
