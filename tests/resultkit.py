"""Helpers shared by the result and report tests: synthetic timings (evenly spread, or seeded noise), the
Measurement and BenchResult built on them with what a test leaves out filled in, a case's % of calibrated ceilings,
and rich tables rendered as text and checked for width."""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from rich.console import Console

from kernelkit.measure.measurement import BenchResult, Ceiling, Measurement
from kernelkit.results import Status

H100 = "NVIDIA H100 80GB HBM3"
TABLE_EDGES = tuple("┏┃┡│├└┗┣╭╰")  # the first character of a rich table's lines (heavy head, rounded box)


def even_samples(median: float, spread: float = 0.02, n: int = 41) -> list[float]:
    """n evenly spaced samples within median*(1 -+ spread): median exact, p20/p80 at median*(1 -+ 0.6*spread)."""
    return [median * (1 + spread * (2 * i / (n - 1) - 1)) for i in range(n)]


def noisy_samples(center: float, rel_noise: float, n: int = 200, seed: int = 0) -> list[float]:
    """n seeded timings around ``center`` seconds with a normal relative spread ``rel_noise``."""
    rng = np.random.default_rng(seed)
    return [float(x) for x in center * (1 + rel_noise * rng.standard_normal(n))]


def measurement(label: str, samples: Sequence[float], *, mode: str = "hot", device: str = "cuda",
                device_name: str = H100, first_call: float = 0.1, warmup_calls: int = 3,
                stop_reason: str = "converged", **fields: Any) -> Measurement:
    """A Measurement of ``samples`` (seconds per call); ``fields``: any other of its fields (bytes, ceiling...)."""
    return Measurement(label, mode, device, device_name, list(samples), first_call=first_call,
                       warmup_calls=warmup_calls, stop_reason=stop_reason, **fields)


def bench_result(impl: str, size: tuple[int, ...] = (1024, 1024), dtype: str = "float32", *,
                 m: Measurement | None = None, op: str = "square", backend: str | None = None,
                 device: str | None = None, mode: str | None = None, status: Status = Status.PASSED,
                 **fields: Any) -> BenchResult:
    """A BenchResult of ``impl`` measured as ``m``: backend the impl's first word, device and mode the
    measurement's (cuda and hot without one); ``fields``: any other of its fields (role, speedups...)."""
    return BenchResult(op, impl, backend or impl.split("_")[0], size, dtype,
                       device or (m.device if m else "cuda"), mode or (m.mode if m else "hot"), status,
                       measurement=m, **fields)


def ceiling_at(seconds: float, nbytes: int, flops: int | None, copy_gbps: float, peak_tflops: float,
               kind: str) -> Ceiling:
    """Calibrated ceilings with a case's % of each worked out from its cost model and time per call; without FLOPs,
    the copy bandwidth alone."""
    return Ceiling(copy_gbps, peak_tflops if flops else None, kind if flops else "",
                   pct_bandwidth=100 * nbytes / seconds / 1e9 / copy_gbps,
                   pct_flops=100 * flops / seconds / 1e12 / peak_tflops if flops else None)


def render(*renderables: object, width: int = 200, print_with: Callable[[Console], None] | None = None) -> str:
    """What ``renderables`` print as on a plain console ``width`` columns wide (then ``print_with(console)``)."""
    console = Console(file=io.StringIO(), width=width, color_system=None)
    for r in renderables:
        console.print(r)
    if print_with is not None:
        print_with(console)
    return console.file.getvalue()  # type: ignore[attr-defined]


def assert_fits(text: str, width: int = 120) -> None:
    """The tables in ``text`` (printed on a page wider than they are) fit ``width`` columns, no cell cut short."""
    rows = [line.rstrip() for line in text.splitlines() if line.startswith(TABLE_EDGES)]
    assert rows, text
    wide = [r for r in rows if len(r) > width]
    assert not wide, f"{len(wide[0])} columns:\n" + "\n".join(wide[:3])
    assert not any("…" in r for r in rows), text

