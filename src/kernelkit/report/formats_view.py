"""Terminal views of outside problem formats: each format's own verdict beside kernelkit's, a KernelBench level's
summary (fast_p, geometric-mean speedup) and a GPU MODE task's ranking score."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from kernelkit.report.bench_table import format_time

if TYPE_CHECKING:
    from kernelkit.formats.jobs import VerdictRow
    from kernelkit.formats.summary import GpuModeScore, LevelSummary


def verdict_lines(rows: Sequence[VerdictRow], width: int = 240) -> list[str]:
    """A heading and one line per problem: the format's verdict, kernelkit's status, and why they disagree (green:
    both pass; red: both fail, or no verdict; yellow: they disagree). kernelkit's own details are in the table."""
    if not rows:
        return []
    lines = ["", "[bold]the format's own verdict, beside kernelkit's[/]"]
    for row in rows:
        side = row.side
        if side is None:
            style, text = "red", row.line()
        elif side.agree:
            style, text = ("green" if side.format_ok else "red"), f"{side.format_says}; kernelkit: {side.status.value}"
        else:
            style, text = "yellow", f"{side.format_says}; kernelkit: {side.status.value} — {side.why}"
        text = text if len(text) <= width else text[: width - 1] + "…"
        lines.append(f"  {escape(row.op)} ({escape(row.impl)}): [{style}]{escape(text)}[/]")
    return lines


def verdict_json(row: VerdictRow) -> dict[str, Any]:
    side = row.side
    return {
        "op": row.op, "impl": row.impl, "verdict_reached": row.outcome.verdict is not None,
        "format": side.format if side else None, "format_ok": side.format_ok if side else None,
        "format_says": side.format_says if side else (row.outcome.verdict.describe() if row.outcome.verdict else None),
        "kernelkit": side.status.value if side else None, "agree": side.agree if side else None,
        "why": side.why if side else row.outcome.message,
    }


def level_lines(summary: LevelSummary, impl: str) -> list[str]:
    """The KernelBench level summary below a bench table."""
    fast = ", ".join(f"fast_{p:g} = {v:.2f}" for p, v in summary.fast.items())
    mean = f"{summary.geomean_speedup:.3f}x" if summary.geomean_speedup is not None else "n/a (none correct and timed)"
    return ["", f"[bold]level summary[/] ({escape(impl)} over eager; correct = kernelkit's PASSED): "
                f"{summary.n} problems, {summary.n_correct} correct; {fast}; geometric-mean speedup {mean}"]


def gpumode_lines(scores: Sequence[GpuModeScore]) -> list[str]:
    """GPU MODE's ranking score (the geometric mean of the benchmark times) of each timed impl."""
    if not scores:
        return []
    parts = [f"{escape(s.impl)} {format_time(s.geomean_s)}" if s.geomean_s is not None
             else f"{escape(s.impl)} n/a ({s.timed} of {s.benchmarks} benchmarks timed)" for s in scores]
    return ["", "[bold]GPU MODE score[/] (geometric mean of the benchmark times, lower ranks higher): "
                + ", ".join(parts)]
