"""Terminal views of what the profiling commands found: torch.profiler's table and launch diagnosis, Nsight
Compute's kernels and findings, and the summary of an impl's compiled kernels (asm)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kernelkit.backends.sass import SassMemory
from kernelkit.profiling.torch_profiler import WAIT_STEPS, WARMUP_STEPS

if TYPE_CHECKING:
    from kernelkit.profiling.asm import AsmReport
    from kernelkit.profiling.ncu_csv import NcuKernel
    from kernelkit.profiling.torch_profiler import LaunchDiagnosis, ProfileResult


# ---- torch.profiler ------------------------------------------------------------------------------------------


def print_profile(console: Console, result: ProfileResult) -> None:
    """Print a ProfileResult on a rich Console: header, table, diagnosis, where the traces are."""
    console.print(f"[bold]profile {result.label}[/] on {result.device}: {result.steps} profiled calls "
                  f"(after {WAIT_STEPS} skipped and {WARMUP_STEPS} warm-up calls)", highlight=False)
    plain = {"markup": False, "highlight": False, "soft_wrap": True}
    console.print(result.table, **plain)
    console.print(format_diagnosis(result.diagnosis, result.device), **plain)
    console.print(f"trace: {result.trace_path} (open it in chrome://tracing or https://ui.perfetto.dev)", **plain)
    for path in result.tensorboard_paths:
        console.print(f"tensorboard trace: {path} (tensorboard --logdir {path.parent})", **plain)


def format_diagnosis(d: LaunchDiagnosis, device: str) -> str:
    """The diagnosis as a few lines of text, for the terminal."""
    if device != "cuda":
        return "launch diagnosis: no device activity to diagnose: the case ran on the CPU (use --device cuda)."
    if not d.has_device_activity:
        return "launch diagnosis: no kernels ran in the active window (an empty input launches nothing)."
    lines = [f"launch diagnosis: GPU busy {d.busy_fraction:.1%} of the {d.window_us:.1f} us active window "
             f"({d.busy_us:.1f} us of device work)",
             f"  {'kernel':<48} {'calls':>5} {'GPU us':>9} {'launch us':>10} {'idle before us':>15}  launch call"]
    for k in d.kernels:
        launch = f"{k.launch_us:.1f}" if k.launch_us is not None else "-"
        gap = f"{k.gap_us:.1f}" if k.gap_us is not None else "-"
        lines.append(f"  {k.name[:48]:<48} {k.count:>5} {k.device_us:>9.1f} {launch:>10} {gap:>15}  "
                     f"{k.launch_api or '-'}")
    lines.append("  (CPU times are taken under the profiler, which slows the CPU side: launch costs read high)")
    return "\n".join(lines + [f"warning: {w}" for w in d.warnings])


# ---- Nsight Compute -------------------------------------------------------------------------------------------


def _fmt(value: float | None, unit: str = "", digits: int = 1) -> str:
    """12.5149 -> '12.5'; 1512352.0 -> '1,512,352' (no trailing zeros)."""
    if value is None:
        return "-"
    text = f"{value:,.{digits}f}"
    return (text.rstrip("0").rstrip(".") if "." in text else text) + unit


def _duration(ns: float | None) -> str:
    if ns is None:
        return "-"
    scale, unit = next(((s, u) for s, u in ((1e6, "ms"), (1e3, "us")) if ns >= s), (1.0, "ns"))
    return f"{ns / scale:.3g} {unit}" if ns < 100 * scale else f"{ns / scale:,.0f} {unit}"


def print_kernels(console: Console, title: str, kernels: Sequence[NcuKernel], metric_names: Sequence[str] = ()) -> None:
    """The kernels table, then ncu's findings (largest estimated speedup first), then the metrics asked for."""
    table = Table(title=title, title_justify="left")
    for name in ("kernel", "time", "SM %", "memory %", "DRAM %", "occupancy %", "regs", "smem/block", "grid",
                 "block"):
        table.add_column(name, justify="left" if name in ("kernel", "grid", "block") else "right",
                         overflow="fold", max_width=48 if name == "kernel" else None)
    for k in kernels:
        s = k.summary()
        smem = s["shared_mem_per_block_bytes"]
        table.add_row(escape(k.name), _duration(s["duration_ns"]), _fmt(s["sm_throughput_pct"]),
                      _fmt(s["memory_throughput_pct"]), _fmt(s["dram_throughput_pct"]),
                      _fmt(s["achieved_occupancy_pct"]), _fmt(s["registers_per_thread"], digits=0),
                      "-" if smem is None else f"{smem:,.0f} B", k.grid_size, k.block_size)
    console.print(table)
    several = len(kernels) > 1
    findings = Table(title="ncu findings", title_justify="left", show_lines=True)
    for name in (["kernel"] if several else []) + ["rule", "type", "est. speedup", "finding"]:
        findings.add_column(name, overflow="fold", justify="right" if name == "est. speedup" else "left")
    ranked = sorted(((k, r) for k in kernels for r in k.rules), key=lambda kr: -(kr[1].speedup_pct or 0))
    for kernel, rule in ranked:
        findings.add_row(*([escape(kernel.name[:40])] if several else []), rule.name, rule.type,
                         _fmt(rule.speedup_pct, "%"), escape(rule.message))
    console.print(findings if ranked else "[dim]ncu's rules found nothing to report.[/]")
    if metric_names:
        extra = Table(title="requested metrics", title_justify="left")
        for name in ("kernel", "metric", "value", "unit"):
            extra.add_column(name, justify="right" if name == "value" else "left")
        for k in kernels:
            for name in metric_names:
                m = k.metrics.get(name)
                shown = "not in the report" if m is None else m.text if m.value is None else _fmt(m.value, digits=3)
                extra.add_row(escape(k.name[:40]), name, shown, m.unit if m else "")
        console.print(extra)


# ---- asm ------------------------------------------------------------------------------------------------------


def print_asm_summary(console: Console, report: AsmReport) -> None:
    """The summary table (one row per kernel), then each kernel's details and the report's notes."""
    table = Table(title=f"{report.case} compiled for {report.arch}", title_justify="left")
    for column in ("kernel", "registers", "spilled B (st/ld)", "shared B", "stack/local B", "global loads",
                   "global stores"):
        table.add_column(column)
    for k in report.kernels:
        r, m = k.resources, k.memory
        widths = [SassMemory.describe(w) for w in (m.global_loads, m.global_stores)] if m else ["?", "?"]
        table.add_row(k.name, _number(r.registers), f"{_number(r.spill_stores)}/{_number(r.spill_loads)}",
                      _number(r.shared), f"{_number(r.stack)}/{_number(r.local)}", *widths)
    console.print(table)
    for k in report.kernels:
        console.print("\n  ".join([f"{k.name} ({k.compiler}):", *k.details]), highlight=False, markup=False)
    for note in report.notes:
        console.print(f"note: {note}", highlight=False, markup=False)


def _number(value: int | None) -> str:
    return "?" if value is None else str(value)
