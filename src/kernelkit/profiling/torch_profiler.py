"""Profile one case under torch.profiler: the op table, a Chrome/Perfetto trace, and a launch diagnosis.

The case runs in this process, one impl call per profiler step, on the schedule wait=1 (the first call compiles
and autotunes, unrecorded), warmup=2 (the profiler warms up, discarded), active=steps (recorded). Each call sits
in an NVTX range and a ``record_function`` range named after the case, to be found in nsys and in the trace.

The launch diagnosis reads the recorded trace: how busy the GPU was over the active window, and per kernel how
long it ran against how long the CPU took to get it going. The active calls are not synchronized one by one (only
the last is, so its work lands in the window): a queue that runs dry between kernels is then the CPU's doing.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from kernelkit.errors import SpecError
from kernelkit.profiling import nvtx
from kernelkit.spec import CaseSetup, Size
from kernelkit.target import prepare_case

DEFAULT_OUT_DIR = Path("kernelkit-results") / "profile"
WAIT_STEPS, WARMUP_STEPS, ROW_LIMIT = 1, 2, 15
# The API calls that launch a kernel: runtime (torch's own kernels) and driver (Triton, cuda.core).
LAUNCH_CALLS = frozenset({"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx"})
DEVICE_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})  # work on the GPU's timeline
API_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})  # CPU-side CUDA API calls
STEP_PREFIX = "ProfilerStep#"  # the range torch.profiler puts around each step


@dataclass(frozen=True)
class TraceEvent:
    """One complete ('X') event of a Chrome trace, times in microseconds; ``category`` is the trace's 'cat'."""

    name: str
    category: str
    start_us: float
    dur_us: float
    correlation: int | None = None  # CUPTI's id, shared by a kernel and the API call that launched it

    @property
    def end_us(self) -> float:
        return self.start_us + self.dur_us


@dataclass(frozen=True)
class KernelStats:
    """One kernel (or memcpy/memset) name over the active window; times are means per launch, in microseconds."""

    name: str
    count: int
    device_us: float
    launch_us: float | None  # the CPU call that launched it (None: no launch call matched)
    launch_api: str | None  # cudaLaunchKernel, cuLaunchKernelEx, ...
    gap_us: float | None  # GPU idle just before it, since the previous kernel ended (None: it was always first)

    @property
    def launch_bound(self) -> bool:
        """The CPU side (idle gap or launch call) takes longer than the kernel runs: the GPU waits for the CPU."""
        return max(self.gap_us or 0.0, self.launch_us or 0.0) > self.device_us


@dataclass(frozen=True)
class LaunchDiagnosis:
    """How busy the GPU was over the active window, and which kernels wait on the CPU. Plain data."""

    window_us: float
    busy_us: float  # the union of device intervals inside the window
    kernels: tuple[KernelStats, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def has_device_activity(self) -> bool:
        return bool(self.kernels)

    @property
    def busy_fraction(self) -> float:
        return self.busy_us / self.window_us if self.window_us > 0 else 0.0


@dataclass
class ProfileResult:
    """What ``profile`` found: the key_averages table, where the traces are, and the launch diagnosis."""

    label: str
    device: str
    steps: int
    table: str
    trace_path: Path
    diagnosis: LaunchDiagnosis
    tensorboard_paths: tuple[Path, ...] = ()


def events_from_chrome_trace(trace: Mapping[str, Any]) -> list[TraceEvent]:
    """The complete events of an exported trace (``export_chrome_trace``'s JSON), with their correlation ids."""
    events = []
    for raw in trace.get("traceEvents", []):
        if raw.get("ph") == "X" and "ts" in raw:
            correlation = (raw.get("args") or {}).get("correlation")
            events.append(TraceEvent(
                str(raw.get("name", "")), str(raw.get("cat", "")).lower(), float(raw["ts"]),
                float(raw.get("dur", 0.0)), int(correlation) if correlation is not None else None,
            ))
    return events


def diagnose_launches(events: Iterable[TraceEvent]) -> LaunchDiagnosis:
    """Busy fraction and per-kernel launch costs of one active window (pure: events in, plain data out).

    The window spans the profiler's steps (or every event, when there are none) and the device work in them.
    A kernel's launch call is the CUDA API event with its correlation id; when the trace has no ids, the launch
    calls (by name) are paired with the kernels in time order, if there are as many of each.
    """
    events = list(events)
    device = sorted((e for e in events if e.category in DEVICE_CATEGORIES), key=lambda e: e.start_us)
    steps = [e for e in events if e.name.startswith(STEP_PREFIX) and e.category != "gpu_user_annotation"]
    spans = steps or events
    start = min((e.start_us for e in spans), default=0.0)
    end = max((e.end_us for e in [*spans, *device]), default=0.0)
    if not device:
        return LaunchDiagnosis(window_us=end - start, busy_us=0.0)
    launches = _match_launches(device, [e for e in events if e.category in API_CATEGORIES])
    gaps: list[float | None] = [None]
    busy, reach = 0.0, start
    for i, event in enumerate(device):
        if i:
            gaps.append(max(0.0, event.start_us - reach))
        busy += max(0.0, min(event.end_us, end) - max(event.start_us, reach))  # the union, clipped to the window
        reach = max(reach, min(event.end_us, end))
    stats = tuple(_stats(name, device, launches, gaps) for name in dict.fromkeys(e.name for e in device))
    return LaunchDiagnosis(end - start, busy, stats, tuple(_launch_warning(s) for s in stats if s.launch_bound))


def _match_launches(device: list[TraceEvent], api: list[TraceEvent]) -> list[TraceEvent | None]:
    by_id: dict[int, TraceEvent] = {}
    for call in sorted(api, key=lambda c: c.name not in LAUNCH_CALLS):  # a launch call wins an id it shares
        if call.correlation is not None:
            by_id.setdefault(call.correlation, call)
    matched = [by_id.get(e.correlation) if e.correlation is not None else None for e in device]
    if any(m is not None for m in matched):
        return matched
    kernels = [i for i, e in enumerate(device) if e.category == "kernel"]
    calls = sorted((c for c in api if c.name in LAUNCH_CALLS), key=lambda c: c.start_us)
    if len(calls) == len(kernels):
        for i, call in zip(kernels, calls, strict=True):
            matched[i] = call
    return matched


def _stats(name: str, device: list[TraceEvent], launches: list[TraceEvent | None], gaps: list[float | None]
           ) -> KernelStats:
    picks = [i for i, e in enumerate(device) if e.name == name]
    calls = [c for c in (launches[i] for i in picks) if c is not None]
    name_gaps = [g for g in (gaps[i] for i in picks) if g is not None]
    return KernelStats(
        name=name, count=len(picks), device_us=_mean([device[i].dur_us for i in picks]),
        launch_us=_mean([c.dur_us for c in calls]) if calls else None,
        launch_api=calls[0].name if calls else None, gap_us=_mean(name_gaps) if name_gaps else None,
    )


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _launch_warning(s: KernelStats) -> str:
    cpu = [f"{s.gap_us:.1f} us idle before it" if s.gap_us is not None else "",
           f"{s.launch_us:.1f} us in {s.launch_api}" if s.launch_us is not None else ""]
    return (f"{s.name} is launch-bound: it runs {s.device_us:.1f} us on the GPU, but the CPU side takes longer "
            f"({', '.join(c for c in cpu if c)} per launch); fewer, larger launches, fusion or a CUDA graph help")


def profile(
    target: str,
    impl: str,
    *,
    size: Size | str | None = None,
    dtype: torch.dtype | str | None = None,
    device: str | None = None,
    steps: int = 5,
    out_dir: str | Path | None = None,
    tensorboard: bool = False,
) -> ProfileResult:
    """Run one case of ``target`` (a built-in op name or a .py file) under torch.profiler (see the module doc).

    size/dtype default to the op's first for the device ('1823x781' and 'bf16' are accepted too). Writes the
    Chrome/Perfetto trace to ``out_dir`` (default ./kernelkit-results/profile) as
    <op>_<impl>_<size>_<dtype>_<device>.trace.json and, with ``tensorboard``, a TensorBoard trace under
    out_dir/tensorboard. Raises KernelkitError for bad arguments or an impl that cannot run here; what the impl
    itself raises propagates.
    """
    if steps < 1:
        raise SpecError(f"--steps must be at least 1, got {steps}")
    case = prepare_case(target, impl, size=size, dtype=dtype, device=device)
    folder = Path(out_dir) if out_dir is not None else DEFAULT_OUT_DIR
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{re.sub(r'[^A-Za-z0-9._-]+', '_', case.label)}_{case.device}"
    trace_path, tb_dir = folder / f"{name}.trace.json", folder / "tensorboard"
    written: list[Path] = []

    def save(prof: torch.profiler.profile) -> None:
        # kineto exports a run's trace only once: TensorBoard's handler writes it, the Chrome trace is a copy.
        if not tensorboard:
            prof.export_chrome_trace(str(trace_path))
            return
        earlier = set(tb_dir.glob("*.pt.trace.json"))
        torch.profiler.tensorboard_trace_handler(str(tb_dir), worker_name=name)(prof)
        written.extend(sorted(set(tb_dir.glob("*.pt.trace.json")) - earlier))
        shutil.copyfile(written[-1], trace_path)

    averages = _run(case, steps, save).key_averages()
    table = averages_table(averages, case.device)
    diagnosis = diagnose_launches(events_from_chrome_trace(json.loads(trace_path.read_text())))
    return ProfileResult(case.label, case.device, steps, table, trace_path, diagnosis, tuple(written))


def _run(case: CaseSetup, steps: int, on_trace_ready: Any) -> torch.profiler.profile:
    """wait + warmup + steps impl calls, one per profiler step, each in an NVTX and a record_function range."""
    on_cuda = case.device == "cuda"
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if on_cuda else [])
    schedule = torch.profiler.schedule(wait=WAIT_STEPS, warmup=WARMUP_STEPS, active=steps, repeat=1)
    total = WAIT_STEPS + WARMUP_STEPS + steps
    # One cycle (repeat=1): torch's notice that it clears events between cycles does not apply.
    with warnings.catch_warnings(), _without_kineto_notices():
        warnings.filterwarnings("ignore", message=".*Profiler clears events at the end of each cycle.*")
        with torch.profiler.profile(activities=activities, schedule=schedule, on_trace_ready=on_trace_ready,
                                    record_shapes=True) as prof:
            for step in range(total):
                with nvtx.range(case.label), torch.profiler.record_function(case.label):
                    case.call()
                # Drain the GPU's queue before the active window opens and before it closes, so exactly the
                # active calls' work is recorded; the calls in between stay asynchronous, as in a real program.
                if on_cuda and (step < WAIT_STEPS + WARMUP_STEPS or step == total - 1):
                    torch.cuda.synchronize()
                prof.step()
    return prof


@contextlib.contextmanager
def _without_kineto_notices() -> Iterator[None]:
    """Hold back kineto's native notices ('USDT: ... profiler_start', printed on stderr at every start and stop of a
    profiler since torch 2.13, with no setting to silence them); anything else written to stderr meanwhile (the
    impl's own output) is passed on when the block ends."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            text = sink.read().decode("utf-8", "replace")
            sys.stderr.write("".join(line for line in text.splitlines(keepends=True) if not line.startswith("USDT:")))
            sys.stderr.flush()


NAME_CHARS = 50  # the table's width: 50 + 4 or 6 columns of 11 = under 120 (torch's own table is 125-190 wide)


def averages_table(averages: Any, device: str) -> str:
    """torch.profiler's key averages as a text table that fits 120 columns: name, calls, self and total CPU time,
    and on a GPU self and total device time; sorted by device time on a GPU, CPU time on the CPU."""
    key = _sort_key(averages, device)
    rows = sorted(averages, key=lambda e: getattr(e, key, 0.0), reverse=True)[:ROW_LIMIT]
    gpu = device == "cuda"
    device_total = "device_time_total" if key != "cuda_time_total" else "cuda_time_total"
    device_self = "self_device_time_total" if key != "cuda_time_total" else "self_cuda_time_total"
    header = ["calls", "self CPU", "CPU total", *(["self GPU", "GPU total"] if gpu else [])]
    lines = [f"{'name':<{NAME_CHARS}}" + "".join(f"{h:>11}" for h in header)]
    lines.append("-" * len(lines[0]))
    for e in rows:
        name = e.key if len(e.key) <= NAME_CHARS - 1 else e.key[:NAME_CHARS - 4] + "..."
        cells = [str(e.count), _us(e.self_cpu_time_total), _us(e.cpu_time_total)]
        if gpu:
            cells += [_us(getattr(e, device_self, 0.0)), _us(getattr(e, device_total, 0.0))]
        lines.append(f"{name:<{NAME_CHARS}}" + "".join(f"{c:>11}" for c in cells))
    return "\n".join(lines)


def _us(value: float) -> str:
    """Microseconds as '254.3us', '143.0ms', '2.10s'."""
    if value >= 1e6:
        return f"{value / 1e6:.2f}s"
    if value >= 1e3:
        return f"{value / 1e3:.1f}ms"
    return f"{value:.1f}us"


def _sort_key(averages: Any, device: str) -> str:
    """Device time on CUDA, CPU time otherwise. torch >= 2.4 calls it device_time_total, older cuda_time_total."""
    if device != "cuda":
        return "cpu_time_total"
    probe = averages[0] if len(averages) else None
    return "device_time_total" if probe is None or hasattr(probe, "device_time_total") else "cuda_time_total"
