"""Terminal views of the results store: the stored runs, and what changed from one run to another (and the same as
JSON, for CI)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kernelkit.report.bench_table import format_time

if TYPE_CHECKING:
    from kernelkit.store import CaseChange, RunComparison, RunInfo

VERDICT_STYLES = {"faster": "green", "slower": "red", "same": "dim"}
VERDICT_TEXT = {"same": "same (within noise)"}
STATUS_STYLES = {"finished": "green", "incomplete": "yellow", "interrupted": "yellow", "failed": "bold red"}
CASE_WIDTH = 44  # longer case names wrap: the default comparison stays within 120 columns


def run_status(run: RunInfo) -> str:
    """What a run came to, for people: finished, finished with failures (k of n), failed, incomplete, interrupted."""
    failed = getattr(run, "n_failed", 0)
    if run.status == "finished" and run.n_results and failed == run.n_results:
        return f"failed (all {run.n_results})"
    if run.status == "finished" and failed:
        return f"finished with failures ({failed} of {run.n_results})"
    return run.status


def runs_table(runs: Sequence[RunInfo], path: Path | str) -> Table:
    """One row per run, newest first as given: id, start (UTC), status, passed of results, device, command (long
    devices and commands wrap: the table fits 120 columns)."""
    table = Table(title=f"runs in {path} (times UTC)", title_justify="left")
    for name, width in (("run", None), ("started", None), ("status", 22), ("passed", None), ("device", 18),
                        ("command", 30)):
        table.add_column(name, overflow="fold", max_width=width)
    for run in runs:
        status = run_status(run)
        style = STATUS_STYLES.get(status.split(" ")[0], "yellow")
        table.add_row(str(run.id), run.started.replace("T", " ").removesuffix("+00:00")[:16], f"[{style}]{status}[/]",
                      f"{run.n_passed}/{run.n_results}", escape(run.device or ""), escape(run.command))
    return table


def _percent(change: float) -> str:
    return f"{change:+.1%}"


def print_comparison(console: Console, result: RunComparison, *, wide: bool = False) -> None:
    """Per-case change from run A to run B (B's median time against A's), its 95% interval, the noise floor and the
    verdict; notes under the table (``wide``: the ratio, its interval and the notes in the table too); then the
    environment keys that differ."""
    modes = sorted({row.mode for row in result.changes})
    one_mode = len(modes) == 1 and not wide
    floors = {(row.floor, row.floor_from) for row in result.changes if row.floor is not None}
    floor_column = wide or len(floors) > 1  # one floor for every case is said once, under the table
    title = (f"run {result.run_a.id} -> run {result.run_b.id}{f', {modes[0]} mode' if one_mode else ''}: "
             "change = B's median time / A's - 1")
    table = Table(title=title, title_justify="left")
    columns = ["case", *([] if one_mode else ["mode"]), "A median", "B median", "change", "95% CI",
               *(["floor"] if floor_column else []), "verdict", *(["A/B", "A/B 95% CI", "note"] if wide else [])]
    for name in columns:
        table.add_column(name, justify="right" if name in ("A median", "B median", "change", "floor") else "left",
                         overflow="fold", max_width=CASE_WIDTH if name == "case" and not wide else None)
    for row in result.changes:
        ratio = row.ratio
        ci = f"[{_percent(1 / ratio.high - 1)}, {_percent(1 / ratio.low - 1)}]" if ratio else "-"
        verdict = (f"[{VERDICT_STYLES.get(row.verdict, 'white')}]{VERDICT_TEXT.get(row.verdict, row.verdict)}[/]"
                   if row.verdict else "-")
        table.add_row(
            escape(row.shown), *([] if one_mode else [row.mode]),
            format_time(row.median_a) if row.median_a else "-", format_time(row.median_b) if row.median_b else "-",
            _percent(row.change) if row.change is not None else "-", escape(ci),
            *([f"{row.floor:.1%}" if row.floor is not None else "-"] if floor_column else []), verdict,
            *([f"{ratio.value:.3f}" if ratio else "-", escape(f"[{ratio.low:.3f}, {ratio.high:.3f}]") if ratio
               else "-", escape(row.note or "")] if wide else []),
        )
    console.print(table)
    used = ", ".join(f"{floor:.1%} {origin}" for floor, origin in sorted(floors)) if not floor_column else (
        ", ".join(sorted({origin for _, origin in floors})))
    console.print(f"[dim]faster or slower only when the change is beyond both its 95% interval and the noise floor "
                  f"({used or 'none compared'}; --min-effect sets it, `kernelkit bench --repeat N` measures it)[/]",
                  highlight=False)
    if not wide:
        for row in result.changes:
            if row.note:
                console.print(f"  {escape(row.shown)}: {escape(row.note)}", highlight=False)
    for diff in result.env_diffs:
        console.print(f"[yellow]environment differs:[/] {escape(diff.key)}: {escape(str(diff.a))} -> "
                      f"{escape(str(diff.b))}", highlight=False)


def comparison_json(result: RunComparison, threshold: float | None, slower: Sequence[CaseChange]) -> dict[str, Any]:
    """``kernelkit compare --json``: the comparison, and the gate's threshold and the cases it failed on."""
    data = result.to_dict()
    data["gate"] = None if threshold is None else {"fail_if_slower": threshold, "regressions": [c.case for c in slower],
                                                   "passed": not slower}
    return data
