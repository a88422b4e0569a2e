"""A format's own verdict as a job for kernelkit's worker processes (``runner.Worker.run(job, timeout)``), so a
crash, a hang or an out-of-memory in the problem's code ends that verdict and not the caller.

``verdict_jobs(target, solution)`` plans one job per problem of a target (the impl it judges: the solution, the
submission, or the reference when no solution was given); runs/verdicts.py runs them in one worker and puts each
verdict beside kernelkit's results for the same impl (``kernelkit check`` prints these).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from kernelkit import wire
from kernelkit.errors import describe_exception
from kernelkit.formats import gpumode, kernelbench
from kernelkit.formats.sources import detect
from kernelkit.formats.verdicts import (
    GpuModeVerdict,
    KernelBenchVerdict,
    SideBySide,
    gpumode_verdict,
    kernelbench_verdict,
)
from kernelkit.results import Status
from kernelkit.spec import parse_dtype


@wire.register
@dataclass
class VerdictOutcome:
    """``status`` PASSED when the verdict was reached (whatever it says, see ``verdict``); else why it was not."""

    status: Status
    verdict: KernelBenchVerdict | GpuModeVerdict | None = None
    message: str = ""
    log: str = ""
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class VerdictJob:
    """KernelBench's verdict on a problem file, or GPU MODE's on a task folder, computed where the job runs.

    solution: the ModelNew file (None: the problem's own Model, the reference as its solution) or the submission
    file (None: the task's submission.py).
    """

    kind: Literal["kernelbench", "gpumode"]
    target: str
    solution: str | None = None
    precision: str = "float32"
    tolerance: float | None = None
    trials: tuple[int, ...] | None = None  # KernelBench: only these trials (one part of a split verdict)

    def execute(self, device: str, on_built: Callable[[], None] | None = None) -> VerdictOutcome:
        """The verdict; ``on_built`` is called once the problem is loaded and again before each trial or spec: in a
        worker each call starts the case limit afresh (runner.Worker), so each call of the problem's code gets the
        whole --timeout."""
        try:
            if self.kind == "gpumode":
                task = gpumode.load_task(self.target, self.solution)
                if on_built is not None:
                    on_built()
                return VerdictOutcome(Status.PASSED, gpumode_verdict(task, on_call=on_built))
            problem = kernelbench.load_problem(self.target)
            if on_built is not None:
                on_built()
            verdict = kernelbench_verdict(problem, self.solution or problem.model, device=device,
                                          precision=parse_dtype(self.precision), tolerance=self.tolerance,
                                          on_call=on_built, only=self.trials)
            return VerdictOutcome(Status.PASSED, verdict)
        except Exception as exc:  # noqa: BLE001 - the job's failure is its outcome
            return VerdictOutcome(Status.RUNTIME_ERROR, message=describe_exception(exc))

    def failed(self, device: str, status: Status, message: str, log: str = "") -> VerdictOutcome:
        return VerdictOutcome(status, message=message, log=log)


@dataclass(frozen=True)
class MemoryProbe:
    """The free and total memory of the device a worker runs on, in bytes (``details``), read there: the caller
    need not start CUDA itself to plan how many verdicts fit beside each other."""

    def execute(self, device: str, on_built: Callable[[], None] | None = None) -> VerdictOutcome:
        if device.startswith("cuda") and torch.cuda.is_available():
            free, total = torch.cuda.mem_get_info()
            return VerdictOutcome(Status.PASSED, details={"free": int(free), "total": int(total)})
        return VerdictOutcome(Status.SKIPPED, message=f"no device memory to read on {device}")

    def failed(self, device: str, status: Status, message: str, log: str = "") -> VerdictOutcome:
        return VerdictOutcome(status, message=message, log=log)


@dataclass(frozen=True)
class PlannedVerdict:
    """The format's verdict to reach on op ``op``'s impl ``impl`` (the one kernelkit's results are put beside)."""

    op: str
    impl: str
    job: VerdictJob


@dataclass
class VerdictRow:
    """One problem: the format's verdict (or why there is none) and kernelkit's beside it."""

    op: str
    impl: str
    outcome: VerdictOutcome
    side: SideBySide | None = None  # None: no verdict was reached, or kernelkit has no result for the impl

    def line(self) -> str:
        if self.side is not None:
            return self.side.line()
        if self.outcome.verdict is not None:
            return f"{self.outcome.verdict.describe()}; kernelkit: no result for {self.impl}"
        return f"no verdict of the format's own: {self.outcome.status.value}: {self.outcome.message}"


def verdict_jobs(target: str | Path, solution: str | Path | None = None) -> list[PlannedVerdict]:
    """One verdict per problem of ``target`` (a KernelBench problem or level folder, a GPU MODE task; [] for
    anything else), on the impl kernelkit runs as the solution: ``solution``, ``submission``, or ``reference``
    when no solution was given (KernelBench then judges the problem's Model as its own ModelNew). A GPU MODE task
    without a submission has none: GPU MODE only judges a custom_kernel."""
    path = Path(target).expanduser().resolve()
    chosen = Path(solution).expanduser().resolve() if solution is not None else None
    kind = detect(path)
    if kind == "gpumode":
        if chosen is None and not (path / "submission.py").is_file():
            return []
        return [PlannedVerdict(path.name, "submission", VerdictJob("gpumode", str(path), _text(chosen)))]
    if kind == "kernelbench":
        problems = [path]
    elif kind == "kernelbench-level":
        problems = kernelbench.problem_files(path)
    else:
        return []
    planned = []
    for problem in problems:
        mine = chosen
        if chosen is not None and chosen.is_dir():
            mine = kernelbench.find_solution(problem, chosen)
        impl = "solution" if mine is not None else "reference"
        planned.append(PlannedVerdict(problem.stem, impl, VerdictJob("kernelbench", str(problem), _text(mine))))
    return planned


def _text(path: Path | None) -> str | None:
    return str(path) if path is not None else None
