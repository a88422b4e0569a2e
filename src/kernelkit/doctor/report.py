"""What `kernelkit doctor` found: one Check per topic, and the report that holds them (plain data, printable)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

STATUSES = ("ok", "info", "warn", "fail", "skipped")
STYLE = {"ok": "green", "info": "cyan", "warn": "yellow", "fail": "bold red", "skipped": "dim"}


@dataclass(frozen=True)
class Check:
    """One finding: ``topic`` ('GPU', 'clocks', 'ncu', 'cold', ...), ``status`` (ok, info, warn, fail or skipped,
    with the reason) and ``detail``, the evidence in a sentence."""

    topic: str
    status: str
    detail: str

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown check status {self.status!r}; one of {', '.join(STATUSES)}")


@dataclass
class DoctorReport:
    """Every check of one doctor run on ``device`` ('cuda' or 'cpu'), and the medians it compared (seconds per
    call, per reference kernel and mode; 'ncu' where Nsight Compute measured the kernel)."""

    device: str
    device_name: str
    checks: list[Check] = field(default_factory=list)
    timings: dict[str, dict[str, float | None]] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """No check failed (warnings and skips do not count)."""
        return not any(c.status == "fail" for c in self.checks)

    def count(self, status: str) -> int:
        return sum(c.status == status for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "device_name": self.device_name, "ok": self.ok, "seconds": self.seconds,
                "checks": [asdict(c) for c in self.checks], "timings": self.timings}


def print_report(console: Console, report: DoctorReport) -> None:
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
