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
