"""The steps of `kernelkit demo`: each prints its evidence on the console and returns an Outcome.

A step raises only when something broke; `demo.run_demo` turns that into a red line and goes on. What a step
cannot do on this machine (no GPU, no ncu) is an Outcome marked skipped, with the reason.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kernelkit.report.progress import RunBar, run_bar
from kernelkit.spec import Size, dtype_name

FP32, BF16 = torch.float32, torch.bfloat16
TIMING_SIZE = {"cuda": (1 << 26,), "cpu": (1 << 22,)}  # 256 MiB of fp32 on a GPU (~0.2 ms on an H100), 16 MiB here
TIMING_BUDGET = {"cuda": 2.0, "cpu": 0.5}  # seconds of kk.bench sampling
BENCH_BUDGET = {"cuda": 1.0, "cpu": 0.2}  # seconds of sampling per impl and (size, dtype), at most
NCU_MIN_TIMEOUT = 180.0  # ncu starts a fresh process and JIT-compiles the kernel under its own interception
PROFILE_IMPL = {"cuda": "triton_flat", "cpu": "eager"}
NCU_CASE = ("square", "triton_flat", "4096x4096")  # 64 MiB in, 64 MiB out: past L2, one kernel of ~45 us


@dataclass(frozen=True)
class DemoContext:
    """What every step needs: where to print, the device, the per-case timeout, quick mode, where files go."""

    console: Console
    device: str  # "cuda" or "cpu", already resolved
    timeout: float
    quick: bool = False
    out_dir: Path = Path("kernelkit-results")

    @property
    def gpu(self) -> bool:
        return self.device == "cuda"


@dataclass(frozen=True)
class Outcome:
    """How a step ended: 'ok', 'failed' (it ran and found something wrong) or 'skipped' (why, in ``note``)."""

    status: str
    note: str = ""


@dataclass(frozen=True)
class Sweep:
    """What one op is checked or benchmarked at."""

    op: str
    sizes: tuple[Size, ...]
    dtypes: tuple[torch.dtype, ...]


# ---- 1. timing -------------------------------------------------------------------------------------------------

def timing_step(ctx: DemoContext) -> Outcome:
    """Wall clock without and with synchronize (GPU), then kk.bench in cold mode, on square's reference."""
    from kernelkit.measure.timer import bench
    from kernelkit.target import prepare_case

    setup = prepare_case("square", "eager", size=TIMING_SIZE[ctx.device], dtype=FP32, device=ctx.device)
    reference, inputs = setup.op.reference, setup.inputs
    nbytes, _ = setup.op.cost(inputs, [reference(*inputs)])  # the first call, outside every timing
    label = f"square reference (x * x), {setup.size[0]:,} float32 ({nbytes / 2**20:.0f} MiB moved)"
    table = Table(title=_timing_title(ctx, label), title_justify="left")
    for name in ("method", "time", "what it measured"):
        table.add_column(name, justify="right" if name == "time" else "left")
    if ctx.gpu:
        _wall_clock_rows(table, lambda: reference(*inputs))
    else:
        ctx.console.print("No GPU here: CPU work is synchronous (a call returns when its work is done), so there is "
                          "no asynchrony to show. The same timing tools on the CPU reference instead:", highlight=False)
        start = time.perf_counter()
        reference(*inputs)
        table.add_row("wall clock, one call", _time(time.perf_counter() - start), "one sample: no spread, no warm-up")
    budget = TIMING_BUDGET[ctx.device] / (2 if ctx.quick else 1)
    m = bench(reference, *inputs, mode="cold", bytes=nbytes, budget=budget, label="square")
    s = m.stats
    table.add_row(
        "kk.bench, cold mode", _time(s.median),
        f"median of n={s.n} (p20-p80 {_time(s.p20)} to {_time(s.p80)}), {m.gbps or 0:.1f} GB/s; cache flushed before "
        f"each sample; stopped: {m.stop_reason}; first call {_time(m.first_call)}, {m.warmup_calls} warm-up calls"
        + (f"; kernel alone (profiler): {_time(m.kernel_seconds)}" if m.kernel_seconds else ""),
    )
    ctx.console.print(table)
    for warning in m.warnings:
        ctx.console.print(f"[yellow]warning[/] {escape(warning)}", highlight=False)
    return Outcome("ok", f"kk.bench median {_time(s.median)}, n={s.n}, stopped: {m.stop_reason}"
                   + ("" if ctx.gpu else " (CPU timings)"))


def _timing_title(ctx: DemoContext, label: str) -> str:
    from kernelkit.measure import host

    where = host.device_name(ctx.device)
    prefix = "" if ctx.gpu else "CPU timings (not GPU performance): "
    return f"{prefix}{label} on {escape(where)}"


def _wall_clock_rows(table: Table, call: Callable[[], Any]) -> None:
    """One call timed without synchronize (and when it really ended), then one call with synchronize."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    call()
    returned = time.perf_counter() - start
    torch.cuda.synchronize()
    finished = time.perf_counter() - start
    table.add_row("[red]wall clock, no synchronize[/]", _time(returned),
                  f"the launch only: the call returned while the kernel ran on; synchronize() came back "
                  f"{_time(finished)} after the call began ({finished / max(returned, 1e-9):.0f}x later)")
    torch.cuda.synchronize()
    start = time.perf_counter()
    call()
    torch.cuda.synchronize()
    table.add_row("wall clock + synchronize", _time(time.perf_counter() - start),
                  "launch + kernel + synchronize: about right, but one sample, overheads included, no spread")


def _time(seconds: float | None) -> str:
    from kernelkit.report.bench_table import format_time

    return format_time(seconds)


# ---- 2. check --------------------------------------------------------------------------------------------------

def check_sweeps(device: str, quick: bool) -> list[Sweep]:
    """GPU: edge shapes (odd, one long row, rows past a block's registers) in fp32 and bf16; CPU: the op's tiny
    CPU sizes in fp32 (the interpreter and simulator are slow, and the interpreter gets bf16 wrong)."""
    from kernelkit.target import open_target

    if device == "cuda":
        dtypes = (FP32,) if quick else (FP32, BF16)
        square: tuple[Size, ...] = ((1823, 781),) if quick else ((1823, 781), (1, 4097))
        softmax: tuple[Size, ...] = ((1823, 781),) if quick else ((1823, 781), (37, 32769))
        return [Sweep("square", square, dtypes), Sweep("softmax", softmax, dtypes)]
    sweeps = []
    for name in ("square", "softmax"):
        sizes = tuple(open_target(name, device).op().cpu_sizes)
        sweeps.append(Sweep(name, sizes[:1] if quick else sizes, (FP32,)))
    return sweeps


def check_step(ctx: DemoContext) -> Outcome:
    """Every impl of square and softmax checked (one worker process for both ops), one check table per op."""
    from kernelkit.report.check_table import print_report, summary_line
    from kernelkit.runs import check as runs

    sweeps = check_sweeps(ctx.device, ctx.quick)
    cases = [case for sweep in sweeps
             for case in runs.plan(sweep.op, device=ctx.device, sizes=sweep.sizes, dtypes=sweep.dtypes)[1]]
    # torch's load_inline builds a C++ extension against torch's headers: half a minute of nvcc on a GPU machine,
    # minutes of compile-only checking on a small CPU, the first time. The tour leaves it to `kernelkit check`.
    left_out = sorted({f"{c.op}/{c.impl}" for c in cases if _builds_an_extension(c.op, c.impl)})
    cases = [c for c in cases if f"{c.op}/{c.impl}" not in left_out]
    why = (f" Left out here: {', '.join(left_out)} (torch's load_inline: its first build compiles a C++ extension "
           "against torch's headers, half a minute on a GPU machine and minutes on a small CPU; `kernelkit check "
           "square` runs it, and caches the build)." if left_out else "")
    if not ctx.gpu:
        ctx.console.print(
            "No GPU: Triton runs in its interpreter and Numba in its CUDA simulator, at tiny sizes; CUDA C++ kernels "
            "are compiled (NVRTC) to prove they build, then SKIPPED." + why, highlight=False)
    elif why:
        ctx.console.print(why.strip(), highlight=False)
    with _progress(ctx, "checking") as bar:
        bar.planned(len(cases))
        report = runs.run_cases(cases, ctx.device, timeout=ctx.timeout, on_result=bar.done, on_phase=bar.phase)
    if report.interrupted:
        raise KeyboardInterrupt
    notes = []
    for sweep in sweeps:
        mine = [r for r in report.results if r.op == sweep.op]
        planned = sum(case.op == sweep.op for case in cases)
        print_report(ctx.console, mine, report.device, planned, title=_sweep_title(sweep))
        ctx.console.print()
        notes.append(f"{sweep.op}: {summary_line(mine, report.device, planned, False)}")
    bad = sum(r.status.failed for r in report.results)
    return Outcome("failed" if bad else "ok", "; ".join(notes))


def _builds_an_extension(op_name: str, impl_name: str) -> bool:
    """Whether the impl's kernels include a torch load_inline extension (a C++ build against torch's headers)."""
    from kernelkit.backends.cuda import InlineExtension
    from kernelkit.target import open_target

    impl = open_target(op_name).op().impls.get(impl_name)
    return impl is not None and any(isinstance(k, InlineExtension) for k in impl.kernels)


def _sweep_title(sweep: Sweep) -> str:
    sizes = ", ".join("x".join(map(str, s)) for s in sweep.sizes)
    return f"{sweep.op}: {sizes}; {', '.join(dtype_name(d) for d in sweep.dtypes)}"


# ---- 3. bench --------------------------------------------------------------------------------------------------

# The GPU bench's contenders: the learner's first version, the best of each DSL, and (softmax) the lecture's five
# passes; the baselines come with every sweep. The demo teaches the method; `kernelkit bench OP` times every impl.
GPU_BENCH_IMPLS = {"square": ("triton_rowwise", "triton_flat", "cuda_vec4", "numba_flat"),
                   "softmax": ("eager_fivepass", "triton_rowwise", "triton_online", "cuda_warp")}
# --quick: two contenders and eager, named (so torch.compile, ~8 s of compiling on a first run, is left out).
QUICK_GPU_BENCH_IMPLS = {"square": ("triton_flat", "cuda_vec4", "eager"),
                         "softmax": ("triton_rowwise", "cuda_warp", "eager")}


def bench_sweeps(device: str, quick: bool) -> list[Sweep]:
    """GPU: sizes well past the 50 MB L2 (square 256 MiB of fp32; softmax 32768 rows of 4096 in bf16); CPU: each
    op's smallest CPU size in fp32 (the Numba simulator runs ~100 us per thread, and every timed call of every impl
    pays it)."""
    from kernelkit.target import open_target

    if device == "cuda":
        return [Sweep("square", ((1 << 26,),), (FP32,)), Sweep("softmax", ((32768, 4096),), (BF16,))]
    return [Sweep(name, (min(open_target(name, device).op().cpu_sizes, key=math.prod),), (FP32,))
            for name in ("square", "softmax")]


def bench_impls(op_name: str, device: str, quick: bool = False) -> list[str]:
    """GPU: the contenders above; CPU: every impl whose backend runs there (no CUDA C++). The baselines (eager,
    compile) come with every sweep, so they are not named (naming one would time it alone)."""
    from kernelkit import backends
    from kernelkit.spec import BASELINES
    from kernelkit.target import open_target

    if device == "cuda":
        return list((QUICK_GPU_BENCH_IMPLS if quick else GPU_BENCH_IMPLS)[op_name])
    op = open_target(op_name, device).op()
    return [name for name, impl in op.impls.items()
            if backends.backend(impl.backend).runs_on(device) and name not in BASELINES]


def bench_step(ctx: DemoContext) -> Outcome:
    """bench_op of square and softmax against eager and torch.compile; one bench table each."""
    from kernelkit.report.bench_table import bench_table, note_lines, skip_lines, warning_lines
    from kernelkit.results import Status
    from kernelkit.runs.bench import bench_op

    budget = BENCH_BUDGET[ctx.device] / (2 if ctx.quick else 1)
    ctx.console.print(
        f"Cold mode (cache flushed before each sample), at most {budget:g} s of sampling per impl and case, each "
        "(size, dtype) in a worker process. The first torch.compile of a shape takes seconds to tens of seconds. "
        "Not stored: the demo leaves your results store alone (`kernelkit bench` records its runs).", highlight=False)
    if ctx.gpu and ctx.quick:
        ctx.console.print("--quick: eager is the only baseline; torch.compile (seconds of compiling per shape on a "
                          "first run) comes with `kernelkit demo` and `kernelkit bench`.", highlight=False)
    if not ctx.gpu:
        ctx.console.print("CPU: fp32 at a tiny size, the impls that run here (no CUDA C++); the Triton interpreter "
                          "and the Numba simulator are slow by design, so these rows teach the method, not speed.",
                          highlight=False)
    notes, ok = [], True
    for sweep in bench_sweeps(ctx.device, ctx.quick):
        with _progress(ctx, f"benchmarking {sweep.op}") as bar:
            report = bench_op(sweep.op, impls=bench_impls(sweep.op, ctx.device, ctx.quick), sizes=sweep.sizes,
                              dtypes=sweep.dtypes, device=ctx.device, budget=budget, timeout=ctx.timeout, store=None,
                              on_result=bar.done, on_phase=bar.phase, on_plan=bar.planned)
        if report.interrupted:
            raise KeyboardInterrupt
        shown = [r for r in report.results if r.status is not Status.SKIPPED]
        ctx.console.print(bench_table(shown, title=_sweep_title(sweep), wide=False))
        for line in _fastest(report.results) + skip_lines(report.results) + note_lines(shown) + \
                warning_lines(report.results, notes_shown=True):
            ctx.console.print(line, highlight=False)
        ctx.console.print()
        ok = ok and report.ok
        timed = sum(r.measurement is not None for r in report.results)
        notes.append(f"{sweep.op}: {timed} timed, {len(report.results) - len(shown)} skipped"
                     + "".join(f", {r.impl} {r.status.value}" for r in report.results if r.status.failed))
    return Outcome("ok" if ok else "failed", "; ".join(notes))


def _fastest(results: Sequence[Any]) -> list[str]:
    """Per (size, dtype): the fastest timed impl, its median, its speedups over the baselines, % of ceiling."""
    from kernelkit.report.bench_table import ceiling_text

    best: dict[tuple[Any, str], Any] = {}
    for r in results:
        if r.role == "impl" and r.measurement is not None and r.measurement.samples:
            key = (r.size, r.dtype)
            if key not in best or r.measurement.median < best[key].measurement.median:
                best[key] = r
    lines = []
    for (size, dtype), r in best.items():
        vs = ", ".join(_versus(name, ratio) for name, ratio in r.speedups.items())
        ceiling = ceiling_text(r.measurement)
        lines.append(f"fastest impl at {'x'.join(map(str, size))} {dtype}: [bold]{escape(r.impl)}[/], "
                     f"{_time(r.measurement.median)}" + (f", {vs}" if vs else "")
                     + (f", {ceiling} of the calibrated ceiling" if ceiling else ""))
    return lines


def _versus(name: str, ratio: Any) -> str:
    """'[green]1.85x faster than eager[/]', '[red]12.0x slower than compile[/]', 'as fast as eager (within noise)'."""
    if ratio.verdict == "faster":
        return f"[green]{ratio.value:.2f}x faster than {name}[/]"
    if ratio.verdict == "slower":
        return f"[red]{1 / ratio.value:.2f}x slower than {name}[/]"
    return f"as fast as {name} (within noise)"


# ---- 4. profile ------------------------------------------------------------------------------------------------

def profile_step(ctx: DemoContext) -> Outcome:
    """kk.profile of one square impl (triton_flat on a GPU, eager on the CPU) and its launch diagnosis."""
    from kernelkit.profiling.torch_profiler import profile
    from kernelkit.report.profile_table import print_profile

    impl = PROFILE_IMPL[ctx.device]
    if not ctx.gpu:
        ctx.console.print("No GPU: the eager impl, profiled on the CPU; there is no device timeline, so the table "
                          "holds CPU ops only and the diagnosis has nothing to diagnose.", highlight=False)
    result = profile("square", impl, device=ctx.device, out_dir=ctx.out_dir / "profile")
    print_profile(ctx.console, result)
    d = result.diagnosis
    busy = f"GPU busy {d.busy_fraction:.0%}" if d.has_device_activity else "no device activity"
    return Outcome("ok", f"{result.label}: {busy}; {len(d.warnings)} launch-bound warnings; trace in "
                         f"{result.trace_path}")


# ---- 5. asm ----------------------------------------------------------------------------------------------------

def asm_step(ctx: DemoContext) -> Outcome:
    """kk.asm of square's cuda_vec4 and the summary the `asm` command prints, then what it says."""
    from kernelkit.backends.sass import SassMemory
    from kernelkit.profiling.asm import report_for
    from kernelkit.report.profile_table import print_asm_summary

    report = report_for("square", "cuda_vec4")
    print_asm_summary(ctx.console, report)
    notes = []
    for k in report.kernels:
        r, m = k.resources, k.memory
        loads = SassMemory.describe(m.global_loads) if m else "unknown (no disassembler)"
        spills = (r.spill_stores or 0) + (r.spill_loads or 0)
        widest = max(m.global_loads, default=0) if m else 0
        reading = ("16-byte vector loads: the float4 accesses survived compilation" if widest >= 128
                   else "no 128-bit load: the compiler did not vectorize")
        ctx.console.print(f"{k.name}: {r.registers} registers, {spills} bytes spilled, global loads {loads}: "
                          f"{reading}.", highlight=False, markup=False)
        notes.append(f"{k.name}: {r.registers} regs, {spills} B spilled, loads {loads}")
    return Outcome("ok", f"{report.arch}: " + "; ".join(notes))


# ---- 6. ncu ----------------------------------------------------------------------------------------------------

def ncu_step(ctx: DemoContext) -> Outcome:
    """kk.ncu of square triton_flat at a mid size, when there is a GPU and ncu; else skipped with the reason."""
    from kernelkit.profiling.ncu import NcuNotFound, NcuPermissionError, find_ncu, ncu_messages, run_ncu
    from kernelkit.report.profile_table import print_kernels

    if not ctx.gpu:
        return _skip(ctx, "no GPU: Nsight Compute reads the counters of a kernel running on an NVIDIA GPU")
    if ctx.quick:
        return _skip(ctx, f"--quick: ncu replays the kernel under the counters, about 10 s; `kernelkit ncu "
                          f"{NCU_CASE[0]} --impl {NCU_CASE[1]} --size {NCU_CASE[2]}` shows it")
    try:
        find_ncu()
    except NcuNotFound as exc:
        return _skip(ctx, f"{str(exc).split(': ')[0]} on this machine (install Nsight Compute, then put ncu on PATH "
                          "or set $KERNELKIT_NCU)")
    op, impl, size = NCU_CASE
    try:
        report = run_ncu(op, impl, size=size, dtype="float32", timeout=max(ctx.timeout, NCU_MIN_TIMEOUT))
    except NcuPermissionError as exc:
        return _skip(ctx, f"ncu may not read the GPU's counters here: {str(exc).splitlines()[0]}")
    print_kernels(ctx.console, f"ncu: {report.case} (--set {report.section_set})", report.kernels, report.metrics)
    for message in ncu_messages(report.output):
        ctx.console.print(f"[dim]{escape(message)}[/]", highlight=False)
    return Outcome("ok", f"{report.case}: {len(report.kernels)} kernel(s) profiled")


def _skip(ctx: DemoContext, reason: str) -> Outcome:
    ctx.console.print(f"[yellow]skipped:[/] {escape(reason)}", highlight=False)
    return Outcome("skipped", reason)


# ---- shared ----------------------------------------------------------------------------------------------------

@contextmanager
def _progress(ctx: DemoContext, what: str) -> Iterator[RunBar]:
    """The run's progress line while workers run (its phase, results of the planned total); nothing when piped."""
    with run_bar(ctx.console, what) as bar:
        yield bar
