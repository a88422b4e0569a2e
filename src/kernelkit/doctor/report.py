"""What `kernelkit doctor` found: one Check per topic, and the report that holds them (plain data; its terminal
view is report/doctor_table.py)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

STATUSES = ("ok", "info", "warn", "fail", "skipped")


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
