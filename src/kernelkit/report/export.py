"""Benchmark results as files: one JSON document per run (everything, raw samples included) and a flat CSV.

The JSON is the lossless form (``read_json`` gives the BenchResults back); the CSV is for spreadsheets and
pandas: one row per result, failed and untimed ones included with their numbers left empty.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kernelkit.measure.measurement import BenchResult, bench_document, read_bench_document
from kernelkit.report.roofline import binding
from kernelkit.results import BASELINE_NAMES as BASELINES

# Each baseline (spec.BASELINES) has its own speedup columns; every speedup is in the JSON.
CSV_COLUMNS = (
    "case", "op", "impl", "role", "size", "dtype", "device", "mode", "status",
    "n", "median_s", "mean_s", "min_s", "p20_s", "p80_s", "stdev_s", "iqr_rel", "rse",
    "gbps", "tflops", "bound", "pct_bandwidth", "pct_flops", "suspect", "peak_bytes",
    *(f"{column}{name}" for name in BASELINES
      for column in ("speedup_vs_", "ci_low_vs_", "ci_high_vs_", "verdict_vs_")),
    "stop_reason", "first_call_s", "dropped", "clock_scaling", "message",
)


def write_json(results: Sequence[BenchResult], path: str | Path, *, env: dict[str, Any] | None = None,
               command: str = "") -> Path:
    """Write one document ``{schema, command, env, results: [BenchResult.to_dict()]}`` to ``path``.

    Non-finite floats (an undefined standard error of 2 samples) are written as null so the file is strict JSON.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(bench_document(results, env=env, command=command))
    return path


def write_csv(results: Sequence[BenchResult], path: str | Path) -> Path:
    """Write one row per result with the CSV_COLUMNS header; times in seconds, rates in GB/s and TFLOP/s."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for r in results:
            writer.writerow({k: _cell(v) for k, v in csv_row(r).items()})
    return path


def csv_row(result: BenchResult) -> dict[str, Any]:
    """One result as a flat dict keyed by CSV_COLUMNS; None where a number does not exist."""
    row: dict[str, Any] = dict.fromkeys(CSV_COLUMNS)
    row.update(case=result.case_id, op=result.op, impl=result.impl, role=result.role,
               size="x".join(map(str, result.size)), dtype=result.dtype, device=result.device, mode=result.mode,
               status=result.status.value, message=result.message)
    for name in BASELINES:
        ratio = result.speedups.get(name)
        if ratio is not None:
            row[f"speedup_vs_{name}"], row[f"verdict_vs_{name}"] = ratio.value, ratio.verdict
            row[f"ci_low_vs_{name}"], row[f"ci_high_vs_{name}"] = ratio.low, ratio.high
    m = result.measurement
    if m is None or not m.samples:
        return row
    s = m.stats
    ceiling = m.ceiling
    row.update(
        n=s.n, median_s=s.median, mean_s=s.mean, min_s=s.min, p20_s=s.p20, p80_s=s.p80, stdev_s=s.stdev,
        iqr_rel=s.iqr_rel, rse=s.rse, gbps=m.gbps, tflops=m.tflops,
        pct_bandwidth=ceiling.pct_bandwidth if ceiling else None, pct_flops=ceiling.pct_flops if ceiling else None,
        bound=binding(m).bound or None, peak_bytes=m.peak_bytes, suspect=result.suspect, stop_reason=m.stop_reason,
        first_call_s=m.first_call, dropped=m.dropped,
        clock_scaling=m.clock_scaling,
    )
    return row


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)  # full precision: the CSV is data, not a view
    return value


def read_json(path: str | Path) -> tuple[list[BenchResult], dict[str, Any]]:
    """The results of a ``write_json`` file, and the document itself (for its env and command)."""
    return read_bench_document(path)
