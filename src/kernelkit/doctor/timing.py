"""The doctor's cross-check of the timing modes: two reference kernels timed in every mode the device has, against
each other and, for the large one, against Nsight Compute when it may read the counters; a verdict per mode.

The references are the built-in op ``square``'s eager impl (torch.square: one kernel that reads and writes every
element, a copy in all but name): large enough to stream past the cache (2^26 floats, 256 MiB each way, on a
GPU; 2^22 on the CPU), and tiny (4096 floats), where launch cost dominates and the modes must differ.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kernelkit.doctor.report import Check, DoctorReport
from kernelkit.measure import modes
from kernelkit.measure.measurement import Measurement
from kernelkit.units import format_time

FAIL_FACTOR = 3  # further than this many tolerances: the mode is broken, not noisy
ORDER_SLACK = 0.10  # tiny kernel: a mode that must read below another may exceed it by this much (noise)
Bench = Callable[..., Measurement]
NcuTime = Callable[[int], float]  # elements of the square case -> device seconds per call measured by ncu


@dataclass(frozen=True)
class Reference:
    name: str  # "large" or "tiny"
    elements: int  # float32 elements of x in square(x)
    what: str


def references(device: str) -> list[Reference]:
    large = 1 << 26 if device == "cuda" else 1 << 22
    mib = large * 4 >> 20
    return [Reference("large", large, f"square over {large:,} float32 ({mib} MiB in, {mib} MiB out)"),
            Reference("tiny", 4096, "square over 4,096 float32 (16 KiB): launch cost dominates")]


def modes_for(device: str) -> tuple[str, ...]:
    return modes.names(device)


def cross_check(report: DoctorReport, device: str, bench: Bench, ncu_time: NcuTime | None, budget: float) -> None:
    """Time each reference in each mode, ask ncu (when given) for the large one, and add a verdict per mode."""
    from kernelkit.target import prepare_case

    for ref in references(device):
        case = prepare_case("square", "eager", size=(ref.elements,), dtype="float32", device=device)
        medians: dict[str, float | None] = {}
        flagged: dict[str, bool] = {}
        for mode in modes_for(device):
            try:
                m = bench(case.impl.fn, *case.inputs, mode=mode, budget=budget, label=f"doctor {ref.name} {mode}")
            except Exception as exc:  # noqa: BLE001 - a mode that cannot time is itself a finding
                medians[mode] = None
                report.checks.append(Check(f"{ref.name}: {mode}", "fail", f"could not time it: {exc}"))
                continue
            medians[mode] = m.median
            flagged[mode] = any("launch-bound" in w for w in m.warnings)
        if ncu_time is not None:
            medians["ncu"] = _ncu(report, ref, ncu_time)
        report.timings[f"{ref.name}: {ref.what}"] = medians
        if ref.name == "tiny":
            report.checks.extend(tiny_verdicts(medians, flagged, ref.name))
        elif device == "cuda":
            report.checks.extend(large_verdicts(medians, flagged, ref.name))
        else:
            report.checks.extend(cpu_large_notes(medians, ref.name))
        if device != "cuda":
            report.checks.append(Check(f"{ref.name}: graph, kernel", "skipped", "need a GPU"))


def _ncu(report: DoctorReport, ref: Reference, ncu_time: NcuTime) -> float | None:
    from kernelkit.profiling.ncu import NcuError, NcuPermissionError

    if any(c.topic == "ncu" and c.status == "warn" for c in report.checks):
        return None  # locked or broken: said once already
    try:
        seconds = ncu_time(ref.elements)
    except NcuPermissionError as exc:
        report.checks.append(Check("ncu", "warn", str(exc).splitlines()[0]))
        return None
    except NcuError as exc:
        report.checks.append(Check("ncu", "warn", f"ncu ran but gave no time: {str(exc).splitlines()[0]}"))
        return None
    if not any(c.topic == "ncu" and c.status == "ok" for c in report.checks):
        report.checks.append(Check("ncu", "ok", "allowed to read the GPU's counters (ERR_NVGPUCTRPERM did not "
                                                "come up)"))
    return seconds


def _verdict(topic: str, value: float, base: float, base_name: str, tolerance: float) -> Check:
    diff = value / base - 1
    if abs(diff) <= tolerance:
        return Check(topic, "ok", f"{_t(value)}: within {abs(diff):.1%} of {base_name} ({_t(base)})")
    status = "warn" if abs(diff) <= FAIL_FACTOR * tolerance else "fail"
    return Check(topic, status, f"{_t(value)}: {diff:+.1%} from {base_name} ({_t(base)}), more than the "
                                f"{tolerance:.0%} a kernel this large allows; do not trust this mode here yet")


def large_verdicts(medians: dict[str, float | None], flagged: dict[str, bool], name: str = "large") -> list[Check]:
    """A mode that evicts (cold, kernel) against ncu, else against the default mode; within each mode's agreement
    (measure/modes.py)."""
    reference, ncu = medians.get(modes.DEFAULT), medians.get("ncu")
    checks = []
    for mode_name in modes.names():
        mode, value = modes.get(mode_name), medians.get(mode_name)
        if value is None:
            continue
        if mode.evicts and ncu:
            checks.append(_verdict(f"{name}: {mode_name}", value, ncu, "ncu", mode.agreement))
        elif mode_name == modes.DEFAULT:
            checks.append(Check(f"{name}: {mode_name}", "info",
                                f"{_t(value)}: the reference here (no ncu to compare with)"))
        elif reference:
            checks.append(_verdict(f"{name}: {mode_name}", value, reference, modes.DEFAULT, mode.agreement))
        if flagged.get(mode_name):
            checks.append(Check(f"{name}: {mode_name}", "fail", "a launch-bound warning on a kernel this large: the "
                                                               "launch-bound diagnosis is wrong here"))
    return checks


def cpu_large_notes(medians: dict[str, float | None], name: str = "large") -> list[Check]:
    """On the CPU the large reference only shows the two modes side by side: CPU timings are no GPU yardstick,
    and a shared CPU's noise is larger than any tolerance worth holding them to."""
    cold, hot = medians.get("cold"), medians.get("hot")
    checks = []
    if cold is not None:
        checks.append(Check(f"{name}: cold", "info", f"{_t(cold)} per call, cache evicted before each"))
    if hot is not None:
        ratio = f" ({hot / cold:.2f}x cold: past the cache both stream from memory)" if cold else ""
        checks.append(Check(f"{name}: hot", "info", f"{_t(hot)} per call back to back{ratio}"))
    return checks


def tiny_verdicts(medians: dict[str, float | None], flagged: dict[str, bool], name: str = "tiny") -> list[Check]:
    """Where launch cost dominates the modes must differ: kernel time at most cold's and hot's (both time the
    kernel and its launch), graph at most cold's (GPU); on the CPU cold (cache evicted) no faster than hot. Graph
    may read below kernel time (replayed kernels overlap their neighbours' start and end): it is shown beside it,
    not judged. Every text says the figures it was judged on."""
    from kernelkit.measure.timer import LAUNCH_BOUND_GAP, LAUNCH_BOUND_RATIO

    cold, hot, graph, kernel = (medians.get(m) for m in ("cold", "hot", "graph", "kernel"))
    ncu = medians.get("ncu")
    checks = []
    if kernel is not None:
        judged = {m: v for m, v in (("cold", cold), ("hot", hot)) if v is not None}
        below = all(kernel <= (1 + ORDER_SLACK) * v for v in judged.values())
        shown = {**judged, **({"graph": graph} if graph is not None else {})}
        relations = "; ".join(_relation(kernel, v, m) for m, v in shown.items())
        checks.append(Check(f"{name}: kernel", "ok" if below else "warn",
                            f"{_t(kernel)}: the device time alone" + (f"; {relations}" if relations else "")
                            + ("" if below else ": above a mode that includes the launch, check the tracing")))
    if graph is not None and cold is not None:
        ok = graph <= (1 + ORDER_SLACK) * cold
        checks.append(Check(f"{name}: graph", "ok" if ok else "warn",
                            f"{_t(graph)}: no launch cost; {_relation(graph, cold, 'cold')}"))
    if cold is not None:
        launch = f" ({_t(cold - kernel)} above the kernel time: the launch)" if kernel is not None else ""
        checks.append(Check(f"{name}: cold", "info", f"{_t(cold)}: each call alone, cache evicted first{launch}"))
    if hot is not None:
        if kernel is not None:
            expected = hot > LAUNCH_BOUND_RATIO * kernel and hot - kernel > LAUNCH_BOUND_GAP
            right = flagged.get("hot", False) == expected
            given = "given" if flagged.get("hot") else "not given"
            checks.append(Check(f"{name}: hot", "ok" if right else "warn",
                                f"{_t(hot)} per call, {hot / kernel:.1f}x the kernel time: the rate back-to-back "
                                f"calls are issued; launch-bound warning {given}"
                                + ("" if right else ", which disagrees with the kernel time")))
        elif cold is not None:
            ok = cold >= (1 - ORDER_SLACK) * hot
            checks.append(Check(f"{name}: hot", "ok" if ok else "warn",
                                f"{_t(hot)} per call back to back, cold {_t(cold)}"
                                + ("" if ok else ": cold read faster than hot, so the timings are noise here")))
    if ncu:
        versus = f", {_t(ncu - kernel)} above kernel mode's {_t(kernel)}" if kernel is not None else ""
        checks.append(Check(f"{name}: ncu", "info", f"{_t(ncu)}{versus}: Nsight Compute's own per-kernel floor "
                                                    "dominates a kernel this small, so it is not compared with it"))
    return checks


def _relation(value: float, other: float, other_name: str) -> str:
    """'below cold's 4.54 µs', 'within 6% of graph's 1.36 µs' (ORDER_SLACK) or '25% above hot's 9.00 µs'."""
    diff = value / other - 1 if other > 0 else 0.0
    if value <= other:
        return f"below {other_name}'s {_t(other)}"
    if diff <= ORDER_SLACK:
        return f"within {diff:.0%} of {other_name}'s {_t(other)}"
    return f"{diff:.0%} above {other_name}'s {_t(other)}"


def _t(seconds: float) -> str:
    return format_time(seconds)


def ncu_time_of_square(elements: int) -> float:
    """Device seconds of one call of square's eager impl at ``elements`` float32, from Nsight Compute
    (gpu__time_duration.sum over its kernels, --clock-control none, caches flushed by ncu)."""
    from kernelkit.profiling.ncu import run_ncu

    report = run_ncu("square", "eager", size=str(elements), dtype="float32", timeout=120.0)
    total = sum(k.summary()["duration_ns"] or 0.0 for k in report.kernels)
    return total / 1e9


def ncu_presence() -> tuple[Check, Any]:
    """(the ncu check, its path or None)."""
    from kernelkit.profiling.ncu import NcuNotFound, find_ncu

    try:
        path = find_ncu()
    except NcuNotFound as exc:
        return Check("ncu", "warn", f"{str(exc).split('. ')[0]}: timings are cross-checked between modes only"), None
    return Check("ncu", "info", f"found at {path}"), path
