"""The demo's matmul step: the CUDA fp32 ladder, rung by rung, as % of cuBLAS, and the best Triton bf16 kernel.

On a GPU: every rung of ``matmul``'s ladder (ops/matmul: naive -> ... -> warp tiling) at LADDER_SIZE in fp32 and
the Triton kernels at the same size in bf16, each benchmarked with cuBLAS (the eager baseline) by bench_op, so the
gate checks every one before it is timed. On the CPU: the Triton blocked kernel in the interpreter at a tiny size,
and the CUDA rungs compiled for sm_90 (a compile error would show), not run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from rich.markup import escape
from rich.table import Table

from kernelkit.demo.steps import DemoContext, Outcome, _progress, _time
from kernelkit.spec import Size

FP32, BF16 = torch.float32, torch.bfloat16
# 2048^3: 17 GFLOP a call, ~35 ms for the naive rung (~1% of cuBLAS): the whole step stays near 20 s on an H100,
# and 2048 / 128 = 16 x 16 tiles of the top rungs still fill its 132 SMs about twice.
LADDER_SIZE: Size = (2048, 2048, 2048)
CPU_SIZE: Size = (33, 29, 17)  # partial tiles, unaligned rows; four interpreter programs
RUNGS = ("cuda_naive", "cuda_coalesced", "cuda_smem", "cuda_tile1d", "cuda_tile2d", "cuda_vec4", "cuda_warptile")
# The blocked (the tutorial's) and TMA (Hopper) kernels: each autotunes a few configs on its first call, about a
# second of compiling each, so the persistent and split-K variants are left to `kernelkit bench matmul`.
TRITON = ("triton_blocked", "triton_tma")
QUICK_RUNGS, QUICK_TRITON = ("cuda_naive", "cuda_tile2d", "cuda_warptile"), ("triton_blocked",)  # --quick: the ends
BUDGET = {"cuda": 0.5, "cpu": 0.2}  # seconds of sampling per contender


def matmul_step(ctx: DemoContext) -> Outcome:
    """bench_op of the ladder (fp32) and the Triton kernels (bf16) against cuBLAS; one table of % of cuBLAS each."""
    from kernelkit.report.bench_table import skip_lines, warning_lines
    from kernelkit.runs.bench import bench_op

    budget = BUDGET[ctx.device] / (2 if ctx.quick else 1)
    if ctx.gpu:
        rungs, triton = (QUICK_RUNGS, QUICK_TRITON) if ctx.quick else (RUNGS, TRITON)
        plan = [(rungs, FP32, "the CUDA fp32 ladder"), (triton, BF16, "Triton bf16")]
        size = LADDER_SIZE
        ctx.console.print(
            f"{'x'.join(map(str, size))} (M x N x K), cold mode, at most {budget:g} s of sampling each; cuBLAS is the "
            "eager baseline (torch's matmul). Each impl is checked before it is timed.", highlight=False)
    else:
        plan = [((*RUNGS, "triton_blocked"), FP32, "the CUDA ladder (compiled only) and Triton's interpreter")]
        size = CPU_SIZE
        ctx.console.print(
            "No GPU: the CUDA rungs are compiled for sm_90 with NVRTC (a build error would show) and SKIPPED; "
            f"triton_blocked runs in Triton's interpreter at {'x'.join(map(str, size))}, and eager is torch's CPU "
            "matmul. CPU timings teach the method, not speed: on a GPU this step times every rung at "
            f"{'x'.join(map(str, LADDER_SIZE))}.", highlight=False)
    notes, ok = [], True
    for impls, dtype, what in plan:
        with _progress(ctx, f"matmul: {what}") as bar:
            report = bench_op("matmul", impls=[*impls, "eager"], sizes=[size], dtypes=[dtype], device=ctx.device,
                              budget=budget, timeout=ctx.timeout, store=None, on_result=bar.done,
                              on_phase=bar.phase, on_plan=bar.planned)
        if report.interrupted:
            raise KeyboardInterrupt
        versus = "cuBLAS" if ctx.gpu else "eager"
        ctx.console.print(ladder_table(report.results, f"matmul {'x'.join(map(str, size))} {dtype_text(dtype)}: "
                                                      f"{what}, % of {versus}", gpu=ctx.gpu))
        for line in skip_lines(report.results) + warning_lines(report.results):
            ctx.console.print(line, highlight=False)
        ctx.console.print()
        ok = ok and report.ok
        notes.append(summary(report.results, ctx.gpu))
    return Outcome("ok" if ok else "failed", "; ".join(n for n in notes if n))


def percent_of_cublas(result: Any) -> float | None:
    """100 x cuBLAS's median / this impl's median (the eager speedup as a percentage); None when either is untimed."""
    ratio = result.speedups.get("eager")
    return 100 * ratio.value if ratio is not None else None


def ladder_table(results: Sequence[Any], title: str, gpu: bool = True) -> Table:
    """One row per timed impl, in the ladder's order, then cuBLAS (eager): median, TFLOP/s, % of cuBLAS and a bar
    of it. On the CPU eager is torch's CPU matmul, and the caption says these are CPU timings."""
    from kernelkit.report.bench_table import caption, ceiling_text, rate_text

    versus = "cuBLAS" if gpu else "eager"
    table = Table(title=title, title_justify="left", caption=caption(results), caption_justify="left")
    for name in ("impl", "median", "TFLOP/s", f"% of {versus}", "", "% of ceiling"):
        table.add_column(name, justify="left" if name in ("impl", "") else "right")
    timed = [r for r in results if r.measurement is not None and r.measurement.samples]
    for r in sorted(timed, key=lambda r: r.role == "baseline"):
        m = r.measurement
        pct = 100.0 if r.impl == "eager" else percent_of_cublas(r)
        bar = "█" * max(1, round(pct / 5)) if pct is not None else ""
        label = f"{r.impl} ({'cuBLAS' if gpu else 'baseline'})" if r.impl == "eager" else r.impl
        table.add_row(escape(label), _time(m.median),
                      rate_text(m.tflops), f"{pct:.1f}%" if pct is not None else "", bar, ceiling_text(m))
    return table


def summary(results: Sequence[Any], gpu: bool) -> str:
    """'cuda_naive 1.1% ... cuda_warptile 84% of cuBLAS' on a GPU; what ran and what compiled on the CPU; failures."""
    timed = [r for r in results if r.role == "impl" and percent_of_cublas(r) is not None]
    failed = [f"{r.impl} {r.status.value}" for r in results if r.status.failed]
    if gpu:
        text = ", ".join(f"{r.impl} {percent_of_cublas(r):.3g}%" for r in timed)
        best = max(timed, key=percent_of_cublas, default=None)  # type: ignore[arg-type]
        if best is not None and best.dtype == "bfloat16":
            text = f"best Triton bf16: {best.impl} {percent_of_cublas(best):.3g}% of cuBLAS"
        elif text:
            text += " of cuBLAS"
    else:
        compiled = sum("compiled" in r.message for r in results if r.status.value == "SKIPPED")
        text = (f"{', '.join(r.impl for r in timed) or 'nothing'} timed in the interpreter; {compiled} CUDA rungs "
                "compiled (sm_90), not run")
    return "; ".join([text, *failed])


def dtype_text(dtype: torch.dtype) -> str:
    return {FP32: "fp32", BF16: "bf16"}.get(dtype, str(dtype).removeprefix("torch."))
