"""`kernelkit doctor`: a self-test to run on a new machine before trusting its numbers.

    report = kk.doctor()       # or: kernelkit doctor [--device cpu] [--no-ncu] [--json]
    report.ok, report.checks   # Check(topic, status, detail) each: ok, info, warn, fail or skipped

On a GPU (under a minute): the GPU, driver, clocks and clocks-event (throttle) reasons, persistence mode (all
read through NVML), whether Nsight Compute is present and may read the counters, the cached ceilings, and every
timing mode on two reference kernels, a large copy-like one and a tiny one, against each other and against ncu,
with a verdict per mode ("large: cold: within 1.2% of ncu"). On the CPU (under 30 s): the CPU, its caches and
load, how cold mode evicts there, the cached ceilings and the two CPU modes; what needs a GPU is skipped, with
the reason. Nothing here changes a GPU setting or anything else on the machine.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from kernelkit.doctor.report import Check, DoctorReport

if TYPE_CHECKING:
    from kernelkit.doctor.timing import Bench, NcuTime

DEFAULT_BUDGET = 1.0  # seconds of sampling per reference kernel and mode
CPU_BUDGET = 0.5

__all__ = ["Check", "DoctorReport", "doctor"]


def doctor(device: str | None = None, *, ncu: bool = True, budget: float | None = None, bench: Bench | None = None,
           ncu_time: NcuTime | None = None) -> DoctorReport:
    """Check this machine (``device``: 'cuda' or 'cpu'; default cuda when a GPU is visible) and return the report.

    ncu: cross-check with Nsight Compute when it is there. budget: seconds of sampling per kernel and mode
    (default 1 on a GPU, 0.5 on the CPU). bench and ncu_time replace the timer and the ncu run (tests).
    """
    from kernelkit.doctor import machine, timing  # import torch: this package stays light (kernelkit imports it)
    from kernelkit.measure import host
    from kernelkit.measure.timer import bench as timer_bench
    from kernelkit.target import resolve_device

    started = time.perf_counter()
    dev = resolve_device(device)
    report = DoctorReport(dev, host.device_name(dev))
    report.checks.extend(machine.cpu_checks(dev))
    if dev == "cuda":
        report.checks.extend(_gpu_checks())
        if ncu and ncu_time is None:
            found, path = timing.ncu_presence()
            report.checks.append(found)
            ncu_time = timing.ncu_time_of_square if path is not None else None
    else:
        report.checks.append(machine.no_gpu_check())
        ncu_time = None
    if not ncu:
        ncu_time = None
        report.checks.append(Check("ncu", "skipped", "--no-ncu: modes are cross-checked between themselves only"))
    report.checks.append(machine.ceilings_check(dev))
    spend = budget if budget is not None else DEFAULT_BUDGET if dev == "cuda" else CPU_BUDGET
    timing.cross_check(report, dev, bench or timer_bench, ncu_time, spend)
    report.seconds = time.perf_counter() - started
    return report


def _gpu_checks() -> list[Check]:
    import torch

    from kernelkit.doctor import machine
    from kernelkit.measure.clocks import ClockReader

    index = torch.cuda.current_device()
    reader = ClockReader.open(index)
    try:
        return machine.gpu_checks(index, reader)
    finally:
        if reader is not None:
            reader.close()
