"""Terminal view of `kernelkit doctor`: the checks as a table, then one summary line."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kernelkit.doctor.report import STATUSES, DoctorReport

STYLE = {"ok": "green", "info": "cyan", "warn": "yellow", "fail": "bold red", "skipped": "dim"}


def print_doctor_report(console: Console, report: DoctorReport) -> None:
    """The checks as a table, then one summary line."""
    table = Table(title=f"kernelkit doctor: {escape(report.device_name)} ({report.device})", title_justify="left")
    table.add_column("topic", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("finding", overflow="fold")
    for check in report.checks:
        style = STYLE[check.status]
        table.add_row(escape(check.topic), f"[{style}]{check.status}[/]", escape(check.detail))
    console.print(table)
    counts = ", ".join(f"{report.count(s)} {s}" for s in STATUSES if report.count(s))
    verdict = "[green]nothing failed[/]" if report.ok else "[bold red]something failed: see above[/]"
    console.print(f"{len(report.checks)} checks in {report.seconds:.0f} s: {counts}; {verdict}. Nothing was changed "
                  "on this machine.", highlight=False)
