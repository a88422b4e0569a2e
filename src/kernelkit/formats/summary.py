"""Level summaries: KernelBench's fast_p and geometric-mean speedup, and GPU MODE's geometric-mean ranking score.

KernelBench (src/kernelbench/score.py): fast_p = (number of problems that are correct and whose speedup over eager
is > p) / (number of problems), every problem counting in the denominator, failed or not; the geometric-mean
speedup is taken over the correct problems only. GPU MODE ranks a submission by the geometric mean of its
benchmark times (task.yml: ``ranking_by: "geom"``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kernelkit.results import Status

FAST_P = (0.0, 1.0, 2.0)


@dataclass(frozen=True)
class ProblemScore:
    """One problem of a level: whether the solution is correct, and its speedup over eager (None: not timed)."""

    name: str
    correct: bool
    speedup: float | None = None


@dataclass(frozen=True)
class LevelSummary:
    n: int
    n_correct: int
    fast: dict[float, float]  # p -> fast_p
    geomean_speedup: float | None  # over the correct problems that were timed; None when there are none

    def describe(self) -> str:
        fast = ", ".join(f"fast_{p:g} = {v:.2f}" for p, v in self.fast.items())
        mean = f"{self.geomean_speedup:.3f}x" if self.geomean_speedup is not None else "n/a"
        return f"{self.n} problems, {self.n_correct} correct; {fast}; geometric-mean speedup (correct) {mean}"


def fast_p(scores: Sequence[ProblemScore], p: float) -> float:
    """The fraction of all problems that are correct with a speedup greater than ``p`` (0.0 for no problems)."""
    if not scores:
        return 0.0
    return sum(1 for s in scores if s.correct and s.speedup is not None and s.speedup > p) / len(scores)


def geometric_mean(values: Iterable[float]) -> float | None:
    """exp(mean(log v)); None for no values. Every value must be positive."""
    logs = []
    for v in values:
        if not v > 0:
            raise ValueError(f"a geometric mean needs positive values, got {v}")
        logs.append(math.log(v))
    return math.exp(sum(logs) / len(logs)) if logs else None


def level_summary(scores: Sequence[ProblemScore], ps: Sequence[float] = FAST_P) -> LevelSummary:
    timed = [s.speedup for s in scores if s.correct and s.speedup is not None]
    return LevelSummary(
        n=len(scores), n_correct=sum(1 for s in scores if s.correct), fast={p: fast_p(scores, p) for p in ps},
        geomean_speedup=geometric_mean(timed),
    )


SOLUTION_IMPLS = ("solution", "submission")  # what a problem's loader calls the impl under test


def solution_impl(results: Sequence[Any]) -> str:
    """The impl a summary scores: the solution (or submission) when the results have one, else the reference (in
    a benchmark, the eager baseline: a problem's reference is timed once, as eager)."""
    found = next((name for name in SOLUTION_IMPLS if any(r.impl == name for r in results)), None)
    return found or ("reference" if any(r.impl == "reference" for r in results) else "eager")


def scores_from_results(results: Sequence[Any], impl: str | None = None,
                        ops: Sequence[str] = ()) -> list[ProblemScore]:
    """One ProblemScore per op (``ops``, default those of the results) of a benchmark's results (BenchResults):
    ``impl`` (default solution_impl) correct when kernelkit PASSED it at every size it ran, its speedup the
    geometric mean of its speedups over eager. An op without a result of ``impl`` (a problem with no solution)
    counts as not correct, as KernelBench counts it."""
    impl = impl or solution_impl(results)
    by_op: dict[str, list[Any]] = {name: [] for name in ops}
    for r in results:
        mine = by_op.setdefault(r.op, [])
        if r.impl == impl:
            mine.append(r)
    scores = []
    for name, mine in by_op.items():
        correct = bool(mine) and all(r.status is Status.PASSED for r in mine)
        # eager scored as its own solution (a level's references): 1x over itself by definition
        ratios = [1.0 if impl == "eager" else r.speedups["eager"].value for r in mine
                  if impl == "eager" or "eager" in r.speedups]
        speedup = geometric_mean(ratios) if correct and len(ratios) == len(mine) else None
        scores.append(ProblemScore(name, correct, speedup))
    return scores


@dataclass(frozen=True)
class GpuModeScore:
    """GPU MODE's ranking score of one impl: the geometric mean of its benchmark times (None unless all timed)."""

    impl: str
    geomean_s: float | None
    timed: int
    benchmarks: int


def gpumode_scores(results: Sequence[Any]) -> list[GpuModeScore]:
    """The ranking score of each impl and baseline that a task's benchmark results hold, in their order."""
    by_impl: dict[str, list[Any]] = {}
    for r in results:
        by_impl.setdefault(r.impl, []).append(r)
    scores = []
    for impl, mine in by_impl.items():
        times = [r.measurement.median for r in mine if r.measurement is not None and r.measurement.median > 0]
        mean = geometric_mean(times) if len(times) == len(mine) else None
        scores.append(GpuModeScore(impl, mean, len(times), len(mine)))
    return scores
