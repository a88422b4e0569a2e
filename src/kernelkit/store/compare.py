"""Run-to-run comparison: each case of run B against run A, with a verdict, and the environment keys that differ
between the two runs (they may not be comparable).

A case is faster or slower only when the change exceeds both the 95% bootstrap interval (the noise inside each
run) and a noise floor (the drift between runs, which that interval does not see: two runs of the same code on the
same machine differ by a few %). The floor is, in order: the one given (``min_effect``), the between-run spread
that ``kernelkit bench --repeat N`` measured for the case (the larger of the two runs'), or a default for the device.
The regression gate (``regressions``) applies the same rule with its threshold as the floor.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from kernelkit.measure.measurement import BenchResult
from kernelkit.measure.stats import Ratio, speedup
from kernelkit.registry import cpu_stand_in
from kernelkit.results import size_text
from kernelkit.store.db import RunInfo, Store

# The noise floor when no run measured one: back-to-back runs of unchanged code differ by up to ~1-2% on a GPU
# (clocks, placement) and by much more on a CPU shared with other work: 0.8-4% on a quiet 2-core machine, up to
# 17% on the same machine while other processes kept both cores busy (load 9).
DEFAULT_MIN_EFFECT = {"cuda": 0.02, "cpu": 0.25}
# A measured between-run spread is taken as the floor, but never under this: two or three runs see less of the
# drift than many would.
MIN_MEASURED_EFFECT = 0.005
SPREAD_KEY = "run_spread"  # BenchResult.details key: (max - min) / median of the case's medians over --repeat runs
# Without a measured between-run spread, a run whose own samples spread widely cannot tell changes of that size:
# the floor is at least SPREAD_FACTOR x the wider of the two runs' IQR / median. Tiny CPU cases moved by -49% and
# +41% between two runs of unchanged code at load 0.7-0.9 (2026-11-26, one torch thread); their IQR was 20-35%, and
# at load 3 an eager 64x48 square moved by 37% with IQRs of 13% and 29% (2x the IQR was not enough).
SPREAD_FACTOR = 3.0
# A run with fewer samples than this (a simulated Numba kernel timed once in its budget) says nothing of its spread:
# its cases are "same", with the reason, whatever their medians (its bootstrap interval is a point).
MIN_VERDICT_SAMPLES = 10
TOO_FEW = "too few samples to tell"
NOT_SPEED = "not a speed"  # a kernel timed in a CPU stand-in (Triton's interpreter, Numba's simulator)
NO_VERDICT = (TOO_FEW, NOT_SPEED)  # "same" for these reasons, never a regression


@dataclass(frozen=True)
class EnvDiff:
    """An environment key (dotted for nested dicts) whose value differs between two runs; None: absent."""

    key: str
    a: Any
    b: Any


@dataclass(frozen=True)
class CaseChange:
    """One case across two runs. ratio = median_a / median_b: > 1 means B is faster.

    verdict is 'faster'/'slower' only when the ratio's 95% bootstrap interval excludes 1.0 and the change is larger
    than the noise floor ``floor`` (a fraction of A's time; ``floor_from`` says where it came from), else 'same';
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
    floor: float | None = None
    floor_from: str = ""
    role: str = "impl"  # "impl" or "baseline"

    @property
    def shown(self) -> str:
        """The case as people read it: ``case`` with the size as its op shows it (a GPU MODE spec)."""
        return f"{self.op}/{self.impl}/{self.size}/{self.dtype}"

    @property
    def change(self) -> float | None:
        """B's time relative to A's, minus 1: +0.05 is 5% slower, -0.05 5% faster; None when not compared."""
        return 1.0 / self.ratio.value - 1.0 if self.ratio else None

    def to_dict(self) -> dict[str, Any]:
        data = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "ratio"}
        data["ratio"] = self.ratio.to_dict() if self.ratio else None
        data["change"] = self.change
        return data


@dataclass(frozen=True)
class RunComparison:
    """Run B against run A: per-case changes, and the environment keys that differ (runs may not be comparable)."""

    run_a: RunInfo
    run_b: RunInfo
    changes: list[CaseChange]
    env_diffs: list[EnvDiff]

    def to_dict(self) -> dict[str, Any]:
        """The comparison as ``kernelkit compare --json`` prints it."""
        def run(info: RunInfo) -> dict[str, Any]:
            return {"id": info.id, "started": info.started, "status": info.status, "command": info.command,
                    "device": info.device}

        return {"run_a": run(self.run_a), "run_b": run(self.run_b), "changes": [c.to_dict() for c in self.changes],
                "env_diffs": [{"key": d.key, "a": d.a, "b": d.b} for d in self.env_diffs]}


def compare(store: Store, run_a: str | int, run_b: str | int, *, min_effect: float | None = None) -> RunComparison:
    """Each case of run B against run A (ratio > 1: B is faster), matched by case key and mode.

    min_effect: the noise floor, a fraction of A's time (0.03: 3%); default: measured by ``bench --repeat``, else
    DEFAULT_MIN_EFFECT for the device.
    """
    if min_effect is not None and not 0 <= min_effect < 1:
        raise ValueError(f"the minimum effect is a fraction of A's time in [0, 1), not {min_effect}")
    info_a, info_b = store.run(run_a), store.run(run_b)
    by_a, by_b = _by_case(store.results(info_a.id)), _by_case(store.results(info_b.id))
    changes = []
    for case in list(by_a) + [c for c in by_b if c not in by_a]:
        modes_a, modes_b = by_a.get(case, {}), by_b.get(case, {})
        changes += [_case_change(modes_a[m], modes_b[m], min_effect) for m in modes_a if m in modes_b]
        rest_a = [r for m, r in modes_a.items() if m not in modes_b]
        rest_b = [r for m, r in modes_b.items() if m not in modes_a]
        for a, b in zip(rest_a, rest_b, strict=False):
            changes.append(_row(a, a, b, note=f"mode differs: {a.mode} in A, {b.mode} in B; not compared"))
        changes += [_row(a, a, None, note="only in A") for a in rest_a[len(rest_b):]]
        changes += [_row(b, None, b, note="only in B") for b in rest_b[len(rest_a):]]
    return RunComparison(info_a, info_b, changes, env_diffs(info_a.env, info_b.env))


def judge(ratio: Ratio, floor: float) -> str:
    """'slower' when B's time exceeds A's by more than ``floor`` and the interval excludes 1.0; 'faster' when A's
    exceeds B's by more than ``floor`` likewise; else 'same'."""
    if ratio.high < 1.0 and 1.0 / ratio.value - 1.0 > floor:
        return "slower"
    if ratio.low > 1.0 and ratio.value - 1.0 > floor:
        return "faster"
    return "same"


def regressions(result: RunComparison, threshold: float, baselines: bool = False) -> list[CaseChange]:
    """The regression gate: the cases of B slower than A by more than ``threshold`` (0.03: 3%) and beyond the
    interval, whatever the noise floor (but not on too few samples to tell, nor a CPU stand-in's time); a case
    that broke (passed in A, failed in B) or that B lost (passed in A, missing from B) counts too. The baselines
    (eager, torch.compile) are the yardstick, not the code under test: judged only when ``baselines``."""
    changes = [c for c in result.changes if baselines or c.role != "baseline"]
    slow = [c for c in changes if c.ratio is not None and not c.floor_from.startswith(NO_VERDICT)
            and judge(c.ratio, threshold) == "slower"]
    broken = [c for c in changes if c.ratio is None and c.status_a == "PASSED" and c.status_b not in ("PASSED",
                                                                                                     "SKIPPED")]
    return slow + broken


def floor_for(a: BenchResult, b: BenchResult, min_effect: float | None) -> tuple[float, str]:
    """The noise floor of one case and where it came from: given, measured (bench --repeat), or the default."""
    if min_effect is not None:
        return min_effect, "given"
    measured = [r.details[SPREAD_KEY] for r in (a, b) if isinstance(r.details.get(SPREAD_KEY), (int, float))]
    if measured:
        return max(MIN_MEASURED_EFFECT, *measured), "measured"
    device = b.device if b.device in DEFAULT_MIN_EFFECT else "cuda"
    spread = max((r.measurement.stats.iqr_rel for r in (a, b) if r.measurement is not None and r.measurement.samples),
                 default=0.0)
    if math.isfinite(spread) and SPREAD_FACTOR * spread > DEFAULT_MIN_EFFECT[device]:
        return SPREAD_FACTOR * spread, f"spread ({SPREAD_FACTOR:g} x IQR {spread:.0%})"
    return DEFAULT_MIN_EFFECT[device], f"default ({device})"


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


def _case_change(a: BenchResult, b: BenchResult, min_effect: float | None) -> CaseChange:
    untimed = [f"{side} ({r.status.value}{': ' + r.message if r.message else ''})" if r.status.failed
               else f"{side} (no samples)" for side, r in (("A", a), ("B", b)) if not _samples(r)]
    if untimed:
        return _row(a, a, b, note=f"not timed in {' and '.join(untimed)}")
    stand_in = cpu_stand_in(a.backend) if a.device == "cpu" else ""
    if stand_in:  # an interpreter's or simulator's time depends on the machine's load, not on the kernel
        return _row(a, a, b, ratio=speedup(_samples(a), _samples(b)), verdict="same",
                    floor_from=f"{NOT_SPEED}: {stand_in} on the CPU")
    floor, floor_from = floor_for(a, b, min_effect)
    few = [len(_samples(r)) for r in (a, b)]
    if min(few) < MIN_VERDICT_SAMPLES:  # no verdict can stand on so few samples: "same", and why
        return _row(a, a, b, ratio=speedup(_samples(a), _samples(b)), verdict="same",
                    floor_from=f"{TOO_FEW} (n={few[0]} and {few[1]})")
    return _row(a, a, b, ratio=speedup(_samples(a), _samples(b)), floor=floor, floor_from=floor_from)


def _row(key: BenchResult, a: BenchResult | None, b: BenchResult | None, *, ratio: Ratio | None = None,
         note: str = "", floor: float | None = None, floor_from: str = "", verdict: str | None = None) -> CaseChange:
    median_a, median_b = (statistics.median(s) if (s := _samples(r)) else None for r in (a, b))
    if verdict is None and ratio is not None:
        verdict = judge(ratio, floor or 0.0)
    return CaseChange(
        case=key.case_id, op=key.op, impl=key.impl, size=size_text(key), dtype=key.dtype,
        mode=key.mode, status_a=a.status.value if a else None, status_b=b.status.value if b else None,
        median_a=median_a, median_b=median_b, ratio=ratio, verdict=verdict, note=note, floor=floor,
        floor_from=floor_from, role=key.role,
    )


def _flatten(env: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in env.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out
