"""A format's own verdict as a job for kernelkit's worker processes (``runner.Worker.run(job, timeout)``), so a
crash, a hang or an out-of-memory in the problem's code ends that verdict and not the caller."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from kernelkit.errors import describe_exception
from kernelkit.formats import gpumode, kernelbench
from kernelkit.formats.verdicts import GpuModeVerdict, KernelBenchVerdict, gpumode_verdict, kernelbench_verdict
from kernelkit.results import Status
from kernelkit.spec import parse_dtype


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

    def execute(self, device: str, on_built: Callable[[], None] | None = None) -> VerdictOutcome:
        if on_built is not None:
            on_built()
        try:
            if self.kind == "gpumode":
                return VerdictOutcome(Status.PASSED, gpumode_verdict(gpumode.load_task(self.target, self.solution)))
            problem = kernelbench.load_problem(self.target)
            verdict = kernelbench_verdict(problem, self.solution or problem.model, device=device,
                                          precision=parse_dtype(self.precision), tolerance=self.tolerance)
            return VerdictOutcome(Status.PASSED, verdict)
        except Exception as exc:  # noqa: BLE001 - the job's failure is its outcome
            return VerdictOutcome(Status.RUNTIME_ERROR, message=describe_exception(exc))

    def failed(self, device: str, status: Status, message: str, log: str = "") -> VerdictOutcome:
        return VerdictOutcome(status, message=message, log=log)
