"""Run-to-run comparison: each case of run B against run A, with a bootstrap verdict, and the environment keys that
differ between the two runs (they may not be comparable)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from kernelkit.measure.measurement import BenchResult
from kernelkit.measure.stats import Ratio, speedup
from kernelkit.store.db import RunInfo, Store


@dataclass(frozen=True)
class EnvDiff:
    """An environment key (dotted for nested dicts) whose value differs between two runs; None: absent."""

    key: str
    a: Any
    b: Any


@dataclass(frozen=True)
class CaseChange:
    """One case across two runs. ratio = median_a / median_b: > 1 means B is faster.

    verdict is 'faster'/'slower' only when the ratio's 95% bootstrap interval excludes 1.0, else 'same';
    None when the case was not compared (only in one run, not timed in one, modes differ): note says why.
    """

    case: str
    op: str
    impl: str
    size: str
    dtype: str
    mode: str
    status_a: str | None
    status_b: str | None
    median_a: float | None
    median_b: float | None
    ratio: Ratio | None
    verdict: str | None
    note: str = ""


@dataclass(frozen=True)
class RunComparison:
    """Run B against run A: per-case changes, and the environment keys that differ (runs may not be comparable)."""

    run_a: RunInfo
    run_b: RunInfo
    changes: list[CaseChange]
    env_diffs: list[EnvDiff]


def compare(store: Store, run_a: str | int, run_b: str | int) -> RunComparison:
    """Each case of run B against run A (ratio > 1: B is faster), matched by case key and mode."""
    info_a, info_b = store.run(run_a), store.run(run_b)
    by_a, by_b = _by_case(store.results(info_a.id)), _by_case(store.results(info_b.id))
    changes = []
    for case in list(by_a) + [c for c in by_b if c not in by_a]:
        modes_a, modes_b = by_a.get(case, {}), by_b.get(case, {})
        changes += [_case_change(modes_a[m], modes_b[m]) for m in modes_a if m in modes_b]
        rest_a = [r for m, r in modes_a.items() if m not in modes_b]
        rest_b = [r for m, r in modes_b.items() if m not in modes_a]
        for a, b in zip(rest_a, rest_b, strict=False):
            changes.append(_row(a, a, b, note=f"mode differs: {a.mode} in A, {b.mode} in B; not compared"))
        changes += [_row(a, a, None, note="only in A") for a in rest_a[len(rest_b):]]
        changes += [_row(b, None, b, note="only in B") for b in rest_b[len(rest_a):]]
    return RunComparison(info_a, info_b, changes, env_diffs(info_a.env, info_b.env))


def env_diffs(env_a: dict[str, Any], env_b: dict[str, Any]) -> list[EnvDiff]:
    """The keys (nested dicts flattened to 'a.b') whose values differ, sorted; a missing key reads None."""
    flat_a, flat_b = _flatten(env_a), _flatten(env_b)
    return [EnvDiff(k, flat_a.get(k), flat_b.get(k)) for k in sorted(flat_a.keys() | flat_b.keys())
            if flat_a.get(k) != flat_b.get(k)]


def _by_case(results: list[BenchResult]) -> dict[str, dict[str, BenchResult]]:
    """case key -> mode -> result, in stored order; a repeated (case, mode) keeps the last result."""
    out: dict[str, dict[str, BenchResult]] = {}
    for r in results:
        out.setdefault(r.case_id, {})[r.mode] = r
    return out


def _samples(r: BenchResult | None) -> list[float]:
    """The timing samples of a result that passed and was timed; empty otherwise."""
    if r is None or r.status.failed or r.measurement is None:
        return []
    return [s for s in r.measurement.samples if math.isfinite(s)]


def _case_change(a: BenchResult, b: BenchResult) -> CaseChange:
    untimed = [f"{side} ({r.status.value}{': ' + r.message if r.message else ''})" if r.status.failed
               else f"{side} (no samples)" for side, r in (("A", a), ("B", b)) if not _samples(r)]
    if untimed:
        return _row(a, a, b, note=f"not timed in {' and '.join(untimed)}")
    return _row(a, a, b, ratio=speedup(_samples(a), _samples(b)))


def _row(key: BenchResult, a: BenchResult | None, b: BenchResult | None, *, ratio: Ratio | None = None,
         note: str = "") -> CaseChange:
    median_a, median_b = (statistics.median(s) if (s := _samples(r)) else None for r in (a, b))
    return CaseChange(
        case=key.case_id, op=key.op, impl=key.impl, size="x".join(map(str, key.size)), dtype=key.dtype,
        mode=key.mode, status_a=a.status.value if a else None, status_b=b.status.value if b else None,
        median_a=median_a, median_b=median_b, ratio=ratio, verdict=ratio.verdict if ratio else None, note=note,
    )


def _flatten(env: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in env.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out
