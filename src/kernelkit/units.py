"""Times and byte counts as people read them: three significant digits in the largest unit under 1000 (the
tables, the doctor's verdicts and the notes all print them alike)."""

from __future__ import annotations

import math

_UNITS = (("ns", 1e9), ("µs", 1e6), ("ms", 1e3))


def format_time(seconds: float | None) -> str:
    """'850 ns', '12.3 µs', '1.23 ms', '4.56 s': three significant digits in the largest unit under 1000."""
    if seconds is None or not math.isfinite(seconds):
        return ""
    for unit, scale in _UNITS:
        if abs(seconds) * scale < 999.5:  # 999.7 us prints as 1.00 ms, not 1000 us
            return f"{three_digits(seconds * scale)} {unit}"
    return f"{three_digits(seconds)} s"


def format_bytes(n: int | None) -> str:
    """'512 B', '1.50 KiB', '256 MiB', '2.00 GiB': three significant digits in the largest binary unit under 1000."""
    if n is None:
        return ""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 999.5:
            return f"{value:.0f} B" if unit == "B" else f"{three_digits(value)} {unit}"
        value /= 1024
    return f"{three_digits(value)} TiB"


def three_digits(value: float) -> str:
    """12.345 -> '12.3', 1.2345 -> '1.23', 123.4 -> '123'."""
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"
