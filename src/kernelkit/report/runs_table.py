"""Terminal views of the results store: the stored runs, and what changed from one run to another."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kernelkit.report.bench_table import format_time

if TYPE_CHECKING:
    from kernelkit.store import RunComparison, RunInfo

VERDICT_STYLES = {"faster": "green", "slower": "red", "same": "dim"}


def runs_table(runs: Sequence[RunInfo], path: Path | str) -> Table:
    """One row per run, newest first as given: id, start, status, results, passed, device, command."""
    table = Table(title=f"runs in {path}", title_justify="left")
    for name in ("run", "started", "status", "results", "passed", "device", "command"):
        table.add_column(name)
    for run in runs:
        table.add_row(str(run.id), run.started, run.status, str(run.n_results), str(run.n_passed),
                      run.device or "", escape(run.command))
    return table


def print_comparison(console: Console, result: RunComparison) -> None:
    """Per-case change from run A to run B (A/B > 1: B is faster), then the environment keys that differ."""
    table = Table(title=f"run {result.run_a.id} -> run {result.run_b.id} (A/B > 1: B is faster)",
                  title_justify="left")
    for name in ("case", "mode", "A median", "B median", "A/B", "95% CI", "verdict", "note"):
        table.add_column(name)
    for row in result.changes:
        ratio = row.ratio
        table.add_row(
            row.case, row.mode,
            format_time(row.median_a) if row.median_a else "-", format_time(row.median_b) if row.median_b else "-",
            f"{ratio.value:.3f}" if ratio else "-", f"[{ratio.low:.3f}, {ratio.high:.3f}]" if ratio else "-",
            f"[{VERDICT_STYLES.get(row.verdict, 'white')}]{row.verdict}[/]" if row.verdict else "-",
            escape(row.note or ""),
        )
    console.print(table)
    for diff in result.env_diffs:
        console.print(f"[yellow]environment differs:[/] {escape(diff.key)}: {escape(str(diff.a))} -> "
                      f"{escape(str(diff.b))}", highlight=False)
