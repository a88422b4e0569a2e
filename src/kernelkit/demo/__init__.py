"""`kernelkit demo`: the guided tour of the loop (time, check, bench, profile, asm, ncu) on square and softmax,
and matmul's ladder of kernels as % of cuBLAS (matmul.py).

Each step prints a heading, the lesson in a sentence or two, then the evidence from the library. A step that
breaks is reported in red and the tour goes on; the steps themselves live in steps.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kernelkit import runner
from kernelkit.demo import matmul as demo_matmul
from kernelkit.demo import steps as demo_steps
from kernelkit.demo.steps import DemoContext, Outcome
from kernelkit.errors import describe_exception
from kernelkit.target import resolve_device

EXIT_FAILED, EXIT_INTERRUPTED = 1, 130
RESULT_STYLE = {"ok": "[green]ok[/]", "failed": "[bold red]FAILED[/]", "skipped": "[yellow]skipped[/]"}
NEXT_COMMANDS = (
    ("kernelkit doctor", "can this machine's timings be trusted? a verdict per timing mode"),
    ("kernelkit ops", "every built-in op and its impls"),
    ("kernelkit check softmax --impl triton_online --dtypes bf16", "one impl, one dtype, all the op's sizes"),
    ("kernelkit bench square", "every impl at every bench size, stored"),
    ("kernelkit bench matmul --dtypes fp32 --plot plots", "the whole ladder at every bench size, with its roofline"),
    ("kernelkit bench softmax --sizes 8192x1000 --mode graph", "CUDA-graph replay: launch cost hidden"),
    ("kernelkit runs; kernelkit compare latest-1 latest", "stored runs, and what changed between two"),
    ("kernelkit profile square --impl triton_flat --size 4096x4096", "torch.profiler table, trace, diagnosis"),
    ("kernelkit ncu square --impl triton_flat --size 8192x8192", "Nsight Compute counters and findings"),
    ("kernelkit asm square --impl cuda_vec4 --ir sass", "the SASS itself, after the summary"),
    ("kernelkit codegen softmax --size 8192x1000", "what torch.compile generated: the code to beat"),
)


@dataclass(frozen=True)
class Step:
    """One lesson of the demo: its heading, the one or two sentences it teaches, and the function that shows it."""

    title: str
    lesson: str
    run: Callable[[DemoContext], Outcome]


def tour() -> list[Step]:
    """The steps in order (built at call time, so a test can replace one step's function)."""
    return [
        Step("Timing: the wrong way and the right way",
             "GPU work is asynchronous: a call returns once its kernel is queued, long before the kernel ends. "
             "A wall clock without synchronize times the launch; kk.bench synchronizes, warms up, flushes the L2 "
             "cache and samples until the median is stable.", demo_steps.timing_step),
        Step("Check every impl against the reference",
             "A fast wrong kernel is worth nothing, so correctness comes first: every impl of square and softmax "
             "runs against the plain PyTorch reference, each case in its own worker process, and ends in a status.",
             demo_steps.check_step),
        Step("Benchmark against eager PyTorch and torch.compile",
             "A kernel is worth keeping only if it beats what PyTorch already gives you. bench_op re-checks each "
             "impl, times impls and baselines interleaved on the same inputs, and compares each median with "
             "this device's calibrated ceiling.", demo_steps.bench_step),
        Step("The matmul ladder: from the naive kernel to cuBLAS",
             "Square and softmax are memory-bound; a matmul reuses each element it loads, so it can be compute-bound. "
             "Each rung of the CUDA fp32 ladder adds one idea (coalescing, shared-memory tiles, register tiles, "
             "vector loads, warp tiles) and closes part of the gap to cuBLAS; Triton gets there in bf16 with far "
             "less code.", demo_matmul.matmul_step),
        Step("Where the time goes: torch.profiler",
             "The profiler lists what one call launches and how long each piece ran; the launch diagnosis says "
             "whether the GPU was kept busy or sat waiting for the CPU (launch-bound).", demo_steps.profile_step),
        Step("What the compiler made: PTX/SASS summary",
             "Source that looks vectorized is not proof: the compiled SASS shows the width of every global load "
             "and store, the registers per thread and any spills. NVRTC compiles for this GPU (sm_90 without one).",
             demo_steps.asm_step),
        Step("Nsight Compute: the hardware counters",
             "ncu replays one kernel under the GPU's performance counters: achieved DRAM and SM throughput, "
             "occupancy, and its own findings with an estimated speedup.", demo_steps.ncu_step),
    ]


def run_demo(
    console: Console,
    device: str | None = None,
    timeout: float = runner.DEFAULT_TIMEOUT,
    quick: bool = False,
    out_dir: Path = Path("kernelkit-results"),
) -> int:
    """Run every step on ``device`` (default: cuda when a GPU is visible); returns the exit code.

    0 when every step that ran succeeded (skipped steps do not count), 1 when one failed, 130 when interrupted.
    ``timeout``: seconds per checked case; ``out_dir``: where the profiler trace goes.
    """
    if timeout <= 0:
        from kernelkit.errors import SpecError

        raise SpecError(f"--timeout must be positive, got {timeout}")
    ctx = DemoContext(console, resolve_device(device), timeout, quick, out_dir)
    _print_header(ctx)
    outcomes: list[tuple[str, Outcome, float]] = []
    with runner.reuse_workers():  # the steps share their workers: one start, one CUDA context, warm compiles
        interrupted = _run_steps(ctx, outcomes)
    _print_summary(ctx, outcomes, interrupted)
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_FAILED if any(o.status == "failed" for _, o, _ in outcomes) else 0


def _run_steps(ctx: DemoContext, outcomes: list[tuple[str, Outcome, float]]) -> bool:
    """Each step in order, its outcome and seconds into ``outcomes``; True when Ctrl-C stopped the tour."""
    console = ctx.console
    for number, step in enumerate(tour(), 1):
        console.print()
        console.rule(f"[bold]{number}. {escape(step.title)}", align="left")
        console.print(step.lesson, highlight=False)
        console.print()
        began = time.perf_counter()
        try:
            outcome = step.run(ctx)
        except KeyboardInterrupt:
            outcomes.append((step.title, Outcome("failed", "interrupted"), time.perf_counter() - began))
            return True
        except Exception as exc:  # noqa: BLE001 - one broken step must not end the tour
            outcome = Outcome("failed", describe_exception(exc))
            console.print(f"[bold red]step {number} failed:[/] {escape(outcome.note)}", highlight=False)
        outcomes.append((step.title, outcome, time.perf_counter() - began))
    return False


def _print_header(ctx: DemoContext) -> None:
    from kernelkit.measure import host

    ctx.console.rule("[bold]kernelkit demo")
    ctx.console.print(
        f"device: {ctx.device} ({escape(host.device_name(ctx.device))}); torch {torch.__version__}"
        f"{'; quick: fewer sizes and dtypes' if ctx.quick else ''}", highlight=False)
    ctx.console.print(
        "The loop on two built-in ops, square (elementwise) and softmax (a row reduction): time a kernel correctly, "
        "check every impl, benchmark against eager PyTorch and torch.compile, climb matmul's ladder of kernels "
        "towards cuBLAS, then look inside with torch.profiler, the compiled SASS and Nsight Compute.",
        highlight=False)
    if not ctx.gpu:
        ctx.console.print(
            "[yellow]No GPU here[/]: Triton runs in its interpreter, Numba in its CUDA simulator, CUDA C++ is compiled "
            "but not run, and every time printed is a CPU timing, never GPU performance.", highlight=False)


def _print_summary(ctx: DemoContext, outcomes: list[tuple[str, Outcome, float]], interrupted: bool) -> None:
    console = ctx.console
    console.print()
    console.rule("[bold]Summary", align="left")
    table = Table(show_header=True, title_justify="left")
    for name in ("step", "result", "time", "what happened"):
        table.add_column(name, justify="right" if name == "time" else "left", overflow="fold",
                         max_width=90 if name == "what happened" else None)
    for number, (title, outcome, seconds) in enumerate(outcomes, 1):
        table.add_row(f"{number}. {escape(title)}", RESULT_STYLE[outcome.status], f"{seconds:.0f} s",
                      escape(outcome.note))
    console.print(table)
    total = sum(seconds for _, _, seconds in outcomes)
    counts = {s: sum(o.status == s for _, o, _ in outcomes) for s in ("ok", "skipped", "failed")}
    console.print(f"{len(outcomes)} steps in {total:.0f} s on {ctx.device}: {counts['ok']} ok, {counts['skipped']} "
                  f"skipped, {counts['failed']} failed{' (interrupted)' if interrupted else ''}", highlight=False)
    console.print("\n[bold]Go further[/]")
    width = max(len(command) for command, _ in NEXT_COMMANDS)
    for command, what in NEXT_COMMANDS:
        console.print(f"  [cyan]{escape(command.ljust(width))}[/]  [dim]{escape(what)}[/]", highlight=False)
